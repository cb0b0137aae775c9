"""TFRecord frames read by offset: the readers a `RecordStore` is built on.

* `ShardReader`: batched `os.pread` of frames through a memory-mapped offset index (the Python
  disk reader), and the description of damaged frames for both disk readers;
* `load_all`: every record of a record set into one `tf.string` variable (the memory backend).

The native disk reader is in `native_reader`, the checks of frames, offset indexes and shards
(and `RunPin`) in `tfx_dynamic_inputs.records` (`frames`, `index_checks`: shared with the reader
without TensorFlow), and `DamagedRecord` in `damaged_records`.

A frame that does not fit in its shard (a truncated shard, or a damaged length or offset in the
index) is a damaged record: both disk readers report it without reading or allocating anything
for it, so an index row claiming a 64 GiB record costs nothing.
"""

from __future__ import annotations

import os
import threading
import weakref

import google_crc32c
import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.damaged_records import DamagedRecord
from tfx_dynamic_inputs.inputs.shard_checks import PayloadCheck
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.records.frames import frame_problem, frames_fit, past_end
from tfx_dynamic_inputs.records.index_checks import RunPin

_ZERO_LENGTH_FIELD = bytes(8)
_ZERO_CRC_FIELDS = bytes(8)


def _mask_crc(crcs: np.ndarray) -> np.ndarray:
    """`layout.masked_crc32c` on raw CRC32C values (uint32, any shape), vectorized."""
    crcs = crcs.astype(np.uint64)
    rotated = ((crcs >> 15) | (crcs << 17)) & 0xFFFFFFFF
    return ((rotated + layout.CRC_MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


class ShardReader:
    """Batched `os.pread` reads of TFRecord frames through a memory-mapped offset index.

    Args:
      shard_paths: local shard paths, in index order.
      offsets: int64 [N, 3] (shard, frame offset, payload length) that passed `check_offsets`.
      verify_crc: check each frame's CRCs.
      payload_check: a check of each payload (None: none).
      shard_bytes: int64 [S], the size of each shard.
      pin: what to check when the shards are opened (None: nothing).

    Raises:
      ValueError: a remote shard path ("://").
    """

    def __init__(
        self,
        shard_paths: list[str],
        offsets: np.ndarray,
        verify_crc: bool,
        payload_check: PayloadCheck | None,
        shard_bytes: np.ndarray,
        pin: RunPin | None = None,
    ):
        for path in shard_paths:
            if "://" in path:
                raise ValueError(
                    f"the disk backend reads local shards with os.pread; {path} is remote. "
                    "Copy the run locally or use backend='memory'."
                )
        self._shard_paths = shard_paths
        self._offsets = offsets
        # A mapped index cut short in place would turn the next read of a row past its new end
        # into SIGBUS, which ends the process: `_rows` checks its size first.
        self._index_path = offsets.filename if isinstance(offsets, np.memmap) else None
        self._index_bytes = offsets.offset + offsets.nbytes if self._index_path else 0
        self._index_fd: int | None = None
        self._shard_bytes = np.asarray(shard_bytes, np.int64)
        self._verify_crc = verify_crc
        self._payload_check = payload_check
        self._pin = pin
        self._fds: list[int] | None = None
        self._open_lock = threading.Lock()

    def _descriptors(self) -> list[int]:
        # Opened on first read so a store can be built, pickled or forked before it is used.
        if self._fds is None:
            with self._open_lock:
                if self._fds is None:
                    fds = [os.open(p, os.O_RDONLY) for p in self._shard_paths]
                    if self._index_path is not None:
                        fds.append(os.open(self._index_path, os.O_RDONLY))
                    if self._pin is not None:
                        try:
                            sizes = [os.fstat(fd).st_size for fd in fds[: len(self._shard_paths)]]
                            self._pin.check(self._shard_paths, sizes)
                        except layout.RunCommitError:
                            _close_all(fds)
                            raise
                    weakref.finalize(self, _close_all, fds)
                    if self._index_path is not None:
                        self._index_fd = fds.pop()
                    self._fds = fds
        return self._fds

    def _rows(self, indices: np.ndarray | int) -> np.ndarray:
        """The offset-index rows of `indices`, copied out of the mapping after a check that the
        index still holds what it held when the store was opened."""
        self._descriptors()
        if self._index_fd is not None:
            size = os.fstat(self._index_fd).st_size
            if size < self._index_bytes:
                raise layout.RunCommitError(
                    f"offset index {self._index_path} holds {size} bytes, {self._index_bytes} "
                    "when the store was opened: it was cut short in place under this reader; "
                    "open the run again"
                )
        return np.array(self._offsets[indices])

    def locate(self, index: int) -> tuple[str, int]:
        """`(shard path, frame offset)` of record `index`.

        Args:
          index: a record number, in [0, N).

        Returns:
          The path of the record's shard and the byte offset of its frame there.
        """
        shard, offset, _ = (int(v) for v in self._rows(index))
        return self._shard_paths[shard], offset

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[DamagedRecord]]:
        """Reads the payloads of a batch of records, checking each frame.

        Args:
          indices: int64 [B] record numbers.

        Returns:
          `(payloads, ok, damaged)`: object [B] of bytes (b"" for damaged records), bool [B],
          and a `DamagedRecord` for each record not ok.

        Raises:
          layout.RunCommitError: on the first read, the run or a shard changed since open; on
            any read, the offset index was cut short in place since open.
          OSError: a shard cannot be opened or read.
        """
        fds = self._descriptors()
        rows = self._rows(indices)
        count = len(rows)
        pread, crc = os.pread, google_crc32c.value
        header, overhead = layout.FRAME_HEADER_BYTES, layout.FRAME_OVERHEAD_BYTES
        verify = self._verify_crc
        payloads: list[bytes] = [b""] * count
        length_fields = [_ZERO_LENGTH_FIELD] * count
        stored_crcs = [_ZERO_CRC_FIELDS] * count
        computed_crcs = [(0, 0)] * count
        # Frames that do not fit in their shard are not read: pread would allocate the length the
        # index claims, whatever the shard holds.
        truncated = ~frames_fit(rows, self._shard_bytes)
        skip = truncated.tolist()
        # The per-record loop only reads and slices; checks run vectorized afterwards, because
        # with page-cached shards the Python work per record, not the disk, bounds throughput.
        for i, (shard, offset, length) in enumerate(rows.tolist()):
            if skip[i]:
                continue
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
        """What is wrong with each record of a batch that a read found damaged.

        Args:
          indices: int64 [K] record numbers.

        Returns:
          One `DamagedRecord` per index, in order.
        """
        fds = self._descriptors()
        damaged = []
        rows = self._rows(indices).tolist()
        for index, (shard, offset, length) in zip(indices.tolist(), rows, strict=True):
            size = int(self._shard_bytes[shard])
            if offset + length + layout.FRAME_OVERHEAD_BYTES > size:  # Python ints: no overflow
                reason = past_end(length, offset, size)
            else:
                frame = os.pread(fds[shard], length + layout.FRAME_OVERHEAD_BYTES, offset)
                reason = frame_problem(frame, length, self._verify_crc)
                reason = reason or "frame changed while reading"
            damaged.append(DamagedRecord(index, self._shard_paths[shard], offset, reason))
        return damaged


def _close_all(fds: list[int], close=os.close) -> None:
    for fd in fds:
        close(fd)


def load_all(
    shard_paths: list[str],
    offsets: np.ndarray,
    verify_crc: bool,
    payload_check: PayloadCheck | None,
) -> tuple[tf.Variable, tf.Variable | None, list[DamagedRecord]]:
    """Reads every record into one tf.string variable, checking each frame.

    Shard by shard, so that besides the variable only one shard is held at a time (in its file
    bytes and its payloads): peak memory stays near the record bytes, not a multiple of them.

    Args:
      shard_paths: the shards, in index order (any `tf.io.gfile` file system).
      offsets: int64 [N, 3] offset index that passed `check_offsets`.
      verify_crc: check each frame's CRCs.
      payload_check: a check of each payload, or None.

    Returns:
      `(records, ok, damaged)`: a tf.string [N] variable (b"" for damaged records), a bool
      [N] variable of the good ones (None when all are), and a `DamagedRecord` for each other.
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
