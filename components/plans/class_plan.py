"""The class-balanced epoch plan in NumPy: `n_c` distinct classes x `n_p` samples a batch, the
record positions, labels and seeds of `inputs.class_plan.ClassBalancedPlan` bit for bit.

`inputs.class_plan`'s docstring says what the plan guarantees (coverage in both epoch modes,
records without replacement within a class, the batch layout, fillers, replicas and elastic
streams). The rounds and units come from `class_geometry.class_units`, the fillers from
`class_fillers`, every random order from `keyed_permutation`, each keyed by the streams of
`(seed, epoch, salt)` with the salts below, which `inputs.class_plan` takes from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from tfx_dynamic_inputs.plans import class_fillers
from tfx_dynamic_inputs.plans.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.plans.class_geometry import EPOCH_MODES, class_units
from tfx_dynamic_inputs.plans.class_report import ClassReport, class_report
from tfx_dynamic_inputs.plans.keyed_hash import keyed_offsets, keyed_seeds
from tfx_dynamic_inputs.plans.keyed_permutation import permuted_positions
from tfx_dynamic_inputs.plans.seed_folds import epoch_seed

# Streams within one (seed, epoch); values after the shared salts (`seed_folds`).
SALT_ROUND_ORDER = 10
SALT_FILL_ORDER = 11
SALT_FILL_OFFSET = 12
SALT_WITHIN_CLASS = 13
SALT_BATCH_ORDER = 14
SALT_BATCH_SEEDS = 15


@dataclasses.dataclass(frozen=True)
class PlanArguments:
    """A class-balanced plan's arguments, checked (`checked_arguments`), and its class report."""

    n_classes_per_batch: int
    n_samples_per_class: int
    seed: int
    max_draws_per_record: int | None
    num_workers: int
    num_replicas: int
    report: ClassReport


def checked_arguments(
    row_splits,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int,
    epoch_mode: str,
    small_classes: str,
    num_workers: int,
    replicas_per_worker: int,
    max_draws_per_record: int | None,
) -> PlanArguments:
    """The arguments of `ClassBalancedPlan` (both executors), checked where a plan is built.

    Args:
      row_splits, n_classes_per_batch, n_samples_per_class, seed, epoch_mode, small_classes,
      num_workers, replicas_per_worker, max_draws_per_record: as `ClassBalancedPlan` takes them.

    Returns:
      The checked values, the replicas of a step and the class report.

    Raises:
      ValueError, TypeError: as `ClassBalancedPlan` documents, in one line.
    """
    if epoch_mode not in EPOCH_MODES:
        raise ValueError(f"epoch_mode must be one of {EPOCH_MODES}, got {epoch_mode!r}")
    n_c = int_argument("n_classes_per_batch", n_classes_per_batch, 1)
    n_p = int_argument("n_samples_per_class", n_samples_per_class, 1)
    seed = seed_argument(seed)
    if max_draws_per_record is not None:
        max_draws_per_record = int_argument("max_draws_per_record", max_draws_per_record, 1)
    num_workers = int_argument("num_workers", num_workers, 1)
    replicas = num_workers * int_argument("replicas_per_worker", replicas_per_worker, 1)
    report = class_report(row_splits, n_p, small_classes)
    num_usable = len(report.usable_classes)
    if n_c > num_usable:
        raise ValueError(
            f"n_classes_per_batch={n_c} is larger than the number of usable classes, "
            f"{num_usable} ({report.summary()})"
        )
    if max_draws_per_record is not None and num_usable >= 1 << class_fillers.ORDER_BITS:
        raise ValueError(
            f"max_draws_per_record supports up to {1 << class_fillers.ORDER_BITS} usable "
            f"classes, got {num_usable}"
        )
    return PlanArguments(n_c, n_p, seed, max_draws_per_record, num_workers, replicas, report)


