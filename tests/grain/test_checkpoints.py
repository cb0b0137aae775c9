"""The Grain streams' checkpoints: an iterator's state resumes it exactly, on the same split or on
another worker count that keeps the global batch, and a state of another plan is refused in one
line naming both."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.grain import GrainClassBalanced, GrainPairs
from tfx_dynamic_inputs.grain.epoch_stream import PLAN_BLOCK


def _pairs(num_x: int, seed: int, batch_size: int, num_workers: int, worker: int) -> GrainPairs:
    rows = [[(x * 7 + k) % 5 for k in range(1 + x % 3)] for x in range(num_x)]
    return GrainPairs(
        np.arange(num_x, dtype=np.float32),
        np.arange(5) * 10,
        rows,
        batch_size=batch_size,
        strategy="least_sampled",
        seed=seed,
        num_workers=num_workers,
        worker_index=worker,
    )


def _balanced(num_records: int, seed: int, n_c: int, num_workers: int, worker: int, mode: str):
    return GrainClassBalanced(
        np.arange(num_records) * 3,
        np.arange(num_records) % 7,
        n_classes_per_batch=n_c,
        n_samples_per_class=2,
        seed=seed,
        epoch_mode=mode,
        num_workers=num_workers,
        worker_index=worker,
    )


def _same(batch: dict, other: dict) -> bool:
    return batch.keys() == other.keys() and all(
        np.array_equal(batch[key], other[key]) for key in batch
    )


@settings(max_examples=30, deadline=None)
@given(
    num_x=st.integers(1, 40),
    seed=st.integers(-(2**63), 2**63 - 1),
    batch_size=st.integers(1, 6),
    split=st.sampled_from([(1, 0), (2, 1), (3, 2)]),
    taken=st.integers(0, 30),
    balanced=st.booleans(),
)
def test_a_state_resumes_the_stream_exactly(num_x, seed, batch_size, split, taken, balanced):
    if balanced:
        sampler = _balanced(max(num_x, 7), seed, 1 + batch_size % 3, *split, "samples")
    else:
        sampler = _pairs(num_x, seed, batch_size, *split)
    stream = sampler.stream(first_epoch=3, num_epochs=3)
    iterator = iter(stream)
    for _ in range(min(taken, 3 * sampler.steps_per_epoch)):
        next(iterator)
    # Through JSON, as a checkpoint keeps it.
    state = json.loads(json.dumps(iterator.get_state()))
    rest = list(iterator)
    resumed = iter(stream)
    resumed.set_state(state)
    again = list(resumed)
    assert len(again) == len(rest)
    assert all(_same(batch, other) for batch, other in zip(again, rest, strict=True))


@settings(max_examples=20, deadline=None)
@given(
    num_x=st.integers(1, 40),
    seed=st.integers(0, 2**40),
    step=st.integers(0, 10),
    balanced=st.booleans(),
    mode=st.sampled_from(["classes", "samples"]),
)
def test_a_state_resumes_on_one_worker_of_the_same_global_batch(num_x, seed, step, balanced, mode):
    """Worker 0 of 2 (batch B) saves its state; one worker of batch 2B resumes it and takes the
    global batches both workers would have taken, concatenated."""
    if balanced:
        two = [_balanced(max(num_x, 7), seed, 2, 2, worker, mode) for worker in (0, 1)]
        one = _balanced(max(num_x, 7), seed, 4, 1, 0, mode)
    else:
        two = [_pairs(num_x, seed, 2, 2, worker) for worker in (0, 1)]
        one = _pairs(num_x, seed, 4, 1, 0)
    step %= two[0].steps_per_epoch
    iterator = iter(two[0].stream(first_epoch=1))
    for _ in range(step):
        next(iterator)
    resumed = iter(one.stream())
    resumed.set_state(iterator.get_state())
    for number in range(step, two[0].steps_per_epoch):
        halves = [sampler.epoch(1)[number] for sampler in two]
        whole = next(resumed)
        for key in whole:
            assert np.array_equal(whole[key], np.concatenate([half[key] for half in halves]))


def test_a_state_of_another_seed_is_refused_naming_both() -> None:
    iterator = iter(_pairs(10, 1, 2, 1, 0).stream())
    next(iterator)
    other = iter(_pairs(10, 2, 2, 1, 0).stream())
    with pytest.raises(ValueError, match=r'"seed": 1.*"seed": 2'):
        other.set_state(iterator.get_state())


def test_a_state_that_is_no_whole_step_of_the_split_is_refused() -> None:
    iterator = iter(_pairs(12, 1, 2, 2, 0).stream())
    next(iterator)
    state = iterator.get_state()  # 4 examples: one step of 2 workers x 2
    three = iter(_pairs(12, 1, 1, 4, 0).stream())
    three.set_state(state)  # the same global batch, 4 x 1: step 1
    with pytest.raises(ValueError, match="examples_done=5 is not a whole step"):
        three.set_state({**state, "examples_done": 5})
    with pytest.raises(ValueError, match="plan, epoch and examples_done"):
        three.set_state({"epoch": 0})


@settings(max_examples=15, deadline=None)
@given(
    num_x=st.integers(PLAN_BLOCK, 3 * PLAN_BLOCK + 5),
    seed=st.integers(-(2**63), 2**63 - 1),
    initial_step=st.integers(0, 3 * PLAN_BLOCK),
    balanced=st.booleans(),
)
def test_batches_planned_in_blocks_equal_batches_planned_alone(num_x, seed, initial_step, balanced):
    # Epochs and streams plan PLAN_BLOCK steps in one call; each batch must be the one its number
    # plans alone, at any start within or across blocks.
    sampler = (
        _balanced(num_x, seed, 1, 1, 0, "samples") if balanced else _pairs(num_x, seed, 1, 1, 0)
    )
    numbers = np.arange(sampler.num_batches)
    initial_step = min(initial_step, len(numbers) - 1)
    alone = [sampler.batch(2, int(number)) for number in numbers[initial_step:]]
    from_epoch = list(sampler.epoch(2, initial_step))
    assert len(from_epoch) == len(alone) and all(map(_same, from_epoch, alone))
    streamed = list(sampler.stream(first_epoch=2, num_epochs=1))
    assert all(map(_same, streamed[initial_step:], alone))
