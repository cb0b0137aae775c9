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

import dataclasses
import logging
import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from components import layout
from components.inputs.epoch_plan import (
    SALT_CHOICE,
    SALT_ORDER,
    SALT_TIE_BREAK,
    EpochState,
    epoch_dataset,
    epoch_seed,
    index_variable,
    worker_slice,
)
from components.inputs.parsing import ImageSpec, example_check, image_example_parser
from components.inputs.record_store import RecordStore
from components.inputs.sources import record_store_from

STRATEGIES = ("uniform", "least_sampled")
REMAINDERS = ("wrap", "drop")
ON_INVALID = ("fail", "skip")
X_RECORD_SET = "x"
Y_RECORD_SET = "y"

# Reasons an x is left out of the plan with on_invalid="skip".
EMPTY_VALID_LIST = "empty valid list"
Y_OUT_OF_RANGE = "y out of range"
X_OUT_OF_RANGE = "x out of range"

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ValidPairs:
    """The checked valid-pair index: CSR rows over x, values are y record numbers.

    Attributes:
      row_splits: int64 [num_x + 1].
      values: int64 [num_pairs], each in [0, num_y).
      num_y: the number of y records.
      planned_x: int64 [num_planned]: the x that take part in the plan (non-empty rows).
      skipped: reason -> number of x left out of the plan for it (on_invalid="skip").
      skipped_x: int64 [num_skipped]: the x left out (those beyond num_x excluded).
    """

    row_splits: np.ndarray
    values: np.ndarray
    num_y: int
    planned_x: np.ndarray
    skipped: dict[str, int]
    skipped_x: np.ndarray

    @property
    def num_x(self) -> int:
        return len(self.row_splits) - 1

    @property
    def num_pairs(self) -> int:
        return len(self.values)

    @classmethod
    def build(
        cls,
        valid_pairs,
        *,
        num_x: int | None = None,
        num_y: int | None = None,
        on_invalid: str = "fail",
    ) -> ValidPairs:
        """Checks and normalizes `valid_pairs`.

        Args:
          valid_pairs: a `tf.RaggedTensor` [num_x, None], CSR arrays `(row_splits, values)`, a
            list of lists of y indices (one list per x), or a `ValidPairs` (returned as is).
          num_x: the number of x records; rows beyond it are x out of range, x without a row
            have an empty valid list. Default: the number of rows.
          num_y: the number of y records; default: max y + 1.
          on_invalid: "fail" raises ValueError naming the first bad x (y out of range, x out of
            range, empty valid list); "skip" leaves those x out of the plan and counts them.
        """
        if isinstance(valid_pairs, ValidPairs):
            return valid_pairs
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, got {on_invalid!r}")
        row_splits, values = _csr_arrays(valid_pairs)
        num_rows = len(row_splits) - 1
        if num_y is None:
            num_y = int(values.max()) + 1 if len(values) else 0
        if num_x is None:
            num_x = num_rows
        degrees = np.diff(row_splits)
        row_of_value = np.repeat(np.arange(num_rows, dtype=np.int64), degrees)

        bad_y = (values < 0) | (values >= num_y)
        problems = {
            X_OUT_OF_RANGE: np.flatnonzero(degrees[num_x:] > 0) + num_x,
            Y_OUT_OF_RANGE: np.unique(row_of_value[bad_y]),
            EMPTY_VALID_LIST: np.concatenate(
                [np.flatnonzero(degrees[:num_x] == 0), np.arange(num_rows, num_x)]
            ).astype(np.int64),
        }
        problems = {reason: rows for reason, rows in problems.items() if len(rows)}
        if problems and on_invalid == "fail":
            raise ValueError(_invalid_message(problems, row_splits, values, num_x, num_y, bad_y))

        keep_row = np.zeros(num_x, dtype=bool)
        keep_row[: min(num_rows, num_x)] = degrees[:num_x] > 0
        if Y_OUT_OF_RANGE in problems:
            keep_row[problems[Y_OUT_OF_RANGE][problems[Y_OUT_OF_RANGE] < num_x]] = False
        if problems or num_rows != num_x:
            # Rows of skipped x become empty; the index gets exactly num_x rows.
            row_splits, values = _keep_rows(row_splits, values, keep_row, num_x)
        skipped_x = np.flatnonzero(~keep_row).astype(np.int64)
        if problems:
            _log.warning(
                "valid_pairs: %d x left out of the plan (%s)",
                len(skipped_x) + len(problems.get(X_OUT_OF_RANGE, ())),
                ", ".join(f"{reason}: {len(rows)}" for reason, rows in problems.items()),
            )
        planned_x = np.flatnonzero(keep_row).astype(np.int64)
        if not len(planned_x):
            raise ValueError("valid_pairs: no x has a valid pair; nothing to plan")
        return cls(
            row_splits=row_splits,
            values=values,
            num_y=int(num_y),
            planned_x=planned_x,
            skipped={reason: len(rows) for reason, rows in problems.items()},
            skipped_x=skipped_x,
        )

    @classmethod
    def load(cls, output_dir: str, **kwargs) -> ValidPairs:
        """Loads `index/pairs` of a materialized run; kwargs as in `build`."""
        return cls.build(layout.load_csr(layout.pairs_index_dir(output_dir)), **kwargs)


