"""The kill-resume test's user module (`test_kill_resume.py`) and its launcher.

`run_fn` trains a tiny regressor on dynamic-pair or class-balanced batches and appends the
record numbers of every batch it trains on to the file $KILLABLE_BATCH_LOG, a JSON line per
batch, written out as it goes; with $KILLABLE_KILL_AT_STEP=n it SIGKILLs its own process at the
end of the n-th batch this attempt trains, once the executor's callbacks (the checkpoints) have
seen that batch end. It writes its final weights to the serving folder (a SavedModel would cost
the test seconds per attempt) and returns its optimizer's iteration count.

The model is built under `fn_args.strategy` (the trainer's `distribution`), and each batch's ids
are the concatenation of its replicas' slices: the global batch.

`python -m tests.components.killable_trainer SPEC.json ...` runs a trainer executor (the spec's
`executor` class path) on each spec in turn (artifacts, properties and the two settings above)
in a fresh process, as an orchestrator's retry does; with $KILLABLE_LOGICAL_CPUS=n the process
has n logical CPU devices (a machine with n GPUs, to a mirrored trainer).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import types

import keras
import numpy as np
import tensorflow as tf

BATCH_LOG_ENV = "KILLABLE_BATCH_LOG"
KILL_AT_STEP_ENV = "KILLABLE_KILL_AT_STEP"
LOGICAL_CPUS_ENV = "KILLABLE_LOGICAL_CPUS"
WEIGHTS_FILE = "weights.npz"


def batch_ids(batch: dict) -> tf.Tensor:
    """int64 [B, k]: what identifies a batch: its x and y record numbers, or its records' and a
    hash of each sample's features (bit-exact: crops, augmentation and SpecAugment replayed or
    not), batch-major, as every part of a batch a strategy splits over replicas."""
    if "x_index" in batch:
        return tf.stack([batch["x_index"], batch["y_index"]], axis=1)
    digests = tf.map_fn(
        lambda sample: tf.strings.to_hash_bucket_fast(tf.io.serialize_tensor(sample), 1 << 62),
        batch["features"],
        fn_output_signature=tf.int64,
    )
    return tf.stack([batch["index"], digests], axis=1)


class Regressor(keras.Model):
    """Predicts the mean of its input; its train step notes the ids of the batch it trains on."""

    def __init__(self, noted: tf.Variable):
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(4)
        self.head = keras.layers.Dense(1)
        # Out of the model's tracked state (a plain holder): the ids are no training state, and
        # their per-replica shape changes with the replica count a retry has.
        self._noted = types.SimpleNamespace(variable=noted)

    def call(self, inputs):
        # Training data holds the batch's ids beside the inputs (not as a third element, which
        # Keras would take for sample weights).
        if isinstance(inputs, dict):
            inputs = inputs["inputs"]
        return self.head(self.hidden(self.flatten(inputs)))

    def train_step(self, data):
        inputs, target = data
        self._noted.variable.assign(inputs["ids"])
        return super().train_step((inputs, target))


class _BatchLog(keras.callbacks.Callback):
    def __init__(
        self, noted: tf.Variable, strategy: tf.distribute.Strategy, path: str, kill_at_step: int
    ):
        super().__init__()
        # One copy a replica (synchronized on read, never aggregated), each its slice's ids.
        self._noted = noted
        self._strategy = strategy
        self._path = path
        self._kill_at_step = kill_at_step
        self._epoch = -1
        self._trained = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        slices = self._strategy.experimental_local_results(self._noted)
        ids = np.concatenate([s.numpy() for s in slices])
        line = {"epoch": self._epoch, "batch": batch, "ids": ids.tolist()}
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
    strategy = fn_args.strategy
    per_replica = shape[0] // strategy.num_replicas_in_sync
    keras.utils.set_random_seed(int(fn_args.custom_config["seed"]))
    with strategy.scope():
        noted = tf.Variable(
            tf.zeros([per_replica, 2], tf.int64),
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.NONE,
        )
        model = Regressor(noted)
        model(tf.zeros([1, *shape[1:]]))  # built before fit, as a resume needs
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=False)
    batches = fn_args.train_dataset.map(
        lambda batch: (
            {"inputs": batch[key], "ids": batch_ids(batch)},
            tf.reduce_mean(batch[key], axis=list(range(1, shape.rank))),
        )
    )
    log = _BatchLog(
        noted, strategy, os.environ[BATCH_LOG_ENV], int(os.environ.get(KILL_AT_STEP_ENV, 0))
    )
    model.fit(
        batches,
        epochs=fn_args.num_epochs,
        initial_epoch=fn_args.initial_epoch,
        callbacks=[*fn_args.callbacks, log],
        verbose=0,
    )
    os.makedirs(fn_args.serving_model_dir, exist_ok=True)
    np.savez(os.path.join(fn_args.serving_model_dir, WEIGHTS_FILE), *model.get_weights())
    return {
        "optimizer_iterations": int(model.optimizer.iterations.numpy()),
        "num_replicas": strategy.num_replicas_in_sync,
    }


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
    logical_cpus = int(os.environ.get(LOGICAL_CPUS_ENV, 1))
    if logical_cpus > 1:
        # Before TensorFlow initializes its devices, which the first op does.
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * logical_cpus,
        )
    for spec_path in sys.argv[1:]:
        with open(spec_path) as f:
            _execute(json.load(f))
