"""The loss a custom `train_step` takes gradients of, under a `tf.distribute` strategy.

Keras' optimizers sum the replicas' gradients (`apply_gradients` in a replica context), so a
`train_step` that takes its own gradients scales its loss by the replicas in sync, as Keras'
`compute_loss` does for compiled losses; with one replica the loss is unchanged.
"""

from __future__ import annotations

import tensorflow as tf


def replica_loss(loss: tf.Tensor) -> tf.Tensor:
    """`loss` divided by the replicas in sync: its gradients, summed over them, are the mean.

    Call it inside the `GradientTape`, on the loss of this replica's slice of the batch.

    Args:
        loss: this replica's scalar loss.

    Returns:
        `loss / num_replicas_in_sync`.

    Example:

        with tf.GradientTape() as tape:
            loss = replica_loss(compute_loss(batch))
    """
    replicas = tf.distribute.get_replica_context().num_replicas_in_sync
    return loss / tf.cast(replicas, loss.dtype)
