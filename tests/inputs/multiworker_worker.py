"""One worker of the 2-process MultiWorkerMirroredStrategy test (run by test_multiworker.py).

Reads TF_CONFIG, trains a tiny model for two epochs on `dynamic_pairs` distributed with
`distribute_datasets_from_function`, and writes the pairs this worker consumed, per epoch, as
JSON to argv[1].
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import dynamic_pairs

NUM_X, NUM_Y, GLOBAL_BATCH, SEED, EPOCHS = 37, 11, 8, 5, 2


def valid_rows() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [
        rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist()
        for _ in range(NUM_X)
    ]


def main(output_path: str) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rows = valid_rows()
    x = np.random.default_rng(1).random([NUM_X, 3]).astype(np.float32)
    y = np.random.default_rng(2).random([NUM_Y, 3]).astype(np.float32)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return dynamic_pairs(
            x,
            y,
            rows,
            batch_size=context.get_per_replica_batch_size(GLOBAL_BATCH),
            strategy="least_sampled",
            seed=SEED,
            input_context=context,
        )

    with strategy.scope():
        weights = tf.Variable(tf.zeros([3, 3]))
    distributed = strategy.distribute_datasets_from_function(dataset_fn)

    @tf.function
    def step(batch):
        def replica_step(b):
            loss = tf.reduce_mean(tf.square(b["x"] @ weights - b["y"]))
            grad = tf.gradients(loss, weights)[0]
            weights.assign_sub(0.1 * tf.distribute.get_replica_context().all_reduce("mean", grad))
            return b["x_index"], b["y_index"]

        return strategy.run(replica_step, args=(batch,))

    consumed = []
    for _ in range(EPOCHS):
        pairs = []
        for batch in distributed:
            xs, ys = step(batch)
            for x_part, y_part in zip(
                strategy.experimental_local_results(xs),
                strategy.experimental_local_results(ys),
                strict=True,
            ):
                pairs.append([x_part.numpy().tolist(), y_part.numpy().tolist()])
        consumed.append(pairs)
    with open(output_path, "w") as f:
        json.dump({"pairs": consumed, "weights": weights.numpy().tolist()}, f)


if __name__ == "__main__":
    main(sys.argv[1])