def _csr_arrays(valid_pairs) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(valid_pairs, tf.RaggedTensor):
        if valid_pairs.ragged_rank != 1 or valid_pairs.shape.rank != 2:
            raise ValueError(
                f"valid_pairs must be a [num_x, None] ragged tensor, got {valid_pairs}"
            )
        row_splits = valid_pairs.row_splits.numpy()
        values = valid_pairs.values.numpy()
    elif isinstance(valid_pairs, tuple) and len(valid_pairs) == 2:
        row_splits, values = (np.asarray(a) for a in valid_pairs)
    elif isinstance(valid_pairs, list):
        lengths = np.fromiter((len(row) for row in valid_pairs), np.int64, len(valid_pairs))
        row_splits = np.concatenate([[0], np.cumsum(lengths)])
        # np.array, not np.fromiter: a float or string y must fail the integer check below.
        values = np.array([y for row in valid_pairs for y in row])
    else:
        raise TypeError(
            "valid_pairs must be a tf.RaggedTensor, a (row_splits, values) tuple or a list of "
            f"lists of y indices, got {type(valid_pairs).__name__}"
        )
    for name, array in (("row_splits", row_splits), ("values", values)):
        if array.ndim != 1 or not (array.dtype.kind in "iu" or array.size == 0):
            raise ValueError(
                f"valid_pairs {name} must be a 1-D integer array, got {array.dtype}"
                f"{list(array.shape)}"
            )
    row_splits = row_splits.astype(np.int64, copy=False)
    values = values.astype(np.int64, copy=False)
    if len(row_splits) < 1 or row_splits[0] != 0 or row_splits[-1] != len(values):
        raise ValueError(
            f"valid_pairs row_splits must start at 0 and end at len(values) ({len(values)})"
        )
    if np.any(np.diff(row_splits) < 0):
        raise ValueError("valid_pairs row_splits must be non-decreasing")
    return row_splits, values


def _keep_rows(row_splits, values, keep_row, num_x):
    degrees = np.diff(row_splits)[:num_x]
    degrees = np.concatenate([degrees, np.zeros(num_x - len(degrees), np.int64)])
    kept_degrees = np.where(keep_row, degrees, 0)
    value_row = np.repeat(np.arange(len(degrees), dtype=np.int64), degrees)
    kept_values = values[: row_splits[min(num_x, len(row_splits) - 1)]][keep_row[value_row]]
    return np.concatenate([[0], np.cumsum(kept_degrees)]).astype(np.int64), kept_values


def _invalid_message(problems, row_splits, values, num_x, num_y, bad_y) -> str:
    parts = []
    if Y_OUT_OF_RANGE in problems:
        position = int(np.flatnonzero(bad_y)[0])
        x = int(np.searchsorted(row_splits, position, side="right") - 1)
        parts.append(
            f"y index {int(values[position])} out of range for x {x} (num_y = {num_y}); "
            f"{len(problems[Y_OUT_OF_RANGE])} x affected"
        )
    if X_OUT_OF_RANGE in problems:
        rows = problems[X_OUT_OF_RANGE]
        parts.append(
            f"valid lists for x {int(rows[0])}.. beyond the x records (num_x = {num_x}); "
            f"{len(rows)} x affected"
        )
    if EMPTY_VALID_LIST in problems:
        rows = problems[EMPTY_VALID_LIST]
        parts.append(f"x {int(rows[0])} has an empty valid list; {len(rows)} x affected")
    return "valid_pairs: " + "; ".join(parts) + ". Pass on_invalid='skip' to leave them out."


