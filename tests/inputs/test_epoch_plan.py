"""Epoch plans: stateless randomness, worker slices, re-planning per iteration, resume."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs.epoch_plan import epoch_dataset, epoch_seed
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.worker_slices import worker_slice

FEW = settings(max_examples=15, deadline=None)


def test_epoch_seeds_are_distinct_and_reproducible():
    seeds = {
        tuple(epoch_seed(seed, epoch, salt).numpy().tolist())
        for seed in range(4)
        for epoch in range(4)
        for salt in range(3)
    }
    assert len(seeds) == 4 * 4 * 3
    assert epoch_seed(7, 3, 1).numpy().tolist() == epoch_seed(7, 3, 1).numpy().tolist()


@FEW
@given(
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(-1, 2**62),
    salt=st.integers(0, 3),
)
def test_an_epoch_seed_is_the_same_for_a_python_epoch_and_a_tensor_one(seed, epoch, salt):
    """A Python epoch makes a constant, a tensor one folds in the graph: the same stream, eagerly
    and traced, and the two folds of `stateless_fold_in` it is defined as."""
    folded = tf.constant([seed, 0], tf.int64)
    for word in (salt, epoch):
        folded = tf.random.experimental.stateless_fold_in(folded, tf.constant(word, tf.int64))
    traced = tf.function(lambda e: epoch_seed(seed, e, salt))
    for got in (
        epoch_seed(seed, epoch, salt),
        epoch_seed(seed, tf.constant(epoch, tf.int64), salt),
        traced(tf.constant(epoch, tf.int64)),
    ):
        assert got.numpy().tolist() == folded.numpy().tolist()


def test_worker_slice_from_context_or_arguments():
    context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2)
    assert worker_slice(context) == (2, 3)
    assert worker_slice(worker_index=1, num_workers=4) == (1, 4)
    assert worker_slice() == (0, 1)
    with pytest.raises(ValueError, match="together"):
        worker_slice(worker_index=1)
    with pytest.raises(ValueError, match="worker_index < num_workers"):
        worker_slice(worker_index=4, num_workers=4)
    with pytest.raises(ValueError, match="not both"):
        worker_slice(context, worker_index=0, num_workers=1)


def _plan(num_batches: int, width: int, seed: int = 0):
    """A plan whose rows identify (epoch, batch): a permutation of the epoch's ids."""

    def plan_fn(epoch):
        ids = tf.random.experimental.stateless_shuffle(
            tf.range(num_batches * width, dtype=tf.int64), epoch_seed(seed, epoch)
        )
        return {"ids": tf.reshape(ids + 1000 * epoch, [num_batches, width])}

    return plan_fn


FORMS = ("whole_epochs", "batches_alone")


def _plans(form: str, num_batches: int, width: int, seed: int = 0) -> dict:
    """`epoch_dataset`'s plan argument in either form, of the same plan: `plan_fn`, or
    `batch_plan_fn` returning the rows asked for."""
    plan_fn = _plan(num_batches, width, seed)
    if form == "whole_epochs":
        return {"plan_fn": plan_fn}

    def batch_plan_fn(epoch, numbers):
        return {"ids": tf.gather(plan_fn(epoch)["ids"], numbers)}

    return {"batch_plan_fn": batch_plan_fn}


def _rows(dataset) -> list[list[int]]:
    return [element["ids"].tolist() for element in dataset.as_numpy_iterator()]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_each_iteration_is_the_next_epoch(num_workers, form):
    num_batches, width = 6, 4
    for worker in range(num_workers):
        state = EpochState()
        ds = epoch_dataset(
            **_plans(form, num_batches, width),
            num_batches=num_batches,
            state=state,
            num_workers=num_workers,
            worker_index=worker,
        )
        assert ds.cardinality().numpy() == num_batches // num_workers
        assert ds.element_spec == {"ids": tf.TensorSpec([width], tf.int64)}
        for epoch in range(3):
            expected = _plan(num_batches, width)(epoch)["ids"].numpy()[worker::num_workers]
            assert _rows(ds) == expected.tolist()
            assert state.epoch.numpy() == epoch + 1


