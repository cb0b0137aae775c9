"""Training checkpoints: a run interrupted at any step and resumed from its checkpoint folder
trains on exactly the batches, and ends with exactly the weights, of an uninterrupted run.

The interruption here is an exception at a batch end, in-process; the trainer component's
kill test (`test_kill_resume.py`) does it with SIGKILL."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs import ClassBalancedSampler, EpochState, RecordStore
from tfx_dynamic_inputs.trainer_component.checkpoints import TrainingCheckpoints

EMBEDDING = {"embedding": tf.io.FixedLenFeature([4], tf.float32)}
N_C, N_P = 3, 2
NUM_EPOCHS = 3
LABELS = np.repeat(np.arange(5), [4, 3, 5, 2, 4])


def embedding_example(index: int) -> bytes:
    values = np.random.default_rng(index).normal(size=4).astype(np.float32)
    feature = {"embedding": tf.train.Feature(float_list=tf.train.FloatList(value=values))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


# Without tf.data's autotuning: Keras makes an iterator an epoch, and these epochs are 3 batches.
# Beside a busy process (the suites run two at a time), destroying an iterator on TF 2.16 sometimes
# waited 5-8 s, the process idle, for the iterator's autotune thread to end (gdb: the destructor
# in ~LogicalThreadWrapper, the thread in Model::OptimizeLoop's timed wait). The file took 87 s
# so, 57 s alone, and 57 s beside the same busy process without autotuning.
NO_AUTOTUNE = tf.data.Options()
NO_AUTOTUNE.autotune.enabled = False

STORE = RecordStore.from_serialized([embedding_example(i) for i in range(len(LABELS))])


class Interrupted(Exception):
    """Stands for the process dying after a batch."""


class Regressor(keras.Model):
    """A small model whose train step also notes the record numbers of its batch."""

    def __init__(self, last_batch: tf.Variable):
        super().__init__()
        self.hidden = keras.layers.Dense(3)
        self.head = keras.layers.Dense(1)
        self._last_batch = last_batch

    def call(self, inputs):
        return self.head(self.hidden(inputs))

    def train_step(self, data):
        features, label, index = data
        self._last_batch.assign(index)
        return super().train_step((features, label))


class BatchLog(keras.callbacks.Callback):
    """Appends each trained batch's record numbers to `seen`; raises after `die_after`."""

    def __init__(self, last_batch: tf.Variable, seen: list, die_after: int | None):
        super().__init__()
        self._last_batch = last_batch
        self._seen = seen
        self._die_after = die_after

    def on_train_batch_end(self, batch, logs=None):
        self._seen.append(self._last_batch.numpy().tolist())
        if len(self._seen) == self._die_after:
            raise Interrupted


def sampler(seed: int = 0, state: EpochState | None = None) -> ClassBalancedSampler:
    """The class-balanced sampler of the test records from `seed` (with `state`, if given)."""
    return ClassBalancedSampler(
        STORE,
        LABELS,
        n_classes_per_batch=N_C,
        n_samples_per_class=N_P,
        seed=seed,
        feature_spec=EMBEDDING,
        state=state,
    )


def attempt(directory: str, seed: int, save_every: int, die_after: int | None = None):
    """One attempt of a training run on `directory`: restore, build the inputs, fit. Returns
    the model, the batches it trained on and its `TrainingCheckpoints`."""
    state = EpochState()
    training_sampler = sampler(seed, state)
    checkpoints = TrainingCheckpoints(directory, save_every_steps=save_every)
    initial_step = checkpoints.resume(training_sampler)
    resume = checkpoints.resume_point()
    assert resume.step == initial_step
    batches = (
        training_sampler.dataset(initial_step=initial_step)
        .map(lambda b: (b["embedding"], tf.cast(b["label"], tf.float32), b["index"]))
        .with_options(NO_AUTOTUNE)
    )
    keras.utils.set_random_seed(seed)
    last_batch = tf.Variable(tf.zeros([N_C * N_P], tf.int64), trainable=False)
    model = Regressor(last_batch)
    model(tf.zeros([1, 4]))  # built before fit, as a resume needs
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=False)
    seen: list = []
    with contextlib.suppress(Interrupted):
        model.fit(
            batches,
            epochs=NUM_EPOCHS,
            initial_epoch=resume.epoch,
            callbacks=[checkpoints.callback(), BatchLog(last_batch, seen, die_after)],
            verbose=0,
        )
    return model, seen, checkpoints


