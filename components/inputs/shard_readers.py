"""TFRecord frames read by offset: what a `RecordStore` is built on.

* `ShardReader`: batched `os.pread` of frames through a memory-mapped offset index (the Python
  disk reader), and the description of damaged frames for both disk readers;
* `open_native_reader`: the `ReadRecordsByIndex` op (`components.native`) bound to one record
  set, when it is built and can be used;
* `load_all`: every record of a record set into one `tf.string` variable (the memory backend);
* `frame_problem`, `check_offsets`: the checks of a frame and of an offset index.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable

import google_crc32c
import numpy as np
import tensorflow as tf

from components import layout, native
from components.inputs.epoch_plan import index_variable

# A payload check returns None for a good payload and the reason otherwise.
PayloadCheck = Callable[[bytes], "str | None"]
# The native op bound to one record set: int64 [B] -> (tf.string [B] records, tf.bool [B] ok).
NativeRead = Callable[[tf.Tensor], "tuple[tf.Tensor, tf.Tensor]"]

_ZERO_LENGTH_FIELD = bytes(8)
_ZERO_CRC_FIELDS = bytes(8)


def _mask_crc(crcs: np.ndarray) -> np.ndarray:
    """`layout.masked_crc32c` on raw CRC32C values (uint32, any shape), vectorized."""
    crcs = crcs.astype(np.uint64)
    rotated = ((crcs >> 15) | (crcs << 17)) & 0xFFFFFFFF
    return ((rotated + layout.CRC_MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


@dataclasses.dataclass(frozen=True)
class DamagedRecord:
    """Where a damaged record is and what is wrong with it."""

    index: int
    shard: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"record {self.index} (shard {self.shard}, offset {self.offset}): {self.reason}"


class ShardReader:
    """Batched `os.pread` reads of TFRecord frames through a memory-mapped offset index."""

    def __init__(
        self,
        shard_paths: list[str],
        offsets: np.ndarray,
        verify_crc: bool,
        payload_check: PayloadCheck | None,
    ):
        for path in shard_paths:
            if "://" in path:
                raise ValueError(
                    f"the disk backend reads local shards with os.pread; {path} is remote. "
                    "Copy the run locally or use backend='memory'."
                )
        self._shard_paths = shard_paths
        self._offsets = offsets
        self._verify_crc = verify_crc
        self._payload_check = payload_check
        self._fds: list[int] | None = None
        self._open_lock = threading.Lock()

    def _descriptors(self) -> list[int]:
        # Opened on first read so a store can be built, pickled or forked before it is used.
        if self._fds is None:
            with self._open_lock:
                if self._fds is None:
                    self._fds = [os.open(p, os.O_RDONLY) for p in self._shard_paths]
                    weakref.finalize(self, _close_all, self._fds)
        return self._fds

    def locate(self, index: int) -> tuple[str, int]:
        shard, offset, _ = (int(v) for v in self._offsets[index])
        return self._shard_paths[shard], offset

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[DamagedRecord]]:
        """Reads the payloads of `indices`; returns (payloads, ok, damaged records)."""
        fds = self._descriptors()
        rows = np.asarray(self._offsets[indices])
        count = len(rows)
        pread, crc = os.pread, google_crc32c.value
        header, overhead = layout.FRAME_HEADER_BYTES, layout.FRAME_OVERHEAD_BYTES
        verify = self._verify_crc
        payloads: list[bytes] = [b""] * count
        length_fields = [_ZERO_LENGTH_FIELD] * count
        stored_crcs = [_ZERO_CRC_FIELDS] * count
        computed_crcs = [(0, 0)] * count
        truncated = np.zeros(count, dtype=bool)
        # The per-record loop only reads and slices; checks run vectorized afterwards, because
        # with page-cached shards the Python work per record, not the disk, bounds throughput.
        for i, (shard, offset, length) in enumerate(rows.tolist()):
            frame = pread(fds[shard], length + overhead, offset)
            end = header + length
            payloads[i] = frame[header:end]
            if len(frame) != length + overhead:
                truncated[i] = True
                continue
            length_fields[i] = frame[:8]
            if verify:
                stored_crcs[i] = frame[8:header] + frame[end:]
                computed_crcs[i] = (crc(frame[:8]), crc(payloads[i]))
        bad = truncated | (
            np.frombuffer(b"".join(length_fields), dtype="<u8").astype(np.int64) != rows[:, 2]
        )
        if verify:
            # [count, 2]: (length CRC, payload CRC) of each frame, stored and computed.
            stored = np.frombuffer(b"".join(stored_crcs), dtype="<u4").reshape(count, 2)
            computed = np.array(computed_crcs, dtype=np.uint32).reshape(count, 2)
            bad |= (_mask_crc(computed) != stored).any(axis=1)
        damaged = self.describe(indices[bad])
        if self._payload_check is not None:
            for i in np.flatnonzero(~bad).tolist():
                reason = self._payload_check(payloads[i])
                if reason is not None:
                    bad[i] = True
                    shard, offset, _ = (int(v) for v in rows[i])
                    damaged.append(
                        DamagedRecord(int(indices[i]), self._shard_paths[shard], offset, reason)
                    )
        records = np.empty(count, dtype=object)
        records[:] = payloads
        if damaged:
            records[bad] = b""
        return records, ~bad, damaged

    def describe(self, indices: np.ndarray) -> list[DamagedRecord]:
        """What is wrong with each record of `indices`, found damaged by a read."""
        fds = self._descriptors()
        damaged = []
        for index in indices.tolist():
            shard, offset, length = (int(v) for v in self._offsets[index])
            frame = os.pread(fds[shard], length + layout.FRAME_OVERHEAD_BYTES, offset)
            reason = frame_problem(frame, length, self._verify_crc)
            reason = reason or "frame changed while reading"
            damaged.append(DamagedRecord(index, self._shard_paths[shard], offset, reason))
        return damaged


def open_native_reader(
    reader: str,
    shard_paths: list[str],
    offsets: np.ndarray,
    verify_crc: bool,
    payload_check: PayloadCheck | None,
) -> NativeRead | None:
    """The native reader `reader` asks for, or None for the Python one."""
    if reader == "python":
        return None
    problem = None
    op_module = native.read_records_op()
    if op_module is None:
        problem = "the native op is not built (python -m components.native)"
    elif payload_check is not None:
        problem = "a payload_check runs in Python"
    elif not (
        isinstance(offsets, np.memmap)
        and offsets.dtype == np.dtype("<i8")
        and offsets.flags.c_contiguous
    ):
        problem = "the offset index is not a memory-mapped little-endian int64 array"
    if problem is None:
        return functools.partial(
            op_module.read_records_by_index,
            shard_paths=shard_paths,
            offsets_path=offsets.filename,
            offsets_header_bytes=int(offsets.offset),
            num_records=len(offsets),
            verify_crc=verify_crc,
        )
    if reader == "native":
        raise ValueError(f"reader='native' cannot be used: {problem}")
    if op_module is None:
        _warn_not_built()
    return None


@functools.cache
def _warn_not_built() -> None:
    logging.getLogger(__name__).warning(
        "RecordStore disk backend: the native reader is not built, reading with os.pread in "
        "Python (slower). Build it with `python -m components.native` (make setup does)."
    )


def _close_all(fds: list[int], close=os.close) -> None:
    for fd in fds:
        close(fd)


def frame_problem(frame: bytes, length: int, verify_crc: bool) -> str | None:
    """Why `frame` is not a valid TFRecord frame of a `length`-byte payload, or None."""
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


def load_all(
    shard_paths: list[str],
    offsets: np.ndarray,
    verify_crc: bool,
    payload_check: PayloadCheck | None,
) -> tuple[tf.Variable, tf.Variable | None, list[DamagedRecord]]:
    """Reads every record into one tf.string variable, checking each frame.

    Shard by shard, so that besides the variable only one shard is held at a time (in its file
    bytes and its payloads): peak memory stays near the record bytes, not a multiple of them.
    """
    num_records = len(offsets)
    records = index_variable(tf.fill([num_records], ""), name="records")
    ok = np.ones(num_records, dtype=bool)
    damaged: list[DamagedRecord] = []
    all_offsets = np.asarray(offsets)
    for shard, path in enumerate(shard_paths):
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
        in_shard = np.flatnonzero(all_offsets[:, 0] == shard)
        payloads = []
        for index, offset, length in zip(
            in_shard.tolist(),
            all_offsets[in_shard, 1].tolist(),
            all_offsets[in_shard, 2].tolist(),
            strict=True,
        ):
            frame = data[offset : offset + length + layout.FRAME_OVERHEAD_BYTES]
            payload = frame[layout.FRAME_HEADER_BYTES : -layout.FRAME_FOOTER_BYTES]
            reason = frame_problem(frame, length, verify_crc)
            if reason is None and payload_check is not None:
                reason = payload_check(payload)
            if reason is not None:
                damaged.append(DamagedRecord(index, path, offset, reason))
                payload = b""
                ok[index] = False
            payloads.append(payload)
        del data
        if payloads:
            records.scatter_nd_update(
                in_shard[:, None], tf.constant(np.array(payloads, dtype=object), tf.string)
            )
        del payloads
    return records, (index_variable(ok, name="records_ok") if damaged else None), damaged


def check_offsets(offsets: np.ndarray, num_records: int, num_shards: int, where: str) -> None:
    if offsets.ndim != 2 or offsets.shape[1] != 3:
        raise ValueError(
            f"{where}/{layout.OFFSETS_FILE}: expected int64 [N, 3], got {offsets.shape}"
        )
    if len(offsets) != num_records:
        raise ValueError(
            f"{where}: {layout.OFFSETS_FILE} has {len(offsets)} rows but {layout.SHARDS_FILE} "
            f"says num_records={num_records}"
        )
    if num_records and (offsets[:, 0].min() < 0 or offsets[:, 0].max() >= num_shards):
        raise ValueError(f"{where}/{layout.OFFSETS_FILE}: shard numbers outside [0, {num_shards})")
    if num_records and (offsets[:, 1:].min() < 0):
        raise ValueError(f"{where}/{layout.OFFSETS_FILE}: negative offset or length")
