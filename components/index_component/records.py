"""Reading the records of an `Examples` artifact in a Beam worker, without TensorFlow.

`read_frames(path)` yields every record of one TFRecord file (GZIP or uncompressed) with its
position in the file; `ExampleFeatures` reads the few features the indexing job needs (label, id,
group) out of a serialized `tf.train.Example`. Neither imports TensorFlow (a 10-25 s start-up per
worker process, see `tfx_dynamic_inputs.layout`): the Example messages are built from their field
numbers in a descriptor pool of their own (wire compatible with `tensorflow.Example`, and
no clash with it when TensorFlow is loaded in the same process), parsed by protobuf's C++ code.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import IO, NamedTuple

from tfx_dynamic_inputs import layout

GZIP = "gzip"
UNCOMPRESSED = "uncompressed"
_GZIP_MAGIC = b"\x1f\x8b"


class RecordFileError(ValueError):
    """A record file of the input is not a readable TFRecord file: it names the file, the record
    and what is wrong (a truncated frame, a CRC mismatch, a stream that does not decompress)."""


def compression_of(path: str) -> str:
    """`GZIP` or `UNCOMPRESSED`: by extension as `ReadFromTFRecord`'s AUTO does (TFX writes
    `*.gz`), and by content for files without it: a file that starts with the gzip magic and not
    with a valid TFRecord header (its length CRC) is gzip.

    Args:
        path: a TFRecord file (any Beam path).

    Returns:
        `GZIP` or `UNCOMPRESSED`.

    Raises:
        RecordFileError: for another compression its extension names (e.g. `.bz2`).
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    detected = CompressionTypes.detect_compression_type(path)
    if detected == CompressionTypes.GZIP:
        return GZIP
    if detected != CompressionTypes.UNCOMPRESSED:
        raise RecordFileError(
            f"{path}: {detected} compression is not supported; TFX writes GZIP or uncompressed "
            "TFRecord files"
        )
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        head = f.read(layout.FRAME_HEADER_BYTES)
    if head.startswith(_GZIP_MAGIC) and not _valid_header(head):
        return GZIP
    return UNCOMPRESSED


def _valid_header(header: bytes) -> bool:
    if len(header) < layout.FRAME_HEADER_BYTES:
        return False
    (crc,) = struct.unpack("<I", header[8:12])
    return layout.masked_crc32c(header[:8]) == crc


def read_frames(path: str, compression: str) -> Iterator[bytes]:
    """The records of one TFRecord file, in file order; CRCs checked.

    Raises `RecordFileError` naming the file and record number when the file is damaged (a frame
    cut short, a CRC mismatch) or does not decompress.

    Args:
        path: the TFRecord file.
        compression: `GZIP` or `UNCOMPRESSED` (`compression_of`).

    Returns:
        An iterator of the serialized records.

    Raises:
        RecordFileError: as above.

    Example:
        for record in read_frames(path, compression_of(path)): ...
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    kind = CompressionTypes.GZIP if compression == GZIP else CompressionTypes.UNCOMPRESSED
    position = 0
    try:
        with FileSystems.open(path, compression_type=kind) as f:
            while (record := _read_frame(f, path, position)) is not None:
                yield record
                position += 1
    except (OSError, EOFError, zlib.error) as error:  # a gzip stream that does not decompress
        raise RecordFileError(
            f"{path}: record {position}: {compression} stream: {error}"
        ) from error


def _read_frame(f: IO[bytes], path: str, position: int) -> bytes | None:
    header = f.read(layout.FRAME_HEADER_BYTES)
    if not header:
        return None
    where = f"{path}: record {position}"
    if len(header) < layout.FRAME_HEADER_BYTES:
        raise RecordFileError(f"{where}: truncated frame header ({len(header)} bytes)")
    if not _valid_header(header):
        raise RecordFileError(f"{where}: the length CRC does not match: not a TFRecord frame")
    (length,) = struct.unpack("<Q", header[:8])
    payload = f.read(length)
    footer = f.read(layout.FRAME_FOOTER_BYTES)
    if len(payload) != length or len(footer) != layout.FRAME_FOOTER_BYTES:
        raise RecordFileError(f"{where}: truncated record ({len(payload)} of {length} bytes)")
    if struct.unpack("<I", footer)[0] != layout.masked_crc32c(payload):
        raise RecordFileError(f"{where}: the payload CRC does not match (a damaged record)")
    return payload


class Values(NamedTuple):
    """One feature of an Example: `kind` is "bytes_list", "float_list" or "int64_list" (None
    when the feature holds no list), `values` its values."""

    kind: str | None
    values: list


class ExampleFeatures:
    """Reads named features out of serialized `tf.train.Example`s."""

    def __init__(self):
        self._example_class = _example_class()

    def read(self, serialized: bytes, keys: tuple[str, ...]) -> dict[str, Values] | None:
        """`Values` of each of `keys` the Example has (absent keys left out); None when
        `serialized` is not an Example.

        Args:
            serialized: one serialized record.
            keys: the feature names to read.

        Returns:
            Feature name -> `Values` (its kind and values), or None.
        """
        from google.protobuf.message import DecodeError

        example = self._example_class()
        try:
            example.ParseFromString(serialized)
        except DecodeError:
            return None
        found = {}
        feature_map = example.features.feature
        for key in keys:
            if key in feature_map:
                feature = feature_map[key]
                kind = feature.WhichOneof("kind")
                found[key] = Values(kind, list(getattr(feature, kind).value) if kind else [])
        return found


def _example_class():
    """The `Example` message class, built from the field numbers of `tensorflow.Example`
    (tensorflow/core/example/{example,feature}.proto) in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfx_dynamic_inputs/example.proto", package="tfx_dynamic_inputs", syntax="proto3"
    )

    def message(name: str, *fields: tuple, nested=(), options=None):
        added = proto.message_type.add(name=name) if options is None else options.add(name=name)
        for field_name, number, field_type, label, type_name, oneof in fields:
            entry = added.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                entry.type_name = type_name
            if oneof is not None:
                entry.oneof_index = oneof
        for build in nested:
            build(added.nested_type)
        return added

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    for name, value_type in (
        ("BytesList", field.TYPE_BYTES),
        ("FloatList", field.TYPE_FLOAT),
        ("Int64List", field.TYPE_INT64),
    ):
        message(name, ("value", 1, value_type, repeated, "", None))
    feature = message(
        "Feature",
        ("bytes_list", 1, field.TYPE_MESSAGE, optional, ".tfx_dynamic_inputs.BytesList", 0),
        ("float_list", 2, field.TYPE_MESSAGE, optional, ".tfx_dynamic_inputs.FloatList", 0),
        ("int64_list", 3, field.TYPE_MESSAGE, optional, ".tfx_dynamic_inputs.Int64List", 0),
    )
    feature.oneof_decl.add(name="kind")

    def feature_entry(nested):
        entry = message(
            "FeatureEntry",
            ("key", 1, field.TYPE_STRING, optional, "", None),
            ("value", 2, field.TYPE_MESSAGE, optional, ".tfx_dynamic_inputs.Feature", None),
            options=nested,
        )
        entry.options.map_entry = True

    message(
        "Features",
        (
            "feature",
            1,
            field.TYPE_MESSAGE,
            repeated,
            ".tfx_dynamic_inputs.Features.FeatureEntry",
            None,
        ),
        nested=(feature_entry,),
    )
    message(
        "Example",
        ("features", 1, field.TYPE_MESSAGE, optional, ".tfx_dynamic_inputs.Features", None),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName("tfx_dynamic_inputs.Example")
    )
