"""Image records: decode once to validate, then store encoded bytes or fixed-size raw pixels."""

from __future__ import annotations

import dataclasses
import io
import struct
import warnings

import numpy as np
from PIL import Image

from components import examples, layout
from components.materialize import rejects

_MAGIC_FORMATS = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"))
_FORMATS = rejects.Formats("PNG or JPEG", "image", (".png", ".jpg", ".jpeg"), rejects.CORRUPT_IMAGE)

# Channels that `tf.io.decode_image(..., channels=0)` (what `components.inputs.parsing` reads
# encoded images with) returns, by PNG colour type: a palette image decodes to RGB, or RGBA when
# it has a tRNS chunk. Pillow's mode cannot tell: it opens 16-bit grey+alpha as RGBA.
_PNG_COLOUR_TYPE_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_PALETTE = 3
_PNG_COLOUR_TYPE_OFFSET = 25  # signature (8), IHDR length and type (8), width, height, depth
_JPEG_MODE_CHANNELS = {"L": 1, "RGB": 3}
# Pillow modes raw storage converts from; 16-bit and 32-bit grey are scaled to 8 bits first.
_RAW_SOURCE_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})
_WIDE_GREY_MODES = frozenset({"I;16", "I;16B", "I;16L", "I"})
_RAW_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


@dataclasses.dataclass(frozen=True)
class ImageStorage:
    """`mode="encoded"` keeps the PNG/JPEG bytes; `"raw"` stores `height x width x channels`
    uint8 pixels (row-major, HWC), resized with bilinear filtering.

    Raw pixels: 16-bit grey is scaled to 8 bits (`value >> 8`, as `tf.image.convert_image_dtype`
    does for 16-bit PNGs read encoded); grey becomes RGB by repetition, colour becomes grey by
    luminance (ITU-R 601-2); alpha is dropped, not composited (as the encoded-image reader does),
    and is 255 where `raw_channels=4` and the source has none.
    """

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
                channels = _decoded_channels(image, data)
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
    raise _FORMATS.unrecognized(data, record_id)


def _decoded_channels(image: Image.Image, data: bytes) -> int:
    """The channels `tf.io.decode_image(data, channels=0)` returns for this (decoded) file."""
    if image.format == "PNG":
        colour_type = data[_PNG_COLOUR_TYPE_OFFSET]
        if colour_type == _PNG_PALETTE and _png_has_chunk(data, b"tRNS"):
            return 4
        return _PNG_COLOUR_TYPE_CHANNELS[colour_type]
    if image.mode not in _JPEG_MODE_CHANNELS:
        raise rejects.RejectedInput(
            rejects.UNSUPPORTED_FORMAT, f"{image.format} colour mode {image.mode} is not supported"
        )
    return _JPEG_MODE_CHANNELS[image.mode]


def _png_has_chunk(data: bytes, chunk_type: bytes) -> bool:
    """Whether an ancillary chunk comes before the image data (where PNG requires tRNS)."""
    position = 8
    while position + 8 <= len(data):
        length, found = struct.unpack_from(">I4s", data, position)
        if found == chunk_type:
            return True
        if found == b"IDAT":
            return False
        position += 12 + length
    return False


def _raw_example(record_id: str, image: Image.Image, storage: ImageStorage) -> bytes:
    if image.mode in _WIDE_GREY_MODES:
        # Pillow's convert("L") clips 16-bit values at 255 (a white image) instead of scaling.
        image = Image.fromarray((np.clip(np.asarray(image), 0, 65535) >> 8).astype(np.uint8), "L")
    elif image.mode not in _RAW_SOURCE_MODES:
        raise rejects.RejectedInput(
            rejects.UNSUPPORTED_FORMAT, f"{image.format} colour mode {image.mode} is not supported"
        )
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
