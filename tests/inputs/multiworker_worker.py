"""One worker process of the MultiWorkerMirroredStrategy tests (run by test_multiworker.py).

Reads TF_CONFIG, and for each sampler (dynamic pairs over arrays, class-balanced batches over
the audio run `run_dir`) restores the sampler state from `checkpoint_in` (unless empty),
resumes at global step `first_step`, trains a tiny model for `num_steps` global steps on the
sampler's batches distributed with `distribute_datasets_from_function`, and writes the
sampler state to `checkpoint_out`. What this worker's replicas consumed, step by step, and the
trained weights go to `output` as JSON.

    python -m tests.inputs.multiworker_worker OUTPUT RUN_DIR CHECKPOINT_IN CHECKPOINT_OUT \
        FIRST_STEP NUM_STEPS
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    SpecAugment,
)
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler

NUM_X, NUM_Y, GLOBAL_BATCH, SEED = 37, 11, 8, 5
CLASS_SIZES = [5, 3, 1, 0, 8, 6, 4, 7, 2, 9, 3, 5]
GLOBAL_CLASSES, N_P = 6, 2
FEATURES = AudioFeatureConfig(crop_seconds=0.1, num_mel_bins=20, spec_augment=SpecAugment(4, 3))


def valid_rows() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [
        rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist()
        for _ in range(NUM_X)
    ]


def pairs_sampler(context: tf.distribute.InputContext) -> DynamicPairsSampler:
    x = np.random.default_rng(1).random([NUM_X, 3]).astype(np.float32)
    y = np.random.default_rng(2).random([NUM_Y, 3]).astype(np.float32)
    return DynamicPairsSampler(
        x,
        y,
        valid_rows(),
        batch_size=context.get_per_replica_batch_size(GLOBAL_BATCH),
        strategy="least_sampled",
        seed=SEED,
        input_context=context,
    )


def class_sampler(run_dir: str, context: tf.distribute.InputContext) -> ClassBalancedSampler:
    return ClassBalancedSampler(
        run_dir,
        n_classes_per_batch=GLOBAL_CLASSES // context.num_replicas_in_sync,
        n_samples_per_class=N_P,
        seed=SEED,
        epoch_mode="samples",
        features=FEATURES,
        input_context=context,
    )


def sample_digests(features: np.ndarray) -> list[str]:
    """One digest per sample's features: bit-equal features give equal digests."""
    return [hashlib.sha1(np.ascontiguousarray(f).tobytes()).hexdigest()[:16] for f in features]


def _train(
    strategy: tf.distribute.Strategy,
    make_sampler: Callable[[tf.distribute.InputContext], EpochSampler],
    inputs: Callable[[dict], tuple[tf.Tensor, tf.Tensor]],
    report: Callable[[dict], dict],
    checkpoint_in: str,
    first_step: int,
    num_steps: int,
) -> tuple[EpochSampler, list[list[dict]], list]:
    made: list[EpochSampler] = []

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        sampler = make_sampler(context)
        if checkpoint_in:
            tf.train.Checkpoint(sampler=sampler.state).read(checkpoint_in).assert_consumed()
        made.append(sampler)
        steps_per_epoch = sampler.num_batches // context.num_replicas_in_sync
        replicas_here = context.num_replicas_in_sync // context.num_input_pipelines
        return sampler.dataset(initial_step=first_step % steps_per_epoch * replicas_here)

    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        weights = tf.Variable(tf.zeros([3, 1]))

    @tf.function
    def step(batch):
        def replica_step(b):
            features, target = inputs(b)
            loss = tf.reduce_mean(tf.square(features @ weights - target))
            grad = tf.gradients(loss, weights)[0]
            weights.assign_sub(0.1 * tf.distribute.get_replica_context().all_reduce("mean", grad))
            return b

        return strategy.run(replica_step, args=(batch,))

    consumed: list[list[dict]] = []
    while len(consumed) < num_steps:
        for batch in distributed:
            local = strategy.experimental_local_results(step(batch))  # a batch a local replica
            consumed.append([report({k: v.numpy() for k, v in b.items()}) for b in local])
            if len(consumed) == num_steps:
                break
    return made[0], consumed, weights.numpy().tolist()


def main(
    output: str, run_dir: str, checkpoint_in: str, checkpoint_out: str, first: int, steps: int
) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    results = {}

    def pairs_inputs(b):
        return b["x"], tf.reduce_sum(b["y"], axis=1, keepdims=True)

    def pairs_report(b):
        return {"x_index": b["x_index"].tolist(), "y_index": b["y_index"].tolist()}

    def class_inputs(b):
        pooled = tf.reduce_mean(b["features"], axis=1)[:, :3]
        return pooled, tf.cast(b["label"][:, None], tf.float32)

    def class_report(b):
        return {
            "index": b["index"].tolist(),
            "label": b["label"].tolist(),
            "features": sample_digests(b["features"]),
        }

    kinds = {
        "pairs": (pairs_sampler, pairs_inputs, pairs_report),
        "classes": (lambda c: class_sampler(run_dir, c), class_inputs, class_report),
    }
    for kind, (make, inputs, report) in kinds.items():
        restore = f"{checkpoint_in}-{kind}" if checkpoint_in else ""
        sampler, consumed, weights = _train(strategy, make, inputs, report, restore, first, steps)
        # Every worker's state is the same; the chief's is the checkpoint the next phase reads.
        worker = strategy.cluster_resolver.task_id or 0
        suffix = "" if worker == 0 else f".worker{worker}"
        tf.train.Checkpoint(sampler=sampler.state).write(f"{checkpoint_out}-{kind}{suffix}")
        results[kind] = {"steps": consumed, "weights": weights}
    with open(output, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:5], int(sys.argv[5]), int(sys.argv[6]))
