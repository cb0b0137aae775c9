"""TFRecord frames built in Python, and shards written from them through Beam's `FileSystems`, so a
Beam worker that only writes never imports TensorFlow.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator

import google_crc32c
import numpy as np

from tfx_dynamic_inputs.layout.filesystem import create, replace
from tfx_dynamic_inputs.layout.names import CRC_MASK_DELTA, FRAME_OVERHEAD_BYTES


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of `data`, masked as TFRecord frames store it.

    Args:
        data: The bytes to checksum (a frame's 8-byte length or its payload).

    Returns:
        The masked CRC, a uint32 value as a Python int.
    """
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


def tfrecord_frame(record: bytes) -> bytes:
    """One TFRecord frame: the bytes `tf.io.TFRecordWriter` writes for `record`, uncompressed.

    Args:
        record: The payload (a serialized `tf.train.Example`, or any bytes).

    Returns:
        uint64 length, its masked CRC, the payload and its masked CRC (`len(record) + 16` bytes).

    Example:
        shard.write(tfrecord_frame(example.SerializeToString()))
    """
    header, footer = frame_parts(record)
    return b"".join((header, record, footer))


def frame_parts(record: bytes) -> tuple[bytes, bytes]:
    """The header and the footer of `record`'s TFRecord frame (its frame is header + record +
    footer): written around the record, they frame it without copying it into a joined frame,
    which for a payload of hundreds of KB costs a fresh allocation as large.

    Args:
        record: The payload.

    Returns:
        (uint64 length and its masked CRC, the payload's masked CRC).
    """
    length = struct.pack("<Q", len(record))
    header = length + struct.pack("<I", masked_crc32c(length))
    return header, struct.pack("<I", masked_crc32c(record))


def write_shard(path: str, records: Iterable[bytes]) -> np.ndarray:
    """Writes serialized records to one uncompressed TFRecord shard at any Beam `FileSystems` path,
    streaming: each record is framed and written as it comes, never held with the others.

    Args:
        path: The shard's path; it is written whole or not at all (see `write_frames`).
        records: The n serialized records of the shard, in order; a generator is consumed once.

    Returns:
        int64 [n, 2]: the frame offset and payload length of each record, in order.

    Example:
        offsets = write_shard(os.path.join(examples_dir(run, "x"), shard_name(0, 1)), records)
    """
    lengths: list[int] = []

    def pieces() -> Iterator[bytes]:
        for record in records:
            header, footer = frame_parts(record)
            lengths.append(len(record))
            yield from (header, record, footer)

    _write_whole(path, pieces())
    return _frame_offsets(np.array(lengths, np.int64))


def _write_whole(path: str, pieces: Iterable[bytes]) -> None:
    """Writes `pieces` in turn to a temporary name beside `path`, then renames it to `path`, so
    a reader never sees half a shard."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with create(temporary) as f:
        for piece in pieces:
            f.write(piece)
    replace(temporary, path)


def _frame_offsets(lengths: np.ndarray) -> np.ndarray:
    """int64 [n, 2]: the frame offset and payload length of frames of payload `lengths`, written
    back to back (every frame is payload + 16 bytes)."""
    frame_ends = np.cumsum(lengths + FRAME_OVERHEAD_BYTES)
    return np.stack([frame_ends - (lengths + FRAME_OVERHEAD_BYTES), lengths], axis=1)


def write_frames(path: str, frames: Iterable[bytes], lengths: np.ndarray) -> np.ndarray:
    """Writes ready TFRecord frames as one shard.

    Offsets follow from the lengths (every frame is payload + 16 bytes), so nothing is read back.
    The shard is written to a temporary name and renamed, so a reader never sees half a shard;
    an existing file at `path` is replaced.

    Args:
        path: The shard's path (any Beam `FileSystems` path).
        frames: The n frames (`tfrecord_frame`), in order; a generator is consumed once.
        lengths: int64 [n] (any shape, flattened): the payload length of each frame.

    Returns:
        int64 [n, 2]: the frame offset and payload length of each record, in order.

    Raises:
        OSError (`BeamIOError` with Beam): the temporary file cannot be renamed to `path` (and
            `path` does not exist).
    """
    lengths = np.asarray(lengths, np.int64).reshape([-1])
    _write_whole(path, frames)
    return _frame_offsets(lengths)
