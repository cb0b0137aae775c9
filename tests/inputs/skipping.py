"""Shared steps of the skip-and-count tests: a small pairs run, how often a plan holds a record,
the batches of several epochs and the samplers' warnings.

Used by `tests/inputs/test_skip_damaged.py` (records damaged on disk) and
`tests/materialize/test_input_edges.py` (records that are no example of their kind).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest
import tensorflow as tf

from tests.inputs import runs

NUM_X = 12
NUM_Y = 3


def write_pairs_run(output_dir: str, y_payloads: dict[int, bytes] | None = None) -> None:
    """Writes a pairs run of 12 x and 3 y 2x2x3 images; x `i` pairs with y `i % 3`, `(i + 1) % 3`.

    Args:
        output_dir: The run directory.
        y_payloads: Records written instead of the y images of these record numbers.
    """
    x_records = [runs.image_example(f"x{i}", np.full([2, 2, 3], i, np.uint8)) for i in range(NUM_X)]
    y_records = [runs.image_example(f"y{i}", np.full([2, 2, 3], i, np.uint8)) for i in range(NUM_Y)]
    for record, payload in (y_payloads or {}).items():
        y_records[record] = payload
    runs.write_record_set(output_dir, "x", x_records, num_shards=2)
    runs.write_record_set(output_dir, "y", y_records, num_shards=1)
    runs.write_pairs(output_dir, [[i % NUM_Y, (i + 1) % NUM_Y] for i in range(NUM_X)])


def times_planned(
    plan: Callable[[int], dict[str, tf.Tensor]], key: str, record: int, epochs: int
) -> int:
    """How often the plans of epochs `0 .. epochs - 1` name `record` under `key`.

    Plans are pure functions of (seed, epoch), so this is what the datasets will meet.

    Args:
        plan: The epoch plan of an epoch (`ClassBalancedSampler.epoch_plan`,
            `DynamicPairsSampler.planner.plan`): int64 [N] tensors by name.
        key: The plan entry that holds record numbers (`"index"`, `"y_index"`).
        record: The record number to count.
        epochs: How many epochs, from epoch 0.
    """
    return sum(int(np.sum(plan(epoch)[key].numpy() == record)) for epoch in range(epochs))


def batches_of_epochs(
    dataset: tf.data.Dataset, epochs: int, caplog: pytest.LogCaptureFixture
) -> list[dict[str, np.ndarray]]:
    """Every batch of `epochs` passes over `dataset`, with its warnings captured in `caplog`."""
    with caplog.at_level(logging.WARNING):
        return [batch for _ in range(epochs) for batch in dataset.as_numpy_iterator()]


def warnings_of(caplog: pytest.LogCaptureFixture, prefix: str) -> list[str]:
    """The messages captured in `caplog` that start with `prefix` (e.g. "dynamic_pairs: epoch")."""
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]
