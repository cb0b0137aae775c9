"""Elastic resume in one process: a checkpoint taken with W workers x R replicas resumes with
W' x R' at the same global batch, and from it on the global stream of batches (each step's
batches of all replicas, in replica order) is, element by element, an uninterrupted run's.

Workers are `tf.distribute.InputContext`s of the input pipelines a strategy would make; the
multi-process strategies and the tf.data service are `test_multiworker.py` and
`test_data_service.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    PairCoverage,
    SpecAugment,
)
from tfx_dynamic_inputs.inputs.epoch_state import StateRunError

NUM_X, NUM_Y, GLOBAL_PAIRS = 37, 11, 12
CLASS_SIZES = [5, 3, 1, 0, 8, 6, 4, 7, 2, 9, 3, 5]  # 11 usable classes
GLOBAL_CLASSES, N_P = 6, 2
# Crops and masks draw per sample: the features show whether a sample draws the same after the
# global batch is split another way.
FEATURES = AudioFeatureConfig(crop_seconds=0.1, num_mel_bins=20, spec_augment=SpecAugment(4, 3))
# (workers, replicas per worker) before and after the resume; the global batch is kept.
TOPOLOGIES = [((2, 1), (1, 1)), ((1, 1), (2, 1)), ((1, 2), (3, 1)), ((3, 2), (1, 3))]


def _valid_rows() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [
        rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist()
        for _ in range(NUM_X)
    ]


def _contexts(workers: int, replicas: int) -> list[tf.distribute.InputContext]:
    return [
        tf.distribute.InputContext(
            num_input_pipelines=workers,
            input_pipeline_id=worker,
            num_replicas_in_sync=workers * replicas,
        )
        for worker in range(workers)
    ]


def _pairs_sampler(context, strategy: str) -> DynamicPairsSampler:
    x = np.random.default_rng(1).random([NUM_X, 3]).astype(np.float32)
    y = np.random.default_rng(2).random([NUM_Y, 3]).astype(np.float32)
    return DynamicPairsSampler(
        x,
        y,
        _valid_rows(),
        batch_size=context.get_per_replica_batch_size(GLOBAL_PAIRS),
        strategy=strategy,
        seed=5,
        input_context=context,
    )


def _class_sampler(run_dir: str, context, global_classes: int = GLOBAL_CLASSES):
    replicas = context.num_replicas_in_sync
    return ClassBalancedSampler(
        run_dir,
        n_classes_per_batch=global_classes // replicas,
        n_samples_per_class=N_P,
        seed=4,
        features=FEATURES,
        input_context=context,
    )


def _global_stream(samplers, replicas: int, first_step: int, num_steps: int) -> list[dict]:
    """`num_steps` global batches from `first_step` of the epoch in progress on: each worker's
    dataset resumed at its batch `first_step * replicas`, then whole epochs; step `s` of an
    epoch is rows `[s * N, (s + 1) * N)` of its plan, row `s * N + i` on worker `i % W`."""
    workers = len(samplers)
    per_worker = []
    for sampler in samplers:
        elements, initial_step = [], first_step * replicas
        while len(elements) < num_steps * replicas:
            dataset = sampler.dataset(initial_step=initial_step)
            elements += [{k: v.numpy() for k, v in b.items()} for b in dataset]
            initial_step = 0
        per_worker.append(elements)
    stream = []
    for step in range(num_steps):
        parts = [
            per_worker[i % workers][step * replicas + i // workers]
            for i in range(workers * replicas)
        ]
        stream.append({key: np.concatenate([p[key] for p in parts]) for key in parts[0]})
    return stream


def _interrupted_and_resumed(make, before, after, stop_step, tmp_path, num_steps):
    """The stream of an uninterrupted run on `before`, and the one that a run stopped after
    `stop_step` global steps on `before` and resumed from its checkpoint on `after` yields."""
    (workers, replicas), (new_workers, new_replicas) = before, after
    uninterrupted = _global_stream(
        [make(c) for c in _contexts(workers, replicas)], replicas, 0, stop_step + num_steps
    )
    stopped = [make(c) for c in _contexts(workers, replicas)]
    _global_stream(stopped, replicas, 0, stop_step)
    path = tf.train.Checkpoint(sampler=stopped[0].state).write(str(tmp_path / "ckpt"))
    resumed = [make(c) for c in _contexts(new_workers, new_replicas)]
    for sampler in resumed:
        tf.train.Checkpoint(sampler=sampler.state).read(path).assert_consumed()
    steps_per_epoch = stopped[0].num_batches // (workers * replicas)
    step_in_epoch = stop_step % steps_per_epoch
    return uninterrupted[stop_step:], _global_stream(
        resumed, new_replicas, step_in_epoch, num_steps
    )


@pytest.fixture(scope="module")
def audio_run(tmp_path_factory) -> str:
    run_dir = str(tmp_path_factory.mktemp("elastic_audio"))
    write_audio_run(run_dir, CLASS_SIZES, seed=3)
    return run_dir


@pytest.mark.parametrize(
    "before, after, strategy",
    [
        (*topology, strategy)
        for topology, strategy in zip(TOPOLOGIES, ["uniform", "least_sampled"] * 2, strict=True)
    ],
)
def test_pairs_resume_on_another_replica_count_continue_the_global_stream(
    before, after, strategy, tmp_path
):
    # 37 x in global batches of 12: 4 steps an epoch; stop in epoch 0, run into epoch 2.
    expected, got = _interrupted_and_resumed(
        lambda c: _pairs_sampler(c, strategy), before, after, 3, tmp_path, num_steps=6
    )
    assert len(got) == len(expected) == 6
    for a, b in zip(got, expected, strict=True):
        assert a["x_index"].shape == (GLOBAL_PAIRS,)
        for key in ("x_index", "y_index", "x", "y"):
            np.testing.assert_array_equal(a[key], b[key])


def test_pair_coverage_of_a_resumed_run_is_the_uninterrupted_one(tmp_path):
    def covered(stream, coverage):
        for batch in stream:
            coverage.update(batch["x_index"], batch["y_index"])
        return coverage.result()

    expected, got = _interrupted_and_resumed(
        lambda c: _pairs_sampler(c, "least_sampled"), (2, 1), (1, 3), 5, tmp_path, num_steps=6
    )
    before = PairCoverage(_valid_rows(), num_y=NUM_Y)
    after = PairCoverage(_valid_rows(), num_y=NUM_Y)
    assert covered(got, after) == covered(expected, before)


# Replicas per worker on both sides; workers x 1 replica is test_multiworker's, in processes.
@pytest.mark.parametrize("before, after", TOPOLOGIES[2:])
def test_class_balanced_resume_on_another_replica_count_continue_the_global_stream(
    before, after, audio_run, tmp_path
):
    probe = _class_sampler(audio_run, _contexts(*before)[0])
    assert probe.plan.elastic
    steps_per_epoch = probe.num_batches // (before[0] * before[1])
    expected, got = _interrupted_and_resumed(
        lambda c: _class_sampler(audio_run, c),
        before,
        after,
        steps_per_epoch - 1,
        tmp_path,
        num_steps=steps_per_epoch + 1,
    )
    assert len(got) == len(expected) == steps_per_epoch + 1
    for a, b in zip(got, expected, strict=True):
        labels = a["label"].reshape(GLOBAL_CLASSES, N_P)[:, 0]
        assert len(set(labels.tolist())) == GLOBAL_CLASSES, "a class on two replicas in a step"
        for key in ("index", "label", "features", "lengths"):
            np.testing.assert_array_equal(a[key], b[key])


def test_a_checkpoint_of_another_global_batch_is_refused_naming_both(audio_run, tmp_path):
    two_replicas = _class_sampler(audio_run, _contexts(1, 2)[0])
    next(iter(two_replicas.dataset()))
    path = tf.train.Checkpoint(sampler=two_replicas.state).write(str(tmp_path / "ckpt"))
    wider = _class_sampler(audio_run, _contexts(1, 2)[0], global_classes=8)
    tf.train.Checkpoint(sampler=wider.state).read(path).assert_consumed()
    with pytest.raises(StateRunError) as refused:
        wider.dataset(initial_step=1)
    message = str(refused.value)
    assert "\n" not in message
    assert "written for global batches of 6 classes x 2 samples" in message
    assert "this sampler plans global batches of 8 classes x 2 samples" in message

    pairs = _pairs_sampler(_contexts(2, 1)[0], "uniform")
    next(iter(pairs.dataset()))
    path = tf.train.Checkpoint(sampler=pairs.state).write(str(tmp_path / "pairs"))
    # The same per-replica batch on half the replicas: 6 pairs a step.
    narrower = DynamicPairsSampler(
        np.zeros([NUM_X, 3], np.float32),
        np.zeros([NUM_Y, 3], np.float32),
        _valid_rows(),
        batch_size=GLOBAL_PAIRS // 2,
        seed=5,
    )
    tf.train.Checkpoint(sampler=narrower.state).read(path).assert_consumed()
    with pytest.raises(StateRunError, match="global batches of 12 pairs .* global batches of 6"):
        narrower.dataset()


def test_a_plan_with_more_replica_classes_than_classes_is_not_elastic(audio_run, tmp_path):
    """11 usable classes cannot fill global batches of 12: each replica's batch is its own unit,
    the stream depends on the replica count, and a resume on another count is refused."""
    four = _class_sampler(audio_run, _contexts(2, 2)[0], global_classes=12)
    assert not four.plan.elastic and "on 4 replicas" in four.stream
    next(iter(four.dataset()))
    path = tf.train.Checkpoint(sampler=four.state).write(str(tmp_path / "ckpt"))
    two = _class_sampler(audio_run, _contexts(1, 2)[0], global_classes=12)
    assert not two.plan.elastic
    tf.train.Checkpoint(sampler=two.state).read(path).assert_consumed()
    with pytest.raises(StateRunError, match="on 4 replicas .* on 2 replicas"):
        two.dataset(initial_step=1)
