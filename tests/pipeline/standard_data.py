"""The standard-TFX pipeline's test data and config, for the LocalDagRunner and the Kubeflow
tests: tf.Examples of a 4-float vector around one of 4 far-apart class centres and an int64
class label, some examples without one.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import tensorflow as tf

from tests.pipeline import standard_modules
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import standard_pipeline

NUM_EXAMPLES = 300
NUM_CLASSES = 4
UNLABELLED_EVERY = 25  # examples 0, 25, 50, ... have no label: IndexExamples rejects them
N_CLASSES_PER_BATCH = 3
N_SAMPLES_PER_CLASS = 4
# The gate's metric: what run_fn returns as its accuracy on the eval split, which ImportExampleGen
# held out; the classes are far apart, so a trained model clears the threshold.
BLESSING_METRIC = "eval_accuracy"
BLESSING_THRESHOLD = 0.8


def class_centers() -> np.ndarray:
    return 4.0 * np.eye(NUM_CLASSES, dtype=np.float32) + 10.0


def write_examples(directory: str) -> list[int | None]:
    """Writes the input TFRecord file; returns the label of each example (None: none)."""
    rng = np.random.default_rng(0)
    labels: list[int | None] = []
    os.makedirs(directory)
    with tf.io.TFRecordWriter(os.path.join(directory, "examples.tfrecord")) as writer:
        for i in range(NUM_EXAMPLES):
            label = i % NUM_CLASSES
            vector = class_centers()[label] + rng.normal(0.0, 0.3, NUM_CLASSES)
            feature = {
                standard_modules.VECTOR_KEY: tf.train.Feature(
                    float_list=tf.train.FloatList(value=vector.tolist())
                )
            }
            if i % UNLABELLED_EVERY:
                feature[standard_modules.LABEL_KEY] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[label])
                )
            labels.append(label if i % UNLABELLED_EVERY else None)
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return labels


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
