"""TFRecord frames built in Python, and shards written from them through Beam's `FileSystems`, so a
Beam worker that only writes never imports TensorFlow.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

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
    length = struct.pack("<Q", len(record))
    return b"".join(
        (
            length,
            struct.pack("<I", masked_crc32c(length)),
            record,
            struct.pack("<I", masked_crc32c(record)),
        )
    )


def write_shard(path: str, records: list[bytes]) -> np.ndarray:
    """Writes serialized records to one uncompressed TFRecord shard at any Beam `FileSystems` path.

    Args:
        path: The shard's path; it is written whole or not at all (see `write_frames`).
        records: The n serialized records of the shard, in order.

    Returns:
        int64 [n, 2]: the frame offset and payload length of each record, in order.

    Example:
        offsets = write_shard(os.path.join(examples_dir(run, "x"), shard_name(0, 1)), records)
    """
    lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    return write_frames(path, (tfrecord_frame(record) for record in records), lengths)


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
    frame_ends = np.cumsum(lengths + FRAME_OVERHEAD_BYTES)
    offsets = frame_ends - (lengths + FRAME_OVERHEAD_BYTES)
    temporary = f"{path}.tmp-{os.getpid()}"
    with create(temporary) as f:
        for frame in frames:
            f.write(frame)
    replace(temporary, path)
    return np.stack([offsets, lengths], axis=1)
