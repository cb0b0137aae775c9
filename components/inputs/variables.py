"""The variables the samplers hold their indexes and records in, outside any strategy scope.

Its own module so that the record stores, the readers, the plans and the samplers can all use it
without importing one another.
"""

from __future__ import annotations

import tensorflow as tf


def index_variable(values, dtype: tf.DType | None = None, name: str | None = None) -> tf.Variable:
    """Holds a large constant (an index, serialized records) for use inside tf.data functions.

    A tf.data function captures a variable by handle, but copies a captured constant into the
    dataset graph every time an iterator is created, that is every epoch (and a graph holds at
    most 2 GB). The variable is not trainable and, held outside a `tf.Module`, not checkpointed.

    Args:
      values: the initial value: an array or tensor of any shape.
      dtype: its dtype (default: inferred from `values`).
      name: the variable's name.

    Returns:
      The `tf.Variable`, of the shape of `values`.

    Raises:
      ValueError: called inside a `tf.distribute` strategy scope.
    """
    require_no_strategy_scope("a sampler index")
    return tf.Variable(values, dtype=dtype, trainable=False, name=name, shape=None)


def require_no_strategy_scope(what: str) -> None:
    """Refuses to create sampler variables inside a `tf.distribute` strategy scope.

    Sampler variables are per input pipeline; a strategy scope would make them distributed
    variables, which tf.data functions cannot update.

    Args:
      what: what is being created, named in the error ("a sampler state").

    Raises:
      ValueError: in a strategy's cross-replica context (inside `strategy.scope()`).
    """
    if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
        raise ValueError(
            f"create {what} outside `strategy.scope()`: build the dataset in the function given "
            "to `strategy.distribute_datasets_from_function`, and create the sampler state "
            "before entering the scope"
        )
