"""The checkpointable state of a sampler: the next epoch, the skipped samples, the run, the
stream of batches and the plan it follows.

`EpochState` is what a `tf.train.Checkpoint` saves of a sampler (`epoch_plan.epoch_dataset`
advances its epoch); `StateRunError` is the refusal of a state restored from a checkpoint of
another run, of another stream of batches (another global batch) or of another plan (another
seed or plan option). `plan_key` and `array_digest` write what a sampler's plan key names.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.arguments import int_argument
from tfx_dynamic_inputs.inputs.variables import require_no_strategy_scope

_log = logging.getLogger(__name__)


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

    `plan` (string scalar variable) names what else shapes the sampler's plan
    (`EpochSampler.plan_key`: the seed, the small-class policy, the class sizes or pair counts),
    set and checked like `run`: resuming the epoch in progress with another seed or option would
    replan it, so that some of its samples come twice and others never. It is refused at any
    step, as another global batch is; to change them at an epoch boundary, start a new state at
    that epoch (`initial_epoch`). A state that names no plan (a checkpoint written before states
    named it) is accepted, with one warning, so that runs in progress resume after an upgrade;
    the run and stream checks still apply to it.

    Args:
      initial_epoch: the first epoch to plan (an int >= 0).
      name: the `tf.Module` name.

    Raises:
      TypeError: `initial_epoch` not an int (a float, a bool).
      ValueError: `initial_epoch` below 0, or created inside a `tf.distribute` strategy scope.

    Example:

        state = EpochState()
        checkpoint = tf.train.Checkpoint(sampler=state)  # restore it before building datasets
    """

    def __init__(self, initial_epoch: int = 0, name: str | None = None):
        require_no_strategy_scope("a sampler state")
        initial_epoch = int_argument("initial_epoch", initial_epoch, 0)
        super().__init__(name=name)
        self.epoch = tf.Variable(initial_epoch, dtype=tf.int64, trainable=False, name="epoch")
        self.skipped_samples = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="skipped_samples"
        )
        self.run = tf.Variable("", dtype=tf.string, trainable=False, name="run")
        self.stream = tf.Variable("", dtype=tf.string, trainable=False, name="stream")
        self.plan = tf.Variable("", dtype=tf.string, trainable=False, name="plan")

    def bind_run(self, run_key: str, stream: str = "", plan: str = "") -> None:
        """Records that this state follows `run_key`, the stream of batches `stream` and the
        plan `plan`.

        Args:
          run_key: the sampler's `EpochSampler.run_key` ("" for data that is not a run).
          stream: the sampler's `EpochSampler.stream` ("": not checked).
          plan: the sampler's `EpochSampler.plan_key` ("": not checked).

        Raises:
          StateRunError: the state already follows another run, stream or plan (restored from a
            checkpoint of another run, global batch, seed or plan option, or shared with such a
            sampler); one line naming both.
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
        held_plan = self.plan.numpy().decode()
        if held_plan == "" and plan:
            if held or held_stream:
                _log.warning(
                    "the sampler state names no plan (a checkpoint written before states named "
                    "their seed and options): resuming without checking that %s is its plan",
                    plan,
                )
            self.plan.assign(plan)
        elif plan and held_plan != plan:
            raise StateRunError(_state_plan_message(held_plan, plan))

    def check_run(self, run_key: str, stream: str = "", plan: str = "") -> tf.Operation:
        """An op that checks, when run, that the state follows `run_key`, `stream` and `plan`.

        Run before each epoch's plan, so a checkpoint restored after the dataset was built is
        checked too. A state that follows no run, stream or plan (of arrays or datasets, or
        written before states named them) is accepted.

        Args:
          run_key: the sampler's `EpochSampler.run_key`.
          stream: the sampler's `EpochSampler.stream` ("": not checked).
          plan: the sampler's `EpochSampler.plan_key` ("": not checked).

        Returns:
          The assert op; it fails with `tf.errors.InvalidArgumentError` (the message of
          `StateRunError`) when the state follows another run, stream or plan.
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
        checks = [same_run]
        if stream:
            checks.append(
                tf.debugging.Assert(
                    tf.logical_or(tf.equal(self.stream, stream), tf.equal(self.stream, "")),
                    ["the sampler state was written for", self.stream, _stream_advice(stream)],
                )
            )
        if plan:
            checks.append(
                tf.debugging.Assert(
                    tf.logical_or(tf.equal(self.plan, plan), tf.equal(self.plan, "")),
                    ["the sampler state was planned with", self.plan, _plan_advice(plan)],
                )
            )
        return tf.group(*checks)


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


def plan_key(items: Mapping[str, object]) -> str:
    """A sampler's plan key: what shapes its plan, as ``name=value`` items joined by ", ".

    Args:
      items: name -> value (a value's `str` must hold no ", " and no "=").

    Returns:
      The key, e.g. ``"seed=4, small_classes=replace, classes=11"``.
    """
    return ", ".join(f"{name}={value}" for name, value in items.items())


def array_digest(values) -> str:
    """A short digest of an integer array (class sizes, offsets) for a plan key: equal arrays
    give equal digests, so a key names the array in 16 hex digits whatever its size.

    Args:
      values: an integer array of any shape.

    Returns:
      16 hex digits.
    """
    data = np.ascontiguousarray(np.asarray(values, np.int64).astype("<i8")).tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _plan_items(key: str) -> dict[str, str] | None:
    """A plan key's items, name -> value; None for a key not of `plan_key`'s form."""
    items = {}
    for item in key.split(", "):
        name, sep, value = item.partition("=")
        if not sep or name in items:
            return None
        items[name] = value
    return items


def _plan_advice(plan: str) -> str:
    return (
        f"but this sampler plans with {plan}: resuming would replan the epoch in progress, "
        "serving some of its samples twice and others never; build the sampler with the "
        "checkpoint's seed and options, or start from a new state (EpochState(initial_epoch=...)) "
        "to change them"
    )


def _state_plan_message(held: str, plan: str) -> str:
    """One line naming the items of the two plan keys that differ (all of both when they do not
    name the same items)."""
    held_items, items = _plan_items(held), _plan_items(plan)
    if held_items is not None and items is not None and held_items.keys() == items.keys():
        differ = [name for name in items if held_items[name] != items[name]]
        held = plan_key({name: held_items[name] for name in differ})
        plan = plan_key({name: items[name] for name in differ})
    return f"the sampler state was planned with {held} {_plan_advice(plan)}"
