"""What the trainer component hands a user module's `run_fn`."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf


@dataclasses.dataclass
class FnArgs:
    """Arguments of `run_fn(fn_args) -> dict[str, float]` (the final metrics).

    Attributes:
      train_dataset: batches re-sampled each time the dataset is iterated (each epoch), with
        known cardinality (the steps of one epoch). Dynamic pairs: dicts
        ``{"x": float32 [B, H, W, C] in [0, 1], "y": same, "x_index": int64 [B],
        "y_index": int64 [B]}``. Class-balanced: dicts ``{"features": float32 [B, T, n_mels]
        log-mel, "lengths": int32 [B] valid frames, "label": int64 [B], "index": int64 [B]}``,
        B = n_classes_per_batch * n_samples_per_class, as n_c groups of n_p consecutive samples
        of one label.
      eval_dataset: held-out batches (class-balanced: the same keys over the eval record set,
        plain batches of whole utterances, labels in that set's own vocabulary), or None.
      callbacks: Keras callbacks the component wants in `fit` (pair coverage, ...).
      num_epochs: epochs to train.
      serving_model_dir: where to export the model (the Model artifact's serving folder).
      model_run_dir: logs and TensorBoard (the ModelRun artifact).
      custom_config: the pipeline's `custom_config` plus the input settings
        (`batch_size` or `n_classes_per_batch` / `n_samples_per_class`, `seed`, ...).
    """

    train_dataset: tf.data.Dataset
    eval_dataset: tf.data.Dataset | None
    callbacks: list
    num_epochs: int
    serving_model_dir: str
    model_run_dir: str
    custom_config: dict[str, Any]
