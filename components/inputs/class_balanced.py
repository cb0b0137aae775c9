"""Class-balanced batches: exactly `n_c` distinct classes x `n_p` samples, every class every epoch.

The epoch plan
--------------
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
  usable class appears at least once per epoch and `num_batches = ceil(usable / n_c)`.
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
* **Workers** take whole batches (`epoch_plan.epoch_dataset`), so each replica's batch keeps the
  exact `n_c x n_p` structure. When `num_batches` is not a multiple of the number of workers,
  the plan adds batches of `n_c` random distinct usable classes until it is.

`class_balanced` wraps the plan into a `tf.data.Dataset` that reads the planned records from a
`RecordStore` and computes log-mel features in the graph (`components.inputs.audio_features`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from components import examples, layout
from components.inputs import epoch_plan, sources
from components.inputs.audio_features import AudioFeatureConfig, audio_features
from components.inputs.record_store import RecordStore

EPOCH_MODES = ("classes", "samples")
SMALL_CLASS_POLICIES = ("replace", "skip")

# Streams within one (seed, epoch); values after epoch_plan's shared salts.
_SALT_ROUND_ORDER = 10
_SALT_FILL_ORDER = 11
_SALT_FILL_OFFSET = 12
_SALT_WITHIN_CLASS = 13
_SALT_BATCH_ORDER = 14
_SALT_BATCH_SEEDS = 15

DEFAULT_FEATURES = AudioFeatureConfig()

# Longest within-class permutation prefix drawn by the partial Fisher-Yates shuffle; longer
# prefixes (large n_p) shuffle every class in full instead.
_MAX_PREFIX = 64


@dataclasses.dataclass(frozen=True)
class ClassReport:
    """What a plan does with each class of the index.

    Attributes:
      num_classes: rows of the class index (C).
      n_samples_per_class: the `n_p` the report was made for.
      policy: the small-class policy, ``"replace"`` or ``"skip"``.
      usable_classes: int64 [U] class ids that the plans use, ascending.
      small_classes: int64 class ids with 0 < records < n_p.
      empty_classes: int64 class ids without records (never usable).
      class_sizes: int64 [C] records per class.
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
    """Classifies the classes of a CSR class index (`row_splits`, int64 [C + 1])."""
    if small_classes not in SMALL_CLASS_POLICIES:
        raise ValueError(
            f"small_classes must be one of {SMALL_CLASS_POLICIES}, got {small_classes!r}"
        )
    if n_samples_per_class < 1:
        raise ValueError(f"n_samples_per_class must be >= 1, got {n_samples_per_class}")
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

    `plan(epoch)` returns a dict of int64 tensors with leading dimension `num_batches`:

    * ``position`` [num_batches, n_c * n_p]: positions in the CSR `values` (the record numbers
      of the classes); ``values[position]`` are the batch's record numbers.
    * ``label`` [num_batches, n_c * n_p]: the class id (CSR row) of each sample.
    * ``seed`` [num_batches, 2]: a stateless seed per batch, for crop offsets and masks.
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
    ):
        if epoch_mode not in EPOCH_MODES:
            raise ValueError(f"epoch_mode must be one of {EPOCH_MODES}, got {epoch_mode!r}")
        if n_classes_per_batch < 1:
            raise ValueError(f"n_classes_per_batch must be >= 1, got {n_classes_per_batch}")
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

        usable = report.usable_classes
        usable_sizes = report.class_sizes[usable]
        if epoch_mode == "classes":
            chunks = np.ones(num_usable, np.int64)
        else:
            chunks = np.maximum(1, -(-usable_sizes // n_p))
        # active[r]: classes with a chunk in round r; the rounds' groups are the batches.
        active = np.cumsum(np.bincount(chunks, minlength=chunks.max() + 1)[::-1])[::-1][1:]
        groups = -(-active // n_c)
        round_starts = np.concatenate([[0], np.cumsum(active)[:-1]])
        batch_offsets = np.concatenate([[0], np.cumsum(groups)[:-1]])
        planned = int(groups.sum())
        extra = -planned % self.num_workers
        self.num_batches = planned + extra
        self.batch_size = n_c * n_p

        # Batches to complete with other classes: the short last group of a round (its members
        # are the round's last `active % n_c` items), then whole extra batches for the workers.
        short = np.flatnonzero(active % n_c)
        members = active[short] % n_c
        fill_batch = np.concatenate(
            [batch_offsets[short] + groups[short] - 1, planned + np.arange(extra)]
        )
        fill_first_member = np.concatenate(
            [round_starts[short] + active[short] - members, np.zeros(extra, np.int64)]
        )
        fill_members = np.concatenate([members, np.zeros(extra, np.int64)])

        self._num_usable = num_usable
        self._num_items = int(active.sum())
        self._num_fill_batches = len(fill_batch)
        # Each batch holds a class at most once, so a class appears at most
        # max_chunks + (batches completed with fillers) times per epoch.
        max_appearances = int(chunks.max()) + len(fill_batch)
        self._prefix = min(max_appearances * n_p, int(usable_sizes.max()))
        self._full_shuffle = epoch_mode == "samples" or self._prefix > _MAX_PREFIX

        # Variables, not constants: tf.data captures a variable by handle but copies a constant
        # into the dataset graph for every iterator, that is every epoch.
        const = lambda a: epoch_plan.index_variable(np.asarray(a, np.int64), tf.int64)
        row_splits = np.concatenate([[0], np.cumsum(report.class_sizes)])
        self._row_splits = const(row_splits)
        self._usable = const(usable)
        self._usable_sizes = const(usable_sizes)
        self._usable_starts = const(row_splits[usable])
        self._chunks = const(chunks)
        # Chunk r of usable class u, for r < chunks[u], in class order (epoch-independent).
        self._item_class = const(np.repeat(np.arange(num_usable), chunks))
        self._item_round = const(
            np.arange(self._num_items) - np.repeat(np.cumsum(chunks) - chunks, chunks)
        )
        self._sample_offsets = const(np.tile(np.arange(n_p), self.num_batches * n_c))
        self._round_starts = const(round_starts)
        self._batch_offsets = const(batch_offsets)
        self._fill_batch = const(fill_batch)
        self._fill_first_member = const(fill_first_member)
        self._fill_members = const(fill_members)

    def plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of `epoch` (int64 scalar; a Python int or a tensor)."""
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        n_c, n_p = self.n_classes_per_batch, self.n_samples_per_class
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
        item_batch = tf.gather(self._batch_offsets, item_round) + in_round // n_c
        item_slot = in_round % n_c

        fill_class, fill_batch, fill_slot, fill_appearance = self._fillers(item_class, stream)

        classes = tf.concat([item_class, fill_class], 0)
        appearances = tf.concat([item_round, fill_appearance], 0)
        slots = tf.concat([item_batch, fill_batch], 0) * n_c + tf.concat([item_slot, fill_slot], 0)
        batch_classes = tf.scatter_nd(slots[:, None], classes, [self.num_batches * n_c])
        batch_appearances = tf.scatter_nd(slots[:, None], appearances, [self.num_batches * n_c])

        # Expand each (class, appearance) to its n_p permutation positions, modulo the class size.
        sample_class = tf.repeat(batch_classes, n_p)
        sizes = tf.gather(self._usable_sizes, sample_class)
        within = (tf.repeat(batch_appearances, n_p) * n_p + self._sample_offsets) % sizes
        position = self._permuted_positions(sample_class, within, stream(_SALT_WITHIN_CLASS))
        label = tf.gather(self._usable, sample_class)

        batch_order = epoch_plan.stateless_permutation(self.num_batches, stream(_SALT_BATCH_ORDER))
        shape = [self.num_batches, n_c * n_p]
        batch_seeds = tf.random.stateless_uniform(
            [self.num_batches, 2],
            seed=stream(_SALT_BATCH_SEEDS),
            minval=None,
            maxval=None,
            dtype=tf.int64,
        )
        return {
            "position": tf.gather(tf.reshape(position, shape), batch_order),
            "label": tf.gather(tf.reshape(label, shape), batch_order),
            "seed": batch_seeds,
        }

    def _fillers(self, item_class: tf.Tensor, stream) -> tuple[tf.Tensor, ...]:
        """Classes that complete the short batches: (class, batch, slot, appearance), each [F].

        The candidates of a batch are `n_c` consecutive entries (from a random offset, wrapping)
        of a random permutation of the usable classes; the first ones that are not already in
        the batch fill its free slots. At most `members < n_c` candidates are in the batch, so
        enough remain.
        """
        n_c = self.n_classes_per_batch
        if self._num_fill_batches == 0:
            empty = tf.zeros([0], tf.int64)
            return empty, empty, empty, empty
        column = tf.range(n_c, dtype=tf.int64)[tf.newaxis, :]
        member_positions = self._fill_first_member[:, None] + column
        has_member = column < self._fill_members[:, None]
        members = tf.where(
            has_member,
            tf.gather(item_class, tf.where(has_member, member_positions, 0)),
            -1,
        )
        class_order = epoch_plan.stateless_permutation(self._num_usable, stream(_SALT_FILL_ORDER))
        start = tf.random.stateless_uniform(
            [self._num_fill_batches],
            seed=stream(_SALT_FILL_OFFSET),
            minval=0,
            maxval=self._num_usable,
            dtype=tf.int64,
        )
        candidates = tf.gather(class_order, (start[:, None] + column) % self._num_usable)
        taken = tf.reduce_any(tf.equal(candidates[:, :, None], members[:, None, :]), axis=2)
        rank = tf.cumsum(tf.cast(~taken, tf.int64), axis=1) - 1
        free_slots = n_c - self._fill_members
        chosen = (~taken) & (rank < free_slots[:, None])
        fill_class = tf.boolean_mask(candidates, chosen)
        fill_batch = tf.boolean_mask(tf.tile(self._fill_batch[:, None], [1, n_c]), chosen)
        fill_slot = tf.boolean_mask(self._fill_members[:, None] + rank, chosen)
        # A filler's appearance number continues after the class's own chunks, counting the
        # class's earlier fillers in this epoch.
        by_class = tf.cast(tf.argsort(fill_class, stable=True), tf.int64)
        sorted_class = tf.gather(fill_class, by_class)
        earlier = tf.range(tf.size(fill_class, out_type=tf.int64)) - tf.searchsorted(
            sorted_class, sorted_class, side="left", out_type=tf.int64
        )
        earlier = tf.scatter_nd(by_class[:, None], earlier, tf.shape(fill_class, out_type=tf.int64))
        fill_appearance = tf.gather(self._chunks, fill_class) + earlier
        return fill_class, fill_batch, fill_slot, fill_appearance

    def _permuted_positions(
        self, sample_class: tf.Tensor, within: tf.Tensor, seed: tf.Tensor
    ) -> tf.Tensor:
        """CSR positions of permutation entries `within` (< class size) of each sample's class."""
        starts = tf.gather(self._usable_starts, sample_class)
        if self._full_shuffle:
            shuffled = epoch_plan.shuffle_within_rows(self._row_splits, seed)
            return tf.gather(shuffled, starts + within)
        prefixes = permutation_prefixes(self._usable_sizes, self._prefix, seed)
        return starts + tf.gather_nd(prefixes, tf.stack([sample_class, within], axis=1))


def permutation_prefixes(sizes, length: int, seed) -> tf.Tensor:
    """int64 [R, length]: row `r` starts a uniform random permutation of `0..sizes[r]-1`.

    Entries `j < min(length, sizes[r])` are the first entries of the permutation (the rest are
    unspecified). A partial Fisher-Yates shuffle, vectorized over rows: step `j` swaps entry `j`
    with a uniform entry `t_j` of `[j, size)`. Only the entries `0..length-1` and the targets
    `t_j` are ever touched, so the shuffle runs on a dense `[R, 2 * length]` array of those
    entries: the cost is `O(R * length**2)`, independent of the class sizes (a full shuffle of
    1M records is a 1M-key sort; this draws only what an epoch of the classes mode uses).
    """
    sizes = tf.convert_to_tensor(sizes, tf.int64)
    rows = tf.shape(sizes, out_type=tf.int64)[0]
    step = tf.range(length, dtype=tf.int64)[tf.newaxis, :]
    remaining = sizes[:, tf.newaxis] - step
    draws = tf.random.stateless_uniform(tf.shape(remaining), seed=seed, dtype=tf.float64)
    offset = tf.cast(draws * tf.cast(tf.maximum(remaining, 1), tf.float64), tf.int64)
    # Steps past the end of a small row swap an entry with itself.
    targets = step + tf.clip_by_value(offset, 0, tf.maximum(remaining - 1, 0))
    # Dense slot of each target: entries below `length` are their own slot; a target at or
    # beyond it gets slot `length + i`, i the first step that targets the same entry.
    first_same = tf.argmax(
        tf.cast(tf.equal(targets[:, :, tf.newaxis], targets[:, tf.newaxis, :]), tf.int32),
        axis=2,
        output_type=tf.int64,
    )
    slots = tf.where(targets < length, targets, length + first_same)
    entries = tf.concat([tf.broadcast_to(step, [rows, length]), targets], axis=1)
    slot_ids = tf.range(2 * length, dtype=tf.int64)[tf.newaxis, :]
    prefix = []
    for j in range(length):
        slot = slots[:, j]
        prefix.append(tf.gather(entries, slot, batch_dims=1))
        # Entry j is never read again (later targets are > j), so only the target slot changes.
        moved = tf.equal(slot_ids, slot[:, tf.newaxis])
        entries = tf.where(moved, entries[:, j : j + 1], entries)
    return tf.stack(prefix, axis=1)


class ClassBalancedSampler:
    """A class-balanced input over one source: its record store, class index, plan and state.

    `dataset()` is the `tf.data.Dataset` that `class_balanced` returns; the sampler also exposes
    what the dataset is built from:

    * `report` (`ClassReport`): usable, small, skipped and empty classes (also logged once as a
      warning when any class is small or empty);
    * `state` (`epoch_plan.EpochState`): track it in a `tf.train.Checkpoint` to resume;
    * `plan` (`ClassBalancedPlan`), `store` (`RecordStore`), `classes` (class names when the
      labels were strings or the run has a `classes.txt`, else None).

    See `class_balanced` for the arguments.
    """

    def __init__(
        self,
        source,
        labels=None,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        worker_index: int | None = None,
        num_workers: int | None = None,
        epoch_mode: str = "classes",
        small_classes: str = "replace",
        features: AudioFeatureConfig | None = DEFAULT_FEATURES,
        record_set: str | None = None,
        load_fn: Callable[[object], object] | None = None,
        backend: str = "auto",
        memory_budget_bytes: int = 1 << 30,
        cache_dir: str | None = None,
        state: epoch_plan.EpochState | None = None,
    ):
        self.worker_index, self.num_workers = epoch_plan.worker_slice(
            input_context, worker_index=worker_index, num_workers=num_workers
        )
        self.features = features
        sample_rate = features.sample_rate if features is not None else None
        resolved = _resolve_source(
            source,
            labels,
            record_set=record_set,
            load_fn=load_fn,
            backend=backend,
            memory_budget_bytes=memory_budget_bytes,
            cache_dir=cache_dir,
            sample_rate=sample_rate,
        )
        self.store: RecordStore = resolved.store
        self.classes = resolved.classes
        self._labels_in_records = resolved.labels_in_records
        if resolved.values.shape[0] != self.store.num_records:
            raise ValueError(
                f"the class index lists {resolved.values.shape[0]} records but the record store "
                f"holds {self.store.num_records}"
            )
        self.plan = ClassBalancedPlan(
            resolved.row_splits,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            seed=seed,
            epoch_mode=epoch_mode,
            small_classes=small_classes,
            num_workers=self.num_workers,
        )
        self.report = self.plan.report
        _log_report(self.report)
        self.state = state if state is not None else epoch_plan.EpochState()
        self._record_numbers = _record_number_lookup(resolved.values, memory_budget_bytes)

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on this worker."""
        return self.plan.num_batches // self.num_workers

    def epoch_plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of `epoch` in record numbers: ``index`` and ``label`` [num_batches,
        n_c * n_p], ``seed`` [num_batches, 2]."""
        planned = self.plan.plan(epoch)
        return {
            "index": self._record_numbers(planned["position"]),
            "label": planned["label"],
            "seed": planned["seed"],
        }

    def dataset(
        self, *, initial_step: int = 0, num_parallel_calls: int = tf.data.AUTOTUNE
    ) -> tf.data.Dataset:
        """Batches of this worker; each iteration of the dataset is the next epoch.

        `initial_step` resumes the epoch in progress (see `epoch_plan.epoch_dataset`).
        """
        rows = epoch_plan.epoch_dataset(
            self.epoch_plan,
            num_batches=self.plan.num_batches,
            state=self.state,
            num_workers=self.num_workers,
            worker_index=self.worker_index,
            initial_step=initial_step,
        )
        return rows.map(
            self._load_batch, num_parallel_calls=num_parallel_calls, deterministic=True
        ).prefetch(tf.data.AUTOTUNE)

    def _load_batch(self, row: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        batch_size = self.plan.batch_size
        index = tf.ensure_shape(row["index"], [batch_size])
        label = tf.ensure_shape(row["label"], [batch_size])
        records = self.store.read(index)
        if self.features is None:
            return {"index": index, "label": label, "record": records}
        parsed = tf.io.parse_example(
            records,
            {
                layout.AUDIO_KEY: tf.io.FixedLenFeature([], tf.string),
                layout.SAMPLE_RATE_KEY: tf.io.FixedLenFeature(
                    [], tf.int64, default_value=self.features.sample_rate
                ),
                layout.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=-1),
            },
        )
        checks = []
        if self._labels_in_records:
            mismatch = tf.not_equal(parsed[layout.LABEL_KEY], label)
            checks.append(
                tf.debugging.Assert(
                    tf.logical_not(tf.reduce_any(mismatch)),
                    [
                        "records whose label differs from the class index:",
                        tf.boolean_mask(index, mismatch),
                    ],
                    summarize=16,
                )
            )
        with tf.control_dependencies(checks):
            computed = audio_features(
                parsed[layout.AUDIO_KEY],
                self.features,
                row["seed"],
                index=index,
                sample_rate=parsed[layout.SAMPLE_RATE_KEY],
            )
        return {"index": index, "label": label, **computed}


def class_balanced(
    source,
    labels=None,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    initial_step: int = 0,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    **options,
) -> tf.data.Dataset:
    """Class-balanced batches of `n_c` distinct classes x `n_p` samples, re-planned every epoch.

    Args:
      source: where the records are:
        * a materialized run directory (`components.layout`; the class index comes from
          `index/<record_set>/class_records`), with `record_set` naming the labelled record set
          (optional when the run has only one);
        * a `RecordStore` of audio Examples, with `labels` (int [N]);
        * a sequence of sample ids, with `labels` and `load_fn` (what a Keras `Sequence`
          holds): `load_fn(id)` returns the waveform (int16, or float in [-1, 1]; [n] or
          [n, 1]) at `features.sample_rate`;
        * a `tf.data.Dataset` of `(waveform, label)` pairs (a finite one).
        Ids and datasets are read once into a `RecordStore` (memory, or indexed shards under
        `cache_dir` when larger than `memory_budget_bytes`).
      labels: int [N] class ids (>= 0) or strings [N] (class names, numbered in sorted order),
        one per record or id.
      n_classes_per_batch: `n_c`, distinct classes per batch.
      n_samples_per_class: `n_p`, samples per class in a batch.
      seed: the plan and the random crops/masks are pure functions of (seed, epoch).
      input_context: `tf.distribute.InputContext`; this input pipeline takes a disjoint share
        of whole batches (or pass `worker_index` and `num_workers` in `options`).
      initial_step: resume point in this worker's batches of the epoch in progress (restore
        `state` from a checkpoint first).
      num_parallel_calls: parallelism of the read + features `map`.
      **options: `epoch_mode` ("classes" | "samples"), `small_classes` ("replace" | "skip"),
        `features` (`AudioFeatureConfig`, or None for raw records), `record_set`, `load_fn`,
        `backend` ("auto" | "memory" | "disk"), `memory_budget_bytes`, `cache_dir`, `state`
        (`EpochState`), `worker_index`, `num_workers`: see `ClassBalancedPlan` and
        `ClassBalancedSampler`.

    Returns:
      A dataset of dicts, one per batch of `B = n_c * n_p` samples, grouped by class (sample `i`
      is of the batch's `i // n_p`-th class):
        ``index`` int64 [B] record numbers, ``label`` int64 [B] class ids,
        ``features`` float32 [B, T, num_mel_bins], ``lengths`` int64 [B] valid frames,
        ``mask`` bool [B, T]; with `features=None`, ``record`` tf.string [B] instead of the last
        three. Its cardinality is the batches per epoch of this worker; iterating it again
        yields the next epoch, so `model.fit(dataset, epochs=N)` sees N different epochs.
    """
    sampler = ClassBalancedSampler(
        source,
        labels,
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        input_context=input_context,
        **options,
    )
    return sampler.dataset(initial_step=initial_step, num_parallel_calls=num_parallel_calls)


@dataclasses.dataclass
class _ResolvedSource:
    store: RecordStore
    row_splits: np.ndarray
    values: np.ndarray
    classes: list[str] | None
    labels_in_records: bool


def _resolve_source(
    source,
    labels,
    *,
    record_set,
    load_fn,
    backend,
    memory_budget_bytes,
    cache_dir,
    sample_rate,
) -> _ResolvedSource:
    if isinstance(source, (str, os.PathLike)):
        if labels is not None or load_fn is not None:
            raise ValueError("a materialized run has its own labels; do not pass labels/load_fn")
        return _open_run(os.fspath(source), record_set, backend, memory_budget_bytes)
    if isinstance(source, RecordStore):
        if labels is None:
            raise ValueError("a RecordStore source needs labels (one class per record)")
        return _from_labels(source, labels)
    if isinstance(source, tf.data.Dataset):
        if labels is not None or load_fn is not None:
            raise ValueError(
                "a dataset source yields (waveform, label): do not pass labels/load_fn"
            )
        return _from_dataset(source, cache_dir, backend, memory_budget_bytes, sample_rate)
    if load_fn is None or labels is None:
        raise TypeError(
            "source must be a run directory, a RecordStore (with labels), a tf.data.Dataset of "
            "(waveform, label), or sample ids with labels and load_fn; got "
            f"{type(source).__name__}" + ("" if load_fn is not None else " without load_fn")
        )
    ids = list(source)
    if len(ids) != len(labels):
        raise ValueError(f"{len(ids)} ids but {len(labels)} labels")
    encoder = _AudioEncoder(sample_rate)

    def load_and_check(item):
        try:
            waveform = load_fn(item)
        except Exception as error:
            raise ValueError(f"load_fn failed for id {item!r}: {error}") from error
        return encoder.encode(waveform, where=f"id {item!r}")

    store = sources.record_store_from(
        ids,
        load_fn=load_and_check,
        encode_fn=lambda record: record,
        parse_fn=None,
        cache_dir=cache_dir,
        memory_budget_bytes=memory_budget_bytes,
    )
    return _from_labels(store, labels)


def _open_run(
    output_dir, record_set, backend, memory_budget_bytes, labelled: bool = True
) -> _ResolvedSource:
    """A record set with its class index; `labelled`: its records carry the `label` feature."""
    if record_set is None:
        index_root = os.path.join(output_dir, layout.INDEX_DIR)
        labelled = sorted(
            name
            for name in (tf.io.gfile.listdir(index_root) if tf.io.gfile.isdir(index_root) else [])
            if tf.io.gfile.isdir(layout.class_records_dir(output_dir, name.rstrip("/")))
        )
        if len(labelled) != 1:
            raise ValueError(
                f"pass record_set: {output_dir} has labelled record sets {labelled}"
                if labelled
                else f"{output_dir} has no labelled record set (no index/*/class_records)"
            )
        record_set = labelled[0].rstrip("/")
    class_dir = layout.class_records_dir(output_dir, record_set)
    if not tf.io.gfile.isdir(class_dir):
        raise FileNotFoundError(
            f"record set {record_set!r} of {output_dir} has no class index ({class_dir})"
        )
    row_splits, values = layout.load_csr(class_dir)
    classes_path = os.path.join(layout.index_dir(output_dir, record_set), layout.CLASSES_FILE)
    classes = layout.load_lines(classes_path) if tf.io.gfile.exists(classes_path) else None
    if classes is not None and len(classes) != len(row_splits) - 1:
        raise ValueError(
            f"{classes_path} lists {len(classes)} classes but the class index has "
            f"{len(row_splits) - 1}"
        )
    store = RecordStore.open(
        output_dir, record_set, backend=backend, memory_budget_bytes=memory_budget_bytes
    )
    _check_csr(row_splits, values, store.num_records, class_dir)
    return _ResolvedSource(store, np.asarray(row_splits), values, classes, labelled)


def _from_labels(store: RecordStore, labels) -> _ResolvedSource:
    class_ids, classes = _class_ids(labels, store.num_records)
    num_classes = int(class_ids.max()) + 1 if len(class_ids) else 0
    row_splits = np.concatenate([[0], np.cumsum(np.bincount(class_ids, minlength=num_classes))])
    values = np.argsort(class_ids, kind="stable").astype(np.int64)
    return _ResolvedSource(store, row_splits.astype(np.int64), values, classes, False)


def _class_ids(labels, num_records: int) -> tuple[np.ndarray, list[str] | None]:
    """int64 [N] class ids and the class names (sorted) when `labels` are strings."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num_records:
        raise ValueError(
            f"labels must be a vector with one class per record ({num_records}), got shape "
            f"{labels.shape}"
        )
    if labels.dtype.kind in "SUO":
        classes, class_ids = np.unique(labels.astype(str), return_inverse=True)
        return class_ids.astype(np.int64), classes.tolist()
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers or strings, got dtype {labels.dtype}")
    class_ids = labels.astype(np.int64)
    if len(class_ids) and class_ids.min() < 0:
        bad = int(np.flatnonzero(class_ids < 0)[0])
        raise ValueError(f"labels must be >= 0; record {bad} has label {class_ids[bad]}")
    return class_ids, None


def _from_dataset(dataset, cache_dir, backend, memory_budget_bytes, sample_rate) -> _ResolvedSource:
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise TypeError(f"a dataset source must yield (waveform, label) pairs, got {spec}")
    record_set = sources.DEFAULT_RECORD_SET
    if cache_dir is not None and tf.io.gfile.isdir(layout.class_records_dir(cache_dir, record_set)):
        # A complete cache from an earlier run: its class index is written last.
        return _open_run(cache_dir, record_set, backend, memory_budget_bytes, labelled=False)
    encoder = _AudioEncoder(sample_rate)
    labels: list = []

    def encode(element) -> bytes:
        waveform, label = element
        labels.append(label.decode() if isinstance(label, bytes) else label)
        return encoder.encode(waveform, where=f"dataset element {len(labels) - 1}")

    store = sources.record_store_from(
        dataset,
        encode_fn=encode,
        cache_dir=cache_dir,
        record_set=record_set,
        memory_budget_bytes=memory_budget_bytes,
    )
    if not labels:
        raise ValueError(
            f"{cache_dir} holds records of an earlier run but no class index; remove it"
        )
    resolved = _from_labels(store, labels)
    if store.backend == "disk" and cache_dir is not None:
        directory = layout.index_dir(cache_dir, record_set)
        class_ids, classes = _class_ids(labels, store.num_records)
        layout.save_npy(os.path.join(directory, layout.CLASS_IDS_FILE), class_ids)
        if classes is not None:
            layout.save_lines(os.path.join(directory, layout.CLASSES_FILE), classes)
        layout.save_csr(
            layout.class_records_dir(cache_dir, record_set), resolved.row_splits, resolved.values
        )
    return resolved


class _AudioEncoder:
    """Waveforms -> audio Examples in the layout of a materialized record set."""

    def __init__(self, sample_rate: int | None):
        self._sample_rate = sample_rate

    def encode(self, waveform, *, where: str) -> bytes:
        samples = np.asarray(waveform.numpy() if isinstance(waveform, tf.Tensor) else waveform)
        if samples.ndim == 2 and samples.shape[1] == 1:
            samples = samples[:, 0]
        if samples.ndim != 1:
            raise ValueError(
                f"{where}: expected a mono waveform [n] or [n, 1], got {samples.shape}"
            )
        if samples.size == 0:
            raise ValueError(f"{where}: empty waveform")
        if samples.dtype.kind == "f":
            samples = np.round(np.clip(samples, -1.0, 32767 / 32768) * 32768)
        elif samples.dtype.kind not in "iu":
            raise ValueError(f"{where}: waveform dtype {samples.dtype} is not int16 or float")
        pcm = samples.astype("<i2")
        feature = {
            layout.AUDIO_KEY: examples.bytes_feature(pcm.tobytes()),
            layout.NUM_SAMPLES_KEY: examples.int64_feature(len(pcm)),
        }
        if self._sample_rate is not None:
            feature[layout.SAMPLE_RATE_KEY] = examples.int64_feature(self._sample_rate)
        return examples.serialize_example(feature)


def _record_number_lookup(values: np.ndarray, memory_budget_bytes: int) -> Callable:
    """positions (int64 tensor) -> `values[positions]`: in the graph when `values` fits the
    budget, else from the memory-mapped index file (one `numpy_function` per epoch plan)."""
    if not isinstance(values, np.memmap) or values.nbytes <= memory_budget_bytes:
        table = epoch_plan.index_variable(np.asarray(values, np.int64), tf.int64, "record_numbers")
        return lambda positions: tf.gather(table, positions)

    def lookup(positions: tf.Tensor) -> tf.Tensor:
        found = tf.numpy_function(
            lambda p: np.asarray(values[p], np.int64), [positions], tf.int64, stateful=False
        )
        return tf.ensure_shape(found, positions.shape)

    return lookup


def _check_csr(row_splits, values, num_records: int, where: str) -> None:
    if len(values) != num_records or (len(row_splits) and row_splits[-1] != len(values)):
        raise ValueError(
            f"{where}: the class index covers {len(values)} records (row_splits end at "
            f"{row_splits[-1] if len(row_splits) else None}) but the record set has {num_records}"
        )


def batch_layout(n_classes_per_batch: int, n_samples_per_class: int) -> np.ndarray:
    """int64 [n_c * n_p]: the class slot of each sample of a batch (`i // n_p`)."""
    return np.repeat(np.arange(n_classes_per_batch), n_samples_per_class).astype(np.int64)


def _log_report(report: ClassReport) -> None:
    if len(report.small_classes) or len(report.empty_classes):
        logging.warning("class_balanced: %s", report.summary())
