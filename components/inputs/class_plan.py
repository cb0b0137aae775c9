"""The class-balanced epoch plan: `n_c` distinct classes x `n_p` samples a batch, every class every
epoch.

Given a class index in CSR form (`row_splits` [C + 1] over the record numbers of each class),
`ClassBalancedPlan` computes, for each epoch, int64 [num_batches, n_c * n_p] record positions.
It is a pure function of (class CSR, seed, epoch), vectorized in TF (no Python loop over classes
or samples), so every worker computes the same global plan and a resumed run recomputes it.

* **Classes.** A class with fewer than `n_p` records is *small*. With
  ``small_classes="replace"`` it is used and its records repeat inside its batches; with
  ``"skip"`` it is left out. Classes without records are always left out. Both are listed in
  `ClassReport` and logged as a warning, never dropped silently. The rest are *usable*; `n_c`
  larger than the number of usable classes is an error naming both numbers.
* **Coverage** (``epoch_mode="classes"``, the default): the epoch is a fresh random permutation
  of the usable classes cut into groups of `n_c`, one group per batch. The last group, if short,
  is completed with other usable classes (drawn at random, distinct from the group's), so every
  usable class appears at least once per epoch and `num_batches = ceil(usable / n_c)` (one
  replica).
* **Coverage** (``epoch_mode="samples"``): every record of every usable class appears at least
  once per epoch. A class with `m` records contributes `ceil(m / n_p)` chunks of `n_p`; round
  `r` of the epoch holds chunk `r` of every class that has one, in a fresh random class order,
  cut into groups of `n_c` and completed like the classes mode. Batches of all rounds are then
  shuffled.
* **Within a class** records are taken without replacement along a fresh random permutation of
  the class: its `j`-th appearance in the epoch takes permutation positions
  `[j * n_p, (j + 1) * n_p)`, modulo the class size. So no record repeats within a class in an
  epoch until the class is exhausted, and never within a batch unless the class is small.
* **Batch layout** (the documented in-batch order): a batch is `n_c` groups of `n_p`
  consecutive samples, one group per class: sample `i` belongs to the batch's `i // n_p`-th
  class. Batches are in random order.
* **Fillers** (`class_fillers`): a short batch's free slots take random other classes, or with
  `max_draws_per_record` the least-drawn classes whose records stay within that cap, which
  bounds the oversampling of small classes in ``"samples"`` mode.
* **Replicas.** The plan's unit is the global batch of one step: with `R` replicas (workers x
  replicas per worker) and at least `n_c x R` usable classes, a unit holds `n_c x R` distinct
  classes (so no class is on two replicas in one step), grouped, filled and ordered as above,
  and is cut into `R` consecutive batches of `n_c` classes. The stream of global batches then
  depends on `n_c x R` alone (`elastic`): the same stream splits over any other replica count
  that keeps the global batch, which is what an elastic resume needs. With fewer usable classes
  each batch is a unit and `num_batches` is rounded up to a multiple of `R`
  (`worker_slices.round_batches`) with batches of `n_c` random distinct usable classes; that
  stream depends on `R`. Workers take whole batches (`epoch_plan.epoch_dataset`), so each
  replica's batch keeps the exact `n_c x n_p` structure.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import class_fillers, epoch_plan
from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.index_shuffle import permuted_positions
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.inputs.worker_slices import round_batches

EPOCH_MODES = ("classes", "samples")
SMALL_CLASS_POLICIES = ("replace", "skip")

# Streams within one (seed, epoch); values after epoch_plan's shared salts.
_SALT_ROUND_ORDER = 10
_SALT_FILL_ORDER = 11
_SALT_FILL_OFFSET = 12
_SALT_WITHIN_CLASS = 13
_SALT_BATCH_ORDER = 14
_SALT_BATCH_SEEDS = 15


@dataclasses.dataclass(frozen=True)
class ClassReport:
    """What a plan does with each class of the index (made by `class_report`).

    Args:
      num_classes: rows of the class index (C).
      n_samples_per_class: the `n_p` the report was made for.
      policy: the small-class policy, ``"replace"`` or ``"skip"``.
      usable_classes: int64 [U] class ids that the plans use, ascending.
      small_classes: int64 class ids with 0 < records < n_p.
      empty_classes: int64 class ids without records (never usable).
      class_sizes: int64 [C] records per class.

    Example:

        report = class_report([0, 5, 6, 6], n_samples_per_class=2)
        report.usable_classes, report.small_classes, report.empty_classes  # [0 1], [1], [2]
    """

    num_classes: int
    n_samples_per_class: int
    policy: str
    usable_classes: np.ndarray
    small_classes: np.ndarray
    empty_classes: np.ndarray
    class_sizes: np.ndarray

    @property
    def skipped_classes(self) -> np.ndarray:
        """Class ids left out of every plan: the empty ones, plus the small ones under "skip"."""
        if self.policy == "skip":
            return np.union1d(self.small_classes, self.empty_classes)
        return self.empty_classes

    @property
    def replaced_classes(self) -> np.ndarray:
        """Class ids whose records repeat inside a batch (small classes under "replace")."""
        return self.small_classes if self.policy == "replace" else self.small_classes[:0]

    def summary(self, max_listed: int = 10) -> str:
        """One line for logs and errors: usable, small and empty classes.

        Args:
          max_listed: the most class ids listed per kind (then "...").

        Returns:
          For example ``"2 of 3 classes usable; 1 classes without records skipped: [2]"``.
        """

        def listed(ids: np.ndarray) -> str:
            head = ", ".join(str(i) for i in ids[:max_listed])
            return f"[{head}{', ...' if len(ids) > max_listed else ''}]"

        parts = [f"{len(self.usable_classes)} of {self.num_classes} classes usable"]
        if len(self.small_classes):
            action = "skipped" if self.policy == "skip" else "filled with replacement"
            parts.append(
                f"{len(self.small_classes)} classes with fewer than {self.n_samples_per_class} "
                f"records {action}: {listed(self.small_classes)}"
            )
        if len(self.empty_classes):
            parts.append(
                f"{len(self.empty_classes)} classes without records skipped: "
                f"{listed(self.empty_classes)}"
            )
        return "; ".join(parts)


def class_report(
    row_splits, n_samples_per_class: int, small_classes: str = "replace"
) -> ClassReport:
    """Classifies the classes of a CSR class index into usable, small and empty.

    Args:
      row_splits: int [C + 1], non-decreasing from 0: class `c` holds the records at CSR
        positions `[row_splits[c], row_splits[c + 1])`.
      n_samples_per_class: `n_p`; a class with fewer (but some) records is small.
      small_classes: ``"replace"`` (small classes are usable) or ``"skip"``.

    Returns:
      The `ClassReport`.

    Raises:
      ValueError: an unknown `small_classes`, `n_samples_per_class` below 1, or `row_splits`
        not a non-decreasing vector starting at 0.
      TypeError: `n_samples_per_class` not an int.
    """
    if small_classes not in SMALL_CLASS_POLICIES:
        raise ValueError(
            f"small_classes must be one of {SMALL_CLASS_POLICIES}, got {small_classes!r}"
        )
    n_samples_per_class = int_argument("n_samples_per_class", n_samples_per_class, 1)
    row_splits = np.asarray(row_splits)
    if row_splits.ndim != 1 or len(row_splits) < 1 or row_splits[0] != 0:
        raise ValueError("row_splits must be a vector [C + 1] starting at 0")
    sizes = np.diff(row_splits.astype(np.int64))
    if np.any(sizes < 0):
        raise ValueError("row_splits must be non-decreasing")
    small = np.flatnonzero((sizes > 0) & (sizes < n_samples_per_class))
    empty = np.flatnonzero(sizes == 0)
    minimum = n_samples_per_class if small_classes == "skip" else 1
    return ClassReport(
        num_classes=len(sizes),
        n_samples_per_class=n_samples_per_class,
        policy=small_classes,
        usable_classes=np.flatnonzero(sizes >= minimum).astype(np.int64),
        small_classes=small.astype(np.int64),
        empty_classes=empty.astype(np.int64),
        class_sizes=sizes,
    )


class ClassBalancedPlan:
    """Per-epoch plans of `n_c x n_p` batches over a CSR class index (see the module docstring).

    Args:
      row_splits: int [C + 1], the class index's CSR row splits (see `class_report`).
      n_classes_per_batch: `n_c`, distinct classes per batch (<= usable classes).
      n_samples_per_class: `n_p`, samples per class in a batch.
      seed: the stateless seed (int64) of every epoch's plan.
      epoch_mode: ``"classes"`` (every usable class once an epoch) or ``"samples"`` (every
        record of every usable class once an epoch).
      small_classes: ``"replace"`` or ``"skip"`` (see `class_report`).
      num_workers, replicas_per_worker: their product is the replicas `R` of a step; the
        plan's units are global batches of `n_c x R` classes where that many are usable (see
        the module docstring), and `num_batches` is a multiple of `R`.
      max_draws_per_record: at most this many draws of any record in an epoch: the short
        batches are completed with the least-drawn classes under the cap
        (`class_fillers.capped_fillers`) instead of random ones. None: no cap.

    Raises:
      ValueError: an unknown `epoch_mode` or `small_classes`, a count below 1, a seed out of
        int64, bad `row_splits`, `n_classes_per_batch` above the number of usable classes
        (naming both), or a `max_draws_per_record` too low to cover a class or to complete the
        short batches (naming the least that does).
      TypeError: a count or seed that is not an int.

    Attributes:
      report: the `ClassReport` of the index.
      num_batches: batches per epoch, over all replicas (a multiple of `num_replicas`).
      batch_size: `n_c * n_p`.
      num_replicas: `R`, workers x replicas per worker.
      elastic: whether the unit is the global batch (`n_c x R` usable classes or more).
      classes_per_unit: `n_c x R` when elastic, else `n_c`.

    Example:

        plan = ClassBalancedPlan([0, 3, 6, 9, 12, 15], n_classes_per_batch=4, n_samples_per_class=2)
        plan.plan(0)["position"]  # int64 [2, 8]: 5 classes in batches of 4 classes x 2
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
        if epoch_mode not in EPOCH_MODES:
            raise ValueError(f"epoch_mode must be one of {EPOCH_MODES}, got {epoch_mode!r}")
        n_classes_per_batch = int_argument("n_classes_per_batch", n_classes_per_batch, 1)
        n_samples_per_class = int_argument("n_samples_per_class", n_samples_per_class, 1)
        seed = seed_argument(seed)
        if max_draws_per_record is not None:
            max_draws_per_record = int_argument("max_draws_per_record", max_draws_per_record, 1)
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        report = class_report(row_splits, n_samples_per_class, small_classes)
        num_usable = len(report.usable_classes)
        if n_classes_per_batch > num_usable:
            raise ValueError(
                f"n_classes_per_batch={n_classes_per_batch} is larger than the number of usable "
                f"classes, {num_usable} ({report.summary()})"
            )
        self.report = report
        self.n_classes_per_batch = n_c = int(n_classes_per_batch)
        self.n_samples_per_class = n_p = int(n_samples_per_class)
        self.seed = int(seed)
        self.epoch_mode = epoch_mode
        self.num_workers = int(num_workers)
        replicas = self.num_workers * int(replicas_per_worker)
        self.num_replicas = replicas
        # The unit of the plan is the global batch (all replicas' batches of one step) when its
        # classes can all be distinct: the stream of global batches then depends on n_c x
        # replicas only, and the same stream splits over any other replica count (elastic).
        self.elastic = n_c * replicas <= num_usable
        self.classes_per_unit = g = n_c * replicas if self.elastic else n_c
        self._rows_per_unit = g // n_c

        usable = report.usable_classes
        usable_sizes = report.class_sizes[usable]
        if epoch_mode == "classes":
            chunks = np.ones(num_usable, np.int64)
        else:
            chunks = np.maximum(1, -(-usable_sizes // n_p))
        # active[r]: classes with a chunk in round r; the rounds' groups are the units.
        active = np.cumsum(np.bincount(chunks, minlength=chunks.max() + 1)[::-1])[::-1][1:]
        groups = -(-active // g)
        round_starts = np.concatenate([[0], np.cumsum(active)[:-1]])
        unit_offsets = np.concatenate([[0], np.cumsum(groups)[:-1]])
        planned = int(groups.sum())
        # An elastic unit is one step of every replica; a replica's batch needs rounding.
        self._num_units = round_batches(planned, num_workers=replicas // self._rows_per_unit)
        extra = self._num_units - planned
        self.num_batches = self._num_units * self._rows_per_unit
        self.batch_size = n_c * n_p

        # Units to complete with other classes: the short last group of a round (its members
        # are the round's last `active % g` items), then whole extra units for the replicas.
        short = np.flatnonzero(active % g)
        members = active[short] % g
        fill_unit = np.concatenate(
            [unit_offsets[short] + groups[short] - 1, planned + np.arange(extra)]
        )
        fill_first_member = np.concatenate(
            [round_starts[short] + active[short] - members, np.zeros(extra, np.int64)]
        )
        fill_members = np.concatenate([members, np.zeros(extra, np.int64)])

        self._num_usable = num_usable
        self._num_items = int(active.sum())
        self._num_fill_units = len(fill_unit)
        self.max_draws_per_record = max_draws_per_record
        if max_draws_per_record is not None and num_usable >= 1 << class_fillers.ORDER_BITS:
            raise ValueError(
                f"max_draws_per_record supports up to {1 << class_fillers.ORDER_BITS} usable "
                f"classes, got {num_usable}"
            )

        # Variables, not constants: tf.data captures a variable by handle but copies a constant
        # into the dataset graph for every iterator, that is every epoch.
        const = lambda a: index_variable(np.asarray(a, np.int64), tf.int64)
        row_splits = np.concatenate([[0], np.cumsum(report.class_sizes)])
        self._usable = const(usable)
        self._usable_sizes = const(usable_sizes)
        self._usable_starts = const(row_splits[usable])
        self._chunks = const(chunks)
        # Chunk r of usable class u, for r < chunks[u], in class order (epoch-independent).
        self._item_class = const(np.repeat(np.arange(num_usable), chunks))
        self._item_round = const(
            np.arange(self._num_items) - np.repeat(np.cumsum(chunks) - chunks, chunks)
        )
        self._sample_offsets = const(np.tile(np.arange(n_p), self._num_units * g))
        self._round_starts = const(round_starts)
        self._unit_offsets = const(unit_offsets)
        self._short = class_fillers.ShortUnits(
            const(fill_unit), const(fill_first_member), const(fill_members), g
        )
        if max_draws_per_record is not None:
            self._max_appearances = const(chunks)
            free_slots = int((g - fill_members).sum())
            least = self._least_cap(usable_sizes, chunks, free_slots, max_draws_per_record)
            if max_draws_per_record < least:
                raise ValueError(
                    f"max_draws_per_record={max_draws_per_record} is below the least cap this "
                    f"plan keeps, {least} (covering every record and completing the short "
                    f"batches with other classes); pass at least {least}, or "
                    "epoch_mode='classes'"
                )
            self._max_appearances.assign(
                class_fillers.max_appearances(usable_sizes, chunks, n_p, max_draws_per_record)
            )

    @property
    def stream(self) -> str:
        """What fixes the stream of batches besides the classes and seed, in words: a sampler
        state resumes only into a plan of the same stream (`epoch_state.EpochState`).

        Elastic plans name the global batch alone (any replica count that keeps it resumes);
        the others name the replica count too.
        """
        geometry = f"classes x {self.n_samples_per_class} samples"
        mode = f"epoch_mode {self.epoch_mode}"
        if self.max_draws_per_record is not None:
            mode += f", max_draws_per_record {self.max_draws_per_record}"
        if self.elastic:
            return (
                f"global batches of {self.n_classes_per_batch * self.num_replicas} {geometry} "
                f"({mode})"
            )
        return (
            f"batches of {self.n_classes_per_batch} {geometry} on {self.num_replicas} replicas "
            f"({mode}; not elastic: n_c x replicas exceeds the "
            f"{self._num_usable} usable classes)"
        )

    def plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of one epoch, a pure function of (index, seed, epoch).

        Args:
          epoch: int64 scalar, a Python int or a tensor.

        Returns:
          A dict of int64 tensors with leading dimension `num_batches`:

          * ``position`` [num_batches, n_c * n_p]: positions in the CSR `values` (the record
            numbers of the classes); ``values[position]`` are the batch's record numbers.
          * ``label`` [num_batches, n_c * n_p]: the class id (CSR row) of each sample.
          * ``seed`` [num_batches, 2]: the stateless seed of the batch's global batch (shared by
            its replicas' batches), for crop offsets and masks.
          * ``slice_start`` [num_batches]: where the batch's first sample lies in its global
            batch: with the seed, it keys each sample's draws (`audio_features`'s
            `positions`), so a sample draws the same on any replica count.
        """
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        g, n_p = self.classes_per_unit, self.n_samples_per_class
        stream = lambda salt: epoch_plan.epoch_seed(self.seed, epoch, salt)

        # Chunks of every usable class (class u has chunks 0..chunks[u]-1), ordered by round and,
        # within a round, randomly: the order in which the round fills its groups.
        item_class, item_round = self._item_class, self._item_round
        random_bits = tf.random.stateless_uniform(
            [self._num_items],
            seed=stream(_SALT_ROUND_ORDER),
            minval=0,
            maxval=1 << 31,
            dtype=tf.int64,
        )
        order = tf.argsort(
            tf.bitwise.bitwise_or(tf.bitwise.left_shift(item_round, 31), random_bits)
        )
        item_class = tf.gather(item_class, order)
        item_round = tf.gather(item_round, order)
        in_round = tf.range(self._num_items, dtype=tf.int64) - tf.gather(
            self._round_starts, item_round
        )
        item_unit = tf.gather(self._unit_offsets, item_round) + in_round // g
        item_slot = in_round % g

        fill_class, fill_unit, fill_slot, fill_appearance = self._fillers(item_class, stream)

        classes = tf.concat([item_class, fill_class], 0)
        appearances = tf.concat([item_round, fill_appearance], 0)
        slots = tf.concat([item_unit, fill_unit], 0) * g + tf.concat([item_slot, fill_slot], 0)
        unit_classes = tf.scatter_nd(slots[:, None], classes, [self._num_units * g])
        unit_appearances = tf.scatter_nd(slots[:, None], appearances, [self._num_units * g])

        # Expand each (class, appearance) to its n_p permutation positions, modulo the class size.
        sample_class = tf.repeat(unit_classes, n_p)
        sizes = tf.gather(self._usable_sizes, sample_class)
        within = (tf.repeat(unit_appearances, n_p) * n_p + self._sample_offsets) % sizes
        position = self._permuted_positions(sample_class, sizes, within, stream(_SALT_WITHIN_CLASS))
        label = tf.gather(self._usable, sample_class)

        # Units in random order, each cut into its replicas' batches (consecutive rows).
        unit_order = epoch_plan.stateless_permutation(self._num_units, stream(_SALT_BATCH_ORDER))
        rows = [self.num_batches, self.batch_size]
        in_units = lambda t: tf.reshape(
            tf.gather(tf.reshape(t, [self._num_units, -1]), unit_order), rows
        )
        unit_seeds = tf.random.stateless_uniform(
            [self._num_units, 2],
            seed=stream(_SALT_BATCH_SEEDS),
            minval=None,
            maxval=None,
            dtype=tf.int64,
        )
        slice_in_unit = tf.range(self.num_batches, dtype=tf.int64) % self._rows_per_unit
        return {
            "position": in_units(position),
            "label": in_units(label),
            "seed": tf.repeat(unit_seeds, self._rows_per_unit, axis=0),
            "slice_start": slice_in_unit * self.batch_size,
        }

    def _least_cap(self, sizes: np.ndarray, chunks: np.ndarray, free_slots: int, asked: int) -> int:
        """The least cap accepted (or `asked`, found acceptable at once): one draw above the
        least that plans epoch 0, which is at least what coverage and the short batches' free
        slots need. Which classes are members
        of a short batch changes every epoch, so a cap at the least that plans epoch 0 failed 3
        of 200 later epochs (40 random corpora); with one draw to spare, none of those nor of 300
        more (60 other corpora) did. A later epoch that still fails does so when planned, in one
        line."""
        n_p = self.n_samples_per_class
        needed = class_fillers.least_feasible_cap(sizes, chunks, n_p, free_slots)
        if not self._num_fill_units:
            return needed
        plan = tf.function(self.plan)

        def plans(cap: int) -> bool:
            self._max_appearances.assign(class_fillers.max_appearances(sizes, chunks, n_p, cap))
            try:
                plan(tf.constant(0, tf.int64))
            except tf.errors.InvalidArgumentError:  # a batch left without classes to fill it
                return False
            return True

        if asked - 1 >= needed and plans(asked - 1):
            return asked
        return class_fillers.least_planning_cap(plans, needed) + 1

    def _fillers(self, item_class: tf.Tensor, stream) -> tuple[tf.Tensor, ...]:
        """The classes that complete the short units (`class_fillers`): (class, unit, slot,
        appearance), each int64 [F]."""
        if self._num_fill_units == 0:
            empty = tf.zeros([0], tf.int64)
            return empty, empty, empty, empty
        class_order = epoch_plan.stateless_permutation(self._num_usable, stream(_SALT_FILL_ORDER))
        if self.max_draws_per_record is None:
            starts = tf.random.stateless_uniform(
                [self._num_fill_units],
                seed=stream(_SALT_FILL_OFFSET),
                minval=0,
                maxval=self._num_usable,
                dtype=tf.int64,
            )
            return class_fillers.random_fillers(
                item_class,
                self._short,
                num_usable=self._num_usable,
                chunks=self._chunks,
                class_order=class_order,
                starts=starts,
            )
        class_rank = tf.scatter_nd(
            class_order[:, None], tf.range(self._num_usable, dtype=tf.int64), [self._num_usable]
        )
        return class_fillers.capped_fillers(
            item_class,
            self._short,
            chunks=self._chunks,
            max_appearances=self._max_appearances,
            class_rank=class_rank,
            max_draws_per_record=self.max_draws_per_record,
        )

    def _permuted_positions(
        self, sample_class: tf.Tensor, sizes: tf.Tensor, within: tf.Tensor, seed: tf.Tensor
    ) -> tf.Tensor:
        """CSR positions of permutation entries `within` (< class size) of each sample's class:
        the epoch's keyed permutation of the class (`index_shuffle`, keyed by the class), computed
        for the sampled entries only, whatever the class sizes."""
        starts = tf.gather(self._usable_starts, sample_class)
        return starts + permuted_positions(within, sizes, seed, tweak=sample_class)


def batch_layout(n_classes_per_batch: int, n_samples_per_class: int) -> np.ndarray:
    """The class slot of each sample of a batch: `i // n_p`.

    Args:
      n_classes_per_batch: `n_c`.
      n_samples_per_class: `n_p`.

    Returns:
      int64 [n_c * n_p], for example ``[0, 0, 1, 1]`` for `n_c = n_p = 2`.
    """
    return np.repeat(np.arange(n_classes_per_batch), n_samples_per_class).astype(np.int64)
