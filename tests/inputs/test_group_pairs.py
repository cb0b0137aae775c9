"""Group pairing without edges: x pairs with any y of its group; O(N_x + N_y) held."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs import PairCoverage, ValidPairs, dynamic_pairs
from tfx_dynamic_inputs.inputs.group_pairs import NO_Y_IN_GROUP, GroupPairs
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def grouped_records(draw):
    num_groups = draw(st.integers(1, 5))
    y_sizes = draw(st.lists(st.integers(1, 6), min_size=num_groups, max_size=num_groups))
    x_groups = draw(st.lists(st.integers(0, num_groups - 1), min_size=1, max_size=30))
    y_groups = np.repeat(np.arange(num_groups), y_sizes)
    order = draw(st.permutations(range(len(y_groups))))
    return np.array(x_groups), y_groups[list(order)]


def plan_pairs(planner: PairPlanner, epoch: int) -> list[tuple[int, int]]:
    plan = planner.plan(epoch)
    return list(
        zip(
            plan["x_index"].numpy().ravel().tolist(),
            plan["y_index"].numpy().ravel().tolist(),
            strict=True,
        )
    )


def test_from_groups_holds_groups_not_edges():
    x_groups = np.repeat(np.arange(3), [4, 5, 6])
    y_groups = np.array([2, 0, 1, 1, 0, 2, 2, 0])
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    assert isinstance(pairs, GroupPairs)
    assert pairs.num_pairs == 4 * 3 + 5 * 2 + 6 * 3
    np.testing.assert_array_equal(pairs.y_of(0), [1, 4, 7])
    np.testing.assert_array_equal(pairs.y_of(14), [0, 5, 6])
    assert pairs.max_degree == 3
    # What is held grows with the records, not with the pairs.
    held = pairs.x_group.nbytes + pairs.group_row_splits.nbytes + pairs.group_values.nbytes
    assert held <= 8 * (len(x_groups) + len(y_groups) + 4)


def test_group_names_and_records_without_a_group():
    pairs = ValidPairs.from_groups(
        ["cat", "dog", "", "cat", "bird"], ["dog", "cat", "cat", None], on_invalid="skip"
    )
    assert pairs.groups == ["bird", "cat", "dog"]
    np.testing.assert_array_equal(pairs.y_of(0), [1, 2])
    np.testing.assert_array_equal(pairs.y_of(1), [0])
    np.testing.assert_array_equal(pairs.planned_x, [0, 1, 3])  # "" has no group, bird no y
    assert pairs.skipped == {NO_Y_IN_GROUP: 1}
    np.testing.assert_array_equal(pairs.skipped_x, [2, 4])


def test_an_x_whose_group_has_no_y_fails_naming_it():
    with pytest.raises(ValueError, match=r"x 2 is in group 'bird', which has no y"):
        ValidPairs.from_groups(["cat", "cat", "bird"], ["cat"])
    with pytest.raises(ValueError, match="x_groups has 3 entries but there are 4 x records"):
        GroupPairs.build([0, 0, 1], [0, 1], num_x=4)
    with pytest.raises(TypeError, match="both be names or both be integers"):
        ValidPairs.from_groups([0, 1], ["a", "b"])


@SETTINGS
@given(records=grouped_records(), seed=st.integers(0, 2**31 - 1), batch_size=st.integers(1, 7))
def test_uniform_draws_each_x_once_per_epoch_from_its_group(records, seed, batch_size):
    x_groups, y_groups = records
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    planner = PairPlanner(pairs, strategy="uniform", seed=seed, batch_size=batch_size)
    for epoch in range(3):
        planned = plan_pairs(planner, epoch)
        xs = [x for x, _ in planned]
        assert sorted(set(xs)) == list(range(len(x_groups)))
        assert len(planned) < len(x_groups) + batch_size
        for x, y in planned:
            assert y_groups[y] == x_groups[x]
        assert planned == plan_pairs(planner, epoch)  # a pure function of (seed, epoch)


@SETTINGS
@given(
    records=grouped_records(),
    strategy=st.sampled_from(["uniform", "least_sampled"]),
    seed=st.integers(0, 2**31 - 1),
    batch_size=st.integers(1, 7),
    epoch=st.integers(0, 2**40),
    data=st.data(),
)
def test_any_batch_of_group_pairs_is_planned_alone(
    records, strategy, seed, batch_size, epoch, data
):
    x_groups, y_groups = records
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    planner = PairPlanner(pairs, strategy=strategy, seed=seed, batch_size=batch_size)
    numbers = data.draw(st.lists(st.integers(0, planner.num_batches - 1), min_size=1, max_size=3))
    whole, alone = planner.plan(epoch), planner.plan_batches(epoch, numbers)
    for key in ("x_index", "y_index"):
        assert alone[key].numpy().tolist() == whole[key].numpy()[numbers].tolist(), key


@SETTINGS
@given(records=grouped_records(), seed=st.integers(0, 2**31 - 1), start=st.integers(0, 5))
def test_least_sampled_meets_every_y_of_the_group_once_per_group_size_epochs(records, seed, start):
    x_groups, y_groups = records
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    planner = PairPlanner(pairs, strategy="least_sampled", seed=seed, batch_size=4)
    # Any window of n consecutive epochs: x meets each of the n y of its group exactly once.
    seen: dict[int, list[int]] = {x: [] for x in range(len(x_groups))}
    for epoch in range(start, start + pairs.max_degree):
        first = {}
        for x, y in plan_pairs(planner, epoch):
            first.setdefault(x, y)  # "wrap" may repeat an x at the end of the epoch
        for x, y in first.items():
            seen[x].append(y)
    for x, ys in seen.items():
        n = len(pairs.y_of(x))
        window = ys[:n]
        assert sorted(window) == sorted(pairs.y_of(x).tolist()), (x, ys)


def test_dynamic_pairs_over_arrays_with_groups_and_coverage():
    x_groups = np.array([0, 1, 0, 2, 1, 0])
    y_groups = np.array([1, 0, 2, 0, 1])
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    x = np.arange(6, dtype=np.int64) * 10
    y = np.arange(5, dtype=np.int64) * 100
    coverage = PairCoverage(pairs)
    assert coverage.num_pairs == pairs.num_pairs
    dataset = coverage.observe(
        dynamic_pairs(x, y, pairs, batch_size=3, strategy="least_sampled", seed=1)
    )
    assert dataset.element_spec["x"] == tf.TensorSpec([3], tf.int64)
    for _ in range(pairs.max_degree):
        for batch in dataset.as_numpy_iterator():
            np.testing.assert_array_equal(batch["x"], batch["x_index"] * 10)
            np.testing.assert_array_equal(batch["y"], batch["y_index"] * 100)
            np.testing.assert_array_equal(y_groups[batch["y_index"]], x_groups[batch["x_index"]])
    assert coverage.result()["pair_coverage_total"] == 1.0
    assert coverage.result()["invalid_pairs"] == 0


def test_edges_refuse_too_many_pairs():
    pairs = ValidPairs.from_groups(np.zeros(1000, np.int64), np.zeros(1000, np.int64))
    with pytest.raises(ValueError, match="1000000 valid pairs, more than 10 to list"):
        pairs.edges(max_pairs=10)
