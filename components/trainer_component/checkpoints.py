"""Durable training checkpoints of one trainer execution, so that a retried execution resumes.

Kubeflow retries a trainer pod that was preempted or killed (the task's `retryPolicy`, which
`tfx_dynamic_inputs.kubeflow.runner` sets on the trainer), and the retry gets the same executor
input, so the same output artifacts: `<model_run>/checkpoints/` is a folder that survives the
attempt. (A new LocalDagRunner run is a new execution with new output folders: it starts afresh; and
TFX's launcher removes the outputs of an executor that raised, so only a process that died keeps
them.) Every `save_every_steps` batches and at each epoch's end it
receives one `tf.train.Checkpoint` of

* `trained_steps`: batches trained so far, over all epochs;
* the sampler state (`EpochState` / `PairingState`: the next epoch, least-sampled counts) and
  any other input-side module (pair coverage);
* the Keras model, which tracks its optimizers (`compile` sets them as attributes), with their
  slots and iteration counts.

The sampler plans are pure functions of `(seed, epoch)` and that state, so `trained_steps` fixes
the resume point: epoch `trained_steps // steps_per_epoch`, batch `trained_steps %
steps_per_epoch` of it. `resume` restores the input side before the datasets are built
(they need the resume step); the model's part is restored by `callback()` when `fit` starts,
once `run_fn` has built the model; like Keras' `BackupAndRestore` it needs the model built
before `fit` and builds `model.optimizer` over the trainable variables when `fit` has not yet
(a model with more optimizers builds them itself, as `CycleGAN.compile` does).

Each epoch's logs go to `history.json` beside them before the epoch's checkpoint, so that a
resumed run reports every epoch (`history()`), not only those of its last attempt.

The checkpoints are a few model-sized files; `CheckpointManager` keeps the latest two and
writes each atomically (a checkpoint is listed only once complete), so an attempt killed while
saving resumes from the one before. A resume does not trust the `checkpoint` file's list: it reads
every `ckpt-<steps>` in the folder, newest first, and resumes from the first whose index and data
files are all there and readable (a file cut short, a `checkpoint` file naming one that is gone),
with one warning naming those it skipped; when checkpoints are there but none is complete it
fails naming the newest, and never starts afresh beside them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping

import keras
import tensorflow as tf

from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler

CHECKPOINT_DIR = "checkpoints"
HISTORY_FILE = "history.json"
_MAX_TO_KEEP = 2
# `CheckpointManager`'s file names: `ckpt-<steps>.index` and `ckpt-<steps>.data-<i>-of-<n>`.
_CHECKPOINT_FILE = re.compile(r"ckpt-(\d+)\.(?:index|data-\d+-of-\d+)")
_CHECKPOINT_NAME = re.compile(r"ckpt-(\d+)")
_DATA_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where training goes on: `epoch` (0-based) and `step`, the batches of it already trained.
    `trained_steps = epoch * steps_per_epoch + step`."""

    epoch: int
    step: int
    trained_steps: int


