"""Pair coverage: distinct valid pairs per epoch and overall, invalid pairs, Keras callback."""

from __future__ import annotations

import glob
import importlib.util

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfx_dynamic_inputs.inputs import PairCoverage, PairCoverageCallback, dynamic_pairs

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None

ROWS = [[0, 2], [1], [0, 1, 2], [2]]  # 7 valid pairs


def test_update_flags_validity_and_counts_distinct_pairs():
    coverage = PairCoverage(ROWS)
    assert coverage.num_pairs == 7
    valid = coverage.update([0, 0, 1, 3, 1, 2], [2, 2, 1, 0, 5, 1])
    assert valid.numpy().tolist() == [True, True, True, False, False, True]
    result = coverage.result()
    assert result["pair_coverage_epoch"] == pytest.approx(3 / 7)
    assert result["invalid_pairs"] == 2
    coverage.start_epoch()
    coverage.update([2], [0])
    result = coverage.result()
    assert result["pair_coverage_epoch"] == pytest.approx(1 / 7)
    assert result["pair_coverage_total"] == pytest.approx(4 / 7)


def test_out_of_range_indices_are_invalid_not_aliased():
    # x * num_y + y must not alias: (0, 3) with num_y = 3 would be the key of (1, 0).
    coverage = PairCoverage([[0], [0]], num_y=3)
    assert coverage.update([0, 1, 5, -1], [3, 0, 0, 0]).numpy().tolist() == [
        False,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("strategy", ["uniform", "least_sampled"])
def test_observed_dataset_reaches_full_coverage_as_planned(strategy):
    coverage = PairCoverage(ROWS)
    ds = coverage.observe(
        dynamic_pairs(np.arange(4), np.arange(3), ROWS, batch_size=2, strategy=strategy)
    )
    totals = []
    for _ in range(3):
        coverage.start_epoch()
        for _ in ds:
            pass
        result = coverage.result()
        assert result["invalid_pairs"] == 0
        assert result["pair_coverage_epoch"] == pytest.approx(4 / 7)  # one pair per x
        totals.append(result["pair_coverage_total"])
    assert totals == sorted(totals)
    if strategy == "least_sampled":
        assert totals[-1] == 1.0  # max degree 3: every pair within 3 epochs


@pytest.mark.full
@pytest.mark.skipif(not HAS_TENSORBOARD, reason="TensorBoard is not installed")
def test_callback_logs_each_epoch_and_writes_tensorboard(tmp_path):
    coverage = PairCoverage(ROWS)
    x = np.eye(4, dtype=np.float32)
    y = np.eye(3, dtype=np.float32)
    ds = coverage.observe(dynamic_pairs(x, y, ROWS, batch_size=2, strategy="least_sampled")).map(
        lambda b: (b["x"], b["y"])
    )
    inputs = keras.Input([4])
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile("sgd", "mse")
    callback = PairCoverageCallback(coverage, log_dir=str(tmp_path))
    history = model.fit(ds, epochs=3, verbose=0, callbacks=[callback])
    assert history.history["pair_coverage_epoch"] == pytest.approx([4 / 7] * 3)
    assert history.history["pair_coverage_total"][-1] == 1.0
    events = glob.glob(str(tmp_path / "pair_coverage" / "events.out.tfevents.*"))
    assert events
    tags = {
        (value.tag, event.step)
        for path in events
        for event in tf.compat.v1.train.summary_iterator(path)
        for value in event.summary.value
    }
    assert {("pair_coverage_total", step) for step in range(3)} <= tags


@pytest.mark.skipif(HAS_TENSORBOARD, reason="TensorBoard is installed")
def test_callback_without_tensorboard_fails_when_built_not_after_an_epoch(tmp_path):
    with pytest.raises(ImportError, match="pip install tensorboard"):
        PairCoverageCallback(PairCoverage(ROWS), log_dir=str(tmp_path))
    assert PairCoverageCallback(PairCoverage(ROWS)).coverage.num_pairs == 7
