"""`keras_inputs`: a sampler's dict batches as the `(inputs, targets)` tuples Keras's `fit` takes,
each iteration still the sampler's next epoch; a key the batches lack is one line."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs import class_balanced, dynamic_pairs, keras_inputs

X = np.arange(24 * 2, dtype=np.float32).reshape(24, 2)
Y = -np.arange(10 * 2, dtype=np.float32).reshape(10, 2)
VALID_PAIRS = [[i % 10, (i * 3 + 1) % 10] for i in range(24)]


def _pairs() -> tf.data.Dataset:
    return dynamic_pairs(X, Y, VALID_PAIRS, batch_size=8, strategy="least_sampled", seed=3)


def test_each_tuple_holds_the_batch_entries_and_each_iteration_is_the_next_epoch():
    batches, tuples = _pairs(), keras_inputs(_pairs(), inputs="x", targets="y")
    assert tuples.cardinality().numpy() == batches.cardinality().numpy() == 3
    epochs = []
    for _ in range(3):
        batch_epoch = list(batches)
        tuple_epoch = list(tuples)
        assert len(batch_epoch) == len(tuple_epoch) == 3
        for batch, (x, y) in zip(batch_epoch, tuple_epoch, strict=True):
            np.testing.assert_array_equal(x, batch["x"])
            np.testing.assert_array_equal(y, batch["y"])
            np.testing.assert_array_equal(x.numpy(), X[batch["x_index"].numpy()])
            np.testing.assert_array_equal(y.numpy(), Y[batch["y_index"].numpy()])
        epochs.append(np.concatenate([y for _, y in tuple_epoch]))
    # least_sampled serves each x's other partner next: the epochs differ, not one replayed.
    assert not np.array_equal(epochs[0], epochs[1])


def test_a_sequence_of_keys_is_a_tuple_in_its_order_and_no_targets_is_inputs_alone():
    both = keras_inputs(_pairs(), inputs=["y_index", "x_index"], targets=("x", "y"))
    (y_index, x_index), (x, y) = next(iter(both))
    np.testing.assert_array_equal(x.numpy(), X[x_index.numpy()])
    np.testing.assert_array_equal(y.numpy(), Y[y_index.numpy()])
    alone = keras_inputs(_pairs(), inputs="x")
    assert isinstance(alone.element_spec, tuple) and len(alone.element_spec) == 1
    assert alone.element_spec[0].shape.as_list() == [8, 2]


def test_class_balanced_batches_become_features_and_labels():
    clips = [np.full(4000, 0.01 * (1 + i % 5), np.float32) for i in range(20)]
    dataset = class_balanced(
        range(20),
        np.arange(20) % 4,
        load_fn=lambda i: clips[i],
        n_classes_per_batch=2,
        n_samples_per_class=2,
        seed=0,
    )
    features_spec, label_spec = keras_inputs(
        dataset, inputs="features", targets="label"
    ).element_spec
    assert features_spec == dataset.element_spec["features"]
    assert label_spec == dataset.element_spec["label"]


def _one_line_error(error: type[Exception], pattern: str, call) -> str:
    with pytest.raises(error, match=pattern) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_misspelt_key_names_the_keys_and_the_closest():
    message = _one_line_error(
        ValueError,
        "keras_inputs targets key 'y_idx'",
        lambda: keras_inputs(_pairs(), inputs="x", targets="y_idx"),
    )
    assert "'x', 'x_index', 'y', 'y_index'" in message
    assert message.endswith("did you mean 'y_index'?")
    message = _one_line_error(
        ValueError, "inputs key 'zzz'", lambda: keras_inputs(_pairs(), inputs=["x", "zzz"])
    )
    assert "did you mean" not in message


def test_what_is_not_a_dataset_of_dicts_or_keys_is_refused_in_one_line():
    tuples = tf.data.Dataset.from_tensor_slices((X, X))
    _one_line_error(
        TypeError,
        "dataset of dict batches .*its elements are tuple, not dicts",
        lambda: keras_inputs(tuples, inputs="x"),
    )
    _one_line_error(
        TypeError,
        "tf.data.Dataset of dict batches, got dict",
        lambda: keras_inputs({"x": X}, inputs="x"),
    )
    _one_line_error(
        TypeError, "inputs keys must be str, got int 0", lambda: keras_inputs(_pairs(), inputs=[0])
    )
    _one_line_error(
        TypeError,
        "targets must be a key .* got int 3",
        lambda: keras_inputs(_pairs(), inputs="x", targets=3),
    )
    _one_line_error(
        ValueError,
        "inputs names no key; the batches hold 'x'",
        lambda: keras_inputs(_pairs(), inputs=()),
    )


KEY = st.text(alphabet="abcxyz_", min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)
@given(
    keys=st.lists(KEY, min_size=1, max_size=5, unique=True),
    asked=st.lists(KEY, min_size=1, max_size=3),
)
def test_generated_keys_are_picked_in_order_or_the_first_missing_one_is_named(keys, asked):
    dataset = tf.data.Dataset.from_tensors(
        {key: tf.fill([2, position + 1], float(position)) for position, key in enumerate(keys)}
    )
    missing = [key for key in asked if key not in keys]
    if missing:
        _one_line_error(
            ValueError,
            f"inputs key {re.escape(repr(missing[0]))} is not in the batches",
            lambda: keras_inputs(dataset, inputs=asked),
        )
        return
    (picked,) = next(iter(keras_inputs(dataset, inputs=asked)))
    assert [float(entry[0, 0]) for entry in picked] == [float(keys.index(k)) for k in asked]
