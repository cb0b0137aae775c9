"""The user modules of the standard-TFX pipeline test: Transform's `preprocessing_fn` and the
trainer's `run_fn`, for raw examples of any input format: the 4-float vector is one feature
`vector` (TFRecord, Parquet) or a CSV column per component, `vector_0` ... `vector_3`.

`run_fn` records the label make-up of every batch of one epoch in
`<model_run>/batch_labels.json` before it trains, so the test can check the `n_c x n_p`
contract on what the trainer was really served; it trains a softmax classifier on the
z-scored vector and exports it with `export_transform_model`: serialized raw Examples in
(Transform's graph in front of the model), and the `transform_features` signature TFMA uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from tfx_dynamic_inputs.models.transform_serving import export_transform_model

VECTOR_KEY = "vector"
# A CSV cell holds one value: the vector's components as columns.
VECTOR_COLUMNS = tuple(f"{VECTOR_KEY}_{i}" for i in range(4))
LABEL_KEY = "label"
TRANSFORMED_VECTOR_KEY = "vector_xf"
BATCH_LABELS_FILE = "batch_labels.json"
# The serving signature's output (the model returns one tensor).
PROBABILITIES_KEY = "probabilities"


def raw_vector(features: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """The `[batch, 4]` vector of parsed raw examples: `vector`, or the CSV columns side by side
    (each `[batch]` or `[batch, 1]`, as the inferred schema's shape has it)."""
    if VECTOR_KEY in features:
        return features[VECTOR_KEY]
    return tf.concat([tf.reshape(features[column], [-1, 1]) for column in VECTOR_COLUMNS], axis=1)


def preprocessing_fn(inputs: dict) -> dict:
    """The vector scaled to z-scores over the training split; the label passed through (a
    sparse tensor: some examples have none, and IndexExamples rejects those)."""
    return {
        TRANSFORMED_VECTOR_KEY: tft.scale_to_z_score(raw_vector(inputs)),
        LABEL_KEY: inputs[LABEL_KEY],
    }


def run_fn(fn_args) -> dict[str, float]:
    n_c = fn_args.custom_config["n_classes_per_batch"]
    n_p = fn_args.custom_config["n_samples_per_class"]
    batches = [batch["label"].numpy().tolist() for batch in fn_args.train_dataset]
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, BATCH_LABELS_FILE), "w") as f:
        json.dump(batches, f)
    per_class = [np.unique(labels, return_counts=True)[1] for labels in batches]

    # Named after the transformed feature: the export feeds the model by its input names.
    vector = keras.Input(
        shape=(fn_args.train_dataset.element_spec[TRANSFORMED_VECTOR_KEY].shape[1],),
        name=TRANSFORMED_VECTOR_KEY,
    )
    probabilities = keras.layers.Dense(fn_args.custom_config["num_classes"], activation="softmax")(
        vector
    )
    model = keras.Model(vector, probabilities)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    pairs = fn_args.train_dataset.map(lambda b: (b[TRANSFORMED_VECTOR_KEY], b["label"]))
    history = model.fit(
        pairs, epochs=fn_args.num_epochs, initial_epoch=fn_args.initial_epoch, verbose=0
    )
    eval_pairs = fn_args.eval_dataset.map(lambda b: (b[TRANSFORMED_VECTOR_KEY], b["label"]))
    correct = total = 0
    for features, labels in eval_pairs:
        predicted = np.argmax(model(features).numpy(), axis=1)
        correct += int(np.sum(predicted == labels.numpy()))
        total += len(predicted)

    export_transform_model(
        model,
        fn_args.tf_transform_output,
        fn_args.serving_model_dir,
        label_feature=LABEL_KEY,
        output_key=PROBABILITIES_KEY,
    )
    return {
        "loss": history.history["loss"][-1],
        "eval_accuracy": correct / total,
        "batches_checked": len(batches),
        "min_classes_per_batch": min(len(counts) for counts in per_class),
        "max_classes_per_batch": max(len(counts) for counts in per_class),
        "min_samples_per_class": min(int(counts.min()) for counts in per_class),
        "max_samples_per_class": max(int(counts.max()) for counts in per_class),
        "batch_size": n_c * n_p,
        "schema_file_found": float(tf.io.gfile.exists(fn_args.schema_path)),
    }
