"""The class-balanced plan over several runs mixed by weight: `MixedClassPlan`.

The classes of runs `0..K-1` are namespaced: run `k`'s class `c` is the global class
`class_offsets[k] + c`, so equal class names of two runs stay two classes. Every batch still holds
exactly `n_c` distinct classes x `n_p` samples; the plan's unit is the global batch of one step
(`g = n_c x R` classes for `R` replicas), cut into `R` batches of `n_c` classes, so the stream of
global batches depends on `g` alone and resumes on any replica count that keeps it (elastic), as
`class_plan.ClassBalancedPlan`'s does.

* **Weights** (`run_mix.MixWeighting`), shares `s_k = weight_k / sum(weights)`:
  ``"classes"``: an epoch's `S = N x g` class slots are apportioned to the runs, run `k` taking
  `floor(S s_k)` or one more (drawn so that its expectation is exactly `S s_k`), and spread over
  the units as evenly as possible (`floor` or `ceil` of its quota / N in each), so each global
  batch holds in expectation `s_k` of its class slots, with less spread than independent draws.
  ``"batches"``: the `N` units are apportioned the same way and each unit is all from one run:
  a unit is run `k`'s with probability `s_k`.
* **An epoch** is the fewest global batches `N` in which the weights show every usable class of
  every run at least once: `N` is set by the run with the most usable classes per unit of
  share; the other runs' classes recur within the epoch. Run `k`'s draws of an epoch walk one
  fresh random permutation of its usable classes cyclically, so a class recurs only after all of
  its run's classes, and a unit never holds a class twice (a run takes at most its usable
  classes in a unit; a weighting that asks for more is refused, naming the run).
* **Within a class** records are taken along a fresh permutation of the class, as in
  `class_plan`: the class's `j`-th appearance of the epoch takes entries `[j n_p, (j+1) n_p)`.
* **Batch layout**: a unit's classes are in random order, each of `n_p` consecutive samples;
  sample `i` of a batch belongs to its `i // n_p`-th class.
* **Weights at a resume**: the plan is a pure function of (classes, shares, seed, epoch); its
  `stream` names the runs (by the caller's keys), the global batch and the weighting but not
  the weights, so a sampler resumed with new weights plans its next epoch with them
  (`mixed_class_balanced`).

* **A batch at a time**: every order above is a keyed permutation (`index_shuffle`) and a
  unit's slots per run, and the run's draws in the units before it, are closed forms of the
  epoch's quotas; so `plan_batches` computes any batch from its number alone, and the sampler's
  datasets plan a block of batches at a time.

Only `epoch_mode="classes"` coverage (every usable class once an epoch) is planned for mixes.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import epoch_plan
from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.class_plan import class_sample_positions
from tfx_dynamic_inputs.inputs.class_report import ClassReport
from tfx_dynamic_inputs.inputs.index_shuffle import keyed_seeds, permuted_positions
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.plans import mix_plan as mix
from tfx_dynamic_inputs.plans.mix_plan import mix_layout

# Streams within one (seed, epoch), stated once with the NumPy plans' executor.
_SALT_QUOTA = mix.SALT_QUOTA
_SALT_EXTRA_ROTATION = mix.SALT_EXTRA_ROTATION
_SALT_UNIT_RUNS = mix.SALT_UNIT_RUNS
_SALT_CLASS_ORDER = mix.SALT_CLASS_ORDER
_SALT_SLOT_ORDER = mix.SALT_SLOT_ORDER
_SALT_WITHIN_CLASS = mix.SALT_WITHIN_CLASS
_SALT_BATCH_ORDER = mix.SALT_BATCH_ORDER
_SALT_BATCH_SEEDS = mix.SALT_BATCH_SEEDS


class MixedClassPlan:
    """Per-epoch plans of `n_c x n_p` batches over several runs' class indexes, mixed by weight.

    Args:
      row_splits: one CSR row-split vector per run (int [C_k + 1], see `class_report.class_report`).
      shares: each run's share, > 0 (normalized here).
      run_names: each run's name, for the reports and errors.
      n_classes_per_batch: `n_c`, distinct classes per batch.
      n_samples_per_class: `n_p`, samples per class in a batch.
      weighting: `MixWeighting` (or its value): a share of class slots or of batches.
      seed: the stateless seed of every epoch's plan.
      small_classes: ``"replace"`` or ``"skip"`` (per run, as in `class_report`).
      num_workers, replicas_per_worker: their product is the replicas `R` of a step.

    Raises:
      ValueError: a count below 1, shares that are not > 0 or not one per run, a run whose share
        of a unit exceeds its usable classes (``"classes"``) or with fewer usable classes than a
        unit (``"batches"``), naming the run, the numbers and the fix.

    Attributes:
      reports: one `ClassReport` per run, in the run's own class ids.
      class_offsets: int64 [K + 1]: run `k`'s classes are global ids `[offsets[k], offsets[k+1])`.
      num_classes: the global class count (all classes of all runs, usable or not).
      num_batches: batches per epoch over all replicas (`num_units x R`).
      num_units: global batches per epoch; classes_per_unit: `n_c x R`.
      batch_size: `n_c * n_p`.

    Example:

        plan = MixedClassPlan([[0, 2, 4, 6], [0, 3, 6]], shares=[1, 1], run_names=["a", "b"],
                              n_classes_per_batch=2, n_samples_per_class=2)
        plan.plan(0)["label"]  # global class ids: run a's 0..2, run b's 3..4
    """

    def __init__(
        self,
        row_splits,
        *,
        shares,
        run_names,
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
        self.run_names = tuple(run_names)
        self.n_classes_per_batch, self.n_samples_per_class = n_c, n_p
        self.num_replicas = replicas
        self.classes_per_unit = g = n_c * replicas
        self.batch_size = n_c * n_p
        # The units, quotas and refusals are stated once, with the NumPy plans' executor.
        layout = mix_layout(
            row_splits,
            shares=shares,
            run_names=self.run_names,
            n_samples_per_class=n_p,
            classes_per_unit=g,
            weighting=self.weighting,
            small_classes=small_classes,
        )
        self.shares = layout.shares
        self.reports: tuple[ClassReport, ...] = layout.reports
        self.class_offsets = layout.class_offsets
        self.num_classes = int(self.class_offsets[-1])
        self.num_units = layout.num_units
        self.num_batches = self.num_units * replicas
        self._usable_counts = layout.usable_counts
        self._base_quota = layout.base_quota
        self._cumulative_fractions = layout.cumulative_fractions
        # Variables, not constants (see class_plan): tf.data captures them by handle.
        const = lambda a: index_variable(np.asarray(a, np.int64), tf.int64)
        self._global_usable = const(layout.global_usable)
        self._usable_offsets = const(layout.usable_offsets)
        self._usable_counts_t = const(layout.usable_counts)
        self._class_sizes = const(layout.class_sizes)
        self._class_starts = const(layout.class_starts)

    @property
    def stream(self) -> str:
        """The global batch, coverage and weighting, in words: what fixes the stream of batches
        besides the runs, their weights and the seed (a state resumes only into the same)."""
        return (
            f"global batches of {self.classes_per_unit} classes x {self.n_samples_per_class} "
            f"samples (epoch_mode classes) mixed by share of {self.weighting.value}"
        )

    def report_summary(self) -> str:
        """One line per run: its name and its `ClassReport.summary()`."""
        return "\n".join(
            f"{name}: {report.summary()}"
            for name, report in zip(self.run_names, self.reports, strict=True)
        )

    def run_of_class(self, label) -> np.ndarray:
        """The run index of global class ids `label` (int array)."""
        return np.searchsorted(self.class_offsets, np.asarray(label), side="right") - 1

    def plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of one epoch, a pure function of (classes, shares, seed, epoch).

        Args:
          epoch: int64 scalar, a Python int or a tensor.

        Returns:
          A dict of int64 tensors with leading dimension `num_batches`: ``position``
          [num_batches, n_c * n_p] (positions in the runs' CSR values, concatenated in run
          order), ``label`` (the global class id of each sample), ``run`` (each sample's run),
          ``seed`` [num_batches, 2] (shared by a global batch's replicas) and ``slice_start``
          [num_batches] (where the batch starts in its global batch), as in `class_plan`.
        """
        return self.plan_batches(epoch, tf.range(self.num_batches, dtype=tf.int64))

    def plan_batches(self, epoch, batch_numbers) -> dict[str, tf.Tensor]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone.

        Every order is keyed (`index_shuffle`): the units', each unit's order of its slots, each
        run's order of its classes and each class's of its records; a unit's slots per run and
        the draws of the units before it are closed forms of the epoch's quotas. So a batch
        costs O(batch x runs), whatever the epoch's size.

        Args:
          epoch: int64 scalar, a Python int or a tensor.
          batch_numbers: int64 [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          The keys of `plan`, each with leading dimension `n`, equal to
          `tf.gather(plan(epoch)[key], batch_numbers)`.

        Raises:
          tf.errors.InvalidArgumentError: when run, a batch number outside `[0, num_batches)`.

        Example:

            plan.plan_batches(2, [0, 3])["run"]  # the runs of batches 0 and 3 of epoch 2
        """
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        batch_numbers = epoch_plan.checked_batch_numbers(batch_numbers, self.num_batches)
        stream = lambda salt: epoch_plan.epoch_seed(self.seed, epoch, salt)
        g, n_c, n_p = self.classes_per_unit, self.n_classes_per_batch, self.n_samples_per_class
        step = batch_numbers // self.num_replicas
        slice_in_unit = batch_numbers % self.num_replicas
        unit = permuted_positions(step, self.num_units, stream(_SALT_BATCH_ORDER))
        counts, earlier = self._unit_counts(unit, stream)  # [n, K] each

        # Each unit's slots are shuffled (a keyed permutation per unit), so no replica's batch
        # is one run's by construction; laid out, a unit's slots are its runs' in run order.
        shape = [-1, n_c]
        slot = slice_in_unit[:, None] * n_c + tf.range(n_c, dtype=tf.int64)[tf.newaxis, :]
        unit_of_slot = tf.broadcast_to(unit[:, None], tf.shape(slot))
        laid_out = tf.reshape(
            permuted_positions(
                tf.reshape(slot, [-1]),
                g,
                stream(_SALT_SLOT_ORDER),
                tweak=tf.reshape(unit_of_slot, [-1]),
            ),
            shape,
        )
        slot_ends = tf.cumsum(counts, axis=1)
        slot_run = tf.searchsorted(slot_ends, laid_out, side="right", out_type=tf.int64)
        first_slot = tf.gather(slot_ends - counts, slot_run, batch_dims=1)
        # The run's draws of the epoch, its earlier units' first: this slot's draw number.
        draw = tf.gather(earlier, slot_run, batch_dims=1) + laid_out - first_slot

        slot_run, draw = tf.reshape(slot_run, [-1]), tf.reshape(draw, [-1])
        usable = tf.gather(self._usable_counts_t, slot_run)
        # The run's draws walk one permutation of its usable classes cyclically: a unit's draws
        # of a run are consecutive and at most its usable classes, hence distinct.
        local = permuted_positions(draw % usable, usable, stream(_SALT_CLASS_ORDER), tweak=slot_run)
        slot_class = tf.gather(
            self._global_usable, tf.gather(self._usable_offsets, slot_run) + local
        )
        sample_class, position = class_sample_positions(
            slot_class,
            draw // usable,
            n_p,
            self._class_sizes,
            self._class_starts,
            stream(_SALT_WITHIN_CLASS),
        )
        rows = [-1, self.batch_size]
        return {
            "position": tf.reshape(position, rows),
            "label": tf.reshape(sample_class, rows),
            "run": tf.reshape(tf.repeat(slot_run, n_p), rows),
            "seed": keyed_seeds(stream(_SALT_BATCH_SEEDS), step),
            "slice_start": slice_in_unit * self.batch_size,
        }

    def _quotas(self, stream) -> tf.Tensor:
        """int64 [K]: this epoch's slots (or units) per run: `floor(total s_k)` plus one for
        the runs a systematic draw picks, each with probability the fraction left, so the
        expectation is exactly `total s_k` and the quotas sum to `total`."""
        offset = tf.random.stateless_uniform([], seed=stream(_SALT_QUOTA), dtype=tf.float64)
        reached = tf.floor(tf.constant(self._cumulative_fractions, tf.float64) + offset)
        extra = tf.cast(reached - tf.concat([tf.floor(offset)[None], reached[:-1]], 0), tf.int64)
        return tf.constant(self._base_quota) + extra

    def _unit_counts(self, unit: tf.Tensor, stream) -> tuple[tf.Tensor, tf.Tensor]:
        """int64 [n, K] each: the class slots per run of each of `unit` (summing to `g`), and
        the run's slots in the units before it (its draws so far this epoch)."""
        quotas = self._quotas(stream)
        units, runs, g = self.num_units, len(self.run_names), self.classes_per_unit
        run_ids = tf.range(runs, dtype=tf.int64)[tf.newaxis, :]
        quota_ends = tf.cumsum(quotas)
        if self.weighting is MixWeighting.BATCHES:
            # The units, in a keyed order, dealt to the runs by quota: a unit is all one run's.
            # A run's draws are numbered by its units' places in that order.
            place = permuted_positions(unit, units, stream(_SALT_UNIT_RUNS))
            unit_run = tf.searchsorted(quota_ends, place, side="right", out_type=tf.int64)
            is_run = tf.equal(unit_run[:, None], run_ids)
            earlier = (place - tf.gather(quota_ends - quotas, unit_run))[:, None] * g
            none = tf.zeros([], tf.int64)
            return tf.where(is_run, tf.constant(g, tf.int64), none), tf.where(is_run, earlier, none)
        # Each run's floor(q / N) slots in every unit, and its q mod N extra slots (< N) in
        # distinct units: the extras of all runs, in run order, dealt round-robin from a random
        # unit, so every unit gets the same number of them. Run k's extras go to the cyclic
        # interval of units [start_k, start_k + extras_k).
        base, extras = quotas // units, quotas % units
        rotation = tf.random.stateless_uniform(
            [], seed=stream(_SALT_EXTRA_ROTATION), maxval=units, dtype=tf.int64
        )
        start = (tf.cumsum(extras, exclusive=True) + rotation) % units
        since_start = (unit[:, None] - start[tf.newaxis, :]) % units
        dealt = tf.cast(since_start < extras[tf.newaxis, :], tf.int64)
        # Run k's extras in units [0, u): those of the cyclic interval below u.
        end = start + extras  # may pass `units`: the interval wraps
        below = tf.maximum(tf.minimum(end, unit[:, None]) - start, 0) + tf.maximum(
            tf.minimum(end - units, unit[:, None]), 0
        )
        return base[tf.newaxis, :] + dealt, unit[:, None] * base[tf.newaxis, :] + below