@FEW
@given(
    num_workers=st.integers(1, 4),
    batches_per_worker=st.integers(1, 5),
    seed=st.integers(0, 1000),
    form=st.sampled_from(FORMS),
)
def test_worker_slices_are_disjoint_and_cover_the_plan(num_workers, batches_per_worker, seed, form):
    num_batches, width = num_workers * batches_per_worker, 3
    per_worker = [
        _rows(
            epoch_dataset(
                **_plans(form, num_batches, width, seed),
                num_batches=num_batches,
                state=EpochState(),
                num_workers=num_workers,
                worker_index=w,
            )
        )
        for w in range(num_workers)
    ]
    ids = [i for rows in per_worker for row in rows for i in row]
    assert len(ids) == len(set(ids)) == num_batches * width
    assert sorted(ids) == list(range(num_batches * width))


@FEW
@given(
    epoch=st.integers(0, 3),
    step=st.integers(1, 5),
    num_workers=st.sampled_from([1, 2]),
    form=st.sampled_from(FORMS),
)
def test_resume_from_checkpoint_yields_exactly_the_rest(
    tmp_path_factory, epoch, step, num_workers, form
):
    num_batches = 6 * num_workers
    plan = _plans(form, num_batches, 2)
    directory = tmp_path_factory.mktemp("ckpt")

    # Reference: an uninterrupted run of epochs 0..epoch+1 on worker 0.
    state = EpochState()
    ds = epoch_dataset(**plan, num_batches=num_batches, state=state, num_workers=num_workers)
    reference = [_rows(ds) for _ in range(epoch + 2)]

    # Interrupted run: stop after `step` batches of `epoch`, checkpointing the state then.
    state = EpochState()
    checkpoint = tf.train.Checkpoint(sampler=state)
    ds = epoch_dataset(**plan, num_batches=num_batches, state=state, num_workers=num_workers)
    for _ in range(epoch):
        _rows(ds)
    iterator = iter(ds)
    seen = [next(iterator)["ids"].numpy().tolist() for _ in range(step)]
    path = checkpoint.write(str(directory / "ckpt"))
    del iterator

    restored = EpochState()
    tf.train.Checkpoint(sampler=restored).read(path).assert_consumed()
    resumed = epoch_dataset(
        **plan, num_batches=num_batches, state=restored, num_workers=num_workers, initial_step=step
    )
    rest_of_epoch = _rows(resumed)
    assert seen + rest_of_epoch == reference[epoch]
    assert _rows(resumed) == reference[epoch + 1]


def test_resume_without_restored_state_is_a_clear_error():
    ds = epoch_dataset(_plan(4, 2), num_batches=4, state=EpochState(), initial_step=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="restore the sampler state"):
        _rows(ds)


def test_bad_arguments_are_rejected():
    plan = _plan(4, 2)
    with pytest.raises(ValueError, match="multiple of num_workers"):
        epoch_dataset(plan, num_batches=5, state=EpochState(), num_workers=2)
    with pytest.raises(ValueError, match="initial_step"):
        epoch_dataset(plan, num_batches=4, state=EpochState(), initial_step=4)
    with pytest.raises(ValueError, match="num_batches"):
        epoch_dataset(plan, num_batches=0, state=EpochState())
    with pytest.raises(ValueError, match="initial_epoch"):
        EpochState(initial_epoch=-1)
    with pytest.raises(ValueError, match=r"leading dimension \(4\) is not 3"):
        epoch_dataset(plan, num_batches=3, state=EpochState())
    with pytest.raises(ValueError, match="give one of plan_fn"):
        epoch_dataset(num_batches=4, state=EpochState())
    with pytest.raises(ValueError, match="give one of plan_fn"):
        epoch_dataset(plan, batch_plan_fn=lambda e, b: plan(e), num_batches=4, state=EpochState())
    dynamic = epoch_dataset(
        lambda epoch: {"ids": tf.zeros([epoch + 1, 2], tf.int64)}, num_batches=3, state=EpochState()
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="leading dimension is not 3"):
        _rows(dynamic)
