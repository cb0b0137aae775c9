"""Batched image parsing of materialized Examples and the Example payload check."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.inputs import runs
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.parsing import ImageSpec, example_check, image_example_parser
from tfx_dynamic_inputs.inputs.record_store import DamagedRecordError, RecordStore


def _encoded_example(pixels: np.ndarray, image_format: bytes) -> bytes:
    encoded = {
        b"png": lambda p: tf.io.encode_png(p).numpy(),
        b"jpeg": lambda p: tf.io.encode_jpeg(p, quality=100).numpy(),
    }[image_format](pixels)
    height, width, channels = pixels.shape
    feature = {
        layout.IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        layout.IMAGE_FORMAT_KEY: tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[image_format])
        ),
        layout.HEIGHT_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
        layout.WIDTH_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
        layout.CHANNELS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[channels])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_raw_images_of_the_target_shape_decode_exactly():
    rng = np.random.default_rng(0)
    images = runs.random_images(rng, 5, shape=(4, 5, 3))
    records = [runs.image_example(f"id{i}", p) for i, p in enumerate(images)]
    parsed = image_example_parser(ImageSpec(4, 5, 3))(tf.constant(records))
    assert parsed.dtype == tf.uint8 and parsed.shape == [5, 4, 5, 3]
    np.testing.assert_array_equal(parsed.numpy(), np.stack(images))


def test_png_and_mixed_batches_decode_and_resize():
    rng = np.random.default_rng(1)
    same = rng.integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    grey_big = rng.integers(0, 256, size=(8, 10, 1), dtype=np.uint8)
    records = [
        _encoded_example(same, b"png"),
        runs.image_example("raw", same),
        _encoded_example(grey_big, b"png"),
        _encoded_example(same, b"jpeg"),
    ]
    parsed = image_example_parser(ImageSpec(4, 5, 3))(tf.constant(records)).numpy()
    np.testing.assert_array_equal(parsed[0], same)
    np.testing.assert_array_equal(parsed[1], same)
    assert parsed[2].shape == (4, 5, 3)
    np.testing.assert_array_equal(parsed[2][..., 0], parsed[2][..., 1])  # grey -> RGB
    expected_grey = tf.image.resize(grey_big.astype(np.float32), [4, 5]).numpy()[..., 0]
    assert np.abs(parsed[2][..., 0].astype(float) - expected_grey).max() <= 1.0
    jpeg = tf.io.decode_jpeg(tf.io.encode_jpeg(same, quality=100)).numpy()
    np.testing.assert_array_equal(parsed[3], jpeg)


def test_float_and_grey_output():
    pixels = np.full([2, 2, 3], 255, np.uint8)
    parsed = image_example_parser(ImageSpec(2, 2, 1, tf.float32))(
        tf.constant([runs.image_example("a", pixels)])
    )
    assert parsed.dtype == tf.float32 and parsed.shape == [1, 2, 2, 1]
    np.testing.assert_allclose(parsed.numpy(), 1.0, atol=1e-2)


def test_image_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="channels"):
        ImageSpec(2, 2, 2)
    with pytest.raises(ValueError, match="dtype"):
        ImageSpec(2, 2, 3, tf.int32)
    with pytest.raises(ValueError, match="height and width"):
        ImageSpec(0, 2)


def test_example_check_reasons():
    check = example_check([layout.IMAGE_KEY])
    good = runs.image_example("a", np.zeros([2, 2, 3], np.uint8))
    assert check(good) is None
    assert "unparsable" in check(b"\xff\xff\xff garbage")
    assert "lacks feature" in check(tf.train.Example().SerializeToString())
    short = tf.train.Example.FromString(good)
    short.features.feature[layout.IMAGE_KEY].bytes_list.value[0] = b"\x00" * 5
    assert "do not match 2x2x3" in check(short.SerializeToString())


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_unparsable_example_is_a_damaged_record(tmp_path, backend):
    rng = np.random.default_rng(2)
    records = [runs.image_example(f"i{i}", p) for i, p in enumerate(runs.random_images(rng, 9))]
    records[4] = b"\xff\xff\xff not an example"
    output_dir = str(tmp_path)
    runs.write_record_set(output_dir, "x", records, num_shards=2)
    check = example_check([layout.IMAGE_KEY])
    shard, offset = RecordStore.open(output_dir, "x", backend="disk").locate(4)
    expected = rf"record 4 \(shard {shard}, offset {offset}\): unparsable tf.train.Example"
    if backend == "memory":
        with pytest.raises(DamagedRecordError, match=expected):
            RecordStore.open(output_dir, "x", backend=backend, payload_check=check)
    else:
        store = RecordStore.open(output_dir, "x", backend=backend, payload_check=check)
        with pytest.raises(DamagedRecordError, match=expected):
            store.read([3, 4])
    skipping = RecordStore.open(
        output_dir, "x", backend=backend, payload_check=check, on_damaged="skip"
    )
    got, ok = skipping.read_checked([3, 4])
    assert ok.numpy().tolist() == [True, False]
    assert skipping.damaged_count.numpy() == 1
    assert [d.index for d in skipping.damaged_records] == [4]
