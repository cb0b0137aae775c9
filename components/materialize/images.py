"""Image records: decode once to validate, then store encoded bytes or fixed-size raw pixels.

What is stored decodes where training reads it: the size a header declares is judged before any
pixel is decoded (`ImageStorage.max_pixels`), and a file stored as encoded bytes is checked for
what TensorFlow's decoders refuse and Pillow lets pass (`_check_png`, `_check_jpeg`) besides
Pillow's full decode.
"""

from __future__ import annotations

import dataclasses
import io
import re
import struct
import warnings
import zlib

import numpy as np
from PIL import Image

from tfx_dynamic_inputs import examples, layout
from tfx_dynamic_inputs.materialize import rejects
from tfx_dynamic_inputs.materialize.config import IMAGE_EXTENSIONS, MAX_IMAGE_PIXELS

_MAGIC_FORMATS = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"))
_FORMATS = rejects.Formats("PNG or JPEG", "image", IMAGE_EXTENSIONS, rejects.CORRUPT_IMAGE)

# Channels that `tf.io.decode_image(..., channels=0)` (what `tfx_dynamic_inputs.inputs.parsing`
# reads encoded images with) returns, by PNG colour type: a palette image decodes to RGB, or RGBA
# when it has a tRNS chunk. Pillow's mode cannot tell: it opens 16-bit grey+alpha as RGBA.
_PNG_COLOUR_TYPE_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_PALETTE = 3
_PNG_COLOUR_TYPE_OFFSET = 25  # signature (8), IHDR length and type (8), width, height, depth
_JPEG_MODE_CHANNELS = {"L": 1, "RGB": 3}
# Pillow modes raw storage converts from; 16-bit and 32-bit grey are scaled to 8 bits first.
_RAW_SOURCE_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})
_WIDE_GREY_MODES = frozenset({"I;16", "I;16B", "I;16L", "I"})
_RAW_MODES = {1: "L", 3: "RGB", 4: "RGBA"}

_PNG_SIGNATURE_BYTES = 8
_PNG_BIT_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_CRITICAL = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel in the image data
# libpng's default user limit on either side (PNG_USER_WIDTH_MAX / PNG_USER_HEIGHT_MAX).
_PNG_MAX_SIDE = 1_000_000
# Adam7 passes: (first column, first row, column step, row step).
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)
# Bytes inflated at a time when checking a PNG's image data (counted, not kept), and bytes of
# compressed data handed to zlib at a time.
_INFLATE_BLOCK = 1 << 20
_INFLATE_INPUT = 1 << 16
# JPEG: markers without a length (TEM, RST0-7, SOI, EOI), start-of-frame markers (not DHT, JPG,
# DAC), and in entropy-coded data the next marker (0xFF then neither 0x00, a stuffed 0xFF,
# nor RST0-7; fill bytes 0xFF may precede it).
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8), 0xD8})
_JPEG_EOI, _JPEG_SOS = 0xD9, 0xDA
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_NEXT_MARKER = re.compile(rb"\xff+([^\x00\xd0-\xd7\xff])")


@dataclasses.dataclass(frozen=True)
class ImageStorage:
    """`mode="encoded"` keeps the PNG/JPEG bytes; `"raw"` stores `height x width x channels`
    uint8 pixels (row-major, HWC), resized with bilinear filtering.

    Raw pixels: 16-bit grey is scaled to 8 bits (`value >> 8`, as `tf.image.convert_image_dtype`
    does for 16-bit PNGs read encoded); grey becomes RGB by repetition, colour becomes grey by
    luminance (ITU-R 601-2); alpha is dropped, not composited (as the encoded-image reader does),
    and is 255 where `raw_channels=4` and the source has none.

    `max_pixels` bounds every input image (width x height, as its header declares them: an
    `image_too_large` reject past it) and the raw size.
    """

    mode: str = "encoded"
    raw_height: int = 256
    raw_width: int = 256
    raw_channels: int = 3
    max_pixels: int = MAX_IMAGE_PIXELS

    def __post_init__(self):
        # Before anything is allocated: a raw size of 100000 x 100000 would ask Pillow for 30 GB.
        if self.mode == "raw" and self.raw_height * self.raw_width > self.max_pixels:
            raise ValueError(
                f"raw size {self.raw_height}x{self.raw_width} is more than max_pixels="
                f"{self.max_pixels} pixels"
            )