def last_checkpoint(die_after: int, steps_per_epoch: int, save_every: int) -> int:
    """The trained steps of the last checkpoint written by a run that died after the end of
    batch `die_after` (1-based, over all epochs)."""
    saves = [
        step
        for step in range(1, die_after + 1)
        if (step % steps_per_epoch == 0 and step < die_after)
        or (save_every and step % save_every == 0 and step % steps_per_epoch)
    ]
    return max(saves, default=0)


# Every save interval, two seeds across them (each case trains about 25 s).
@pytest.mark.parametrize(("seed", "save_every"), [(0, 1), (7, 4), (7, 0)])
def test_resumed_runs_train_on_the_same_batches_to_the_same_weights(tmp_path, seed, save_every):
    reference, batches, checkpoints = attempt(str(tmp_path / "whole"), seed, save_every)
    total = NUM_EPOCHS * checkpoints.steps_per_epoch
    assert len(batches) == total == checkpoints.resume_point().trained_steps
    for die_after in sorted({1, total // 2, checkpoints.steps_per_epoch, total - 1}):
        directory = str(tmp_path / f"killed_{die_after}")
        _, first, _ = attempt(directory, seed, save_every, die_after)
        assert first == batches[:die_after]
        model, rest, resumed = attempt(directory, seed, save_every)
        # The second attempt starts from the last checkpoint before the interruption: an
        # epoch end (reached only after the epoch's last batch end) or a multiple of save_every.
        saved = len(batches) - len(rest)
        assert saved == last_checkpoint(die_after, checkpoints.steps_per_epoch, save_every)
        assert first[:saved] + rest == batches
        assert resumed.resume_point().trained_steps == total
        for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_a_finished_run_resumes_at_its_end(tmp_path):
    attempt(str(tmp_path), 0, 0)
    _, again, checkpoints = attempt(str(tmp_path), 0, 0)
    assert again == []
    point = checkpoints.resume_point()
    assert (point.epoch, point.step) == (NUM_EPOCHS, 0)


def test_resuming_an_unbuilt_model_is_a_clear_error(tmp_path):
    attempt(str(tmp_path), 0, 0, die_after=3)
    checkpoints = TrainingCheckpoints(str(tmp_path))
    checkpoints.resume(sampler())
    model = Regressor(tf.Variable(tf.zeros([N_C * N_P], tf.int64)))
    model.compile(optimizer="adam", loss="mse")
    data = tf.data.Dataset.from_tensors((tf.zeros([2, 4]), tf.zeros([2]), tf.zeros([2], tf.int64)))
    with pytest.raises(ValueError, match="needs the model built before `fit`"):
        model.fit(data, callbacks=[checkpoints.callback()], verbose=0)


def test_fit_must_start_at_the_resumed_epoch(tmp_path):
    attempt(str(tmp_path), 0, 0, die_after=3)
    checkpoints = TrainingCheckpoints(str(tmp_path))
    initial_step = checkpoints.resume(sampler())
    assert checkpoints.resume_point().epoch == 1
    # The model the checkpoint was written from, so that the restore succeeds and the epoch
    # check is what refuses the fit.
    model = Regressor(tf.Variable(tf.zeros([N_C * N_P], tf.int64), trainable=False))
    model(tf.zeros([1, 4]))
    model.compile(optimizer="adam", loss="mse")
    data = (
        sampler()
        .dataset(initial_step=initial_step)
        .map(lambda b: (b["embedding"], tf.cast(b["label"], tf.float32), b["index"]))
    )
    with pytest.raises(ValueError, match="pass `initial_epoch=fn_args.initial_epoch`"):
        model.fit(data, epochs=NUM_EPOCHS, callbacks=[checkpoints.callback()], verbose=0)


def test_the_history_covers_every_epoch_of_every_attempt(tmp_path):
    attempt(str(tmp_path), 0, 0, die_after=3)
    model, _, checkpoints = attempt(str(tmp_path), 0, 0)
    again = TrainingCheckpoints(str(tmp_path))
    again.resume(sampler())
    history = again.history()
    assert sorted(history) == ["loss"] and len(history["loss"]) == NUM_EPOCHS
    assert history["loss"][-1] > 0


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="save_every_steps"):
        TrainingCheckpoints(str(tmp_path), save_every_steps=-1)
    checkpoints = TrainingCheckpoints(str(tmp_path))
    with pytest.raises(ValueError, match="call resume"):
        checkpoints.resume_point()
    checkpoints.resume(sampler())
    with pytest.raises(ValueError, match="called already"):
        checkpoints.resume(sampler())


# ------------------------------------------------------------------ damaged checkpoint folders

SAVED_STEPS = (2, 4)


def saved_checkpoints(directory: str) -> None:
    """Writes the checkpoints of a run that trained `SAVED_STEPS` batches (the sampler's state, a
    small model, the steps), as the training callback does, without training."""
    checkpoints = TrainingCheckpoints(directory)
    checkpoints.resume(sampler())
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(2)])
    manager = checkpoints.manager(model)
    for steps in SAVED_STEPS:
        checkpoints.trained_steps.assign(steps)
        manager.save(checkpoint_number=steps)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("saved"))
    saved_checkpoints(directory)
    return directory


