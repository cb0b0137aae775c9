"""How a trainer execution spreads its steps over this machine's replicas, and why a retry may
use another number of them.

A trainer's `distribution` parameter is ``"none"`` (one replica: the default strategy) or
``"mirrored"``: `tf.distribute.MirroredStrategy` over every GPU of the machine, or over its
logical CPU devices where it has no GPU (one, unless the process configured more before
TensorFlow initialized). `run_fn` builds its model in `fn_args.strategy.scope()`; Keras' `fit`
then splits each batch of `fn_args.train_dataset` over the replicas.

The samplers plan and read *global* batches: the batch geometry (`batch_size`,
`n_classes_per_batch`) is the global batch's, whatever the replica count, and each replica
trains on its consecutive slice of `batch_size / R` rows (class-balanced: `n_c / R` whole
classes of `n_p` samples, since a batch holds its classes' samples consecutively). The stream
of global batches, the checkpointed sampler state and the step count do not depend on `R`, so
an execution retried on a machine with another number of GPUs (a Kubeflow retry after a
preemption) resumes the same stream, the same batches to the same steps.

Example:

    strategy = training_strategy("mirrored")
    check_split(8, strategy.num_replicas_in_sync, "n_classes_per_batch")
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

from tfx_dynamic_inputs.inputs.arguments import choice
from tfx_dynamic_inputs.inputs.graph_functions import as_written

NO_DISTRIBUTION = "none"
MIRRORED = "mirrored"
DISTRIBUTIONS = (NO_DISTRIBUTION, MIRRORED)


def checked_distribution(value: object) -> str:
    """`value` when it names a distribution (None: ``"none"``).

    Args:
      value: the trainer's `distribution` parameter.

    Returns:
      One of `DISTRIBUTIONS`.

    Raises:
      ValueError: another value, naming the allowed ones (and the closest).
    """
    return NO_DISTRIBUTION if value is None else choice("distribution", value, DISTRIBUTIONS)


def training_strategy(distribution: str) -> tf.distribute.Strategy:
    """The strategy `run_fn` builds its model under.

    Args:
      distribution: one of `DISTRIBUTIONS`.

    Returns:
      ``"none"``: the default strategy (one replica); ``"mirrored"``: a `MirroredStrategy`
      over the GPUs, or over the logical CPU devices where there is no GPU.

    Raises:
      ValueError: an unknown `distribution`.
    """
    if checked_distribution(distribution) == NO_DISTRIBUTION:
        return tf.distribute.get_strategy()
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([device.name for device in devices])


def check_split(global_count: int, num_replicas: int, name: str) -> int:
    """The replica's share of a global batch count, which must split evenly.

    Args:
      global_count: the global batch's rows (`batch_size`) or classes (`n_classes_per_batch`).
      num_replicas: the strategy's replicas in sync.
      name: the parameter, for the error.

    Returns:
      `global_count // num_replicas`.

    Raises:
      ValueError: `global_count` is not a multiple of `num_replicas`, naming both.
    """
    if global_count % num_replicas:
        raise ValueError(
            f"{name}={global_count} does not split over the {num_replicas} replicas of this "
            f"machine: give a multiple of {num_replicas}, or distribution='none'"
        )
    return global_count // num_replicas


def with_batch_size(dataset: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    """`dataset` with every element's leading dimension fixed at `batch_size`, statically.

    `tf.distribute` splits a batch over the replicas only where it knows the batch size from the
    element spec; the samplers' batches have it at run time only.

    Args:
      dataset: batches (dicts of tensors with the batch as their leading dimension).
      batch_size: the global batch's rows.

    Returns:
      The same elements, checked to have `batch_size` rows; the cardinality is kept.

    Raises:
      ValueError: an element holds a sparse or ragged tensor (named), which the replicas
        cannot split by rows here.
    """
    spec = dataset.element_spec
    named = spec.items() if isinstance(spec, Mapping) else enumerate(tf.nest.flatten(spec))
    for name, value in named:
        # Composite specs (sparse, ragged) are leaves here, as they are to `ensure_shape`.
        for leaf in tf.nest.flatten(value):
            if not isinstance(leaf, tf.TensorSpec):
                raise ValueError(
                    f"batch key {name!r} is a {type(leaf).__name__}: a batch split over "
                    "replicas needs dense tensors; densify it in the feature spec, or use "
                    "distribution='none'"
                )

    def fixed(batch):
        return tf.nest.map_structure(
            lambda tensor: tf.ensure_shape(tensor, [batch_size, *tensor.shape[1:]]), batch
        )

    return dataset.map(as_written(fixed))
