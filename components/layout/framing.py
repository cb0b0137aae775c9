"""TFRecord frames built in Python, and shards written from them through Beam's `FileSystems`, so a
Beam worker that only writes never imports TensorFlow.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

import google_crc32c
import numpy as np

from components.layout.names import CRC_MASK_DELTA, FRAME_OVERHEAD_BYTES, create


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of `data`, masked as TFRecord frames store it."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


def tfrecord_frame(record: bytes) -> bytes:
    """One TFRecord frame: the bytes `tf.io.TFRecordWriter` writes for `record`, uncompressed."""
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

    Returns int64 [n, 2]: the frame offset and payload length of each record, in order.
    """
    lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    return write_frames(path, (tfrecord_frame(record) for record in records), lengths)


def write_frames(path: str, frames: Iterable[bytes], lengths: np.ndarray) -> np.ndarray:
    """Writes ready TFRecord frames (whose payloads are `lengths` int64 [n] bytes) as one shard.

    Returns int64 [n, 2]: the frame offset and payload length of each record, in order. Offsets
    follow from the lengths (every frame is payload + 16 bytes), so nothing is read back. The
    shard is written to a temporary name and renamed, so a reader never sees half a shard.
    """
    from apache_beam.io.filesystem import BeamIOError
    from apache_beam.io.filesystems import FileSystems

    lengths = np.asarray(lengths, np.int64).reshape([-1])
    frame_ends = np.cumsum(lengths + FRAME_OVERHEAD_BYTES)
    offsets = frame_ends - (lengths + FRAME_OVERHEAD_BYTES)
    temporary = f"{path}.tmp-{os.getpid()}"
    with create(temporary) as f:
        for frame in frames:
            f.write(frame)
    try:
        FileSystems.rename([temporary], [path])  # replaces `path` locally and on object stores
    except BeamIOError:
        if not FileSystems.exists(path):
            raise
        FileSystems.delete([path])  # file systems whose rename refuses to replace (HDFS)
        FileSystems.rename([temporary], [path])
    return np.stack([offsets, lengths], axis=1)
