"""The class-balanced epoch plan: `n_c` distinct classes x `n_p` samples a batch, every class every
epoch.

Given a class index in CSR form (`row_splits` [C + 1] over the record numbers of each class),
`ClassBalancedPlan` computes, for each epoch, int64 [num_batches, n_c * n_p] record positions.
It is a pure function of (class CSR, seed, epoch), vectorized in TF (no Python loop over classes
or samples), so every worker computes the same global plan and a resumed run recomputes it. Every
random order in it is a keyed permutation (`index_shuffle`): the units' order, each round's order
of its classes, each class's order of its records. So any batch is planned from its number alone
(`plan_batches`, what the datasets use); only the fillers of the epoch's few short units are
computed for the epoch (`class_fillers`).

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

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import class_fillers, epoch_plan
from tfx_dynamic_inputs.inputs.index_shuffle import keyed_offsets, keyed_seeds, permuted_positions
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.plans import class_plan as numpy_plan
from tfx_dynamic_inputs.plans.class_geometry import EPOCH_MODES as EPOCH_MODES
from tfx_dynamic_inputs.plans.class_geometry import class_units

# Streams within one (seed, epoch), stated once with the NumPy plans' executor.
_SALT_ROUND_ORDER = numpy_plan.SALT_ROUND_ORDER
_SALT_FILL_ORDER = numpy_plan.SALT_FILL_ORDER
_SALT_FILL_OFFSET = numpy_plan.SALT_FILL_OFFSET
_SALT_WITHIN_CLASS = numpy_plan.SALT_WITHIN_CLASS
_SALT_BATCH_ORDER = numpy_plan.SALT_BATCH_ORDER
_SALT_BATCH_SEEDS = numpy_plan.SALT_BATCH_SEEDS


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
        checked = numpy_plan.checked_arguments(
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
        self.report = report = checked.report
        num_usable = len(report.usable_classes)
        self.n_classes_per_batch = n_c = checked.n_classes_per_batch
        self.n_samples_per_class = n_p = checked.n_samples_per_class
        self.seed = checked.seed
        self.epoch_mode = epoch_mode
        self.num_workers = checked.num_workers
        self.num_replicas = replicas = checked.num_replicas
        max_draws_per_record = checked.max_draws_per_record
        usable = report.usable_classes
        usable_sizes = report.class_sizes[usable]
        units = class_units(
            usable_sizes,
            n_classes_per_batch=n_c,
            n_samples_per_class=n_p,
            epoch_mode=epoch_mode,
            num_replicas=replicas,
        )
        self.elastic = units.elastic
        self.classes_per_unit = g = units.classes_per_unit
        self._rows_per_unit = units.rows_per_unit
        self._num_units = units.num_units
        self.num_batches = units.num_batches
        self.batch_size = n_c * n_p
        chunks = units.chunks
        fill_members = units.fill_members

        self._num_usable = num_usable
        self._num_fill_units = len(units.fill_unit)
        self.max_draws_per_record = max_draws_per_record

        # Variables, not constants: tf.data captures a variable by handle but copies a constant
        # into the dataset graph for every iterator, that is every epoch.
        const = lambda a: index_variable(np.asarray(a, np.int64), tf.int64)
        row_splits = np.concatenate([[0], np.cumsum(report.class_sizes)])
        self._usable = const(usable)
        self._usable_sizes = const(usable_sizes)
        self._usable_starts = const(row_splits[usable])
        self._chunks = const(chunks)
        # The classes of round r are those with more than r chunks: the first active[r] of the
        # usable classes by chunks, most first. A round's order is a keyed permutation of them.
        self._by_chunks = const(units.by_chunks)
        self._round_sizes = const(units.round_sizes)
        self._unit_offsets = const(units.unit_offsets)
        self._short = class_fillers.ShortUnits(
            const(units.fill_unit),
            const(units.fill_round),
            const(units.fill_first_member),
            const(fill_members),
            g,
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
    def plans_batches_alone(self) -> bool:
        """Whether a block of batches is cheaper planned alone than as its share of the epoch.

        `plan_batches` computes the fillers of all the epoch's short units on every call (a
        filler's appearance number counts the class's earlier fillers). That is cheap where
        there are few: one short unit a round, and ``"classes"`` has one round. In
        ``"samples"`` mode over classes of very different sizes most units can be short (the
        late rounds hold only the big classes), and planning each block of
        `epoch_plan.PLAN_BLOCK_BATCHES` would redo the epoch's fillers every block. So: no
        draw cap (its fillers rank every class, once an epoch), and the short units' slots at
        most the class slots of a block.
        """
        filler_slots = self._num_fill_units * self.classes_per_unit
        block_slots = epoch_plan.PLAN_BLOCK_BATCHES * self.n_classes_per_batch
        return self.max_draws_per_record is None and filler_slots <= block_slots

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
        return self.plan_batches(epoch, tf.range(self.num_batches, dtype=tf.int64))

    def plan_batches(self, epoch, batch_numbers) -> dict[str, tf.Tensor]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone.

        A batch's global batch (its unit) is the keyed permutation of the epoch's units at the
        batch's step; the unit's members are the keyed permutation of its round's classes at
        the unit's positions in the round; the fillers of the epoch's short units are computed
        for all of them (O(short units x classes per unit); `plans_batches_alone` says when
        that is small). Nothing else of the number of records or batches is built.

        Args:
          epoch: int64 scalar, a Python int or a tensor.
          batch_numbers: int64 [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          ``position``, ``label``, ``seed`` and ``slice_start``, each with leading dimension
          `n`, equal to `tf.gather(plan(epoch)[key], batch_numbers)`.

        Raises:
          tf.errors.InvalidArgumentError: when run, a batch number outside `[0, num_batches)`.

        Example:

            plan = ClassBalancedPlan([0, 3, 6, 9, 12, 15], n_classes_per_batch=4,
                                     n_samples_per_class=2)
            plan.plan_batches(3, [1])["label"]  # int64 [1, 8]: batch 1 of epoch 3
        """
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        batch_numbers = epoch_plan.checked_batch_numbers(batch_numbers, self.num_batches)
        n_c, n_p = self.n_classes_per_batch, self.n_samples_per_class
        stream = lambda salt: epoch_plan.epoch_seed(self.seed, epoch, salt)
        step = batch_numbers // self._rows_per_unit
        slice_in_unit = batch_numbers % self._rows_per_unit
        # Units in random order, each cut into its replicas' batches (consecutive rows).
        unit = permuted_positions(step, self._num_units, stream(_SALT_BATCH_ORDER))
        slot = slice_in_unit[:, None] * n_c + tf.range(n_c, dtype=tf.int64)[tf.newaxis, :]
        unit = tf.broadcast_to(unit[:, None], tf.shape(slot))
        classes, appearances = self._unit_slots(
            tf.reshape(unit, [-1]), tf.reshape(slot, [-1]), stream
        )

        sample_class, position = class_sample_positions(
            classes,
            appearances,
            n_p,
            self._usable_sizes,
            self._usable_starts,
            stream(_SALT_WITHIN_CLASS),
        )
        rows = [-1, self.batch_size]
        return {
            "position": tf.reshape(position, rows),
            "label": tf.reshape(tf.gather(self._usable, sample_class), rows),
            "seed": keyed_seeds(stream(_SALT_BATCH_SEEDS), step),
            "slice_start": slice_in_unit * self.batch_size,
        }

    def _unit_slots(self, unit: tf.Tensor, slot: tf.Tensor, stream) -> tuple[tf.Tensor, tf.Tensor]:
        """The usable class and appearance number of each (unit, slot), int64 [m] each."""
        g = self.classes_per_unit
        round_number = (
            tf.searchsorted(self._unit_offsets, unit, side="right", out_type=tf.int64) - 1
        )
        first = (unit - tf.gather(self._unit_offsets, round_number)) * g
        members = tf.clip_by_value(tf.gather(self._round_sizes, round_number) - first, 0, g)
        is_member = slot < members
        member_class = self._round_classes(
            round_number, tf.where(is_member, first + slot, tf.zeros_like(slot)), stream
        )
        if not self._num_fill_units:
            return member_class, round_number
        fill_class, fill_appearance = self._fillers(stream)
        # A slot past the members is a short unit's filler `slot - members`.
        short = tf.minimum(
            tf.searchsorted(self._short.unit, unit, out_type=tf.int64), self._num_fill_units - 1
        )
        filler = tf.stack([short, tf.maximum(slot - members, 0)], axis=1)
        return (
            tf.where(is_member, member_class, tf.gather_nd(fill_class, filler)),
            tf.where(is_member, round_number, tf.gather_nd(fill_appearance, filler)),
        )

    def _round_classes(self, round_number: tf.Tensor, position: tf.Tensor, stream) -> tf.Tensor:
        """The usable class at each round position: the round's keyed order of its classes."""
        size = tf.gather(self._round_sizes, round_number)
        permuted = permuted_positions(position, size, stream(_SALT_ROUND_ORDER), tweak=round_number)
        return tf.gather(self._by_chunks, permuted)

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
        # Only the fillers can refuse a cap: epoch 0's, not its whole plan.
        fillers = tf.function(
            lambda: self._fillers(lambda salt: epoch_plan.epoch_seed(self.seed, 0, salt)),
            autograph=False,
        )

        def plans(cap: int) -> bool:
            self._max_appearances.assign(class_fillers.max_appearances(sizes, chunks, n_p, cap))
            try:
                fillers()
            except tf.errors.InvalidArgumentError:  # a batch left without classes to fill it
                return False
            return True

        if asked - 1 >= needed and plans(asked - 1):
            return asked
        return class_fillers.least_planning_cap(plans, needed) + 1

    def _fillers(self, stream) -> tuple[tf.Tensor, tf.Tensor]:
        """The classes that complete the short units (`class_fillers`): `(class, appearance)`,
        each int64 [S, g], entry `j` filling slot `members + j` of short unit `i`."""
        short, g = self._short, self.classes_per_unit
        column = tf.range(g, dtype=tf.int64)[tf.newaxis, :]
        is_member = column < short.members[:, None]
        round_number = tf.broadcast_to(short.round[:, None], tf.shape(is_member))
        position = tf.where(is_member, short.first_member[:, None] + column, tf.zeros_like(column))
        member_class = tf.where(
            is_member,
            tf.reshape(
                self._round_classes(
                    tf.reshape(round_number, [-1]), tf.reshape(position, [-1]), stream
                ),
                [-1, g],
            ),
            tf.constant(-1, tf.int64),
        )
        seed = stream(_SALT_FILL_ORDER)
        if self.max_draws_per_record is None:
            # Each short unit's window of g classes along the epoch's keyed class order.
            offset = keyed_offsets(
                self._num_usable,
                stream(_SALT_FILL_OFFSET),
                tf.range(self._num_fill_units, dtype=tf.int64),
            )
            window = (offset[:, None] + column) % self._num_usable
            candidates = permuted_positions(tf.reshape(window, [-1]), self._num_usable, seed)
            return class_fillers.random_fillers(
                member_class, short.members, tf.reshape(candidates, [-1, g]), self._chunks
            )
        class_rank = permuted_positions(
            tf.range(self._num_usable, dtype=tf.int64), self._num_usable, seed
        )
        return class_fillers.capped_fillers(
            member_class,
            short.members,
            chunks=self._chunks,
            max_appearances=self._max_appearances,
            class_rank=class_rank,
            max_draws_per_record=self.max_draws_per_record,
        )


