"""A user module for the trainer component's tests: a small real Keras model, plus a record of
what `run_fn` was given so the tests can check the `FnArgs` contract."""

from __future__ import annotations

import keras
import tensorflow as tf

# The last FnArgs `run_fn` received (the tests run the executor in this process).
received: dict = {}


def run_fn(fn_args) -> dict[str, float]:
    received["fn_args"] = fn_args
    spec = fn_args.train_dataset.element_spec
    key = "x" if "x" in spec else "features"
    inputs = keras.Input(shape=spec[key].shape[1:])
    outputs = keras.layers.Dense(1)(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    # Predict the mean of the input: a real, cheap regression target.
    pairs = fn_args.train_dataset.map(
        lambda batch: (
            batch[key],
            tf.reduce_mean(batch[key], axis=list(range(1, len(spec[key].shape)))),
        )
    )
    history = model.fit(
        pairs,
        epochs=fn_args.num_epochs,
        initial_epoch=fn_args.initial_epoch,
        callbacks=fn_args.callbacks,
        verbose=0,
    )
    model.export(fn_args.serving_model_dir, verbose=False)
    return {"loss": history.history["loss"][-1], "epochs_run": len(history.history["loss"])}
