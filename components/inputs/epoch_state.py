"""The checkpointable state of a sampler: the next epoch, the skipped samples, the run and the
stream of batches it follows.

`EpochState` is what a `tf.train.Checkpoint` saves of a sampler (`epoch_plan.epoch_dataset`
advances its epoch); `StateRunError` is the refusal of a state restored from a checkpoint of
another run, or of another stream of batches (another global batch).
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dynamic_inputs.inputs.variables import require_no_strategy_scope


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

    `stream` (string scalar variable) names what fixes the sampler's stream of batches besides
    the data and seed (`EpochSampler.stream`: the global batch, and for a plan that is not
    elastic the replica count), set and checked like `run`: a checkpoint resumes with any number
    of workers and replicas that keeps the stream (an elastic resume), and is refused, naming
    both, with one that does not (another global batch size).

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
        self.stream = tf.Variable("", dtype=tf.string, trainable=False, name="stream")

    def bind_run(self, run_key: str, stream: str = "") -> None:
        """Records that this state follows `run_key` and the stream of batches `stream`.

        Args:
          run_key: the sampler's `EpochSampler.run_key` ("" for data that is not a run).
          stream: the sampler's `EpochSampler.stream` ("": not checked).

        Raises:
          StateRunError: the state already follows another run or stream (restored from a
            checkpoint of another run or global batch, or shared with such a sampler).
        """
        held = self.run.numpy().decode()
        if held == "":
            self.run.assign(run_key)
        elif held != run_key:
            raise StateRunError(_state_run_message(held, run_key))
        held_stream = self.stream.numpy().decode()
        if held_stream == "":
            self.stream.assign(stream)
        elif stream and held_stream != stream:
            raise StateRunError(_state_stream_message(held_stream, stream))

    def check_run(self, run_key: str, stream: str = "") -> tf.Operation:
        """An op that checks, when run, that the state follows `run_key` and `stream`.

        Run before each epoch's plan, so a checkpoint restored after the dataset was built is
        checked too. A state that follows no run or stream (of arrays or datasets, or written
        before states named them) is accepted.

        Args:
          run_key: the sampler's `EpochSampler.run_key`.
          stream: the sampler's `EpochSampler.stream` ("": not checked).

        Returns:
          The assert op; it fails with `tf.errors.InvalidArgumentError` (the message of
          `StateRunError`) when the state follows another run or stream.
        """
        same_run = tf.debugging.Assert(
            tf.logical_or(tf.equal(self.run, run_key), tf.equal(self.run, "")),
            [
                "the sampler state follows run",
                self.run,
                f"but this sampler reads {_run_words(run_key)}"
                ": it was restored from a checkpoint of another run; restore the checkpoint of this"
                " run, or start from a new state",
            ],
        )
        if not stream:
            return same_run
        same_stream = tf.debugging.Assert(
            tf.logical_or(tf.equal(self.stream, stream), tf.equal(self.stream, "")),
            ["the sampler state was written for", self.stream, _stream_advice(stream)],
        )
        return tf.group(same_run, same_stream)


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


def _stream_advice(stream: str) -> str:
    return (
        f"but this sampler plans {stream}: a checkpoint resumes on any number of workers and "
        "replicas that keeps the global batch (n_c or batch_size x replicas); restore it with "
        "that global batch, or start from a new state"
    )


def _state_stream_message(held: str, stream: str) -> str:
    return f"the sampler state was written for {held} {_stream_advice(stream)}"