class TrainingCheckpoints:
    """The checkpoints of one training run in `directory` (see `checkpoint_dir`), a checkpoint
    every `save_every_steps` trained batches (0: at epoch ends only) and at each epoch's end.

    `resume(sampler, other_inputs)` is the `training_inputs.Resume` hook: the trainer's inputs
    call it with their sampler before building its dataset.
    """

    def __init__(self, directory: str, *, save_every_steps: int = 0):
        if save_every_steps < 0:
            raise ValueError(f"save_every_steps must be >= 0, got {save_every_steps}")
        self.directory = directory
        self.save_every_steps = save_every_steps
        self.steps_per_epoch = 0
        self.trained_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="trained_steps")
        self._inputs: dict[str, tf.Module] = {}
        self._sampler: EpochSampler | None = None
        self._resumed_from: str | None = None

    def resume(
        self, sampler: EpochSampler, other_inputs: Mapping[str, tf.Module] | None = None
    ) -> int:
        """Tracks `sampler`'s state and `other_inputs` (by name), restores them from the latest
        checkpoint (none: a fresh start) and returns the batches of the epoch in progress already
        trained: the sampler dataset's `initial_step`.

        Args:
            sampler: the training run's `EpochSampler`.
            other_inputs: more input state to checkpoint, name -> `tf.Module`, or None.

        Returns:
            The batches of the epoch in progress already trained (0 on a fresh start).

        Raises:
            ValueError: when called a second time, or when the folder holds checkpoints but
                none is complete (the message names the newest and what is wrong with it).
        """
        if self._inputs:
            raise ValueError("resume() was called already: one sampler per training run")
        self._inputs = {"sampler": sampler.state, **(other_inputs or {})}
        self._sampler = sampler
        self.steps_per_epoch = sampler.steps_per_epoch
        self._resumed_from = newest_complete_checkpoint(self.directory)
        if self._resumed_from is not None:
            checkpoint = tf.train.Checkpoint(trained_steps=self.trained_steps, **self._inputs)
            # The model's part is restored later, by the callback.
            checkpoint.restore(self._resumed_from).expect_partial()
            _log.info(
                "resuming from %s: %d steps trained", self._resumed_from, int(self.trained_steps)
            )
        return self.resume_point().step

    def rewind_inputs(self) -> None:
        """Puts the sampler's dataset back where it was built (`EpochSampler.rewind`): what an
        iteration started and dropped before training (Keras' `fit` under a strategy reads one
        batch to build the model) advanced is undone. The callback calls it when `fit` starts."""
        if self._sampler is not None:
            self._sampler.rewind()

    @property
    def resumed_from(self) -> str | None:
        """The checkpoint `resume` restored (the newest complete one), or None on a fresh
        start."""
        return self._resumed_from

    def resume_point(self) -> ResumePoint:
        """Where training goes on, as restored by `resume` (and advanced by training)."""
        if not self.steps_per_epoch:
            raise ValueError("call resume(sampler) first")
        trained = int(self.trained_steps.numpy())
        epoch, step = divmod(trained, self.steps_per_epoch)
        return ResumePoint(epoch=epoch, step=step, trained_steps=trained)

    def history(self) -> dict[str, list[float]]:
        """The logs of the epochs trained before the resume point, by name (`fit`'s
        `History.history` layout); empty on a fresh start."""
        path = os.path.join(self.directory, HISTORY_FILE)
        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path) as f:
            epochs = json.load(f)
        # An attempt may have logged an epoch and died before its checkpoint.
        done = epochs[: self.resume_point().epoch]
        return {name: [logs[name] for logs in done if name in logs] for name in _names(done)}

    def record_epoch(self, epoch: int, logs: Mapping[str, object]) -> None:
        """Records the numeric logs of epoch `epoch` in the checkpoint folder's history.

        The history keeps the epochs before `epoch`; any recorded from `epoch` on (by an
        earlier attempt) are replaced.

        Args:
            epoch: the 0-based epoch that ended.
            logs: its Keras logs; values that are not numbers are left out.
        """
        path = os.path.join(self.directory, HISTORY_FILE)
        epochs = []
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                epochs = json.load(f)[:epoch]
        numbers = {}
        for name, value in logs.items():
            try:
                numbers[name] = float(value)
            except (TypeError, ValueError):
                continue  # not a number: not part of the history
        tf.io.gfile.makedirs(self.directory)
        with tf.io.gfile.GFile(path, "w") as f:
            json.dump([*epochs, numbers], f)

    def callback(self) -> keras.callbacks.Callback:
        """A Keras callback that restores the model's part when `fit` starts (after
        `resume`) and saves every `save_every_steps` batches and at each epoch's end.
        Pass `fit` `initial_epoch=resume_point().epoch`: the callback refuses a `fit` that
        starts at another epoch."""
        return _CheckpointCallback(self)

    def manager(self, model: keras.Model) -> tf.train.CheckpointManager:
        """The checkpoint manager of the training state: steps, `model`, the sampler and the other
        inputs (after `resume`).

        Args:
            model: the Keras model trained.

        Returns:
            A `tf.train.CheckpointManager` over `directory`.
        """
        checkpoint = tf.train.Checkpoint(
            trained_steps=self.trained_steps, model=model, **self._inputs
        )
        return tf.train.CheckpointManager(
            checkpoint, self.directory, max_to_keep=_MAX_TO_KEEP, step_counter=self.trained_steps
        )


