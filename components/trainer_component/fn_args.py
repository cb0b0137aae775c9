"""What the trainer component hands a user module's `run_fn`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import tensorflow as tf

if TYPE_CHECKING:
    from tensorflow_transform import TFTransformOutput


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
        of one label. Class-balanced records parsed with a feature spec (input options
        `feature_spec` / `apply_transform`, see `training_inputs.example_parser`): dicts of the
        parsed (or transformed) features, `label` and `index`, in the same groups.
      eval_dataset: held-out batches (class-balanced: the same keys over the eval record set,
        plain batches of whole utterances or records, labels in that set's own vocabulary), or
        None.
      callbacks: Keras callbacks the component wants in `fit` (pair coverage, the training
        checkpoints, ...).
      num_epochs: epochs to train.
      serving_model_dir: where to export the model (the Model artifact's serving folder).
      model_run_dir: logs and TensorBoard (the ModelRun artifact).
      custom_config: the pipeline's `custom_config` plus the input settings
        (`batch_size` or `n_classes_per_batch` / `n_samples_per_class` / `num_classes`, `seed`,
        ...).
      initial_epoch: the epoch training starts at: 0, or where a retried execution resumes
        from its checkpoint (`checkpoints`); pass it to `fit(initial_epoch=...)`.
        `train_dataset`'s first iteration is then the rest of that epoch.
      trained_history: the per-epoch logs (`History.history` layout) of the epochs trained
        before `initial_epoch` by earlier attempts; empty on a fresh start.
      schema_path: the schema file of the `schema` input (as the standard Trainer's), or None.
      tf_transform_output: Transform's output of the `transform_graph` input (its feature specs,
        `transform_features_layer()` for the serving signature), or None.
      strategy: the `tf.distribute.Strategy` of the trainer's `distribution` (the default
        strategy for ``"none"``): build and compile the model in `strategy.scope()`; `fit` splits
        each global batch of `train_dataset` over its replicas (`custom_config["num_replicas"]`).
        A custom `train_step` divides its loss by the replicas before taking gradients (Keras
        sums them over the replicas).
    """

    train_dataset: tf.data.Dataset
    eval_dataset: tf.data.Dataset | None
    callbacks: list
    num_epochs: int
    serving_model_dir: str
    model_run_dir: str
    custom_config: dict[str, Any]
    initial_epoch: int = 0
    trained_history: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    schema_path: str | None = None
    tf_transform_output: TFTransformOutput | None = None
    strategy: tf.distribute.Strategy = dataclasses.field(default_factory=tf.distribute.get_strategy)
