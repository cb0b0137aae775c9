"""`tf.train.Example` records built in pure Python: every record this project writes.

The Beam jobs' image and audio records, and the records `sources` and `class_balanced` build
from in-memory data. The protobuf wire format of Example / Features / Feature / BytesList /
Int64List is written by hand so that a Beam worker of the pairs job never imports TensorFlow (a
~6 s start-up per worker process), at about half the cost of building `tf.train` messages.
The bytes equal `tf.train.Example(...).SerializeToString(deterministic=True)` (tested): the
feature map is written sorted by the UTF-8 bytes of its keys, as deterministic serialization
does, because the default order follows hashing and differs between processes, which would
break byte-identical re-runs."""

from __future__ import annotations

# A `tf.train.Feature` message, serialized: what `bytes_feature` / `int64_feature` return and
# `serialize_example` takes.
Feature = bytes

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1

# Tags (field number << 3 | wire type 2, length-delimited) of the fields written here: each
# is field 1 of its message except Feature.int64_list (3) and a map entry's value (2).
_FIELD_1 = b"\x0a"
_MAP_VALUE = b"\x12"
_INT64_LIST = b"\x1a"


def _varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer below 2**64."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def bytes_feature(value: bytes | memoryview) -> Feature:
    """A Feature holding `BytesList(value=[value])`.

    Args:
        value: the bytes (anything `bytes()` takes).

    Returns:
        The serialized Feature.

    Example:
        serialize_example({"id": bytes_feature(b"a.png")})
    """
    # A memoryview (a slice of a spill file's read) is joined as it is, not copied first.
    if not isinstance(value, bytes) and not (
        isinstance(value, memoryview) and value.format == "B" and value.ndim == 1
    ):
        value = bytes(value)
    inner_header = _FIELD_1 + _varint(len(value))
    # One join: nesting `_length_delimited` would copy a large value once per level.
    return b"".join((_FIELD_1, _varint(len(inner_header) + len(value)), inner_header, value))


def int64_feature(value: int) -> Feature:
    """A Feature holding `Int64List(value=[value])`; raises ValueError outside int64.

    Args:
        value: an integer in [-2**63, 2**63).

    Returns:
        The serialized Feature.

    Raises:
        ValueError: when `value` is outside int64.
    """
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} is out of the int64 range")
    # int64 is a packed repeated field; a negative value is its 64-bit two's complement.
    packed = _length_delimited(_FIELD_1, _varint(value & _UINT64_MASK))
    return _length_delimited(_INT64_LIST, packed)


def serialize_example(features: dict[str, Feature]) -> bytes:
    """The serialized `tf.train.Example` of a feature map, keys in UTF-8 byte order.

    Args:
        features: feature name -> serialized Feature (`bytes_feature`, `int64_feature`).

    Returns:
        The Example's bytes, as `tf.train.Example.SerializeToString(deterministic=True)`.

    Example:
        serialize_example({"label": int64_feature(3), "id": bytes_feature(b"a")})
    """
    encoded = sorted((key.encode("utf-8"), feature) for key, feature in features.items())
    # The parts of every map entry, joined once at the end: the audio payload of an utterance is
    # hundreds of KB, and each nested concatenation would copy it again.
    parts: list[bytes] = []
    for key, feature in encoded:
        key_field = _length_delimited(_FIELD_1, key)
        value_header = _MAP_VALUE + _varint(len(feature))
        entry_length = len(key_field) + len(value_header) + len(feature)
        parts += (_FIELD_1, _varint(entry_length), key_field, value_header, feature)
    entries_length = sum(len(part) for part in parts)
    return b"".join((_FIELD_1, _varint(entries_length), *parts))