def resumed_steps(directory: str) -> int:
    """The trained steps a new attempt on `directory` resumes at."""
    checkpoints = TrainingCheckpoints(directory)
    checkpoints.resume(sampler())
    return checkpoints.resume_point().trained_steps


def cut(path: str, size: int) -> None:
    with open(path, "rb") as f:
        kept = f.read()[:size]
    with open(path, "wb") as f:
        f.write(kept)


def skip_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_checkpoint_file_naming_a_missing_checkpoint_resumes_from_the_newest_complete_one(
    saved, tmp_path, caplog
):
    directory = str(tmp_path / "run")
    shutil.copytree(saved, directory)
    state = os.path.join(directory, "checkpoint")
    with open(state) as f:
        text = f.read()
    with open(state, "w") as f:
        f.write(
            text.replace('model_checkpoint_path: "ckpt-4"', 'model_checkpoint_path: "ckpt-999"')
        )
    with caplog.at_level(logging.WARNING):
        assert resumed_steps(directory) == 4
    (warning,) = skip_warnings(caplog)
    assert "ckpt-999.index is missing" in warning and "resuming from" in warning


# Any cut of the newest checkpoint's data or index file, at any byte.
@settings(max_examples=25, deadline=None)
@given(suffix=st.sampled_from([".data-00000-of-00001", ".index"]), fraction=st.floats(0, 0.999))
def test_a_cut_newest_checkpoint_falls_back_to_the_one_before_with_one_warning(
    saved, suffix, fraction
):
    with tempfile.TemporaryDirectory() as root:
        directory = os.path.join(root, "run")
        shutil.copytree(saved, directory)
        damaged = os.path.join(directory, f"ckpt-4{suffix}")
        cut(damaged, int(os.path.getsize(damaged) * fraction))
        handler = _Records()
        logging.getLogger(TrainingCheckpoints.__module__).addHandler(handler)
        try:
            assert resumed_steps(directory) == 2
        finally:
            logging.getLogger(TrainingCheckpoints.__module__).removeHandler(handler)
    (warning,) = handler.warnings
    assert damaged in warning and "ckpt-2" in warning


class _Records(logging.Handler):
    """The warnings logged while it is attached (caplog is per test, not per example)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []

    def emit(self, record):
        self.warnings.append(record.getMessage())


def test_a_missing_data_file_is_named_and_skipped(saved, tmp_path, caplog):
    directory = str(tmp_path / "run")
    shutil.copytree(saved, directory)
    os.remove(os.path.join(directory, "ckpt-4.data-00000-of-00001"))
    with caplog.at_level(logging.WARNING):
        assert resumed_steps(directory) == 2
    (warning,) = skip_warnings(caplog)
    assert "ckpt-4" in warning and "data files" in warning


def test_checkpoints_none_complete_fail_naming_the_newest_never_restart(saved, tmp_path):
    directory = str(tmp_path / "run")
    shutil.copytree(saved, directory)
    for steps in SAVED_STEPS:
        data = os.path.join(directory, f"ckpt-{steps}.data-00000-of-00001")
        cut(data, os.path.getsize(data) // 2)
    with pytest.raises(ValueError, match="no complete checkpoint to resume from") as raised:
        resumed_steps(directory)
    message = str(raised.value)
    assert "\n" not in message
    assert os.path.join(directory, "ckpt-4.data-00000-of-00001") in message
    assert "1 older ones" in message
