"""The kill-resume test's user module (`test_kill_resume.py`) and its launcher.

`run_fn` trains a tiny regressor on dynamic-pair or class-balanced batches and appends the
record numbers of every batch it trains on to the file $KILLABLE_BATCH_LOG, a JSON line per
batch, written out as it goes; with $KILLABLE_KILL_AT_STEP=n it SIGKILLs its own process at the
end of the n-th batch this attempt trains, once the executor's callbacks (the checkpoints) have
seen that batch end. It writes its final weights to the serving folder (a SavedModel would cost
the test seconds per attempt) and returns its optimizer's iteration count.

`python -m tests.components.killable_trainer SPEC.json ...` runs a trainer executor (the spec's
`executor` class path) on each spec in turn (artifacts, properties and the two settings above)
in a fresh process, as an orchestrator's retry does.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

BATCH_LOG_ENV = "KILLABLE_BATCH_LOG"
KILL_AT_STEP_ENV = "KILLABLE_KILL_AT_STEP"
WEIGHTS_FILE = "weights.npz"


def batch_ids(batch: dict) -> tf.Tensor:
    """int64 [k, B]: what identifies a batch: its x and y record numbers, or its records'."""
    if "x_index" in batch:
        return tf.stack([batch["x_index"], batch["y_index"]])
    return batch["index"][None]


class Regressor(keras.Model):
    """Predicts the mean of its input; its train step notes the ids of the batch it trains on."""

    def __init__(self, noted: tf.Variable):
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(4)
        self.head = keras.layers.Dense(1)
        self._noted = noted

    def call(self, inputs):
        return self.head(self.hidden(self.flatten(inputs)))

    def train_step(self, data):
        inputs, target, ids = data
        self._noted.assign(ids)
        return super().train_step((inputs, target))


class _BatchLog(keras.callbacks.Callback):
    def __init__(self, noted: tf.Variable, path: str, kill_at_step: int):
        super().__init__()
        self._noted = noted
        self._path = path
        self._kill_at_step = kill_at_step
        self._epoch = -1
        self._trained = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        line = {"epoch": self._epoch, "batch": batch, "ids": self._noted.numpy().tolist()}
        # Appended and flushed each batch: a SIGKILL leaves every line written before it.
        with open(self._path, "a") as f:
            f.write(json.dumps(line) + "\n")
        self._trained += 1
        if self._trained == self._kill_at_step:
            os.kill(os.getpid(), signal.SIGKILL)


def run_fn(fn_args) -> dict[str, float]:
    spec = fn_args.train_dataset.element_spec
    key = "x" if "x" in spec else "features"
    shape = spec[key].shape
    noted = tf.Variable(
        tf.zeros([2 if "x_index" in spec else 1, shape[0]], tf.int64), trainable=False
    )
    keras.utils.set_random_seed(int(fn_args.custom_config["seed"]))
    model = Regressor(noted)
    model(tf.zeros([1, *shape[1:]]))  # built before fit, as a resume needs
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=False)
    batches = fn_args.train_dataset.map(
        lambda batch: (
            batch[key],
            tf.reduce_mean(batch[key], axis=list(range(1, shape.rank))),
            batch_ids(batch),
        )
    )
    log = _BatchLog(noted, os.environ[BATCH_LOG_ENV], int(os.environ.get(KILL_AT_STEP_ENV, 0)))
    model.fit(
        batches,
        epochs=fn_args.num_epochs,
        initial_epoch=fn_args.initial_epoch,
        callbacks=[*fn_args.callbacks, log],
        verbose=0,
    )
    os.makedirs(fn_args.serving_model_dir, exist_ok=True)
    np.savez(os.path.join(fn_args.serving_model_dir, WEIGHTS_FILE), *model.get_weights())
    return {"optimizer_iterations": int(model.optimizer.iterations.numpy())}


def _execute(spec: dict) -> None:
    # Imported here: the executor needs TFX, run_fn does not.
    from tfx.types import artifact_utils
    from tfx.utils import import_utils

    import tfx_dynamic_inputs.artifacts  # noqa: F401  (registers the custom artifact types)

    os.environ[BATCH_LOG_ENV] = spec["batch_log"]
    os.environ[KILL_AT_STEP_ENV] = str(spec.get("kill_at_step", 0))
    executor = import_utils.import_class_by_path(spec["executor"])
    executor().Do(
        artifact_utils.parse_artifact_dict(spec["inputs"]),
        artifact_utils.parse_artifact_dict(spec["outputs"]),
        spec["exec_properties"],
    )


if __name__ == "__main__":
    for spec_path in sys.argv[1:]:
        with open(spec_path) as f:
            _execute(json.load(f))
