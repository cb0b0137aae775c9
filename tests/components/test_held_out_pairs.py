"""The CycleGAN trainer's held-out images: x and y records the dynamic pairs never serve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.inputs import runs
from tfx_dynamic_inputs.inputs import ValidPairs
from tfx_dynamic_inputs.trainer_component import training_inputs
from tfx_dynamic_inputs.trainer_component.input_options import PairsInputOptions


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=6), min_size=5, max_size=25),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_held_out_records_leave_no_pair_and_the_rest_stay(rows, k, seed):
    pairs = ValidPairs.build(rows, num_y=12)
    rng = np.random.default_rng(seed)
    drawn_x = set(rng.choice(pairs.planned_x, k, replace=False).tolist())
    drawn_y = set(rng.choice(12, k, replace=False).tolist())
    if not any(x not in drawn_x and y not in drawn_y for x, row in enumerate(rows) for y in row):
        with pytest.raises(ValueError, match=f"held_out={k}: .* leaves no valid pair"):
            training_inputs.hold_out_pairs(pairs, k, seed)
        return
    training, held_x, held_y = training_inputs.hold_out_pairs(pairs, k, seed)
    assert len(held_x) == len(held_y) == k
    assert set(held_x) <= set(pairs.planned_x.tolist())
    kept = {
        (x, int(y))
        for x in range(training.num_x)
        for y in training.values[training.row_splits[x] : training.row_splits[x + 1]]
    }
    original = {(x, y) for x, row in enumerate(rows) for y in row}
    expected = {(x, y) for x, y in original if x not in held_x and y not in held_y}
    assert kept == expected
    assert not set(training.planned_x.tolist()) & set(held_x.tolist())
    again = training_inputs.hold_out_pairs(pairs, k, seed)
    np.testing.assert_array_equal(again[1], held_x)
    np.testing.assert_array_equal(again[2], held_y)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    x_groups=st.lists(st.integers(-1, 3), min_size=5, max_size=25),
    y_groups=st.lists(st.integers(-1, 3), min_size=5, max_size=12),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_held_out_records_leave_their_groups_and_the_rest_stay(x_groups, y_groups, k, seed):
    try:
        pairs = ValidPairs.from_groups(x_groups, y_groups, on_invalid="skip")
    except ValueError:
        return  # no x has a group with y: nothing to hold out from
    if not 0 < k < min(len(pairs.planned_x), pairs.num_y):
        with pytest.raises(ValueError, match=f"held_out={k}: needs 0 < held_out <"):
            training_inputs.hold_out_group_pairs(pairs, k, seed)
        return
    # The same draw as for a pair list: the same records are held out however the run pairs.
    held_x, held_y = training_inputs._draw_held_out(pairs.planned_x, pairs.num_y, k, seed)
    expected = {
        (x, y)
        for x, gx in enumerate(x_groups)
        for y, gy in enumerate(y_groups)
        if gx >= 0 and gx == gy and x not in held_x and y not in held_y
    }
    if not expected:
        with pytest.raises(ValueError, match=f"held_out={k}: .* leaves no x with a y"):
            training_inputs.hold_out_group_pairs(pairs, k, seed)
        return
    training, got_x, got_y = training_inputs.hold_out_group_pairs(pairs, k, seed)
    np.testing.assert_array_equal(got_x, held_x)
    np.testing.assert_array_equal(got_y, held_y)
    kept = {(int(x), int(y)) for x in training.planned_x for y in training.y_of(int(x))}
    assert kept == expected
    assert not set(training.planned_x.tolist()) & set(held_x.tolist())


def test_held_out_needs_records_left_to_train_on():
    pairs = ValidPairs.build([[0], [1], [0, 1]], num_y=2)
    with pytest.raises(ValueError, match=r"held_out=2: needs 0 < held_out < 2"):
        training_inputs.hold_out_pairs(pairs, 2, seed=0)


def test_the_training_stream_never_serves_the_held_out_images(tmp_path):
    output_dir = str(tmp_path)
    image = lambda i: np.full([2, 2, 1], i, np.uint8)  # noqa: E731
    runs.write_record_set(
        output_dir, "x", [runs.image_example(f"x{i}", image(i)) for i in range(16)]
    )
    runs.write_record_set(
        output_dir, "y", [runs.image_example(f"y{i}", image(100 + i)) for i in range(8)]
    )
    runs.write_pairs(output_dir, [[i % 8, (i + 3) % 8] for i in range(16)])
    train, coverage, held_out = training_inputs.pairs_train_dataset(
        output_dir,
        output_dir,
        batch_size=4,
        seed=7,
        options=PairsInputOptions(image={"height": 2, "width": 2, "channels": 1}, held_out=3),
    )
    [batch] = list(held_out.as_numpy_iterator())
    held_x, held_y = set(batch["x_index"].tolist()), set(batch["y_index"].tolist())
    assert len(held_x) == len(held_y) == 3
    np.testing.assert_allclose(batch["x"][:, 0, 0, 0] * 255, batch["x_index"], atol=1e-3)
    np.testing.assert_allclose(batch["y"][:, 0, 0, 0] * 255, 100 + batch["y_index"], atol=1e-3)
    for _ in range(3):
        for pairs in train.as_numpy_iterator():
            assert not held_x & set(pairs["x_index"].tolist())
            assert not held_y & set(pairs["y_index"].tolist())
    assert coverage.result()["invalid_pairs"] == 0
