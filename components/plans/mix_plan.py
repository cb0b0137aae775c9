"""The class-balanced plan over several runs mixed by weight, in NumPy: the record positions,
labels, runs and seeds of `inputs.mix_plan.MixedClassPlan` bit for bit.

`inputs.mix_plan`'s docstring says what the mix guarantees (weights as shares of class slots or
of global batches, coverage of every run's usable classes, draws without repeats in a unit).
What sets an epoch's units and quotas (`mix_layout`, with its one-line refusals) is stated here
once; `inputs.mix_plan` takes it from here. The epoch's two scalar draws are TensorFlow's
`stateless_uniform` (`seed_folds.stateless_uniform`, `stateless_uniform_int`), reproduced.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from tfx_dynamic_inputs.option_bounds import MixWeighting
from tfx_dynamic_inputs.plans.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.plans.class_plan import class_sample_positions
from tfx_dynamic_inputs.plans.class_report import ClassReport, class_report
from tfx_dynamic_inputs.plans.keyed_hash import keyed_seeds
from tfx_dynamic_inputs.plans.keyed_permutation import permuted_positions
from tfx_dynamic_inputs.plans.seed_folds import (
    epoch_seed,
    stateless_uniform,
    stateless_uniform_int,
)

# Streams within one (seed, epoch); after the class plan's salts (10-15).
SALT_QUOTA = 20
SALT_EXTRA_ROTATION = 21
SALT_UNIT_RUNS = 22
SALT_CLASS_ORDER = 23
SALT_SLOT_ORDER = 24
SALT_WITHIN_CLASS = 25
SALT_BATCH_ORDER = 26
SALT_BATCH_SEEDS = 27
# Float slack of the share arithmetic (shares are float64 ratios of the weights).
_EPSILON = 1e-9


@dataclasses.dataclass(frozen=True)
class MixLayout:
    """The epoch-independent arithmetic of a mix (int64 arrays unless said; K runs).

    Attributes:
      shares: float64 [K], the normalized shares.
      reports: one `ClassReport` per run, in the run's own class ids.
      class_offsets: [K + 1], run `k`'s classes are global ids `[offsets[k], offsets[k+1])`.
      usable_counts: [K], each run's usable classes.
      num_units: global batches per epoch.
      base_quota: [K], each run's `floor` of its slots (or units) of an epoch.
      cumulative_fractions: float64 [K], the running sum of the fractions left over.
      global_usable: the usable classes of all runs, as global ids, in run order.
      usable_offsets: [K], where each run's start in `global_usable`.
      class_sizes, class_starts: each global class's records and first position.
    """

    shares: np.ndarray
    reports: tuple[ClassReport, ...]
    class_offsets: np.ndarray
    usable_counts: np.ndarray
    num_units: int
    base_quota: np.ndarray
    cumulative_fractions: np.ndarray
    global_usable: np.ndarray
    usable_offsets: np.ndarray
    class_sizes: np.ndarray
    class_starts: np.ndarray


def mix_layout(
    row_splits: Sequence,
    *,
    shares,
    run_names: Sequence[str],
    n_samples_per_class: int,
    classes_per_unit: int,
    weighting: MixWeighting,
    small_classes: str,
) -> MixLayout:
    """The units and quotas of a mix of runs (see `inputs.mix_plan.MixedClassPlan`).

    Args:
      row_splits: one CSR row-split vector per run.
      shares: each run's share, > 0 (normalized here).
      run_names: each run's name, for the errors.
      n_samples_per_class: `n_p`.
      classes_per_unit: `g = n_c x R`.
      weighting: a share of class slots or of batches.
      small_classes: ``"replace"`` or ``"skip"``.

    Returns:
      The `MixLayout`.

    Raises:
      ValueError: shares that are not > 0 or not one per run, a run without usable classes, or
        a run whose share of a unit exceeds its usable classes (naming it, the numbers and the
        fix).
    """
    shares = np.asarray(shares, np.float64)
    if len(row_splits) != len(shares) or len(run_names) != len(shares) or not len(shares):
        raise ValueError(
            f"{len(row_splits)} class indexes, {len(shares)} shares and "
            f"{len(run_names)} run names: pass one of each per run"
        )
    if not np.all(np.isfinite(shares) & (shares > 0)):
        raise ValueError(f"shares must be > 0, got {shares.tolist()}")
    shares = shares / shares.sum()
    reports = tuple(
        class_report(splits, n_samples_per_class, small_classes) for splits in row_splits
    )
    g = classes_per_unit
    usable_counts = np.array([len(r.usable_classes) for r in reports], np.int64)
    for name, report, usable, share in zip(run_names, reports, usable_counts, shares, strict=True):
        if usable == 0:
            raise ValueError(f"run {name!r} has no usable class ({report.summary()})")
        if weighting is MixWeighting.BATCHES and usable < g:
            raise ValueError(
                f"run {name!r} has {usable} usable classes but a global batch of "
                f"{g} classes (n_c x replicas) is all from one run with weighting "
                "'batches'; lower n_classes_per_batch or use weighting 'classes'"
            )
        wanted = math.ceil(g * share - _EPSILON)
        if weighting is MixWeighting.CLASSES and wanted > usable:
            raise ValueError(
                f"run {name!r} has {usable} usable classes but its weight asks for up to "
                f"{wanted} of each global batch's {g} class slots; lower its weight or "
                "n_classes_per_batch"
            )
    # The fewest units whose guaranteed quotas (`floor`) hold every usable class of every run.
    slots = g if weighting is MixWeighting.CLASSES else 1
    per_unit = shares * slots
    needed = usable_counts if weighting is MixWeighting.CLASSES else -(-usable_counts // g)
    units = max(1, int(np.max(np.floor(needed / per_unit))))
    while np.any(np.floor(units * per_unit + _EPSILON) < needed):
        units += 1
    # Fixed apportionment arithmetic of an epoch (float64; randomized per epoch).
    exact = units * slots * shares
    base = np.floor(exact + _EPSILON)
    cumulative = np.cumsum(np.clip(exact - base, 0.0, None))
    cumulative[-1] = round(cumulative[-1])  # the fractions sum to the slots left over
    class_offsets = np.concatenate([[0], np.cumsum([r.num_classes for r in reports])])
    all_sizes = np.concatenate([r.class_sizes for r in reports]).astype(np.int64)
    return MixLayout(
        shares=shares,
        reports=reports,
        class_offsets=class_offsets.astype(np.int64),
        usable_counts=usable_counts,
        num_units=units,
        base_quota=base.astype(np.int64),
        cumulative_fractions=cumulative,
        global_usable=np.concatenate(
            [r.usable_classes + off for r, off in zip(reports, class_offsets[:-1], strict=True)]
        ).astype(np.int64),
        usable_offsets=np.concatenate([[0], np.cumsum(usable_counts)])[:-1].astype(np.int64),
        class_sizes=all_sizes,
        class_starts=np.concatenate([[0], np.cumsum(all_sizes)])[:-1].astype(np.int64),
    )


class MixedClassPlan:
    """Per-epoch plans of `n_c x n_p` batches over several runs' class indexes, mixed by weight,
    as `inputs.mix_plan.MixedClassPlan` plans them (the same arguments and refusals).

    Args:
      row_splits: one CSR row-split vector per run.
      shares: each run's share, > 0.
      run_names: each run's name, for the errors.
      n_classes_per_batch: `n_c`, distinct classes per batch.
      n_samples_per_class: `n_p`, samples per class in a batch.
      weighting: `MixWeighting` (or its value).
      seed: the stateless seed of every epoch's plan.
      small_classes: ``"replace"`` or ``"skip"``.
      num_workers, replicas_per_worker: their product is the replicas `R` of a step.

    Raises:
      ValueError: as `mix_layout`, or a count below 1.
      TypeError: a count or seed that is not an int.

    Example:

        plan = MixedClassPlan([[0, 2, 4, 6], [0, 3, 6]], shares=[1, 1], run_names=["a", "b"],
                              n_classes_per_batch=2, n_samples_per_class=2)
        plan.plan(0)["run"]
    """

    def __init__(
        self,
        row_splits: Sequence,
        *,
        shares,
        run_names: Sequence[str],
        n_classes_per_batch: int,
        n_samples_per_class: int,
        weighting: MixWeighting | str = MixWeighting.CLASSES,
        seed: int = 0,
        small_classes: str = "replace",
        num_workers: int = 1,
        replicas_per_worker: int = 1,
    ):
        n_c = int_argument("n_classes_per_batch", n_classes_per_batch, 1)
        n_p = int_argument("n_samples_per_class", n_samples_per_class, 1)
        self.seed = seed_argument(seed)
        self.weighting = MixWeighting(weighting)
        replicas = int_argument("num_workers", num_workers, 1) * int_argument(
            "replicas_per_worker", replicas_per_worker, 1
        )
        self.n_classes_per_batch, self.n_samples_per_class = n_c, n_p
        self.num_replicas = replicas
        self.classes_per_unit = n_c * replicas
        self.batch_size = n_c * n_p
        self.layout = mix_layout(
            row_splits,
            shares=shares,
            run_names=tuple(run_names),
            n_samples_per_class=n_p,
            classes_per_unit=self.classes_per_unit,
            weighting=self.weighting,
            small_classes=small_classes,
        )
        self.num_units = self.layout.num_units
        self.num_batches = self.num_units * replicas

    def plan(self, epoch: int) -> dict[str, np.ndarray]:
        """The global plan of one epoch, a pure function of (classes, shares, seed, epoch).

        Args:
          epoch: the epoch (int64).

        Returns:
          ``position``, ``label``, ``run`` [num_batches, n_c * n_p], ``seed`` [num_batches, 2]
          and ``slice_start`` [num_batches], as `inputs.mix_plan.MixedClassPlan.plan`.
        """
        return self.plan_batches(epoch, np.arange(self.num_batches, dtype=np.int64))

    def plan_batches(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone.

        Args:
          epoch: the epoch (int64).
          batch_numbers: int [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          The keys of `plan`, each with leading dimension `n`.

        Raises:
          ValueError: a batch number outside `[0, num_batches)`.
        """
        batch_numbers = np.asarray(batch_numbers, np.int64).reshape(-1)
        if np.any((batch_numbers < 0) | (batch_numbers >= self.num_batches)):
            raise ValueError(f"plan_batches: a batch number is outside [0, {self.num_batches})")
        layout, g = self.layout, self.classes_per_unit
        n_c, n_p = self.n_classes_per_batch, self.n_samples_per_class
        stream = lambda salt: epoch_seed(self.seed, epoch, salt)
        step = batch_numbers // self.num_replicas
        slice_in_unit = batch_numbers % self.num_replicas
        unit = permuted_positions(step, self.num_units, stream(SALT_BATCH_ORDER))
        counts, earlier = self._unit_counts(unit, stream)  # [n, K] each
        slot = slice_in_unit[:, None] * n_c + np.arange(n_c, dtype=np.int64)
        unit_of_slot = np.broadcast_to(unit[:, None], slot.shape)
        laid_out = permuted_positions(
            slot.reshape(-1), g, stream(SALT_SLOT_ORDER), unit_of_slot.reshape(-1)
        ).reshape(-1, n_c)
        slot_ends = np.cumsum(counts, axis=1)
        # Each row's searchsorted (side right) of its slots among its runs' slot ends.
        slot_run = (slot_ends[:, None, :] <= laid_out[:, :, None]).sum(axis=2)
        first_slot = np.take_along_axis(slot_ends - counts, slot_run, axis=1)
        # The run's draws of the epoch, its earlier units' first: this slot's draw number.
        draw = np.take_along_axis(earlier, slot_run, axis=1) + laid_out - first_slot
        slot_run, draw = slot_run.reshape(-1), draw.reshape(-1)
        usable = layout.usable_counts[slot_run]
        local = permuted_positions(draw % usable, usable, stream(SALT_CLASS_ORDER), slot_run)
        slot_class = layout.global_usable[layout.usable_offsets[slot_run] + local]
        sample_class, position = class_sample_positions(
            slot_class,
            draw // usable,
            n_p,
            layout.class_sizes,
            layout.class_starts,
            stream(SALT_WITHIN_CLASS),
        )
        rows = (-1, self.batch_size)
        return {
            "position": position.reshape(rows),
            "label": sample_class.reshape(rows),
            "run": np.repeat(slot_run, n_p).reshape(rows),
            "seed": keyed_seeds(stream(SALT_BATCH_SEEDS), step).reshape(-1, 2),
            "slice_start": slice_in_unit * self.batch_size,
        }

    def _quotas(self, stream: Callable[[int], np.ndarray]) -> np.ndarray:
        """int64 [K]: this epoch's slots (or units) per run (a systematic draw of the
        fractions left over)."""
        offset = stateless_uniform(stream(SALT_QUOTA))
        reached = np.floor(self.layout.cumulative_fractions + offset)
        extra = reached - np.concatenate([[math.floor(offset)], reached[:-1]])
        return self.layout.base_quota + extra.astype(np.int64)

    def _unit_counts(
        self, unit: np.ndarray, stream: Callable[[int], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """int64 [n, K] each: the class slots per run of each unit, and the run's slots in the
        units before it."""
        quotas = self._quotas(stream)
        units, g = self.num_units, self.classes_per_unit
        run_ids = np.arange(len(quotas), dtype=np.int64)[np.newaxis, :]
        quota_ends = np.cumsum(quotas)
        if self.weighting is MixWeighting.BATCHES:
            place = permuted_positions(unit, units, stream(SALT_UNIT_RUNS))
            unit_run = np.searchsorted(quota_ends, place, side="right")
            is_run = unit_run[:, None] == run_ids
            earlier = (place - (quota_ends - quotas)[unit_run])[:, None] * g
            return np.where(is_run, g, 0), np.where(is_run, earlier, 0)
        base, extras = quotas // units, quotas % units
        rotation = stateless_uniform_int(stream(SALT_EXTRA_ROTATION), units)
        start = (np.cumsum(extras) - extras + rotation) % units
        since_start = (unit[:, None] - start[np.newaxis, :]) % units
        dealt = (since_start < extras[np.newaxis, :]).astype(np.int64)
        end = start + extras  # may pass `units`: the interval wraps
        below = np.maximum(np.minimum(end, unit[:, None]) - start, 0) + np.maximum(
            np.minimum(end - units, unit[:, None]), 0
        )
        return base[np.newaxis, :] + dealt, unit[:, None] * base[np.newaxis, :] + below
