"""Per-epoch dynamic pairs: every epoch, each x gets a freshly sampled y from its valid list.

The valid pairs are a CSR index over the x records (`row_splits` int64 [num_x + 1], `values`
int64 [num_pairs]: the y record numbers of each x). An epoch's plan is computed in TF, vectorized
over all x, from stateless randomness seeded by `(seed, epoch)`:

* `uniform`: each x takes a uniformly random entry of its row;
* `least_sampled`: each x takes the entry with the lowest historical count (ties broken at
  random); the counts (int64 [num_pairs]) live in a checkpointable `PairingState`. If every x has
  at most D valid partners, every valid pair has been planned after D epochs.

The x order is reshuffled every epoch and cut into global batches; with several workers each
takes a disjoint set of whole batches (`epoch_plan`). Batches are read by index from
`RecordStore`s and parsed once per batch.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from components import layout
from components.inputs.epoch_plan import (
    SALT_CHOICE,
    SALT_GROUP_START,
    SALT_ORDER,
    SALT_TIE_BREAK,
    EpochSampler,
    EpochState,
    SkipLog,
    epoch_seed,
    index_variable,
    replicas_per_worker,
    round_batches,
    worker_slice,
)
from components.inputs.group_pairs import GroupPairs
from components.inputs.parsing import ImageSpec, ParseFn, example_check, image_example_parser
from components.inputs.record_store import RecordStore, describe_damaged
from components.inputs.sources import record_store_from
from components.inputs.valid_pairs import ValidPairs

STRATEGIES = ("uniform", "least_sampled")
REMAINDERS = ("wrap", "drop")
# The options of `open_pairs_run` that `DynamicPairsSampler.from_run` passes on to it.
_RUN_OPTIONS = (
    "backend",
    "memory_budget_bytes",
    "on_damaged",
    "verify_crc",
    "check_examples",
    "on_invalid",
    "reader",
)


class PairingState(EpochState):
    """Checkpointable state of a dynamic-pairs dataset.

    `epoch` (see `EpochState`); for `least_sampled`, also `pair_counts` (int64 [num_pairs]: how
    often each valid pair was planned), `last_choice` (int64 [num_planned]: the pair each planned
    x took in the last planned epoch) and `planned_epoch` (that epoch), which let a resumed run
    re-plan the epoch in progress exactly. With `GroupPairs`, `least_sampled` is a stateless
    schedule and the state holds only the epoch.
    """

    def __init__(
        self,
        valid_pairs: ValidPairs | GroupPairs,
        strategy: str = "uniform",
        initial_epoch: int = 0,
        name: str | None = None,
    ):
        super().__init__(initial_epoch=initial_epoch, name=name)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        self.strategy = strategy
        self.num_pairs = valid_pairs.num_pairs
        self.num_planned = len(valid_pairs.planned_x)
        # Group pairs follow a stateless schedule: nothing to count.
        if strategy == "least_sampled" and isinstance(valid_pairs, ValidPairs):
            self.pair_counts = tf.Variable(
                tf.zeros([self.num_pairs], tf.int64), trainable=False, name="pair_counts"
            )
            self.last_choice = tf.Variable(
                tf.fill([self.num_planned], tf.constant(-1, tf.int64)),
                trainable=False,
                name="last_choice",
            )
            self.planned_epoch = tf.Variable(-1, dtype=tf.int64, trainable=False)


class PairPlanner:
    """Computes epoch plans of dynamic pairs: which y each x takes, in which order and batch."""

    def __init__(
        self,
        valid_pairs: ValidPairs | GroupPairs,
        *,
        strategy: str,
        seed: int,
        batch_size: int,
        num_workers: int = 1,
        replicas_per_worker: int = 1,
        remainder: str = "wrap",
        state: PairingState | None = None,
    ):
        """`num_batches` follows `epoch_plan.round_batches` (wrap rounds up, drop down)."""
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if remainder not in REMAINDERS:
            raise ValueError(f"remainder must be one of {REMAINDERS}, got {remainder!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.valid_pairs = valid_pairs
        self.strategy = strategy
        self.seed = int(seed)
        self.batch_size = int(batch_size)
        num_planned = len(valid_pairs.planned_x)
        if remainder == "wrap":
            planned_batches = -(-num_planned // self.batch_size)
        else:
            planned_batches = num_planned // self.batch_size
        self.num_batches = round_batches(
            planned_batches,
            num_workers=num_workers,
            replicas_per_worker=replicas_per_worker,
            down=remainder == "drop",
        )
        if not self.num_batches:
            raise ValueError(
                f"remainder='drop' leaves no batch: {num_planned} x, batch_size "
                f"{batch_size} x {num_workers} workers"
            )
        if state is None:
            state = PairingState(valid_pairs, strategy)
        elif state.strategy != strategy or (
            state.num_pairs,
            state.num_planned,
        ) != (valid_pairs.num_pairs, num_planned):
            raise ValueError(
                f"state was made for strategy {state.strategy!r} with {state.num_planned} x and "
                f"{state.num_pairs} pairs, not {strategy!r} with {num_planned} x and "
                f"{valid_pairs.num_pairs} pairs"
            )
        self.state = state
        self._planned_x = index_variable(valid_pairs.planned_x, name="planned_x")
        self._all_x_planned = len(valid_pairs.planned_x) == valid_pairs.num_x
        if isinstance(valid_pairs, GroupPairs):
            self._init_groups(valid_pairs)
            return
        self._row_splits = index_variable(valid_pairs.row_splits, name="row_splits")
        self._values = index_variable(valid_pairs.values, name="values")
        if strategy == "least_sampled":
            degrees = np.diff(valid_pairs.row_splits)
            row_dtype = np.int32 if valid_pairs.num_x < 2**31 else np.int64
            self._row_ids = index_variable(
                np.repeat(np.arange(valid_pairs.num_x, dtype=row_dtype), degrees), name="row_ids"
            )

    def plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of `epoch`: `x_index`, `y_index`, int64 [num_batches, batch_size]."""
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        # Choices are made in x order, where every read of the index is sequential; one shuffle
        # of the (x, y) rows then orders the epoch. Random gathers into the index would cost
        # more than the shuffle at 10M x.
        if isinstance(self.valid_pairs, GroupPairs):
            chosen_y = self._group_choices(epoch)
        elif self.strategy == "uniform":
            starts = self._row_splits[:-1]
            degrees = self._row_splits[1:] - starts
            if not self._all_x_planned:
                starts = tf.gather(starts, self._planned_x)
                degrees = tf.gather(degrees, self._planned_x)
            uniform = tf.random.stateless_uniform(
                tf.shape(starts), epoch_seed(self.seed, epoch, SALT_CHOICE), dtype=tf.float64
            )
            offsets = tf.cast(uniform * tf.cast(degrees, tf.float64), tf.int64)
            chosen_y = tf.gather(self._values, starts + tf.minimum(offsets, degrees - 1))
        else:
            chosen_y = tf.gather(self._values, self._least_sampled_positions(epoch))
        pairs = tf.stack([self._planned_x, chosen_y], axis=1)
        pairs = tf.random.experimental.stateless_shuffle(
            pairs, seed=epoch_seed(self.seed, epoch, SALT_ORDER)
        )
        pairs = tf.reshape(self._fit_to_batches(pairs), [self.num_batches, self.batch_size, 2])
        return {"x_index": pairs[..., 0], "y_index": pairs[..., 1]}

    def _init_groups(self, pairs: GroupPairs) -> None:
        x_group = pairs.x_group if self._all_x_planned else pairs.x_group[pairs.planned_x]
        self._planned_group = index_variable(x_group, tf.int64, name="planned_group")
        self._group_starts = index_variable(pairs.group_row_splits[:-1], name="group_starts")
        self._group_sizes = index_variable(pairs.group_sizes, name="group_sizes")
        group_values = pairs.group_values
        if self.strategy == "least_sampled":
            # Each group's y in a fixed random order (from the seed): the order x walks along.
            value_group = np.repeat(np.arange(pairs.num_groups), pairs.group_sizes)
            keys = np.random.default_rng(self.seed).random(len(group_values))
            group_values = group_values[np.lexsort((keys, value_group))]
        self._group_values = index_variable(group_values, name="group_values")

    def _group_choices(self, epoch: tf.Tensor) -> tf.Tensor:
        """int64 [num_planned]: the y each planned x takes in `epoch`, drawn from its group."""
        starts = tf.gather(self._group_starts, self._planned_group)
        sizes = tf.gather(self._group_sizes, self._planned_group)
        if self.strategy == "uniform":
            seed = epoch_seed(self.seed, epoch, SALT_CHOICE)
        else:
            # The same draw every epoch: where x starts its walk along its group's order.
            seed = epoch_seed(self.seed, -1, SALT_GROUP_START)
        uniform = tf.random.stateless_uniform(tf.shape(starts), seed, dtype=tf.float64)
        offsets = tf.minimum(tf.cast(uniform * tf.cast(sizes, tf.float64), tf.int64), sizes - 1)
        if self.strategy == "least_sampled":
            offsets = tf.math.floormod(offsets + epoch, sizes)
        return tf.gather(self._group_values, starts + offsets)

    def _fit_to_batches(self, ordered: tf.Tensor) -> tf.Tensor:
        """Cuts (drop) or extends (wrap: the start of this epoch's order again) to whole batches."""
        total = self.num_batches * self.batch_size
        num_planned = len(self.valid_pairs.planned_x)
        if total <= num_planned:
            return ordered[:total]
        if total - num_planned <= num_planned:
            return tf.concat([ordered, ordered[: total - num_planned]], axis=0)
        return tf.gather(ordered, tf.math.floormod(tf.range(total, dtype=tf.int64), num_planned))

    def _least_sampled_positions(self, epoch: tf.Tensor) -> tf.Tensor:
        """int64 [num_planned]: the chosen pair (position in values) of each planned x.

        Updates the counts. Re-planning the last planned epoch (a resume) first takes back that
        epoch's choices, so it yields the same plan and leaves the counts as they were.
        """
        state = self.state
        in_order = tf.debugging.Assert(
            epoch >= state.planned_epoch.value(),
            ["least_sampled plans must be computed in epoch order"],
        )
        with tf.control_dependencies([in_order]):
            replay = tf.equal(epoch, state.planned_epoch.value())

        ones = tf.ones([state.num_planned], tf.int64)

        def take_back():
            sub = tf.raw_ops.ResourceScatterNdSub(
                ref=state.pair_counts.handle,
                indices=state.last_choice.value()[:, None],
                updates=ones,
            )
            with tf.control_dependencies([sub]):
                return tf.identity(True)

        taken_back = tf.cond(replay, take_back, lambda: tf.identity(False))
        with tf.control_dependencies([taken_back]):
            counts = state.pair_counts.value()
        nnz = tf.shape(counts, out_type=tf.int64)[0]
        tie_break = tf.random.stateless_uniform(
            [nnz],
            epoch_seed(self.seed, epoch, SALT_TIE_BREAK),
            minval=0,
            maxval=1 << 31,
            dtype=tf.int64,
        )
        # Lowest count first, then a random key: one segment min picks a random least-used pair.
        keys = tf.bitwise.bitwise_or(tf.bitwise.left_shift(counts, 31), tie_break)
        row_min = tf.math.segment_min(keys, self._row_ids)
        is_min = tf.equal(keys, tf.gather(row_min, self._row_ids))
        positions = tf.math.segment_min(
            tf.where(is_min, tf.range(nnz, dtype=tf.int64), nnz), self._row_ids
        )
        chosen = tf.gather(positions, self._planned_x)
        with tf.control_dependencies([chosen]):
            updates = [
                tf.raw_ops.ResourceScatterNdAdd(
                    ref=state.pair_counts.handle, indices=chosen[:, None], updates=ones
                ),
                state.last_choice.assign(chosen, read_value=False),
                state.planned_epoch.assign(epoch, read_value=False),
            ]
        with tf.control_dependencies(updates):
            return tf.identity(chosen)


