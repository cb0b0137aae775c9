"""Properties of the reader without TensorFlow over generated values: frames of any payloads
read back whole, any byte of a frame changed is a damaged record naming it (and only it), and
Examples of any features parse as `tf.io.parse_single_example` parses them."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.inputs.runs import write_record_set
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records import (
    DamagedRecordError,
    ExampleDecoder,
    ExampleError,
    FixedFeature,
    RunRecords,
    example_pb2,
)

# 2 to 12 payloads of 0 to 300 bytes; at least 2 a shard, so that changing one frame leaves a
# sampled CRC of its shard as the run recorded it (the shard is then damaged, not another run's).
_PAYLOADS = st.lists(st.binary(max_size=300), min_size=2, max_size=12)


@settings(max_examples=30, deadline=None)
@given(payloads=_PAYLOADS, data=st.data())
def test_any_changed_frame_byte_is_a_damaged_record_and_only_that_one(payloads, data):
    num_shards = data.draw(st.integers(1, len(payloads) // 2), label="shards")
    with tempfile.TemporaryDirectory() as run:
        write_record_set(run, "s", payloads, num_shards=num_shards)
        reader = RunRecords(run, "s")
        assert [reader.read(i) for i in range(len(payloads))] == payloads
        reader.close()
        index = data.draw(st.integers(0, len(payloads) - 1), label="record")
        shard, offset, length = (
            int(v) for v in np.load(os.path.join(layout.index_dir(run, "s"), "offsets.npy"))[index]
        )
        position = offset + data.draw(st.integers(0, length + 15), label="byte of the frame")
        change = data.draw(st.integers(1, 255), label="xor")
        path = layout.load_shards(run, "s").shard_paths[shard]
        with open(path, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ change]))
        with pytest.raises(DamagedRecordError) as error:
            RunRecords(run, "s").read(index)
        assert f"record {index} (shard {path}, offset {offset})" in str(error.value)
        skipping = RunRecords(run, "s", on_damaged="skip")
        reads = [skipping.read(i) for i in range(len(payloads))]
        assert reads == [None if i == index else p for i, p in enumerate(payloads)]


_KINDS = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
_VALUES = {
    "bytes": st.binary(max_size=20),
    "int64": st.integers(-(1 << 63), (1 << 63) - 1),
    "float": st.floats(width=32, allow_nan=False),
}


@st.composite
def _features(draw) -> dict[str, tuple[str, list]]:
    names = draw(st.lists(st.text(min_size=1, max_size=8), max_size=5, unique=True))
    features = {}
    for name in names:
        kind = draw(st.sampled_from(sorted(_KINDS)))
        features[name] = (kind, draw(st.lists(_VALUES[kind], max_size=4)))
    return features


def _tf_example(features: dict[str, tuple[str, list]]) -> tf.train.Example:
    lists = {
        "bytes": lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v)),
        "int64": lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v)),
        "float": lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v)),
    }
    feature = {name: lists[kind](values) for name, (kind, values) in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature))


@settings(max_examples=50, deadline=None)
@given(features=_features())
def test_examples_are_the_same_bytes_as_tensorflows(features):
    theirs = _tf_example(features).SerializeToString(deterministic=True)
    ours = example_pb2.Example.FromString(theirs)
    assert ours.SerializeToString(deterministic=True) == theirs
    for name, (kind, values) in features.items():
        stored = ours.features.feature[name]
        assert stored.WhichOneof("kind") == f"{kind}_list"
        assert list(getattr(stored, f"{kind}_list").value) == values


@st.composite
def _spec_entry(draw, features: dict) -> tuple[str, FixedFeature]:
    # Mostly the features the Example holds, sometimes another kind, size or a missing one.
    name = draw(st.sampled_from(sorted(features)) | st.just("absent"))
    kind, values = features.get(name, ("int64", []))
    kind = draw(st.just(kind) | st.sampled_from(sorted(_KINDS)))
    size = draw(st.just(max(len(values), 1)) | st.integers(1, 4))
    default = draw(st.none() | _VALUES[kind])
    return name, FixedFeature(kind, (size,), default)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), features=_features().filter(bool))
def test_decoding_matches_tensorflows_parser(data, features):
    name, feature = data.draw(_spec_entry(features), label="spec")
    payload = _tf_example(features).SerializeToString()
    dtype = _KINDS[feature.kind]
    default = None if feature.default is None else [feature.default] * feature.size
    spec = {name: tf.io.FixedLenFeature([feature.size], dtype, default_value=default)}
    try:
        expected = tf.io.parse_single_example(payload, spec)[name].numpy()
    except tf.errors.InvalidArgumentError:
        expected = None
    decode = ExampleDecoder.of({name: feature})
    if expected is None:
        with pytest.raises(ExampleError):
            decode(payload)
        return
    got = decode(payload)[name]
    if feature.kind == "bytes":
        assert got.tolist() == expected.tolist()
    else:
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
