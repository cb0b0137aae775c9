"""TFRecord frames read back: whether a frame is a valid frame of the payload length the offset
index gives (`frame_problem`), whether it fits in its shard (`frames_fit`, `past_end`), and one
frame read by offset and checked (`read_frame`). Every reader of a run checks frames with these:
the TensorFlow record store's Python reader and the reader without TensorFlow (`RunRecords`).
"""

from __future__ import annotations

import os
import struct

import numpy as np

from tfx_dynamic_inputs import layout


def frame_problem(frame: bytes, length: int, verify_crc: bool) -> str | None:
    """Why `frame` is not a valid TFRecord frame of a `length`-byte payload, or None.

    Args:
      frame: the bytes read at the frame's offset (a short read is a truncated shard).
      length: the payload length the index gives.
      verify_crc: also check the length and payload CRCs.

    Returns:
      None for a good frame, else the reason.
    """
    expected = length + layout.FRAME_OVERHEAD_BYTES
    if len(frame) < expected:
        return f"truncated shard: frame needs {expected} bytes, {len(frame)} available"
    (stored_length,) = struct.unpack_from("<Q", frame, 0)
    if stored_length != length:
        return f"frame length {stored_length} does not match the index ({length})"
    if not verify_crc:
        return None
    (length_crc,) = struct.unpack_from("<I", frame, 8)
    if length_crc != layout.masked_crc32c(frame[:8]):
        return "length CRC mismatch"
    payload_end = layout.FRAME_HEADER_BYTES + length
    (payload_crc,) = struct.unpack_from("<I", frame, payload_end)
    if payload_crc != layout.masked_crc32c(frame[layout.FRAME_HEADER_BYTES : payload_end]):
        return "payload CRC mismatch"
    return None


def past_end(length: int, offset: int, size: int) -> str:
    """The damage reason of a frame that does not fit in its shard.

    Args:
      length: the payload length in bytes.
      offset: the frame's offset in the shard.
      size: the shard's size in bytes.

    Returns:
      The reason, naming the bytes the frame needs and the shard holds.
    """
    frame_bytes = length + layout.FRAME_OVERHEAD_BYTES
    return (
        f"truncated shard or damaged index: the frame needs {frame_bytes} bytes at offset "
        f"{offset}, the shard holds {size}"
    )


def frames_fit(rows: np.ndarray, shard_bytes: np.ndarray) -> np.ndarray:
    """Whether each frame of `rows` (checked rows of an offset index) fits in its shard.

    Not `offset + length + 16 <= size`: that sum wraps around in int64 for a damaged row. Here
    offset and length are >= 0 and `room` >= -16, so `room - offset` wraps only where the first
    comparison is already false.

    Args:
      rows: int64 [R, 3] (shard, frame offset, payload length), rows that passed the shard and
        sign checks of `check_offsets`.
      shard_bytes: int64 [S], the size of each shard.

    Returns:
      bool [R]: True where the frame (payload + 16 bytes of framing) ends inside its shard.
    """
    room = shard_bytes[rows[:, 0]] - layout.FRAME_OVERHEAD_BYTES
    offsets = rows[:, 1]
    return (offsets <= room) & (rows[:, 2] <= room - offsets)


def read_frame(
    fd: int, offset: int, length: int, shard_size: int, verify_crc: bool
) -> tuple[bytes, str | None]:
    """The payload of the frame at `offset` of an open shard, and what is wrong with it.

    Reads `length + 16` bytes, what the offset index gives, and nothing for a frame that does
    not fit in the shard: a damaged index row claiming a 64 GiB record allocates nothing.

    Args:
      fd: the shard, open for reading.
      offset: the frame's offset, from the offset index (>= 0).
      length: the payload length, from the offset index (>= 0).
      shard_size: the shard's size in bytes when the reader opened it.
      verify_crc: also check the frame's two masked CRC32Cs.

    Returns:
      `(payload, None)` for a good frame; `(b"", reason)` for a damaged one.

    Example:
      payload, problem = read_frame(fd, 0, 120, os.fstat(fd).st_size, verify_crc=True)
    """
    if offset + length + layout.FRAME_OVERHEAD_BYTES > shard_size:  # Python ints: no overflow
        return b"", past_end(length, offset, shard_size)
    frame = os.pread(fd, length + layout.FRAME_OVERHEAD_BYTES, offset)
    problem = frame_problem(frame, length, verify_crc)
    if problem is not None:
        return b"", problem
    return frame[layout.FRAME_HEADER_BYTES : layout.FRAME_HEADER_BYTES + length], None