def dynamic_pairs(
    x,
    y,
    valid_pairs,
    *,
    batch_size: int,
    strategy: str = "uniform",
    seed: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    initial_step: int = 0,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    deterministic: bool = True,
    **options,
) -> tf.data.Dataset:
    """A dataset of pair batches, re-paired on every iteration (one iteration = one epoch).

    Args:
      x, y: `RecordStore`s, or anything `components.inputs.sources.record_store_from` takes (a
        `tf.data.Dataset`, arrays / tensors or a dict / tuple of them).
      valid_pairs: for each x record, the y record numbers it may be paired with (see
        `ValidPairs.build`: ragged tensor, `(row_splits, values)` or list of lists), or a
        `GroupPairs` (`ValidPairs.from_groups`: x pairs with any y of its group).
      batch_size: pairs per element (per worker / replica). With `input_context`, pass
        `input_context.get_per_replica_batch_size(global_batch_size)`.
      strategy: "uniform" or "least_sampled".
      seed: plans are a pure function of `(seed, epoch)` (and the counts, for least_sampled).
      input_context: this worker's slice of the global plan (or pass `worker_index` and
        `num_workers` in `options`).
      state: a `PairingState` to checkpoint (epoch, and counts for least_sampled); resume by
        restoring it and passing `initial_step` (batches of this worker already consumed in the
        epoch in progress).
      image: decode image Examples (the layout's features) to this fixed shape / dtype.
      parse_fn, x_parse_fn, y_parse_fn: tf.string [B] -> tensors, for both sides or per side.
        Default: the parser of stores built from arrays / datasets, else `image`'s parser,
        else the serialized records themselves.
      remainder: "wrap" fills the last batch with x from the start of the epoch's order (every
        x each epoch, fixed batch shape); "drop" leaves the last x of the order out.
      on_invalid: what to do with bad valid-pair input (see `ValidPairs.build`).
      memory_budget_bytes, cache_dir: for `x` / `y` given as arrays or datasets.
      num_parallel_calls, deterministic: of the read-and-parse map.
      **options: `worker_index`, `num_workers`, `state`, `image`, `parse_fn`, `x_parse_fn`,
        `y_parse_fn`, `remainder`, `on_invalid`, `memory_budget_bytes`, `cache_dir`: see
        `DynamicPairsSampler`, which also exposes the stores, the plan and the skip count.

    Returns:
      A dataset of dicts: `x`, `y` (parsed batches), `x_index`, `y_index` (int64 [B]). The
      batch dimension is static, unless a store skips damaged records (on_damaged="skip"),
      which drops the pairs that touch them (counted in `state.skipped_samples` and logged once
      per epoch). Cardinality: batches per worker per epoch.
    """
    sampler = DynamicPairsSampler(
        x,
        y,
        valid_pairs,
        batch_size=batch_size,
        strategy=strategy,
        seed=seed,
        input_context=input_context,
        **options,
    )
    return sampler.dataset(
        initial_step=initial_step,
        num_parallel_calls=num_parallel_calls,
        deterministic=deterministic,
    )