def image_example(record_id: str, data: bytes, storage: ImageStorage) -> bytes:
    """Validates one image file and returns its serialized `tf.train.Example`.

    Features: `id`, `image` (file bytes, or raw pixels), `image_format` (b"png", b"jpeg" or
    b"raw"), `height`, `width`, `channels` (of what `image` decodes to). Raises
    `RejectedInput(UNSUPPORTED_FORMAT | CORRUPT_IMAGE | IMAGE_TOO_LARGE)`: IMAGE_TOO_LARGE
    from the header, before a pixel is decoded.

    Args:
        record_id: the image's id (its path below the root).
        data: the file's bytes.
        storage: how the image is stored.

    Returns:
        The serialized `tf.train.Example`.

    Raises:
        RejectedInput: as above.
    """
    image_format = _sniff_format(record_id, data)
    if image_format == "PNG":
        width, height = _check_png(data, storage.max_pixels)
    else:
        width, height = _check_jpeg(data, storage.max_pixels)
    try:
        with warnings.catch_warnings():
            # `max_pixels`, checked above, stands in for Pillow's own bomb warning.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[image_format]) as image:
                if image.size != (width, height):
                    raise rejects.RejectedInput(
                        rejects.CORRUPT_IMAGE,
                        f"Pillow reads a {image.width}x{image.height} image, its header "
                        f"declares {width}x{height}",
                    )
                image.load()
                if storage.mode == "raw":
                    return _raw_example(record_id, image, storage)
                channels = _decoded_channels(image, data)
                height, width = image.height, image.width
    except rejects.RejectedInput:
        raise
    except Image.DecompressionBombError as error:  # Pillow's own limit, if set below ours
        raise rejects.RejectedInput(rejects.IMAGE_TOO_LARGE, _one_line(error)) from error
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


def _too_large(width: int, height: int, max_pixels: int, image_format: str) -> None:
    if width * height > max_pixels:
        raise rejects.RejectedInput(
            rejects.IMAGE_TOO_LARGE,
            f"its {image_format} header declares {width}x{height} = {width * height} pixels; "
            f"the limit is {max_pixels} (--max_image_pixels)",
        )


def _png_corrupt(detail: str) -> rejects.RejectedInput:
    return rejects.RejectedInput(rejects.CORRUPT_IMAGE, f"PNG: {detail}")


