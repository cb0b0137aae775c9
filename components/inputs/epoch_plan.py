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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import tensorflow as tf

from components.inputs.variables import require_no_strategy_scope

_log = logging.getLogger(__name__)

# Batch numbers of an unbounded `epoch_range_dataset` run up to the largest int64.
_LAST_BATCH_NUMBER = (1 << 63) - 1

# Salts separate the random streams drawn for different purposes within one (seed, epoch).
SALT_ORDER = 0
SALT_CHOICE = 1
SALT_TIE_BREAK = 2
SALT_GROUP_START = 3


class EpochState(tf.Module):
    """Checkpointable sampler state.

    `epoch` (int64 scalar variable) is the next epoch to plan. A dataset built by `epoch_dataset`
    increments it when an iteration starts, so a checkpoint written during epoch `e` holds
    `e + 1`; resuming with `initial_step > 0` re-plans epoch `epoch - 1`, the one in progress.
    Track it with `tf.train.Checkpoint(sampler=state, ...)`. `EpochSampler.distributed_dataset`
    (tf.data service) reads `epoch` as its default first epoch and never advances it: the workers
    cannot update a variable of this process.

    `skipped_samples` (int64 scalar variable) counts the samples the sampler left out of its
    batches because their records are damaged (stores opened with `on_damaged="skip"`), over all
    epochs; it is checkpointed with the epoch, so a resumed run keeps counting.

    `run` (string scalar variable) names the run(s) the sampler reads (`EpochSampler.run_key`),
    set when its first dataset is built and checkpointed with the rest: a state restored from a
    checkpoint of another run is refused, naming both, instead of resuming into data of the same
    sizes that it does not describe.

    Args:
      initial_epoch: the first epoch to plan (>= 0).
      name: the `tf.Module` name.

    Raises:
      ValueError: `initial_epoch` below 0, or created inside a `tf.distribute` strategy scope.

    Example:

        state = EpochState()
        checkpoint = tf.train.Checkpoint(sampler=state)  # restore it before building datasets
    """

    def __init__(self, initial_epoch: int = 0, name: str | None = None):
        require_no_strategy_scope("a sampler state")
        super().__init__(name=name)
        if initial_epoch < 0:
            raise ValueError(f"initial_epoch must be >= 0, got {initial_epoch}")
        self.epoch = tf.Variable(initial_epoch, dtype=tf.int64, trainable=False, name="epoch")
        self.skipped_samples = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="skipped_samples"
        )
        self.run = tf.Variable("", dtype=tf.string, trainable=False, name="run")

    def bind_run(self, run_key: str) -> None:
        """Records that this state follows `run_key`.

        Args:
          run_key: the sampler's `EpochSampler.run_key` ("" for data that is not a run).

        Raises:
          StateRunError: the state already follows another run (restored from a checkpoint of
            another run, or shared with a sampler of another run).
        """
        held = self.run.numpy().decode()
        if held == "":
            self.run.assign(run_key)
        elif held != run_key:
            raise StateRunError(_state_run_message(held, run_key))

    def check_run(self, run_key: str) -> tf.Operation:
        """An op that checks, when run, that the state follows `run_key`.

        Run before each epoch's plan, so a checkpoint restored after the dataset was built is
        checked too. A state that follows no run (of arrays or datasets, or written before
        states named their run) is accepted.

        Args:
          run_key: the sampler's `EpochSampler.run_key`.

        Returns:
          The assert op; it fails with `tf.errors.InvalidArgumentError` (the message of
          `StateRunError`) when the state follows another run.
        """
        return tf.debugging.Assert(
            tf.logical_or(tf.equal(self.run, run_key), tf.equal(self.run, "")),
            [
                "the sampler state follows run",
                self.run,
                f"but this sampler reads {_run_words(run_key)}"
                ": it was restored from a checkpoint of another run; restore the checkpoint of this"
                " run, or start from a new state",
            ],
        )