class DynamicPairsSampler(EpochSampler):
    """A dynamic-pairs input: its record stores, valid pairs, planner and state.

    `dataset()` is the `tf.data.Dataset` that `dynamic_pairs` returns; the sampler also exposes
    what it is built from: `x_store`, `y_store` (`RecordStore`s), `valid_pairs` (`ValidPairs`),
    `planner` (`PairPlanner`), `state` (`PairingState`: track it in a checkpoint to resume; its
    `skipped_samples` counts the pairs left out because a record is damaged). Build one over a
    materialized run with `from_run`. See `dynamic_pairs` for the arguments.
    """

    def __init__(
        self,
        x,
        y,
        valid_pairs,
        *,
        batch_size: int,
        strategy: str = "uniform",
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        worker_index: int | None = None,
        num_workers: int | None = None,
        state: PairingState | None = None,
        image: ImageSpec | None = None,
        parse_fn: ParseFn | None = None,
        x_parse_fn: ParseFn | None = None,
        y_parse_fn: ParseFn | None = None,
        remainder: str = "wrap",
        on_invalid: str = "fail",
        memory_budget_bytes: int = 1 << 30,
        cache_dir: str | None = None,
    ):
        self.x_store = record_store_from(
            x,
            record_set=layout.X_RECORD_SET,
            memory_budget_bytes=memory_budget_bytes,
            cache_dir=cache_dir,
        )
        self.y_store = record_store_from(
            y,
            record_set=layout.Y_RECORD_SET,
            memory_budget_bytes=memory_budget_bytes,
            cache_dir=cache_dir,
        )
        self.valid_pairs = (
            valid_pairs
            if isinstance(valid_pairs, GroupPairs)
            else ValidPairs.build(
                valid_pairs,
                num_x=self.x_store.num_records,
                num_y=self.y_store.num_records,
                on_invalid=on_invalid,
            )
        )
        if (self.valid_pairs.num_x, self.valid_pairs.num_y) != (
            self.x_store.num_records,
            self.y_store.num_records,
        ):
            raise ValueError(
                f"valid_pairs covers {self.valid_pairs.num_x} x and {self.valid_pairs.num_y} y, "
                f"but the stores hold {self.x_store.num_records} x and "
                f"{self.y_store.num_records} y records"
            )
        self.worker_index, self.num_workers = worker_slice(
            input_context, worker_index=worker_index, num_workers=num_workers
        )
        self.batch_size = int(batch_size)
        self.planner = PairPlanner(
            self.valid_pairs,
            strategy=strategy,
            seed=seed,
            batch_size=batch_size,
            num_workers=self.num_workers,
            replicas_per_worker=replicas_per_worker(input_context),
            remainder=remainder,
            state=state,
        )
        self.state = self.planner.state
        self.num_batches = self.planner.num_batches
        self._x_parse = _parser(x_parse_fn or parse_fn, self.x_store, image)
        self._y_parse = _parser(y_parse_fn or parse_fn, self.y_store, image)
        self._skip_log = SkipLog(
            "dynamic_pairs",
            self.state,
            lambda: describe_damaged({"x": self.x_store, "y": self.y_store}),
        )

    @classmethod
    def from_run(cls, output_dir: str, *, batch_size: int, **options) -> DynamicPairsSampler:
        """A sampler over a materialized run directory: the options of `open_pairs_run`
        (`backend`, `on_damaged`, `verify_crc`, `check_examples`, ...) open it, the rest are
        as in `dynamic_pairs`."""
        run_options = {k: options.pop(k) for k in _RUN_OPTIONS if k in options}
        x_store, y_store, valid_pairs = open_pairs_run(output_dir, **run_options)
        return cls(x_store, y_store, valid_pairs, batch_size=batch_size, **options)

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.planner.plan(epoch)

    def _load_batch(self, row: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        x_index, y_index = row["x_index"], row["y_index"]
        x_records, x_ok = self.x_store.read_checked(x_index)
        y_records, y_ok = self.y_store.read_checked(y_index)
        if "skip" not in (self.x_store.on_damaged, self.y_store.on_damaged):
            batch = {
                "x": self._x_parse(x_records),
                "y": self._y_parse(y_records),
                "x_index": x_index,
                "y_index": y_index,
            }
            return tf.nest.map_structure(lambda t: _with_batch_dim(t, self.batch_size), batch)
        keep = tf.logical_and(x_ok, y_ok)
        with tf.control_dependencies([self._skip_log.record(row["epoch"], keep)]):
            keep = tf.identity(keep)
        return {
            "x": self._x_parse(tf.boolean_mask(x_records, keep)),
            "y": self._y_parse(tf.boolean_mask(y_records, keep)),
            "x_index": tf.boolean_mask(x_index, keep),
            "y_index": tf.boolean_mask(y_index, keep),
        }


def open_pairs_run(
    output_dir: str,
    *,
    pair_index_dir: str | None = None,
    backend: str = "auto",
    memory_budget_bytes: int = 1 << 30,
    on_damaged: str = "fail",
    verify_crc: bool = True,
    check_examples: bool = False,
    on_invalid: str = "fail",
    reader: str = "auto",
) -> tuple[RecordStore, RecordStore, ValidPairs]:
    """Opens the `x` and `y` record sets and the valid-pair index of a materialized run.

    `pair_index_dir`: the run directory holding `index/pairs` when it is not `output_dir` (the
    TFX `PairIndex` artifact beside the `OffsetIndex` one).

    `check_examples` also checks that each record is a parsable image Example (a damaged record
    otherwise); it costs a protobuf parse per record read on the disk backend. `reader`: the disk
    backend's reader (see `RecordStore.open`).
    """
    payload_check = example_check([layout.IMAGE_KEY]) if check_examples else None
    stores = [
        RecordStore.open(
            output_dir,
            record_set,
            backend=backend,
            memory_budget_bytes=memory_budget_bytes // 2,
            on_damaged=on_damaged,
            verify_crc=verify_crc,
            payload_check=payload_check,
            reader=reader,
        )
        for record_set in (layout.X_RECORD_SET, layout.Y_RECORD_SET)
    ]
    valid_pairs = ValidPairs.load(
        output_dir if pair_index_dir is None else pair_index_dir,
        num_x=stores[0].num_records,
        num_y=stores[1].num_records,
        on_invalid=on_invalid,
    )
    return stores[0], stores[1], valid_pairs


def dynamic_pairs_from_run(
    output_dir: str,
    *,
    batch_size: int,
    initial_step: int = 0,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    deterministic: bool = True,
    **options,
) -> tf.data.Dataset:
    """`dynamic_pairs` over a materialized run directory; options as in
    `DynamicPairsSampler.from_run` (`backend`, `on_damaged`, `verify_crc`, `check_examples`, ...)
    and `dynamic_pairs`. Skipped pairs are counted in the sampler's state and logged once per
    epoch; build the `DynamicPairsSampler` to read the count."""
    sampler = DynamicPairsSampler.from_run(output_dir, batch_size=batch_size, **options)
    return sampler.dataset(
        initial_step=initial_step,
        num_parallel_calls=num_parallel_calls,
        deterministic=deterministic,
    )


def _parser(explicit, store: RecordStore, image: ImageSpec | None):
    if explicit is not None:
        return explicit
    if store.parse_fn is not None:
        return store.parse_fn
    if image is not None:
        return image_example_parser(image)
    return tf.identity


def _with_batch_dim(tensor, batch_size: int):
    if isinstance(tensor, tf.Tensor) and tensor.shape.rank:
        return tf.ensure_shape(tensor, [batch_size, *tensor.shape[1:]])
    return tensor
