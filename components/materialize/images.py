"""Image records: decode once to validate, then store encoded bytes or fixed-size raw pixels."""

from __future__ import annotations

import dataclasses
import io
import posixpath
import warnings

from PIL import Image

from components import examples, layout
from components.materialize import rejects

_MAGIC_FORMATS = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"))
_IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")

# Channels that `tf.io.decode_image(..., channels=0)` returns for each decoded Pillow mode; a
# palette image decodes to RGB, or RGBA when it has a transparent colour.
_MODE_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_RAW_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


@dataclasses.dataclass(frozen=True)
class ImageStorage:
    """`mode="encoded"` keeps the PNG/JPEG bytes; `"raw"` stores `height x width x channels`
    uint8 pixels (row-major, HWC), resized with bilinear filtering."""

    mode: str = "encoded"
    raw_height: int = 256
    raw_width: int = 256
    raw_channels: int = 3


def image_example(record_id: str, data: bytes, storage: ImageStorage) -> bytes:
    """Validates one image file and returns its serialized `tf.train.Example`.

    Features: `id`, `image` (file bytes, or raw pixels), `image_format` (b"png", b"jpeg" or
    b"raw"), `height`, `width`, `channels` (of what `image` decodes to). Raises
    `RejectedInput(UNSUPPORTED_FORMAT | CORRUPT_IMAGE)`.
    """
    image_format = _sniff_format(record_id, data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[image_format]) as image:
                image.load()
                if storage.mode == "raw":
                    return _raw_example(record_id, image, storage)
                channels = _decoded_channels(image)
                height, width = image.height, image.width
    except rejects.RejectedInput:
        raise
    except Exception as error:  # Any decoder failure is a property of this file.
        raise rejects.RejectedInput(rejects.CORRUPT_IMAGE, _one_line(error)) from error
    return examples.serialize_example(
        {
            layout.ID_KEY: examples.bytes_feature(record_id.encode("utf-8")),
            layout.IMAGE_KEY: examples.bytes_feature(data),
            layout.IMAGE_FORMAT_KEY: examples.bytes_feature(image_format.lower().encode()),
            layout.HEIGHT_KEY: examples.int64_feature(height),
            layout.WIDTH_KEY: examples.int64_feature(width),
            layout.CHANNELS_KEY: examples.int64_feature(channels),
        }
    )


def _sniff_format(record_id: str, data: bytes) -> str:
    for magic, image_format in _MAGIC_FORMATS:
        if data.startswith(magic):
            return image_format
    extension = posixpath.splitext(record_id)[1].lower()
    if extension in _IMAGE_EXTENSIONS:
        what = "empty file" if not data else "content is not PNG or JPEG"
        raise rejects.RejectedInput(rejects.CORRUPT_IMAGE, f"{what} (extension {extension})")
    raise rejects.RejectedInput(
        rejects.UNSUPPORTED_FORMAT, f"not a PNG or JPEG image (extension {extension or 'none'!r})"
    )


def _decoded_channels(image: Image.Image) -> int:
    if image.mode == "P":
        return 4 if "transparency" in image.info else 3
    if image.mode not in _MODE_CHANNELS:
        raise rejects.RejectedInput(
            rejects.UNSUPPORTED_FORMAT, f"{image.format} colour mode {image.mode} is not supported"
        )
    return _MODE_CHANNELS[image.mode]


def _raw_example(record_id: str, image: Image.Image, storage: ImageStorage) -> bytes:
    _decoded_channels(image)
    pixels = image.convert(_RAW_MODES[storage.raw_channels]).resize(
        (storage.raw_width, storage.raw_height), Image.Resampling.BILINEAR
    )
    return examples.serialize_example(
        {
            layout.ID_KEY: examples.bytes_feature(record_id.encode("utf-8")),
            layout.IMAGE_KEY: examples.bytes_feature(pixels.tobytes()),
            layout.IMAGE_FORMAT_KEY: examples.bytes_feature(b"raw"),
            layout.HEIGHT_KEY: examples.int64_feature(storage.raw_height),
            layout.WIDTH_KEY: examples.int64_feature(storage.raw_width),
            layout.CHANNELS_KEY: examples.int64_feature(storage.raw_channels),
        }
    )


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__