class StateRunError(ValueError):
    """A sampler state (a checkpoint) of one run used with a sampler of another."""


def _run_words(run_key: str) -> str:
    return f"run {run_key}" if run_key else "data that is not a run"


def _state_run_message(held: str, run_key: str) -> str:
    return (
        f"the sampler state follows {_run_words(held)} but this sampler reads "
        f"{_run_words(run_key)}: it was restored from a checkpoint of another run; restore the "
        "checkpoint of this run, or start from a new state"
    )


class SkipLog:
    """Counts the samples a sampler leaves out of a batch and logs each epoch that skips once.

    `record(epoch, kept)` adds the samples with `kept == False` to `state.skipped_samples`; the
    first batch of an epoch that skips any logs one warning naming the epoch, the total so far and
    what `describe()` says about the damaged records (their record numbers, shards and offsets).
    Python runs only for a batch that skips something.

    Args:
      sampler: the sampler's name, for the warning.
      state: holds the count, `state.skipped_samples`.
      describe: returns what is known of the damaged records, for the warning.
    """

    def __init__(self, sampler: str, state: EpochState, describe: Callable[[], str]):
        self._sampler = sampler
        self._state = state
        self._describe = describe
        self._logged_epochs: set[int] = set()
        self._lock = threading.Lock()

    def record(self, epoch: tf.Tensor, kept: tf.Tensor) -> tf.Tensor:
        """Counts a batch's skipped samples, and logs the first skip of an epoch.

        Args:
          epoch: int64 scalar, the batch's epoch.
          kept: bool [B], false for the samples left out.

        Returns:
          bool scalar, true when this call logged: run it before the batch is returned (a
          control dependency).
        """
        skipped = tf.reduce_sum(tf.cast(tf.logical_not(kept), tf.int64))
        total = self._state.skipped_samples.assign_add(skipped)
        return tf.cond(
            skipped > 0,
            lambda: tf.py_function(self._log, [epoch, total], tf.bool),
            lambda: tf.constant(False),
        )

    def _log(self, epoch: tf.Tensor, total: tf.Tensor) -> bool:
        epoch = int(epoch.numpy())
        with self._lock:
            if epoch in self._logged_epochs:
                return False
            self._logged_epochs.add(epoch)
        _log.warning(
            "%s: epoch %d skips samples whose records are damaged (on_damaged='skip'); %d "
            "skipped so far (state.skipped_samples). %s",
            self._sampler,
            epoch,
            int(total.numpy()),
            self._describe(),
        )
        return True


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


def shuffle_within_rows(row_splits, seed) -> tf.Tensor:
    """Positions of the CSR `values`, randomly permuted inside each row.

    Built by one sort on the key `(row, random)`, so it is vectorized over all rows.

    Args:
      row_splits: int64 [R + 1], the CSR row splits (`nnz = row_splits[-1]` < 2**31).
      seed: int64 [2] stateless seed.

    Returns:
      int64 [nnz]: element `j`, for `j` in row `r` (`row_splits[r] <= j < row_splits[r + 1]`),
      is again a position in row `r`; each row's positions are a uniform random permutation.
    """
    row_splits = tf.convert_to_tensor(row_splits, tf.int64)
    nnz = row_splits[-1]
    row_ids = tf.ragged.row_splits_to_segment_ids(row_splits, out_type=tf.int64)
    # 31 random bits below the row id keep the key inside int64 for up to 2**32 rows.
    random_bits = tf.random.stateless_uniform(
        [nnz], seed=seed, minval=0, maxval=1 << 31, dtype=tf.int64
    )
    keys = tf.bitwise.bitwise_or(tf.bitwise.left_shift(row_ids, 31), random_bits)
    # tf.argsort returns int32 positions, which bounds nnz by 2**31 here.
    return tf.cast(tf.argsort(keys, stable=True), tf.int64)