def class_sample_positions(
    classes: tf.Tensor,
    appearances: tf.Tensor,
    n_samples_per_class: int,
    class_sizes: tf.Tensor,
    class_starts: tf.Tensor,
    seed: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The records of each drawn (class, appearance): its `n_p` entries `appearance * n_p + j`
    (modulo the class's size) of the epoch's keyed permutation of the class, computed at those
    entries only. A class's appearances so walk one permutation of its records.

    Args:
      classes: int64 [m], class numbers (rows of `class_sizes` / `class_starts`).
      appearances: int64 [m], each draw's appearance number of its class this epoch.
      n_samples_per_class: `n_p`.
      class_sizes, class_starts: int64 [C], each class's record count and first position.
      seed: int64 [2], the epoch's stream of within-class orders.

    Returns:
      `(sample_class, position)`, int64 [m * n_p] each: each class repeated `n_p` times, and the
      positions of its records.

    Example:

        class_sample_positions(classes, appearances, 2, sizes, starts, seed)
    """
    n_p = n_samples_per_class
    sample_class = tf.repeat(classes, n_p)
    sizes = tf.gather(class_sizes, sample_class)
    offsets = appearances[:, None] * n_p + tf.range(n_p, dtype=tf.int64)[tf.newaxis, :]
    within = tf.reshape(offsets, [-1]) % sizes
    position = tf.gather(class_starts, sample_class) + permuted_positions(
        within, sizes, seed, tweak=sample_class
    )
    return sample_class, position


def batch_layout(n_classes_per_batch: int, n_samples_per_class: int) -> np.ndarray:
    """The class slot of each sample of a batch: `i // n_p`.

    Args:
      n_classes_per_batch: `n_c`.
      n_samples_per_class: `n_p`.

    Returns:
      int64 [n_c * n_p], for example ``[0, 0, 1, 1]`` for `n_c = n_p = 2`.
    """
    return np.repeat(np.arange(n_classes_per_batch), n_samples_per_class).astype(np.int64)
