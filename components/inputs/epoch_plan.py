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

Plans draw their randomness from `epoch_seed` streams (`stateless_permutation`, and the keyed
elementwise permutations of `index_shuffle`). The state a plan may depend on is
`epoch_state.EpochState`; how batches split over workers is `worker_slices`; the count of
samples left out as damaged, `skip_log`.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.worker_slices import batches_per_worker

# Batch numbers of an unbounded `epoch_range_dataset` run up to the largest int64.
_LAST_BATCH_NUMBER = (1 << 63) - 1

# Salts separate the random streams drawn for different purposes within one (seed, epoch).
SALT_ORDER = 0
SALT_CHOICE = 1
SALT_TIE_BREAK = 2
SALT_GROUP_START = 3


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
    base = tf.constant([seed, 0], dtype=tf.int64)
    with_salt = tf.random.experimental.stateless_fold_in(base, tf.constant(salt, tf.int64))
    return tf.random.experimental.stateless_fold_in(with_salt, tf.cast(epoch, tf.int64))


def stateless_permutation(n, seed) -> tf.Tensor:
    """A random permutation of `0..n-1`, a pure function of `seed`.

    Args:
      n: int64 scalar, the length.
      seed: int64 [2] stateless seed.

    Returns:
      int64 [n].
    """
    return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=seed)


def epoch_dataset(
    plan_fn: Callable[[tf.Tensor], object],
    *,
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
        and runs inside the tf.data graph.
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
      ValueError: `num_batches` below 1 or not a multiple of `num_workers`, a bad worker slice,
        `initial_step` outside `[0, num_batches // num_workers)`, or a plan whose leading
        dimension is known and is not `num_batches`.
      tf.errors.InvalidArgumentError: when iterated, resuming (`initial_step > 0`) with
        `state.epoch == 0`, or a plan whose leading dimension turns out not `num_batches`.
    """
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
        plan = plan_fn(epoch)
        mine = tf.nest.map_structure(lambda rows: _check_rows(rows, num_batches), plan)
        mine = tf.nest.map_structure(lambda rows: rows[worker_index::num_workers], mine)
        return tf.data.Dataset.from_tensor_slices(mine).skip(skip)

    dataset = tf.data.Dataset.range(1).flat_map(one_epoch)
    if initial_step == 0:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(worker_batches))
    return dataset


def epoch_range_dataset(
    plan_fn: Callable[[tf.Tensor], dict[str, tf.Tensor]],
    *,
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

    A plan costs O(records), so the dataset does not plan per batch: it keeps the rows of the last
    epoch it planned (per iterator: on the service, per worker task) and plans again when a
    batch of another epoch comes, about once per epoch per worker since each worker receives its
    batch numbers in increasing order.

    Args:
      plan_fn: `plan_fn(epoch)` (int64 scalar tensor) returns a dict of int64 tensors, each with
        leading dimension `num_batches`: the global plan of that epoch. It must be a pure function
        of the epoch (stateless plans): the service plans an epoch on every worker that needs it.
      num_batches: global batches per epoch; a multiple of `num_workers`.
      start_epoch: the first epoch (>= 0).
      num_epochs: epochs to yield (>= 1); None for an unbounded range.
      num_workers, worker_index: this worker's slice, rows `b % num_workers == worker_index` of
        each plan (as in `epoch_dataset`; the trainer's input pipelines, not service workers).

    Returns:
      A dataset of dicts: the plan's keys, each row without its leading dimension, plus
      ``epoch`` (int64 scalar). Its cardinality is `num_epochs * steps`.

    Raises:
      ValueError: `num_batches` below 1 or not a multiple of `num_workers`, a bad worker slice,
        `start_epoch` below 0, `num_epochs` below 1, a `plan_fn` that does not return a dict
        or returns one with an ``epoch`` key, or one whose known leading dimension is not
        `num_batches`.
    """
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
    # Traced once more for the row shapes only (a graph, nothing runs).
    spec = tf.data.Dataset.range(1).map(plan_fn).element_spec
    if not isinstance(spec, dict) or "epoch" in spec:
        raise ValueError(f"plan_fn must return a dict without an 'epoch' key, got {spec}")

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
    return tf.data.Dataset.range(first, last).scan(nothing_planned, step)


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
    if rows.shape.rank is not None and rows.shape.rank > 0 and rows.shape[0] is not None:
        if rows.shape[0] != num_batches:
            raise ValueError(
                f"plan_fn returned a plan whose leading dimension ({rows.shape[0]}) is not "
                f"num_batches ({num_batches})"
            )
        return rows
    check = tf.debugging.Assert(
        tf.equal(tf.shape(rows, out_type=tf.int64)[0], num_batches),
        ["plan_fn returned a plan whose leading dimension is not num_batches"],
    )
    with tf.control_dependencies([check]):
        return tf.identity(rows)
