"""The standard-TFX pipeline's test data and config, for the LocalDagRunner and the Kubeflow
tests: examples of a 4-float vector around one of 4 far-apart class centres and an int64 class
label, some examples without one, as TFRecord, CSV or Parquet files.
"""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

from tests.pipeline import standard_modules
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import example_gen, standard_pipeline

NUM_EXAMPLES = 300
NUM_CLASSES = 4
UNLABELLED_EVERY = 25  # examples 0, 25, 50, ... have no label: IndexExamples rejects them
N_CLASSES_PER_BATCH = 3
N_SAMPLES_PER_CLASS = 4
# The gate's metric: what run_fn returns as its accuracy on the eval split, which ExampleGen held
# out; the classes are far apart, so a trained model clears the threshold.
BLESSING_METRIC = "eval_accuracy"
BLESSING_THRESHOLD = 0.8


def class_centers() -> np.ndarray:
    return 4.0 * np.eye(NUM_CLASSES, dtype=np.float32) + 10.0


def raw_example(vector: np.ndarray, label: int | None, input_format: str) -> tf.train.Example:
    """One raw example with `input_format`'s features (what serving takes): the vector as one
    feature, or (CSV) a feature per column; an int64 label, or (`label` None) none, which in CSV
    is a label of no values (an empty cell)."""
    if input_format == example_gen.CSV:
        feature = {
            column: tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            for column, value in zip(standard_modules.VECTOR_COLUMNS, vector.tolist(), strict=True)
        }
    else:
        feature = {
            standard_modules.VECTOR_KEY: tf.train.Feature(
                float_list=tf.train.FloatList(value=vector.tolist())
            )
        }
    if label is not None or input_format == example_gen.CSV:
        feature[standard_modules.LABEL_KEY] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=[] if label is None else [label])
        )
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _rows() -> list[tuple[np.ndarray, int | None]]:
    """The vector and the label (None: none) of each input example."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(NUM_EXAMPLES):
        label = i % NUM_CLASSES
        vector = class_centers()[label] + rng.normal(0.0, 0.3, NUM_CLASSES)
        rows.append((vector, label if i % UNLABELLED_EVERY else None))
    return rows


def write_examples(directory: str, input_format: str = example_gen.TFRECORD) -> list[int | None]:
    """Writes the input file in `input_format`; returns the label of each example (None: none).

    TFRecord: tf.Examples (`raw_example`). CSV: a header line, then a row per example, its
    vector in `VECTOR_COLUMNS` and an empty label cell where it has none. Parquet: a list<float>
    `vector` column and an int64 `label` column, null where there is none.
    """
    rows = _rows()
    os.makedirs(directory)
    if input_format == example_gen.CSV:
        with open(os.path.join(directory, "examples.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*standard_modules.VECTOR_COLUMNS, standard_modules.LABEL_KEY])
            for vector, label in rows:
                writer.writerow([*vector.tolist(), "" if label is None else label])
    elif input_format == example_gen.PARQUET:
        table = pa.table(
            {
                standard_modules.VECTOR_KEY: pa.array(
                    [vector.tolist() for vector, _ in rows], pa.list_(pa.float32())
                ),
                standard_modules.LABEL_KEY: pa.array([label for _, label in rows], pa.int64()),
            }
        )
        pq.write_table(table, os.path.join(directory, "examples.parquet"))
    else:
        with tf.io.TFRecordWriter(os.path.join(directory, "examples.tfrecord")) as writer:
            for vector, label in rows:
                writer.write(raw_example(vector, label, input_format).SerializeToString())
    return [label for _, label in rows]


def config(input_base: str, **overrides: Any) -> standard_pipeline.StandardConfig:
    """The pipeline over the examples at `input_base`, with this module's trainer and gate
    settings; `overrides` replace fields."""
    return standard_pipeline.StandardConfig(
        **{
            "input_base": input_base,
            "preprocessing_fn": f"{standard_modules.__name__}.preprocessing_fn",
            "trainer_module": standard_modules.__name__,
            "label_feature": standard_modules.LABEL_KEY,
            "n_classes_per_batch": N_CLASSES_PER_BATCH,
            "n_samples_per_class": N_SAMPLES_PER_CLASS,
            "num_epochs": 3,
            "num_shards": 2,
            "blessing_metric": BLESSING_METRIC,
            "blessing_direction": keys.HIGHER_IS_BETTER,
            "blessing_threshold": BLESSING_THRESHOLD,
            **overrides,
        }
    )
