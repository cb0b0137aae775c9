"""The package's own tf.data functions are traced as written (no AutoGraph conversion, which
cost each process about 1.5 s for a first sampler dataset and 5 s of an augmented speaker
pipeline), while the functions a user hands in are converted, as `Dataset.map` converts them:
a Python `if` over a tensor in a `parse_fn` or a plan function keeps working."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs.inputs import ClassBalancedSampler, EpochState, RecordStore, dynamic_pairs
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_dataset
from tfx_dynamic_inputs.inputs.graph_functions import as_given, as_written

RECORDS = [bytes([i % 251]) * (1 + i % 7) for i in range(24)]
LABELS = np.repeat(np.arange(6), 4)


def user_parse(records: tf.Tensor) -> dict[str, tf.Tensor]:
    """A parse function only AutoGraph can trace: a Python `if` over a tensor."""
    lengths = tf.cast(tf.strings.length(records), tf.int64)
    if tf.reduce_max(lengths) > 100:
        lengths = lengths // 2
    return {"length": lengths}


def test_as_written_traces_without_autograph_and_as_given_converts():
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(RECORDS))
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        dataset.map(as_written(user_parse))
    lengths = [element["length"] for element in dataset.map(as_given(user_parse))]
    assert lengths == [len(record) for record in RECORDS]
    assert as_given(None) is None


def test_a_users_parse_fn_with_python_control_flow_runs_in_both_samplers():
    store = RecordStore.from_serialized(RECORDS, parse_fn=user_parse)
    [batch] = dynamic_pairs(store, store, [[i] for i in range(24)], batch_size=24, seed=0).take(1)
    assert batch["x"]["length"].numpy().tolist() == [
        len(RECORDS[i]) for i in batch["x_index"].numpy()
    ]
    sampler = ClassBalancedSampler(
        RecordStore.from_serialized(RECORDS),
        LABELS,
        n_classes_per_batch=3,
        n_samples_per_class=2,
        parse_fn=user_parse,
        features=None,
    )
    for batch in sampler.dataset().take(2):
        assert batch["length"].numpy().tolist() == [len(RECORDS[i]) for i in batch["index"]]


def test_a_users_plan_function_with_python_control_flow_plans_epochs():
    def plan_fn(epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        rows = tf.range(4, dtype=tf.int64)
        if epoch % 2 == 1:
            rows = rows[::-1]
        return {"batch": rows}

    dataset = epoch_dataset(plan_fn, num_batches=4, state=EpochState())
    epochs = [[int(row["batch"]) for row in dataset] for _ in range(2)]
    assert epochs == [[0, 1, 2, 3], [3, 2, 1, 0]]


# AutoGraph caches what it converted by function, per process: a fresh one sees every
# conversion. Also on TensorFlow 2.16 (`full`).
CONVERSIONS = """
import json
import numpy as np
import tensorflow as tf
from tensorflow.python.autograph.impl import api
from tfx_dynamic_inputs.inputs import ClassBalancedSampler, RecordStore, class_balanced
from tfx_dynamic_inputs.inputs import dynamic_pairs
from tests.inputs.test_graph_functions import LABELS, RECORDS, user_parse

converted = []
transform = api._TRANSPILER.transform


def recording(entity, program_ctx):
    converted.append(f"{entity.__module__}.{entity.__qualname__}")
    return transform(entity, program_ctx)


api._TRANSPILER.transform = recording
store = RecordStore.from_serialized(RECORDS, parse_fn=user_parse)
next(iter(dynamic_pairs(store, store, [[i, 23 - i] for i in range(24)], batch_size=8, seed=0)))
x = np.random.default_rng(0).random((24, 4, 4, 1), np.float32)
next(iter(dynamic_pairs(x, x, [[i] for i in range(24)], batch_size=8, seed=0)))
clips = tf.random.uniform([24, 8000], -0.1, 0.1)
for epoch_mode in ("classes", "samples"):
    sampler = ClassBalancedSampler(
        tf.data.Dataset.from_tensor_slices((clips, LABELS)),
        n_classes_per_batch=3,
        n_samples_per_class=2,
        epoch_mode=epoch_mode,
    )
    next(iter(sampler.dataset()))
    next(iter(sampler.epochs_dataset(num_epochs=1)))
print(json.dumps(converted))
"""


@pytest.mark.full
def test_the_packages_own_functions_are_not_converted_and_a_users_are():
    done = run_python(CONVERSIONS, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    converted = json.loads(done.stdout.splitlines()[-1])
    assert "tests.inputs.test_graph_functions.user_parse" in converted
    assert [name for name in converted if name.startswith("tfx_dynamic_inputs")] == []
