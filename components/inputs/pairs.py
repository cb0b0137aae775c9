"""Per-epoch dynamic pairs: every epoch, each x gets a freshly sampled y from its valid list.

`dynamic_pairs` (and `DynamicPairsSampler`, which it wraps) reads the pairs that
`pair_plan.PairPlanner` plans for each epoch from the x and y `RecordStore`s, a batch at a time,
and parses them once per batch; with several workers each takes a disjoint set of whole batches
(`epoch_plan`). Over a materialized run, pass its `Run` (`open_run`) as `x`.
"""

from __future__ import annotations

import os

import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.damaged_records import describe_damaged
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler
from tfx_dynamic_inputs.inputs.epoch_state import plan_key
from tfx_dynamic_inputs.inputs.graph_functions import as_given
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs
from tfx_dynamic_inputs.inputs.pair_plan import PairingState, PairPlanner
from tfx_dynamic_inputs.inputs.parsing import (
    ExampleGuard,
    ImageSpec,
    ParseFn,
    example_check,
    image_example_parser,
    image_example_spec,
)
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions, open_run
from tfx_dynamic_inputs.inputs.skip_log import SkipLog
from tfx_dynamic_inputs.inputs.sources import record_store_from
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs
from tfx_dynamic_inputs.inputs.worker_slices import replicas_per_worker, worker_slice


