"""TFRecord frames read back: whether a frame is a valid frame of the payload length the offset
index gives (`frame_problem`), whether it fits in its shard (`frames_fit`, `past_end`), one
frame read by offset and checked (`read_frame`), and the frames of a batch in one shard, read in
file order with frames near each other in one pread (`read_frames`). Every reader of a run
checks frames with these: the TensorFlow record store's Python reader and the reader without
TensorFlow (`RunRecords`).
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Sequence

import numpy as np

from tfx_dynamic_inputs import layout

# Frames of a batch at most this far apart in their shard are read in one pread: copying a few
# KiB of the page cache costs less than another system call (16 KiB: the fastest of 3 to 255 KiB
# for the index rows of 256 or 32 records of 100k).
READ_GAP_BYTES = 16 << 10
# What one pread reads at most (one frame larger than it is read alone): a batch's reads hold a
# bounded buffer at a time whatever the shard's size.
READ_SPAN_BYTES = 1 << 20
_HEADER = struct.Struct("<QI")  # a frame's payload length and its masked CRC
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


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
    return _checked_payload(frame, 0, length, verify_crc)


def read_frames(
    fd: int,
    offsets: Sequence[int],
    lengths: Sequence[int],
    shard_size: int,
    verify_crc: bool,
) -> list[tuple[bytes, str | None]]:
    """`read_frame` of each frame of a batch in one open shard, the frames read in file order,
    those at most `READ_GAP_BYTES` apart in one pread of at most `READ_SPAN_BYTES` (a batch of
    consecutive records is a few preads, not one a record).

    Each frame is checked on the bytes its own pread would have read (a read that ends at the
    shard's end is cut there as each frame's would be), so each payload and reason is
    `read_frame`'s.

    Args:
      fd: the shard, open for reading.
      offsets: the frames' offsets, from the offset index (>= 0), in any order.
      lengths: their payload lengths, from the offset index (>= 0).
      shard_size: the shard's size in bytes when the reader opened it.
      verify_crc: also check each frame's two masked CRC32Cs.

    Returns:
      `(payload, None)` or `(b"", reason)` for each frame, in the order given.

    Example:
      payloads = [p for p, _ in read_frames(fd, [0, 136], [120, 40], size, verify_crc=True)]
    """
    results: list[tuple[bytes, str | None]] = [(b"", None)] * len(offsets)
    group: list[int] = []  # the frames of the next pread, and the bytes it spans
    start = end = 0
    for frame in sorted(range(len(offsets)), key=offsets.__getitem__):
        offset, length = offsets[frame], lengths[frame]
        frame_end = offset + length + layout.FRAME_OVERHEAD_BYTES
        if frame_end > shard_size:
            results[frame] = (b"", past_end(length, offset, shard_size))
            continue
        if group and (offset - end > READ_GAP_BYTES or frame_end - start > READ_SPAN_BYTES):
            _read_group(fd, group, start, end, offsets, lengths, verify_crc, results)
            group = []
        if not group:
            start = offset
        end = max(end, frame_end) if group else frame_end  # a damaged index may overlap frames
        group.append(frame)
    if group:
        _read_group(fd, group, start, end, offsets, lengths, verify_crc, results)
    return results


def _read_group(
    fd: int,
    group: list[int],
    start: int,
    end: int,
    offsets: Sequence[int],
    lengths: Sequence[int],
    verify_crc: bool,
    results: list[tuple[bytes, str | None]],
) -> None:
    """Reads the bytes [start, end) of a shard once and checks each frame of `group` there."""
    data = os.pread(fd, end - start, start)
    for frame in group:
        results[frame] = _checked_payload(data, offsets[frame] - start, lengths[frame], verify_crc)


def _checked_payload(
    data: bytes, at: int, length: int, verify_crc: bool
) -> tuple[bytes, str | None]:
    """The payload of the frame at `at` of `data` and None, or b"" and `frame_problem`'s reason
    (the checks are `frame_problem`'s, made without copying the frame)."""
    payload_start = at + layout.FRAME_HEADER_BYTES
    payload_end = payload_start + length
    if len(data) >= payload_end + _CRC.size:
        stored_length, length_crc = _HEADER.unpack_from(data, at)
        if stored_length == length:
            payload = data[payload_start:payload_end]
            if not verify_crc or (
                length_crc == _length_crc(length)
                and _CRC.unpack_from(data, payload_end)[0] == layout.masked_crc32c(payload)
            ):
                return payload, None
    frame = data[at : payload_end + _CRC.size]
    return b"", frame_problem(frame, length, verify_crc)


@functools.lru_cache(maxsize=1 << 12)
def _length_crc(length: int) -> int:
    """The masked CRC of a frame's length field holding `length` (the field's 8 bytes are
    `length`'s: records of a run share few lengths, so each is computed once)."""
    return layout.masked_crc32c(_LENGTH.pack(length))