class PairingState(EpochState):
    """Checkpointable state of a dynamic-pairs dataset.

    `epoch` (see `EpochState`); for `least_sampled`, also `pair_counts` (int64 [num_pairs]: how
    often each valid pair was planned), `last_choice` (int64 [num_planned]: the pair each planned
    x took in the last planned epoch) and `planned_epoch` (that epoch), which let a resumed run
    re-plan the epoch in progress exactly.
    """

    def __init__(
        self,
        valid_pairs: ValidPairs,
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
        if strategy == "least_sampled":
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
        valid_pairs: ValidPairs,
        *,
        strategy: str,
        seed: int,
        batch_size: int,
        num_workers: int = 1,
        replicas_per_worker: int = 1,
        remainder: str = "wrap",
        state: PairingState | None = None,
    ):
        """`num_batches` is a multiple of `num_workers * replicas_per_worker`, so that every
        replica gets the same number of batches (a strategy drops a last, partial step)."""
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
        step = num_workers * replicas_per_worker
        global_batch = self.batch_size * step
        if remainder == "wrap":
            self.num_batches = math.ceil(num_planned / global_batch) * step
        else:
            self.num_batches = (num_planned // global_batch) * step
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
        self._row_splits = index_variable(valid_pairs.row_splits, name="row_splits")
        self._values = index_variable(valid_pairs.values, name="values")
        self._planned_x = index_variable(valid_pairs.planned_x, name="planned_x")
        self._all_x_planned = len(valid_pairs.planned_x) == valid_pairs.num_x
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
        if self.strategy == "uniform":
            starts = self._row_splits[:-1]
            degrees = self._row_splits[1:] - starts
            if not self._all_x_planned:
                starts = tf.gather(starts, self._planned_x)
                degrees = tf.gather(degrees, self._planned_x)
            uniform = tf.random.stateless_uniform(
                tf.shape(starts), epoch_seed(self.seed, epoch, SALT_CHOICE), dtype=tf.float64
            )
            offsets = tf.cast(uniform * tf.cast(degrees, tf.float64), tf.int64)
            positions = starts + tf.minimum(offsets, degrees - 1)
        else:
            positions = self._least_sampled_positions(epoch)
        pairs = tf.stack([self._planned_x, tf.gather(self._values, positions)], axis=1)
        pairs = tf.random.experimental.stateless_shuffle(
            pairs, seed=epoch_seed(self.seed, epoch, SALT_ORDER)
        )
        pairs = tf.reshape(self._fit_to_batches(pairs), [self.num_batches, self.batch_size, 2])
        return {"x_index": pairs[..., 0], "y_index": pairs[..., 1]}

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
    worker_index: int | None = None,
    num_workers: int | None = None,
    state: PairingState | None = None,
    initial_step: int = 0,
    image: ImageSpec | None = None,
    parse_fn: Callable[[tf.Tensor], object] | None = None,
    x_parse_fn: Callable[[tf.Tensor], object] | None = None,
    y_parse_fn: Callable[[tf.Tensor], object] | None = None,
    remainder: str = "wrap",
    on_invalid: str = "fail",
    memory_budget_bytes: int = 1 << 30,
    cache_dir: str | None = None,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    deterministic: bool = True,
) -> tf.data.Dataset:
    """A dataset of pair batches, re-paired on every iteration (one iteration = one epoch).

    Args:
      x, y: `RecordStore`s, or anything `components.inputs.sources.record_store_from` takes (a
        `tf.data.Dataset`, arrays / tensors or a dict / tuple of them).
      valid_pairs: for each x record, the y record numbers it may be paired with (see
        `ValidPairs.build`: ragged tensor, `(row_splits, values)` or list of lists).
      batch_size: pairs per element (per worker / replica). With `input_context`, pass
        `input_context.get_per_replica_batch_size(global_batch_size)`.
      strategy: "uniform" or "least_sampled".
      seed: plans are a pure function of `(seed, epoch)` (and the counts, for least_sampled).
      input_context / worker_index, num_workers: this worker's slice of the global plan.
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

    Returns:
      A dataset of dicts: `x`, `y` (parsed batches), `x_index`, `y_index` (int64 [B]). The
      batch dimension is static, unless a store skips damaged records (on_damaged="skip"),
      which drops the pairs that touch them. Cardinality: batches per worker per epoch.
    """
    x_store = record_store_from(
        x, record_set=X_RECORD_SET, memory_budget_bytes=memory_budget_bytes, cache_dir=cache_dir
    )
    y_store = record_store_from(
        y, record_set=Y_RECORD_SET, memory_budget_bytes=memory_budget_bytes, cache_dir=cache_dir
    )
    valid_pairs = ValidPairs.build(
        valid_pairs, num_x=x_store.num_records, num_y=y_store.num_records, on_invalid=on_invalid
    )
    if valid_pairs.num_x != x_store.num_records or valid_pairs.num_y != y_store.num_records:
        raise ValueError(
            f"valid_pairs covers {valid_pairs.num_x} x and {valid_pairs.num_y} y, but the stores "
            f"hold {x_store.num_records} x and {y_store.num_records} y records"
        )
    worker, workers = worker_slice(
        input_context, worker_index=worker_index, num_workers=num_workers
    )
    replicas_per_worker = 1
    if input_context is not None:
        replicas_per_worker = max(
            1, input_context.num_replicas_in_sync // input_context.num_input_pipelines
        )
    planner = PairPlanner(
        valid_pairs,
        strategy=strategy,
        seed=seed,
        batch_size=batch_size,
        num_workers=workers,
        replicas_per_worker=replicas_per_worker,
        remainder=remainder,
        state=state,
    )
    plans = epoch_dataset(
        planner.plan,
        num_batches=planner.num_batches,
        state=planner.state,
        num_workers=workers,
        worker_index=worker,
        initial_step=initial_step,
    )
    load = _batch_loader(
        x_store,
        y_store,
        _parser(x_parse_fn or parse_fn, x_store, image),
        _parser(y_parse_fn or parse_fn, y_store, image),
        batch_size,
    )
    return plans.map(
        load, num_parallel_calls=num_parallel_calls, deterministic=deterministic
    ).prefetch(tf.data.AUTOTUNE)