def dynamic_pairs(
    x,
    y=None,
    valid_pairs=None,
    *,
    batch_size: int,
    strategy: str = "uniform",
    seed: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    initial_step: int = 0,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    deterministic: bool = True,
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
    store_options: StoreOptions | None = None,
    check_examples: bool = False,
) -> tf.data.Dataset:
    """A dataset of pair batches, re-paired on every iteration (one iteration = one epoch).

    Args:
      x, y: `RecordStore`s, or anything `tfx_dynamic_inputs.inputs.sources.record_store_from`
        takes (a `tf.data.Dataset`, arrays / tensors or a dict / tuple of them). Or `x` alone a
        pairs run (a `Run` from `open_run`, or its folder), whose stores and valid pairs are used.
      valid_pairs: for each x record, the y record numbers it may be paired with (see
        `ValidPairs.build`: ragged tensor, `(row_splits, values)` or list of lists), or a
        `GroupPairs` (`ValidPairs.from_groups`: x pairs with any y of its group).
      batch_size: pairs per element (per worker / replica). With `input_context`, pass
        `input_context.get_per_replica_batch_size(global_batch_size)`.
      strategy: "uniform" or "least_sampled".
      seed: plans are a pure function of `(seed, epoch)`, for both strategies.
      input_context: this worker's slice of the global plan (or pass `worker_index` and
        `num_workers`).
      state: a `PairingState` to checkpoint (the epoch); resume by
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
      store_options, check_examples: how a run's record stores are opened (`StoreOptions`), and
        whether each record read is checked to be a parsable image Example.
      num_parallel_calls, deterministic: of the read-and-parse map.

    `DynamicPairsSampler` takes the same arguments and also exposes the stores, the plan and
    the skip count.

    Returns:
      A dataset of dicts: `x`, `y` (parsed batches), `x_index`, `y_index` (int64 [B]). The
      batch dimension is static, unless a store skips damaged records (on_damaged="skip"),
      which drops the pairs that touch them (counted in `state.skipped_samples` and logged once
      per epoch). Cardinality: batches per worker per epoch.

    Raises:
      ValueError: a bad argument (named), valid pairs that do not fit the stores, or `y` /
        `valid_pairs` given with a run.
      TypeError: `y` or `valid_pairs` missing without a run.
      layout.IndexFileError, layout.RunCommitError: a damaged or uncommitted run.

    Example:

        dataset = dynamic_pairs(x_images, y_images, [[0, 3], [1], [2, 3]], batch_size=2)
        dataset = dynamic_pairs(open_run("runs/digits"), batch_size=64, image=ImageSpec(28, 28, 1))
        model.fit(dataset, epochs=10)   # each epoch pairs every x with a fresh y
    """
    initial_step = int_argument("initial_step", initial_step, 0)
    sampler = DynamicPairsSampler(
        x,
        y,
        valid_pairs,
        batch_size=batch_size,
        strategy=strategy,
        seed=seed,
        input_context=input_context,
        worker_index=worker_index,
        num_workers=num_workers,
        state=state,
        image=image,
        parse_fn=parse_fn,
        x_parse_fn=x_parse_fn,
        y_parse_fn=y_parse_fn,
        remainder=remainder,
        on_invalid=on_invalid,
        memory_budget_bytes=memory_budget_bytes,
        cache_dir=cache_dir,
        store_options=store_options,
        check_examples=check_examples,
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
    materialized run: pass its `Run` (`open_run`) or folder as `x`. See `dynamic_pairs` for
    the arguments.

    Example:

        sampler = DynamicPairsSampler(open_run("runs/digits"), batch_size=64, seed=7)
        checkpoint = tf.train.Checkpoint(pairing=sampler.state)
        model.fit(sampler.dataset(), epochs=10, steps_per_epoch=sampler.steps_per_epoch)
    """

    plans_batches_alone = True

    def __init__(
        self,
        x,
        y=None,
        valid_pairs=None,
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
        store_options: StoreOptions | None = None,
        check_examples: bool = False,
    ):
        # Checked before the stores are built: a bad argument is one line, at once.
        batch_size = int_argument("batch_size", batch_size, 1)
        seed = seed_argument(seed)
        if isinstance(x, (str, os.PathLike, Run)):
            if y is not None or valid_pairs is not None:
                raise ValueError("a run holds its own y and valid pairs: pass the run alone")
            run = x if isinstance(x, Run) else open_run(os.fspath(x))
            store_options = store_options or StoreOptions(memory_budget_bytes=memory_budget_bytes)
            x, y, valid_pairs = run.pairs(
                store_options, check_examples=check_examples, on_invalid=on_invalid
            )
        elif y is None or valid_pairs is None:
            raise TypeError("pass x, y and valid_pairs, or a pairs run (open_run) as x alone")
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
        self.batch_size = batch_size
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
        self._x_parse, self._x_guard = _parser(x_parse_fn or parse_fn, self.x_store, image)
        self._y_parse, self._y_guard = _parser(y_parse_fn or parse_fn, self.y_store, image)
        damaged = {
            "x": self._x_guard if self._x_guard is not None else self.x_store,
            "y": self._y_guard if self._y_guard is not None else self.y_store,
        }
        self._skip_log = SkipLog("dynamic_pairs", self.state, lambda: describe_damaged(damaged))

    @property
    def stream(self) -> str:
        return self.planner.stream

    @property
    def plan_key(self) -> str:
        return pair_plan_key(self.planner)

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.planner.plan(epoch)

    def _plan_batches(self, epoch: tf.Tensor, batch_numbers: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.planner.plan_batches(epoch, batch_numbers)

    def _stores(self) -> list[RecordStore]:
        return [self.x_store, self.y_store]

    def _load_batch(
        self, row: dict[str, tf.Tensor], *, for_service: bool = False
    ) -> dict[str, tf.Tensor]:
        x_index, y_index = row["x_index"], row["y_index"]
        x_records, x_ok = self.x_store.read_checked(x_index, for_service=for_service)
        y_records, y_ok = self.y_store.read_checked(y_index, for_service=for_service)
        if self._x_guard is not None and not for_service:
            x_records, x_ok = self._x_guard.check(x_index, x_records, x_ok)
        if self._y_guard is not None and not for_service:
            y_records, y_ok = self._y_guard.check(y_index, y_records, y_ok)
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


def pair_plan_key(planner: PairPlanner) -> str:
    """A pairs sampler's `plan_key`: the seed and the sizes of the pairs planned (x, planned x,
    y, pairs, and whether they pair by edges or by groups); the planner's `stream` names the
    rest (global batch, strategy, remainder).

    Args:
      planner: the sampler's `PairPlanner`.

    Returns:
      The key (`epoch_state.plan_key`).
    """
    pairs = planner.valid_pairs
    return plan_key(
        {
            "seed": planner.seed,
            "x": pairs.num_x,
            "planned_x": len(pairs.planned_x),
            "y": pairs.num_y,
            "pairs": pairs.num_pairs,
            "pairing": "groups" if isinstance(pairs, GroupPairs) else "edges",
        }
    )


def open_pairs_run(
    output_dir: str,
    *,
    pair_index_dir: str | None = None,
    store_options: StoreOptions | None = None,
    check_examples: bool = False,
    on_invalid: str = "fail",
) -> tuple[RecordStore, RecordStore, ValidPairs | GroupPairs]:
    """Opens the `x` and `y` record sets and the valid-pair index of a materialized run.

    `Run.pairs` calls this; use it directly for a run folder whose pair index lies elsewhere.

    Args:
      output_dir: the run folder (or the TFX `OffsetIndex` artifact holding its record sets).
      pair_index_dir: the run folder holding `index/pairs` when it is not `output_dir` (the TFX
        `PairIndex` artifact beside the `OffsetIndex` one); both must hold the same committed run.
      store_options: how the two record stores are opened (`StoreOptions`; they share its
        `memory_budget_bytes` half and half). Default `StoreOptions()`.
      check_examples: also check that each record is a parsable image Example (a damaged record
        otherwise); a protobuf parse per record read on the disk backend. (A sampler that parses
        with `image` checks each record once anyway, `parsing.ExampleGuard`.)
      on_invalid: what to do with bad valid-pair entries (see `ValidPairs.build`).

    Returns:
      `(x_store, y_store, valid_pairs)`: the valid pairs are a `GroupPairs` when the run paired
      by group (the pairs job's `--x_groups` / `--groups_from_subfolder`, `IndexExamples`'
      `group_feature`), else a `ValidPairs`; the samplers take either.

    Raises:
      layout.RunCommitError: a part of a run `summary.json` does not commit as ok, or the pair
        index and the record sets of two different runs.
      layout.IndexFileError: a damaged index, named with its folder.

    Example:

        x_store, y_store, valid_pairs = open_pairs_run("runs/digits")
    """
    if pair_index_dir is not None:
        layout.check_same_run(output_dir, pair_index_dir)
    options = store_options or StoreOptions()
    payload_check = example_check([layout.IMAGE_KEY]) if check_examples else None
    x_store, y_store = (
        options.open_store(output_dir, record_set, payload_check=payload_check, budget_share=2)
        for record_set in (layout.X_RECORD_SET, layout.Y_RECORD_SET)
    )
    pairs_dir = output_dir if pair_index_dir is None else pair_index_dir
    num_x, num_y = x_store.num_records, y_store.num_records
    if layout.has_group_index(pairs_dir):
        valid_pairs = _load_group_pairs(pairs_dir, num_x=num_x, num_y=num_y, on_invalid=on_invalid)
    else:
        valid_pairs = ValidPairs.load(pairs_dir, num_x=num_x, num_y=num_y, on_invalid=on_invalid)
    return x_store, y_store, valid_pairs


def _load_group_pairs(output_dir: str, *, num_x: int, num_y: int, on_invalid: str) -> GroupPairs:
    """The group pairing of a run as `GroupPairs`; whatever contradicts the record stores is a
    damaged index."""
    _, x_groups, y_groups = layout.load_group_index(output_dir)
    try:
        return ValidPairs.from_groups(
            x_groups, y_groups, num_x=num_x, num_y=num_y, on_invalid=on_invalid
        )
    except ValueError as error:
        directory = layout.pairs_index_dir(output_dir)
        raise layout.IndexFileError(f"group pair index {directory}: {error}") from error


def _parser(
    explicit, store: RecordStore, image: ImageSpec | None
) -> tuple[ParseFn, ExampleGuard | None]:
    """The parse function of one side, and the guard of its records when the parser is the
    image Example parser (a parse function's records may be anything)."""
    if explicit is not None:
        return as_given(explicit), None
    if store.parse_fn is not None:
        return store.parse_fn, None
    if image is not None:
        return image_example_parser(image), ExampleGuard(store, image_example_spec())
    return tf.identity, None


def _with_batch_dim(tensor, batch_size: int):
    if isinstance(tensor, tf.Tensor) and tensor.shape.rank:
        return tf.ensure_shape(tensor, [batch_size, *tensor.shape[1:]])
    return tensor