def newest_complete_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint of `CheckpointManager` in `directory`, checked by reading it.

    Every `ckpt-<steps>` there (a file of it, or a name in the `checkpoint` file) is a candidate,
    newest (most steps) first; the first whose index and every data file are there and whose
    every tensor reads back (`tf.train.load_checkpoint`) is returned, after one warning naming the
    newer ones skipped. Reading a checkpoint whole costs one read of its files.

    Args:
        directory: the checkpoint folder.

    Returns:
        The complete checkpoint's prefix (`<directory>/ckpt-<steps>`), or None when there is no
        checkpoint at all.

    Raises:
        ValueError: there are checkpoints but none is complete; the message names the newest's
            damaged or missing file.
    """
    skipped = []
    for prefix in _checkpoint_prefixes(directory):
        damage = _damage(prefix)
        if damage is None:
            if skipped:
                _log.warning(
                    "resuming from %s, the newest complete checkpoint; skipped newer ones: %s",
                    prefix,
                    "; ".join(skipped),
                )
            return prefix
        skipped.append(damage)
    if not skipped:
        return None
    older = f" (and {len(skipped) - 1} older ones, as damaged)" if len(skipped) > 1 else ""
    raise ValueError(
        f"no complete checkpoint to resume from in {directory}: {skipped[0]}{older}; move the "
        "folder away to train afresh"
    )


def _checkpoint_prefixes(directory: str) -> list[str]:
    """The prefixes of the checkpoints in `directory` (files, or names in its `checkpoint`
    file), newest first."""
    steps = set()
    if tf.io.gfile.isdir(directory):
        for name in tf.io.gfile.listdir(directory):
            match = _CHECKPOINT_FILE.fullmatch(name)
            if match:
                steps.add(int(match.group(1)))
    try:
        state = tf.train.get_checkpoint_state(directory)
    except ValueError:  # an empty `checkpoint` file names none: the files above are all there is
        state = None
    if state is not None:
        # The checkpoint it names may be gone: it is then skipped, and named in the warning.
        folder, name = os.path.split(state.model_checkpoint_path)
        match = _CHECKPOINT_NAME.fullmatch(name)
        if match and folder.rstrip("/") == directory.rstrip("/"):
            steps.add(int(match.group(1)))
    return [os.path.join(directory, f"ckpt-{step}") for step in sorted(steps, reverse=True)]


def _damage(prefix: str) -> str | None:
    """What makes the checkpoint `prefix` incomplete, naming its file; None when it is whole."""
    index = f"{prefix}.index"
    if not tf.io.gfile.exists(index):
        return f"{index} is missing"
    directory, name = os.path.split(prefix)
    data = [
        os.path.join(directory, file)
        for file in sorted(tf.io.gfile.listdir(directory))
        if file.startswith(f"{name}.data-")
    ]
    shards = [tuple(map(int, match.groups())) for match in map(_DATA_SHARD.search, data) if match]
    if not shards:
        return f"the data files of {prefix} are missing (no {name}.data-*)"
    count = max(count for _, count in shards)
    missing = sorted(set(range(count)) - {shard for shard, _ in shards})
    if missing:
        return f"{prefix}.data-{missing[0]:05d}-of-{count:05d} is missing"
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, RuntimeError, ValueError, IndexError) as error:
        return f"{index} is unreadable ({_first_line(error)})"
    for tensor in reader.get_variable_to_dtype_map():
        try:
            reader.get_tensor(tensor)
        except (tf.errors.OpError, RuntimeError, ValueError, IndexError) as error:
            return f"{', '.join(data)} cannot be read back ({tensor}: {_first_line(error)})"
    return None


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _names(epochs: list[dict[str, float]]) -> list[str]:
    return sorted({name for logs in epochs for name in logs})


def checkpoint_dir(model_run_uri: str) -> str:
    """The checkpoint folder of the execution whose ModelRun artifact is at `model_run_uri`.

    Args:
        model_run_uri: the ModelRun artifact's URI.

    Returns:
        `<model_run_uri>/checkpoints`.
    """
    return os.path.join(model_run_uri, CHECKPOINT_DIR)


class _CheckpointCallback(keras.callbacks.Callback):
    def __init__(self, checkpoints: TrainingCheckpoints):
        super().__init__()
        self._checkpoints = checkpoints
        self._manager: tf.train.CheckpointManager | None = None
        self._first_epoch: int | None = None
        # Each optimizer's iteration count due at the end of a resumed, partial first epoch.
        self._iterations_at_end: list[tuple[keras.optimizers.Optimizer, int]] = []

    def on_train_begin(self, logs=None):
        self._manager = self._checkpoints.manager(self.model)
        self._first_epoch = self._checkpoints.resume_point().epoch
        # Under a tf.distribute strategy `fit` has read a batch already, from an iterator it
        # dropped (to build the model): the sampler goes back to where its dataset was built.
        self._checkpoints.rewind_inputs()
        latest = self._checkpoints.resumed_from
        if latest is None:
            return
        # Keras builds a model and its optimizer inside the first traced train step, where a
        # restore would run in the graph; both must exist before it, as for Keras'
        # BackupAndRestore.
        if not self.model.built:
            raise ValueError(
                f"resuming from {latest} needs the model built before `fit`: call "
                "`model.build(input_shape)` or call it on a batch first"
            )
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        # Input-side values were restored before the datasets were built; this restores them
        # again, unchanged, with the model and its optimizers, and checks nothing was missed.
        self._manager.checkpoint.restore(latest).assert_existing_objects_matched()
        resumed_at = self._checkpoints.resume_point().step
        if resumed_at:
            remaining = self._checkpoints.steps_per_epoch - resumed_at
            self._iterations_at_end = [
                (optimizer, int(optimizer.iterations.numpy()) + remaining)
                for optimizer in _optimizers(self.model)
            ]

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch is not None and epoch != self._first_epoch:
            raise ValueError(
                f"fit started at epoch {epoch}, but training resumes at epoch "
                f"{self._first_epoch}: pass `initial_epoch=fn_args.initial_epoch` to `fit`"
            )
        self._first_epoch = None

    def on_train_batch_end(self, batch, logs=None):
        trained = int(self._checkpoints.trained_steps.assign_add(1).numpy())
        every = self._checkpoints.save_every_steps
        if every and trained % every == 0 and trained % self._checkpoints.steps_per_epoch:
            self._manager.save(checkpoint_number=trained)

    def on_epoch_end(self, epoch, logs=None):
        if self._iterations_at_end:
            # Keras ends the short, resumed epoch on a step whose `get_next` finds nothing; the
            # optimizers' iteration counts (Adam's bias correction) are still advanced by that
            # step, and are set back to the batches really trained.
            for optimizer, iterations in self._iterations_at_end:
                optimizer.iterations.assign(iterations)
            self._iterations_at_end = []
        self._checkpoints.record_epoch(epoch, logs or {})
        self._manager.save(checkpoint_number=int(self._checkpoints.trained_steps.numpy()))


def _optimizers(model: keras.Model) -> list[keras.optimizers.Optimizer]:
    """The optimizers `model` holds as attributes (`optimizer`, or several, as `CycleGAN`)."""
    found: list[keras.optimizers.Optimizer] = []
    for value in vars(model).values():
        if isinstance(value, keras.optimizers.Optimizer) and all(value is not f for f in found):
            found.append(value)
    return found
