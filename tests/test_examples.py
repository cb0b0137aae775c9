"""The pure-Python `tf.train.Example` writer against TensorFlow's own serialization."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs import examples

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
# Edge values of every varint length, negatives (10-byte varints) and the int64 limits.
EDGE_INT64 = st.sampled_from(
    [0, 1, -1, 127, 128, 16383, 16384, (1 << 31) - 1, 1 << 31, -(1 << 63), (1 << 63) - 1]
)
KEYS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
VALUES = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=300)),
    st.tuples(st.just("bytes"), st.binary(min_size=20000, max_size=20000)),
    st.tuples(st.just("int64"), st.one_of(INT64, EDGE_INT64)),
)


def _ours(value) -> examples.Feature:
    kind, payload = value
    return examples.bytes_feature(payload) if kind == "bytes" else examples.int64_feature(payload)


def _tensorflow(value) -> tf.train.Feature:
    kind, payload = value
    if kind == "bytes":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload]))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[payload]))


def _expected(feature_map: dict) -> bytes:
    example = tf.train.Example(
        features=tf.train.Features(feature={k: _tensorflow(v) for k, v in feature_map.items()})
    )
    return example.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(feature_map=st.dictionaries(KEYS, VALUES, max_size=40))
def test_examples_are_byte_identical_to_tensorflow(feature_map):
    ours = examples.serialize_example({k: _ours(v) for k, v in feature_map.items()})
    assert ours == _expected(feature_map)


def test_many_keys_are_sorted_by_utf8_bytes():
    # Code points above the BMP and keys that are prefixes of each other.
    keys = ["", "a", "ab", "b", "é", "\uffff", "\U0001f600", "Z", "a\x00", *map(str, range(300))]
    feature_map = {key: ("int64", i - 150) for i, key in enumerate(keys)}
    ours = examples.serialize_example({k: _ours(v) for k, v in feature_map.items()})
    assert ours == _expected(feature_map)
    parsed = tf.train.Example.FromString(ours).features.feature
    assert {key: parsed[key].int64_list.value[0] for key in keys} == {
        key: value for key, (_, value) in feature_map.items()
    }


@pytest.mark.parametrize("value", [1 << 63, -(1 << 63) - 1])
def test_int64_feature_refuses_values_outside_int64(value):
    with pytest.raises(ValueError, match="int64"):
        examples.int64_feature(value)


@settings(max_examples=50, deadline=None)
@given(payload=st.binary(max_size=3000), start=st.integers(0, 20))
def test_a_memoryview_slice_serializes_as_its_bytes(payload, start):
    # The shard writers hand over views of a spill file's read, not copies.
    view = memoryview(b"\x00" * start + payload + b"\xff")[start : start + len(payload)]
    assert examples.serialize_example(
        {"audio": examples.bytes_feature(view), "n": examples.int64_feature(len(payload))}
    ) == examples.serialize_example(
        {"audio": examples.bytes_feature(payload), "n": examples.int64_feature(len(payload))}
    )