class ClassBalancedPlan:
    """Per-epoch plans of `n_c x n_p` batches over a CSR class index, as
    `inputs.class_plan.ClassBalancedPlan` plans them (the same arguments, attributes and errors;
    a cap that no epoch can keep is a `ValueError` when planned).

    Args:
      row_splits: int [C + 1], the class index's CSR row splits.
      n_classes_per_batch: `n_c`, distinct classes per batch (<= usable classes).
      n_samples_per_class: `n_p`, samples per class in a batch.
      seed: the stateless seed (int64) of every epoch's plan.
      epoch_mode: ``"classes"`` or ``"samples"``.
      small_classes: ``"replace"`` or ``"skip"``.
      num_workers, replicas_per_worker: their product is the replicas `R` of a step.
      max_draws_per_record: at most this many draws of any record in an epoch; None: no cap.

    Raises:
      ValueError: an unknown `epoch_mode` or `small_classes`, a count below 1, a seed out of
        int64, bad `row_splits`, `n_classes_per_batch` above the usable classes, or a
        `max_draws_per_record` too low (naming the least that plans).
      TypeError: a count or seed that is not an int.

    Example:

        plan = ClassBalancedPlan([0, 3, 6, 9, 12, 15], n_classes_per_batch=4, n_samples_per_class=2)
        plan.plan(0)["position"]  # int64 [2, 8]
    """

    def __init__(
        self,
        row_splits,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        seed: int = 0,
        epoch_mode: str = "classes",
        small_classes: str = "replace",
        num_workers: int = 1,
        replicas_per_worker: int = 1,
        max_draws_per_record: int | None = None,
    ):
        checked = checked_arguments(
            row_splits,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            seed=seed,
            epoch_mode=epoch_mode,
            small_classes=small_classes,
            num_workers=num_workers,
            replicas_per_worker=replicas_per_worker,
            max_draws_per_record=max_draws_per_record,
        )
        n_c, n_p = checked.n_classes_per_batch, checked.n_samples_per_class
        self.seed = checked.seed
        max_draws_per_record, replicas = checked.max_draws_per_record, checked.num_replicas
        report = checked.report
        self.report = report
        self.n_classes_per_batch, self.n_samples_per_class = n_c, n_p
        self.epoch_mode = epoch_mode
        self.num_replicas = replicas
        self.max_draws_per_record = max_draws_per_record
        self._usable = report.usable_classes
        self._usable_sizes = report.class_sizes[self._usable]
        self._usable_starts = np.concatenate([[0], np.cumsum(report.class_sizes)])[self._usable]
        self._units = units = class_units(
            self._usable_sizes,
            n_classes_per_batch=n_c,
            n_samples_per_class=n_p,
            epoch_mode=epoch_mode,
            num_replicas=replicas,
        )
        self.elastic = units.elastic
        self.classes_per_unit = units.classes_per_unit
        self.num_batches = units.num_batches
        self.batch_size = n_c * n_p
        if max_draws_per_record is not None:
            self._max_appearances = units.chunks
            least = self._least_cap(max_draws_per_record)
            if max_draws_per_record < least:
                raise ValueError(
                    f"max_draws_per_record={max_draws_per_record} is below the least cap this "
                    f"plan keeps, {least} (covering every record and completing the short "
                    f"batches with other classes); pass at least {least}, or "
                    "epoch_mode='classes'"
                )
            self._max_appearances = self._appearances_under(max_draws_per_record)

    def plan(self, epoch: int) -> dict[str, np.ndarray]:
        """The global plan of one epoch, a pure function of (index, seed, epoch).

        Args:
          epoch: the epoch (int64).

        Returns:
          ``position`` and ``label`` int64 [num_batches, n_c * n_p], ``seed`` int64
          [num_batches, 2] and ``slice_start`` int64 [num_batches], as
          `inputs.class_plan.ClassBalancedPlan.plan` returns them.
        """
        return self.plan_batches(epoch, np.arange(self.num_batches, dtype=np.int64))

    def plan_batches(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone (and the
        fillers of the epoch's short units).

        Args:
          epoch: the epoch (int64).
          batch_numbers: int [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          ``position``, ``label``, ``seed`` and ``slice_start``, each with leading dimension `n`.

        Raises:
          ValueError: a batch number outside `[0, num_batches)`, or a cap that leaves a batch
            of this epoch without classes to complete it.
        """
        batch_numbers = np.asarray(batch_numbers, np.int64).reshape(-1)
        if np.any((batch_numbers < 0) | (batch_numbers >= self.num_batches)):
            raise ValueError(f"plan_batches: a batch number is outside [0, {self.num_batches})")
        n_c, n_p, units = self.n_classes_per_batch, self.n_samples_per_class, self._units
        stream = lambda salt: epoch_seed(self.seed, epoch, salt)
        step = batch_numbers // units.rows_per_unit
        slice_in_unit = batch_numbers % units.rows_per_unit
        # Units in random order, each cut into its replicas' batches (consecutive rows).
        unit = permuted_positions(step, units.num_units, stream(SALT_BATCH_ORDER))
        slot = slice_in_unit[:, None] * n_c + np.arange(n_c, dtype=np.int64)
        unit = np.broadcast_to(unit[:, None], slot.shape)
        classes, appearances = self._unit_slots(unit.reshape(-1), slot.reshape(-1), stream)
        sample_class, position = class_sample_positions(
            classes,
            appearances,
            n_p,
            self._usable_sizes,
            self._usable_starts,
            stream(SALT_WITHIN_CLASS),
        )
        rows = (-1, self.batch_size)
        return {
            "position": position.reshape(rows),
            "label": self._usable[sample_class].reshape(rows),
            "seed": keyed_seeds(stream(SALT_BATCH_SEEDS), step).reshape(-1, 2),
            "slice_start": slice_in_unit * self.batch_size,
        }

    def _unit_slots(
        self, unit: np.ndarray, slot: np.ndarray, stream: Callable[[int], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The usable class and appearance number of each (unit, slot), int64 [m] each."""
        units, g = self._units, self.classes_per_unit
        round_number = np.searchsorted(units.unit_offsets, unit, side="right") - 1
        first = (unit - units.unit_offsets[round_number]) * g
        members = np.clip(units.round_sizes[round_number] - first, 0, g)
        is_member = slot < members
        member_class = self._round_classes(
            round_number, np.where(is_member, first + slot, 0), stream
        )
        num_fill = len(units.fill_unit)
        if not num_fill:
            return member_class, round_number
        fill_class, fill_appearance = self._fillers(stream)
        # A slot past the members is a short unit's filler `slot - members`.
        short = np.minimum(np.searchsorted(units.fill_unit, unit, side="left"), num_fill - 1)
        filler = np.maximum(slot - members, 0)
        return (
            np.where(is_member, member_class, fill_class[short, filler]),
            np.where(is_member, round_number, fill_appearance[short, filler]),
        )

    def _round_classes(
        self, round_number: np.ndarray, position: np.ndarray, stream: Callable[[int], np.ndarray]
    ) -> np.ndarray:
        """The usable class at each round position: the round's keyed order of its classes."""
        size = self._units.round_sizes[round_number]
        permuted = permuted_positions(position, size, stream(SALT_ROUND_ORDER), round_number)
        return self._units.by_chunks[permuted]

    def _fillers(self, stream: Callable[[int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The classes that complete the short units: `(class, appearance)`, int64 [S, g]."""
        units, g = self._units, self.classes_per_unit
        num_usable = len(self._usable)
        column = np.arange(g, dtype=np.int64)[np.newaxis, :]
        is_member = column < units.fill_members[:, None]
        round_number = np.broadcast_to(units.fill_round[:, None], is_member.shape)
        position = np.where(is_member, units.fill_first_member[:, None] + column, 0)
        member_class = np.where(
            is_member,
            self._round_classes(round_number.reshape(-1), position.reshape(-1), stream).reshape(
                -1, g
            ),
            -1,
        )
        seed = stream(SALT_FILL_ORDER)
        if self.max_draws_per_record is None:
            # Each short unit's window of g classes along the epoch's keyed class order.
            fill_units = np.arange(len(units.fill_unit), dtype=np.int64)
            offset = keyed_offsets(num_usable, stream(SALT_FILL_OFFSET), fill_units)
            window = (offset[:, None] + column) % num_usable
            candidates = permuted_positions(window.reshape(-1), num_usable, seed)
            return class_fillers.random_fillers(
                member_class, units.fill_members, candidates.reshape(-1, g), units.chunks
            )
        class_rank = permuted_positions(np.arange(num_usable), num_usable, seed)
        return class_fillers.capped_fillers(
            member_class,
            units.fill_members,
            chunks=units.chunks,
            max_appearances=self._max_appearances,
            class_rank=class_rank,
            max_draws_per_record=self.max_draws_per_record,
        )

    def _appearances_under(self, cap: int) -> np.ndarray:
        return class_fillers.max_appearances(
            self._usable_sizes, self._units.chunks, self.n_samples_per_class, cap
        )

    def _least_cap(self, asked: int) -> int:
        """The least cap accepted (or `asked`, found acceptable at once): one draw above the
        least that plans epoch 0, as `inputs.class_plan.ClassBalancedPlan` finds it (its
        `_least_cap` says why one above)."""
        units = self._units
        free_slots = int((self.classes_per_unit - units.fill_members).sum())
        needed = class_fillers.least_feasible_cap(
            self._usable_sizes, units.chunks, self.n_samples_per_class, free_slots
        )
        if not len(units.fill_unit):
            return needed

        def plans(cap: int) -> bool:
            self._max_appearances = self._appearances_under(cap)
            try:
                self._fillers(lambda salt: epoch_seed(self.seed, 0, salt))
            except ValueError:  # a batch left without classes to fill it
                return False
            return True

        if asked - 1 >= needed and plans(asked - 1):
            return asked
        return class_fillers.least_planning_cap(plans, needed) + 1


def class_sample_positions(
    classes: np.ndarray,
    appearances: np.ndarray,
    n_samples_per_class: int,
    class_sizes: np.ndarray,
    class_starts: np.ndarray,
    seed: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The records of each drawn (class, appearance): its `n_p` entries `appearance * n_p + j`
    (modulo the class's size) of the epoch's keyed permutation of the class.

    Args:
      classes: int64 [m], class numbers (rows of `class_sizes` / `class_starts`).
      appearances: int64 [m], each draw's appearance number of its class this epoch.
      n_samples_per_class: `n_p`.
      class_sizes, class_starts: int64 [C], each class's record count and first position.
      seed: int64 [2], the epoch's stream of within-class orders.

    Returns:
      `(sample_class, position)`, int64 [m * n_p] each.
    """
    n_p = n_samples_per_class
    sample_class = np.repeat(classes, n_p)
    sizes = class_sizes[sample_class]
    offsets = appearances[:, None] * n_p + np.arange(n_p, dtype=np.int64)
    within = offsets.reshape(-1) % sizes
    position = class_starts[sample_class] + permuted_positions(within, sizes, seed, sample_class)
    return sample_class, position
