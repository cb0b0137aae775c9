"""The reader without TensorFlow (`tfx_dynamic_inputs.records`) gives what the TensorFlow side
gives, record for record: the payloads `RecordStore` reads, and the features its parsers
decode (`tf.io.parse_example`, then the int16 PCM or uint8 pixels `decode_raw` reads)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import tensorflow as tf

from tests.core.records_runs import SAMPLE_RATE, write_audio_run, write_image_run
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.parsing import AUDIO_EXAMPLE_SPEC, image_example_spec
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.records import (
    AudioDecoder,
    ImageDecoder,
    RunRecords,
    RunRecordSource,
    example_pb2,
)


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_every_payload_equals_the_record_store(tmp_path, backend):
    records = write_audio_run(str(tmp_path), num_records=23)
    store = RecordStore.open(str(tmp_path), "train", backend=backend)
    from_tensorflow = store.read(tf.range(store.num_records, dtype=tf.int64)).numpy().tolist()
    reader = RunRecords(str(tmp_path), "train")
    assert len(reader) == store.num_records == 23
    assert reader.run_id == store.run_id
    assert [reader.read(i) for i in range(len(reader))] == from_tensorflow == records
    assert [reader.locate(i) for i in range(len(reader))] == [
        store.locate(i) for i in range(len(reader))
    ]


def test_audio_records_decode_as_the_tensorflow_parser_reads_them(tmp_path):
    write_audio_run(str(tmp_path), num_records=17)
    source = RunRecordSource(str(tmp_path), "train")  # decode="auto": the audio job's
    assert source.decoder == AudioDecoder(SAMPLE_RATE)
    payloads = RecordStore.open(str(tmp_path), "train").read(tf.range(17, dtype=tf.int64))
    spec = dict(AUDIO_EXAMPLE_SPEC, **{layout.ID_KEY: tf.io.FixedLenFeature([], tf.string)})
    parsed = tf.io.parse_example(payloads, spec)
    for i in range(17):
        record = source[i]
        pcm = tf.io.decode_raw(parsed[layout.AUDIO_KEY][i], tf.int16, little_endian=True)
        assert record[layout.AUDIO_KEY].dtype == np.int16
        np.testing.assert_array_equal(record[layout.AUDIO_KEY], pcm.numpy())
        for key in (layout.SAMPLE_RATE_KEY, layout.LABEL_KEY, layout.ID_KEY):
            assert record[key] == parsed[key][i].numpy(), key
        assert record[layout.SAMPLE_RATE_KEY].dtype == np.int64


def test_raw_images_decode_as_the_tensorflow_parser_reads_them(tmp_path):
    write_image_run(str(tmp_path), num_records=9)
    source = RunRecordSource(str(tmp_path), "x")
    assert source.decoder == ImageDecoder()
    payloads = RecordStore.open(str(tmp_path), "x").read(tf.range(9, dtype=tf.int64))
    parsed = tf.io.parse_example(payloads, image_example_spec())
    pixels = tf.reshape(tf.io.decode_raw(parsed[layout.IMAGE_KEY], tf.uint8), [9, 5, 4, 3])
    for i in range(9):
        record = source[i]
        np.testing.assert_array_equal(record[layout.IMAGE_KEY], pixels[i].numpy())
        assert record[layout.IMAGE_KEY].dtype == np.uint8
        assert record[layout.ID_KEY] == parsed[layout.ID_KEY][i].numpy()
        assert record[layout.IMAGE_FORMAT_KEY] == b"raw"


def test_a_pickled_source_reads_the_same_records(tmp_path):
    # What a Grain worker process gets: a copy that opens its own files, checked.
    write_audio_run(str(tmp_path), num_records=6)
    source = RunRecordSource(str(tmp_path), "train", decode="bytes")
    source[0]
    copy = pickle.loads(pickle.dumps(source))
    assert [copy[i] for i in range(6)] == [source[i] for i in range(6)]
    assert copy.records.run_id == source.records.run_id


def test_the_messages_are_tensorflows_on_the_wire():
    # Field numbers, types, labels and packing of every field equal tf.train's own.
    described = 0
    for name, message in example_pb2.Example.DESCRIPTOR.file.message_types_by_name.items():
        for field in message.fields:
            other = getattr(tf.train, name).DESCRIPTOR.fields_by_name[field.name]
            assert _wire(field) == _wire(other), f"{name}.{field.name}"
            described += 1
    assert described == 8  # value x 3, the oneof's three lists, features, feature (the map)
    entries = [
        message.DESCRIPTOR.fields_by_name["feature"].message_type
        for message in (example_pb2.Features, tf.train.Features)
    ]
    assert [[_wire(field) for field in entry.fields] for entry in entries] == [
        [(1, 9, 1, False), (2, 11, 1, False)]
    ] * 2  # key: string, value: Feature
    assert all(entry.GetOptions().map_entry for entry in entries)


def _wire(field) -> tuple[int, int, int, bool]:
    """What a field is on the wire: its number, type, label and packing."""
    # Newer protobuf runtimes (upb, 6.x) drop `label` for `is_repeated`; these are proto2-style
    # messages with optional (1) and repeated (3) fields only.
    if hasattr(field, "label"):
        label = field.label
    else:
        label = field.LABEL_REPEATED if field.is_repeated else field.LABEL_OPTIONAL
    return field.number, field.type, label, field.GetOptions().packed