def worker_slice(
    input_context: tf.distribute.InputContext | None = None,
    *,
    worker_index: int | None = None,
    num_workers: int | None = None,
) -> tuple[int, int]:
    """This input pipeline's `(worker_index, num_workers)`, from an input context or values.

    Args:
      input_context: given by `strategy.distribute_datasets_from_function`.
      worker_index, num_workers: given together, instead of `input_context`.

    Returns:
      `(worker_index, num_workers)`; with neither argument, the input is not distributed:
      `(0, 1)`.

    Raises:
      ValueError: both an input context and values, only one of the values, or not
        `0 <= worker_index < num_workers`.

    Example:

        worker_slice(worker_index=1, num_workers=4)  # (1, 4)
    """
    if input_context is not None:
        if worker_index is not None or num_workers is not None:
            raise ValueError("pass either input_context or worker_index/num_workers, not both")
        worker_index = input_context.input_pipeline_id
        num_workers = input_context.num_input_pipelines
    if worker_index is None and num_workers is None:
        return 0, 1
    if worker_index is None or num_workers is None:
        raise ValueError("worker_index and num_workers must be given together")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(
            f"need 0 <= worker_index < num_workers, got worker_index={worker_index}, "
            f"num_workers={num_workers}"
        )
    return int(worker_index), int(num_workers)


def replicas_per_worker(input_context: tf.distribute.InputContext | None) -> int:
    """The replicas one input pipeline feeds.

    Args:
      input_context: from `strategy.distribute_datasets_from_function`, or None.

    Returns:
      Replicas in sync // input pipelines, at least 1 (1 without an input context).
    """
    if input_context is None:
        return 1
    return max(1, input_context.num_replicas_in_sync // input_context.num_input_pipelines)


def round_batches(
    num_batches: int, *, num_workers: int, replicas_per_worker: int = 1, down: bool = False
) -> int:
    """The global batches of an epoch, rounded to a multiple of workers x replicas per worker.

    Every sampler plans its epochs with this one rule, so that every replica of every worker takes
    the same number of steps (a `tf.distribute` strategy drops a last, partial step).

    Args:
      num_batches: the batches the plan needs.
      num_workers: input pipelines (>= 1).
      replicas_per_worker: replicas each pipeline feeds (>= 1).
      down: round down (the plan leaves the last batches out) instead of up (it adds some).

    Returns:
      The rounded number of batches (0 is possible when rounding down).

    Raises:
      ValueError: `num_workers` or `replicas_per_worker` below 1.
    """
    if num_workers < 1 or replicas_per_worker < 1:
        raise ValueError(
            f"need num_workers >= 1 and replicas_per_worker >= 1, got {num_workers}, "
            f"{replicas_per_worker}"
        )
    multiple = num_workers * replicas_per_worker
    if down:
        return num_batches // multiple * multiple
    return -(-num_batches // multiple) * multiple


def epoch_dataset(
    plan_fn: Callable[[tf.Tensor], object],
    *,
    num_batches: int,
    state: EpochState,
    num_workers: int = 1,
    worker_index: int = 0,
    initial_step: int = 0,
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
    batches_per_worker = _batches_per_worker(num_batches, num_workers, worker_index)
    if not 0 <= initial_step < batches_per_worker:
        raise ValueError(
            f"initial_step must be in [0, {batches_per_worker}) (batches per worker per epoch), "
            f"got {initial_step}"
        )
    # One-shot: only the first iteration resumes mid-epoch.
    steps_to_skip = tf.Variable(initial_step, dtype=tf.int64, trainable=False)

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
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches_per_worker))
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
    steps = _batches_per_worker(num_batches, num_workers, worker_index)
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


def _batches_per_worker(num_batches: int, num_workers: int, worker_index: int) -> int:
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"need 0 <= worker_index < num_workers, got {worker_index}, {num_workers}")
    if num_batches % num_workers:
        raise ValueError(
            f"num_batches ({num_batches}) must be a multiple of num_workers ({num_workers})"
        )
    return num_batches // num_workers


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
