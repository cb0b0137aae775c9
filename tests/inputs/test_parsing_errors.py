"""Images that cannot take the `ImageSpec` shape fail naming their record; grey + alpha reads."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.parsing import ImageSpec, image_example_parser


def _example(record_id: bytes, image: bytes, image_format: bytes, shape) -> bytes:
    def ints(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def strings(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    height, width, channels = shape
    feature = {
        layout.ID_KEY: strings(record_id),
        layout.IMAGE_KEY: strings(image),
        layout.IMAGE_FORMAT_KEY: strings(image_format),
        layout.HEIGHT_KEY: ints(height),
        layout.WIDTH_KEY: ints(width),
        layout.CHANNELS_KEY: ints(channels),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


GOOD = _example(b"good.raw", bytes(4 * 5 * 3), b"raw", (4, 5, 3))


@pytest.mark.parametrize(
    "record_id, payload, shape, message",
    [
        (b"dir/short.raw", bytes(10), (4, 5, 3), "raw bytes"),
        (b"dir/five.raw", bytes(4 * 5 * 5), (4, 5, 5), "1 to 4 channels"),
    ],
)
@pytest.mark.parametrize("channels", [1, 3])
def test_an_image_that_cannot_take_the_spec_shape_names_its_record(
    record_id, payload, shape, message, channels
):
    bad = _example(record_id, payload, b"raw", shape)
    parse = image_example_parser(ImageSpec(4, 5, channels))
    dataset = tf.data.Dataset.from_tensor_slices([GOOD, bad]).batch(2).map(parse)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message) as caught:
        list(dataset)
    assert record_id.decode() in caught.value.message


def test_grey_alpha_images_read_as_grey_with_alpha_dropped():
    pixels = np.random.default_rng(0).integers(0, 256, (4, 5, 2), dtype=np.uint8)
    png = tf.io.encode_png(pixels).numpy()
    raw = pixels.tobytes()
    records = [
        _example(b"la.png", png, b"png", (4, 5, 2)),
        _example(b"la.raw", raw, b"raw", (4, 5, 2)),
    ]
    for channels in (1, 3):
        images = image_example_parser(ImageSpec(4, 5, channels))(tf.constant(records)).numpy()
        expected = np.repeat(pixels[..., :1], channels, axis=-1)
        np.testing.assert_array_equal(images, np.stack([expected, expected]))
