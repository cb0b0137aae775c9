"""Stateless, vectorized per-epoch plans and the dataset that re-plans every epoch.

A sampler describes one epoch as a *plan*: int64 tensors whose leading dimension is the number of
global batches, one row per batch (for example the x and y record numbers of each pair). The plan
is a pure function of `(seed, epoch)` and, for stateful strategies, of a checkpointable state, so
that

* every worker computes the same global plan and keeps a disjoint set of whole batches;
* resuming at `(epoch, step)` recomputes the plan and skips `step` batches, with no tf.data
  iterator state to save.

`epoch_dataset` turns a plan function into a `tf.data.Dataset` whose every iteration is the next
epoch, which is what `keras.Model.fit(ds, epochs=N)` needs. It advances the epoch in a variable of
this process, which a tf.data service worker (another process, given the graph with the variable's
value at registration) cannot see; `epoch_range_dataset` is the form for the service: a range of
epochs in one iteration, every batch computed from its batch number, so that the service can split
the batch numbers across its workers (`EpochSampler.distributed_dataset`).

Plans draw their randomness from `epoch_seed` streams, through the keyed elementwise
permutations and draws of `index_shuffle`. The state a plan may depend on is
`epoch_state.EpochState`; how batches split over workers is `worker_slices`; the count of
samples left out as damaged, `skip_log`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.graph_functions import as_given, as_written
from tfx_dynamic_inputs.inputs.worker_slices import batches_per_worker
from tfx_dynamic_inputs.plans import seed_folds

# Batch numbers of an unbounded `epoch_range_dataset` run up to the largest int64.
_LAST_BATCH_NUMBER = (1 << 63) - 1
# A `batch_plan_fn` call plans this many of a worker's batches: its fixed cost is paid once for
# them, and the first batch of an epoch still costs O(block), not O(records). Measured on 400k
# pairs in batches of 256 (2 cores): the rows of an epoch cost 0.17 s of CPU planned whole,
# 0.65 s a batch per call, 0.29 s in blocks of 16 and 0.23 s in blocks of 64.
PLAN_BLOCK_BATCHES = 64

# Salts separate the random streams drawn for different purposes within one (seed, epoch):
# stated once, with the NumPy plans' executor.
SALT_ORDER = seed_folds.SALT_ORDER
SALT_CHOICE = seed_folds.SALT_CHOICE
SALT_TIE_BREAK = seed_folds.SALT_TIE_BREAK
SALT_GROUP_START = seed_folds.SALT_GROUP_START


def epoch_seed(seed: int, epoch, salt: int = 0) -> tf.Tensor:
    """The stateless seed of the random stream `(seed, epoch, salt)`.

    Use it with `tf.random.stateless_*`. Streams of different `(seed, epoch, salt)` are distinct
    (each argument is folded in with a counter-based hash).

    Args:
      seed: the sampler seed (int64).
      epoch: int64 scalar, a Python int or a tensor.
      salt: the purpose of the stream (`SALT_*`).

    Returns:
      int64 [2].
    """
    if isinstance(epoch, int):
        return tf.constant(_folded_seed(seed, salt, epoch))
    return tf.random.experimental.stateless_fold_in(
        tf.constant(_folded_seed(seed, salt)), tf.cast(epoch, tf.int64)
    )


# Folds of Python ints are constants of a plan: computed once, eagerly, by the same kernel, and
# put in its graph as one constant, where each fold in the graph takes about 8 nodes that tf.data
# traces again for each dataset and optimizes again for each epoch's iterator.
@lru_cache(maxsize=4096)
def _folded_seed(seed: int, *words: int) -> np.ndarray:
    with tf.init_scope():
        folded = tf.constant([seed, 0], dtype=tf.int64)
        for word in words:
            folded = tf.random.experimental.stateless_fold_in(folded, tf.constant(word, tf.int64))
        return folded.numpy()


def checked_batch_numbers(batch_numbers, num_batches: int) -> tf.Tensor:
    """`batch_numbers` as int64, checked (when run) to be batches of an epoch of `num_batches`:
    what a plan's `plan_batches` takes.

    Args:
      batch_numbers: int [n], a list or a tensor.
      num_batches: the epoch's global batches.

    Returns:
      int64 [n], the same numbers, which raise `tf.errors.InvalidArgumentError` naming the range
      when one is outside `[0, num_batches)`.

    Example:

        numbers = checked_batch_numbers([0, 5], num_batches=8)
    """
    batch_numbers = tf.convert_to_tensor(batch_numbers, tf.int64)
    in_range = tf.debugging.Assert(
        tf.reduce_all((batch_numbers >= 0) & (batch_numbers < num_batches)),
        [f"plan_batches: a batch number is outside [0, {num_batches})"],
    )
    with tf.control_dependencies([in_range]):
        return tf.identity(batch_numbers)


def epoch_dataset(
    plan_fn: Callable[[tf.Tensor], object] | None = None,
    *,
    batch_plan_fn: Callable[[tf.Tensor, tf.Tensor], object] | None = None,
    num_batches: int,
    state: EpochState,
    num_workers: int = 1,
    worker_index: int = 0,
    initial_step: int = 0,
    steps_to_skip: tf.Variable | None = None,
) -> tf.data.Dataset:
    """A dataset whose every iteration is the next epoch's plan, one batch row per element.

    Args:
      plan_fn: `plan_fn(epoch)` (int64 scalar tensor) returns a structure of int64 tensors, each
        with leading dimension `num_batches`: the global plan of that epoch. It is traced once
        (converted by AutoGraph, as a `Dataset.map` function is: `graph_functions.as_given`)
        and runs inside the tf.data graph, once per epoch.
      batch_plan_fn: instead of `plan_fn` (give one of them), `batch_plan_fn(epoch,
        batch_numbers)` (int64 scalar and [n]) returns the same structure with leading
        dimension `n`: those rows of the epoch's plan, computed from their numbers alone. It
        runs once per `PLAN_BLOCK_BATCHES` of this worker's batches, so no plan of the epoch's
        size is held and the first batch costs O(batch), not O(records).
      num_batches: global batches per epoch; a multiple of `num_workers`.
      state: the `EpochState` whose `epoch` picks (and is advanced by) each iteration.
      num_workers, worker_index: this worker keeps batch rows `b` with
        `b % num_workers == worker_index`, so workers hold disjoint whole batches whose union is
        the plan.
      initial_step: resume point, in this worker's batches. When positive, the first iteration
        re-plans the epoch in progress (`state.epoch - 1`, as restored from a checkpoint written
        during that epoch) and skips its first `initial_step` batches; later iterations are
        whole epochs.
      steps_to_skip: the int64 variable that holds the resume point until the first iteration
        takes it (then 0), set to `initial_step` here; None: one of the dataset's own. Given, the
        caller can arm it again (`EpochSampler.rewind`).

    Returns:
      A dataset of plan rows (the structure of `plan_fn`'s result, leading dimension removed).
      Its cardinality is `num_batches // num_workers` when `initial_step == 0`.

    Raises:
      ValueError: not exactly one of `plan_fn` and `batch_plan_fn`, `num_batches` below 1 or
        not a multiple of `num_workers`, a bad worker slice, `initial_step` outside
        `[0, num_batches // num_workers)`, or a plan whose leading dimension is known and is not
        `num_batches`.
      tf.errors.InvalidArgumentError: when iterated, resuming (`initial_step > 0`) with
        `state.epoch == 0`, or a plan whose leading dimension turns out not `num_batches`.
    """
    plan_fn, batch_plan_fn = _given_plan_functions(plan_fn, batch_plan_fn)
    worker_batches = batches_per_worker(num_batches, num_workers, worker_index)
    if not 0 <= initial_step < worker_batches:
        raise ValueError(
            f"initial_step must be in [0, {worker_batches}) (batches per worker per epoch), "
            f"got {initial_step}"
        )
    # One-shot: only the first iteration resumes mid-epoch.
    if steps_to_skip is None:
        steps_to_skip = tf.Variable(initial_step, dtype=tf.int64, trainable=False)
    else:
        steps_to_skip.assign(initial_step)

    def one_epoch(_):
        skip = steps_to_skip.value()
        resuming = skip > 0
        with tf.control_dependencies([skip]):
            steps_to_skip.assign(0)
        epoch = tf.cond(
            resuming,
            lambda: _epoch_in_progress(state.epoch),
            lambda: state.epoch.assign_add(1, read_value=True) - 1,
        )
        if batch_plan_fn is not None:
            # Only the epoch and the blocks of batch numbers here: a map in this inner dataset
            # would instantiate its function again for every epoch's iterator (about 50 ms).
            first = worker_index + skip * num_workers
            numbers = tf.data.Dataset.range(first, num_batches, num_workers)
            blocks = numbers.batch(PLAN_BLOCK_BATCHES)
            return tf.data.Dataset.zip(tf.data.Dataset.from_tensors(epoch).repeat(), blocks)
        plan = plan_fn(epoch)
        mine = tf.nest.map_structure(lambda rows: _check_rows(rows, num_batches), plan)
        mine = tf.nest.map_structure(lambda rows: rows[worker_index::num_workers], mine)
        return tf.data.Dataset.from_tensor_slices(mine).skip(skip)

    dataset = tf.data.Dataset.range(1).flat_map(as_written(one_epoch))
    if batch_plan_fn is not None:
        # The next block is planned while the reads of this one's batches run (without the
        # prefetch, the parallel read map waited on each block: about 5% of the pairs' rate).
        rows = dataset.map(as_written(partial(_batch_rows, batch_plan_fn))).unbatch()
        dataset = rows.prefetch(PLAN_BLOCK_BATCHES)
    if initial_step == 0:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(worker_batches))
    return dataset


def epoch_range_dataset(
    plan_fn: Callable[[tf.Tensor], dict[str, tf.Tensor]] | None = None,
    *,
    batch_plan_fn: Callable[[tf.Tensor, tf.Tensor], dict[str, tf.Tensor]] | None = None,
    num_batches: int,
    start_epoch: int,
    num_epochs: int | None = None,
    num_workers: int = 1,
    worker_index: int = 0,
) -> tf.data.Dataset:
    """This worker's plan rows of the epochs `[start_epoch, start_epoch + num_epochs)`, in order.

    The dataset is self-contained, so it can run in another process (a tf.data service worker):
    its source is `Dataset.range` over batch numbers `g = epoch * steps + j` (`steps =
    num_batches // num_workers`, `j` the row in this worker's slice), which the service's
    `distributed_epoch` mode hands out to its workers one at a time, and each element is computed
    from `g` alone. So any service worker can produce any batch, every epoch is planned from its
    own number (never from a counter the workers cannot share), and iterating the dataset again
    yields the same epochs again.

    With `batch_plan_fn` the source is the numbers of blocks of `PLAN_BLOCK_BATCHES` batches (the
    last block of an epoch may be shorter), each planned alone, so the service hands out blocks
    and a worker holds one block's rows. A whole plan (`plan_fn`) costs O(records), so then the
    dataset keeps the rows of the last epoch it planned (per iterator: on the service, per worker
    task) and plans again when a batch of another epoch comes, about once per epoch per worker
    since each worker receives its batch numbers in increasing order.

    Args:
      plan_fn: `plan_fn(epoch)` (int64 scalar tensor) returns a dict of int64 tensors, each with
        leading dimension `num_batches`: the global plan of that epoch. It must be a pure function
        of the epoch (stateless plans): the service plans an epoch on every worker that needs it.
      batch_plan_fn: instead of `plan_fn` (give one of them), as in `epoch_dataset`: a pure
        function of the epoch and the batch numbers.
      num_batches: global batches per epoch; a multiple of `num_workers`.
      start_epoch: the first epoch (>= 0).
      num_epochs: epochs to yield (>= 1); None for an unbounded range.
      num_workers, worker_index: this worker's slice, rows `b % num_workers == worker_index` of
        each plan (as in `epoch_dataset`; the trainer's input pipelines, not service workers).

    Returns:
      A dataset of dicts: the plan's keys, each row without its leading dimension, plus
      ``epoch`` (int64 scalar). Its cardinality is `num_epochs * steps` with `plan_fn`, unknown
      with `batch_plan_fn` (the rows of blocks).

    Raises:
      ValueError: not exactly one of `plan_fn` and `batch_plan_fn`, `num_batches` below 1 or
        not a multiple of `num_workers`, a bad worker slice, `start_epoch` below 0, `num_epochs`
        below 1, a plan function that does not return a dict or returns one with an ``epoch``
        key, or one whose known leading dimension is not `num_batches`.
    """
    plan_fn, batch_plan_fn = _given_plan_functions(plan_fn, batch_plan_fn)
    steps = batches_per_worker(num_batches, num_workers, worker_index)
    if start_epoch < 0:
        raise ValueError(f"start_epoch must be >= 0, got {start_epoch}")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
    first = start_epoch * steps
    last = (
        _LAST_BATCH_NUMBER // steps * steps
        if num_epochs is None
        else (start_epoch + num_epochs) * steps
    )
    if batch_plan_fn is not None:
        return _blocks_of_epochs(batch_plan_fn, first, last, steps, num_workers, worker_index)

    # Traced once more for the row shapes only (a graph, nothing runs).
    spec = _check_keys(tf.data.Dataset.range(1).map(plan_fn).element_spec)

    def this_slice(epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return {
            key: _check_rows(value, num_batches)[worker_index::num_workers]
            for key, value in plan_fn(epoch).items()
        }

    def step(kept: dict, batch_number: tf.Tensor) -> tuple[dict, dict[str, tf.Tensor]]:
        epoch = batch_number // steps
        rows = tf.cond(
            tf.equal(kept["epoch"], epoch), lambda: kept["rows"], lambda: this_slice(epoch)
        )
        row = {key: value[batch_number % steps] for key, value in rows.items()}
        return {"epoch": epoch, "rows": rows}, {**row, "epoch": epoch}

    # The kept rows are scan state, local to each iterator (each service worker task): no
    # variable to ship, share or race on. Empty before the first batch (scan relaxes the shape).
    nothing_planned = {
        "epoch": tf.constant(-1, tf.int64),
        "rows": {key: tf.zeros([0, *s.shape[1:]], s.dtype) for key, s in spec.items()},
    }
    return tf.data.Dataset.range(first, last).scan(nothing_planned, as_written(step))


def _blocks_of_epochs(
    batch_plan_fn: Callable,
    first: int,
    last: int,
    steps: int,
    num_workers: int,
    worker_index: int,
) -> tf.data.Dataset:
    """`epoch_range_dataset`'s rows of batch numbers `[first, last)` (multiples of `steps`, this
    worker's batches per epoch), from a source of block numbers: each block is up to
    `PLAN_BLOCK_BATCHES` consecutive batches of one epoch, planned in one `batch_plan_fn` call."""
    blocks_per_epoch = -(-steps // PLAN_BLOCK_BATCHES)

    def planned_block(block_number: tf.Tensor) -> dict[str, tf.Tensor]:
        epoch = block_number // blocks_per_epoch
        start = block_number % blocks_per_epoch * PLAN_BLOCK_BATCHES
        rows_of_worker = tf.range(start, tf.minimum(start + PLAN_BLOCK_BATCHES, steps))
        numbers = rows_of_worker * num_workers + worker_index
        rows = _check_keys(_batch_rows(batch_plan_fn, epoch, numbers))
        return {**rows, "epoch": tf.fill(tf.shape(numbers), epoch)}

    epochs = (first // steps, last // steps)
    blocks = tf.data.Dataset.range(epochs[0] * blocks_per_epoch, epochs[1] * blocks_per_epoch)
    # No assert_cardinality: under the service's distributed_epoch each worker holds a share.
    return blocks.map(as_written(planned_block)).unbatch()


def _given_plan_functions(plan_fn: Callable | None, batch_plan_fn: Callable | None) -> tuple:
    """Both, converted as a user's functions (`as_given`), when exactly one is given."""
    if (plan_fn is None) == (batch_plan_fn is None):
        raise ValueError("give one of plan_fn (whole epochs) and batch_plan_fn (batches alone)")
    return as_given(plan_fn), as_given(batch_plan_fn)


def _batch_rows(batch_plan_fn: Callable, epoch: tf.Tensor, numbers: tf.Tensor):
    """`batch_plan_fn(epoch, numbers)`, each tensor checked to have a row per number."""
    count = tf.size(numbers, out_type=tf.int64)

    def checked(rows: tf.Tensor) -> tf.Tensor:
        check = tf.debugging.Assert(
            tf.equal(tf.shape(rows, out_type=tf.int64)[0], count),
            ["the batch plan function returned a row count other than its batch numbers'"],
        )
        with tf.control_dependencies([check]):
            return tf.identity(rows)

    return tf.nest.map_structure(checked, batch_plan_fn(epoch, numbers))


def _check_keys(rows):
    """`rows` (plan rows, or their element spec), which must be a dict without ``epoch``."""
    if not isinstance(rows, dict) or "epoch" in rows:
        raise ValueError(f"the plan function must return a dict without an 'epoch' key, got {rows}")
    return rows


def _epoch_in_progress(next_epoch: tf.Variable) -> tf.Tensor:
    # tf.debugging.Assert, not assert_positive: the latter's message ops cost milliseconds at
    # every iterator creation, that is every epoch.
    check = tf.debugging.Assert(
        next_epoch.value() > 0,
        [
            "initial_step > 0 resumes the epoch in progress, state.epoch - 1; restore the "
            "sampler state from a checkpoint written during that epoch first"
        ],
    )
    with tf.control_dependencies([check]):
        return next_epoch.value() - 1


def _check_rows(rows: tf.Tensor, num_batches: int) -> tf.Tensor:
    """`rows`, checked to have `num_batches` rows (now where the shape is known)."""
    if rows.shape.rank is not None and rows.shape.rank > 0 and rows.shape[0] is not None:
        if rows.shape[0] != num_batches:
            raise ValueError(
                f"the plan function returned rows whose leading dimension ({rows.shape[0]}) "
                f"is not {num_batches}"
            )
        return rows
    check = tf.debugging.Assert(
        tf.equal(tf.shape(rows, out_type=tf.int64)[0], num_batches),
        [f"the plan function returned rows whose leading dimension is not {num_batches}"],
    )
    with tf.control_dependencies([check]):
        return tf.identity(rows)