def _check_png(data: bytes, max_pixels: int) -> tuple[int, int]:
    """(width, height) of a PNG whose IHDR, chunk structure and image data libpng (what
    `tf.io.decode_image` reads PNGs with) accepts; raises `RejectedInput` otherwise.

    Pillow decodes a PNG without reading the CRC of its image data (IDAT) or of the chunks after
    it, stops inflating once it has its pixels and takes a short zlib stream as all-zero rows;
    libpng refuses each of these ("Invalid PNG data" at every epoch). Checked here: the size
    against `max_pixels` first (IHDR, before anything is inflated); every critical chunk's CRC
    (libpng only warns about ancillary ones); that the chunks reach IEND; and that the first run
    of IDAT chunks inflates, without a zlib error, to at least the bytes IHDR asks for and then
    ends, with its Adler-32 (more data is what libpng tolerates: "Too much image data"). Inflated
    bytes are counted, not kept.
    """
    header_end = _PNG_SIGNATURE_BYTES + 8 + 13
    if len(data) < header_end + 4 or data[12:16] != b"IHDR" or data[8:12] != b"\0\0\0\r":
        raise _png_corrupt("no IHDR chunk at its start")
    width, height, depth, colour_type, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    if not (0 < width < 1 << 31 and 0 < height < 1 << 31):
        raise _png_corrupt(f"IHDR declares a {width}x{height} image")
    _too_large(width, height, max_pixels, "PNG")
    if max(width, height) > _PNG_MAX_SIDE:
        raise rejects.RejectedInput(
            rejects.IMAGE_TOO_LARGE,
            f"its PNG header declares {width}x{height}; libpng (TensorFlow's PNG decoder) reads "
            f"no side over {_PNG_MAX_SIDE} pixels",
        )
    if depth not in _PNG_BIT_DEPTHS.get(colour_type, ()) or interlace > 1:
        raise _png_corrupt(
            f"IHDR declares colour type {colour_type}, bit depth {depth}, interlace {interlace}"
        )
    bits_per_pixel = depth * _PNG_SAMPLES[colour_type]
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    needed = 0
    for x0, y0, dx, dy in passes:
        columns, rows = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if columns > 0 and rows > 0:
            needed += rows * (1 + -(-columns * bits_per_pixel // 8))
    inflater = zlib.decompressobj()
    inflated = 0
    view = memoryview(data)
    palette = False
    idat_state = "before"  # "in" the first run of IDAT chunks, then "after" it
    position = _PNG_SIGNATURE_BYTES
    while True:
        if position + 8 > len(data):
            raise _png_corrupt(f"cut short at byte {position}: no IEND chunk")
        length, chunk_type = struct.unpack_from(">I4s", data, position)
        end = position + 12 + length
        if length >= 1 << 31 or end > len(data):
            raise _png_corrupt(
                f"cut short: chunk {chunk_type!r} at byte {position} runs past the end"
            )
        if not chunk_type.isalpha() or not chunk_type.isascii():
            raise _png_corrupt(f"invalid chunk type {chunk_type!r} at byte {position}")
        if not chunk_type[0] & 0x20:  # critical (IHDR, PLTE, IDAT, IEND): libpng checks the CRC
            if chunk_type not in _PNG_CRITICAL:
                raise _png_corrupt(f"unknown critical chunk {chunk_type!r} at byte {position}")
            (stored,) = struct.unpack_from(">I", data, end - 4)
            if zlib.crc32(view[position + 4 : end - 4]) != stored:
                raise _png_corrupt(
                    f"CRC mismatch in chunk {chunk_type.decode('latin-1')!r} at byte {position}"
                )
        if chunk_type == b"PLTE":
            palette = True
        if chunk_type == b"IDAT" and idat_state != "after":
            if colour_type == _PNG_PALETTE and not palette:
                raise _png_corrupt("a palette image without a PLTE chunk before its image data")
            idat_state = "in"
            try:
                # Fed in pieces, so what zlib hands back unconsumed stays small.
                for start in range(position + 8, end - 4, _INFLATE_INPUT):
                    piece = view[start : min(start + _INFLATE_INPUT, end - 4)]
                    while piece and inflated <= needed and not inflater.eof:
                        inflated += len(inflater.decompress(piece, _INFLATE_BLOCK))
                        piece = inflater.unconsumed_tail
            except zlib.error as error:
                raise _png_corrupt(f"image data does not inflate ({error})") from error
        elif idat_state == "in":
            idat_state = "after"
        if chunk_type == b"IEND":
            break
        position = end
    if idat_state == "before":
        raise _png_corrupt("no IDAT chunk")
    if inflated < needed:
        raise _png_corrupt(
            f"image data inflates to {inflated} bytes, the {width}x{height} image needs {needed}"
        )
    if inflated == needed and not inflater.eof:
        raise _png_corrupt("the image data's zlib stream does not end (no Adler-32 checksum)")
    return width, height


def _check_jpeg(data: bytes, max_pixels: int) -> tuple[int, int]:
    """(width, height) of a JPEG whose markers reach an end-of-image (EOI) marker, as libjpeg
    reads them; raises `RejectedInput` otherwise.

    The size (the first start-of-frame marker) is judged against `max_pixels` as soon as it is
    read. Pillow decodes a JPEG whose data runs out before EOI (or whose marker segment runs past
    the end) by making up the end; TensorFlow's decoder fails reading past the end, so such a
    file is refused here ("cut short"), also in the rare case (a tiny image) where the decoder
    happens not to need the missing bytes. Entropy-coded data is skipped to its next marker, as
    libjpeg does.
    """
    size: tuple[int, int] | None = None
    position = 2  # after SOI
    while True:
        marker_at = data.find(b"\xff", position)
        while 0 <= marker_at < len(data) - 1 and data[marker_at + 1] == 0xFF:
            marker_at += 1  # fill bytes
        if marker_at < 0 or marker_at + 1 >= len(data):
            raise rejects.RejectedInput(
                rejects.CORRUPT_IMAGE, "JPEG: cut short: no end-of-image marker"
            )
        marker = data[marker_at + 1]
        position = marker_at + 2
        if marker == _JPEG_EOI:
            break
        if marker in _JPEG_STANDALONE or marker == 0x00:
            continue
        if position + 2 > len(data):
            raise rejects.RejectedInput(rejects.CORRUPT_IMAGE, "JPEG: cut short in a marker")
        (length,) = struct.unpack_from(">H", data, position)
        if length < 2 or position + length > len(data):
            raise rejects.RejectedInput(
                rejects.CORRUPT_IMAGE,
                f"JPEG: cut short: marker 0x{marker:02X} at byte {marker_at} declares "
                f"{length} bytes, past the end",
            )
        if marker in _JPEG_SOF and size is None and length >= 7:
            height, width = struct.unpack_from(">HH", data, position + 3)
            size = (width, height)
            _too_large(width, height, max_pixels, "JPEG")
        position += length
        if marker == _JPEG_SOS:
            found = _JPEG_NEXT_MARKER.search(data, position)
            position = len(data) if found is None else found.start()
    if size is None:
        raise rejects.RejectedInput(rejects.CORRUPT_IMAGE, "JPEG: no start-of-frame marker")
    return size


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