def open_pairs_run(
    output_dir: str,
    *,
    backend: str = "auto",
    memory_budget_bytes: int = 1 << 30,
    on_damaged: str = "fail",
    verify_crc: bool = True,
    check_examples: bool = False,
    on_invalid: str = "fail",
    reader: str = "auto",
) -> tuple[RecordStore, RecordStore, ValidPairs]:
    """Opens the `x` and `y` record sets and the valid-pair index of a materialized run.

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
        for record_set in (X_RECORD_SET, Y_RECORD_SET)
    ]
    valid_pairs = ValidPairs.load(
        output_dir,
        num_x=stores[0].num_records,
        num_y=stores[1].num_records,
        on_invalid=on_invalid,
    )
    return stores[0], stores[1], valid_pairs


def dynamic_pairs_from_run(
    output_dir: str,
    *,
    batch_size: int,
    image: ImageSpec | None = None,
    backend: str = "auto",
    memory_budget_bytes: int = 1 << 30,
    on_damaged: str = "fail",
    verify_crc: bool = True,
    check_examples: bool = False,
    **kwargs,
) -> tf.data.Dataset:
    """`dynamic_pairs` over a materialized run directory; kwargs as in `dynamic_pairs`."""
    x_store, y_store, valid_pairs = open_pairs_run(
        output_dir,
        backend=backend,
        memory_budget_bytes=memory_budget_bytes,
        on_damaged=on_damaged,
        verify_crc=verify_crc,
        check_examples=check_examples,
        on_invalid=kwargs.pop("on_invalid", "fail"),
    )
    return dynamic_pairs(
        x_store, y_store, valid_pairs, batch_size=batch_size, image=image, **kwargs
    )


def _parser(explicit, store: RecordStore, image: ImageSpec | None):
    if explicit is not None:
        return explicit
    if store.parse_fn is not None:
        return store.parse_fn
    if image is not None:
        return image_example_parser(image)
    return tf.identity


def _batch_loader(x_store, y_store, x_parse, y_parse, batch_size):
    skipping = "skip" in (x_store.on_damaged, y_store.on_damaged)

    def load(row):
        x_index, y_index = row["x_index"], row["y_index"]
        x_records, x_ok = x_store.read_checked(x_index)
        y_records, y_ok = y_store.read_checked(y_index)
        if skipping:
            keep = tf.logical_and(x_ok, y_ok)
            x_index, y_index = tf.boolean_mask(x_index, keep), tf.boolean_mask(y_index, keep)
            x_records, y_records = (
                tf.boolean_mask(x_records, keep),
                tf.boolean_mask(y_records, keep),
            )
        batch = {
            "x": x_parse(x_records),
            "y": y_parse(y_records),
            "x_index": x_index,
            "y_index": y_index,
        }
        if skipping:
            return batch
        return tf.nest.map_structure(lambda t: _with_batch_dim(t, batch_size), batch)

    return load


def _with_batch_dim(tensor, batch_size: int):
    if isinstance(tensor, tf.Tensor) and tensor.shape.rank:
        return tf.ensure_shape(tensor, [batch_size, *tensor.shape[1:]])
    return tensor
