"""TFRecord frames read by offset: what a `RecordStore` is built on.

* `ShardReader`: batched `os.pread` of frames through a memory-mapped offset index (the Python
  disk reader), and the description of damaged frames for both disk readers;
* `open_native_reader`: the `ReadRecordsByIndex` op (`components.native`) bound to one record
  set, when it is built and can be used;
* `load_all`: every record of a record set into one `tf.string` variable (the memory backend);
* `frame_problem`, `check_offsets`, `shard_sizes`: the checks of a frame and of an offset index
  (against `shards.json` and the shard sizes).

A frame that does not fit in its shard (a truncated shard, or a damaged length or offset in the
index) is a damaged record: both disk readers report it without reading or allocating anything
for it, so an index row claiming a 64 GiB record costs nothing.
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
from components.inputs.variables import index_variable

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
    """Where a damaged record is and what is wrong with it.

    Args:
      index: the record number.
      shard: the shard's path (or a note when the records are in memory).
      offset: the frame's byte offset in the shard (-1: none).
      reason: what is wrong.
    """

    index: int
    shard: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"record {self.index} (shard {self.shard}, offset {self.offset}): {self.reason}"


@dataclasses.dataclass(frozen=True)
class RunPin:
    """The run a disk reader was opened on: whenever it opens the shards (the Python reader on
    its first read, the native op every epoch) it checks that `summary.json` of `output_dir`
    still commits `run_id` (when the store is a run) and that every shard still has the size it
    had at open, so it never serves another run's files under the index it opened.

    Args:
      output_dir: the run's folder (holds `summary.json`).
      run_id: the run id `summary.json` must commit, or None when the store is not a run.
      shard_bytes: the size of each shard at open.
    """

    output_dir: str
    run_id: str | None
    shard_bytes: tuple[int, ...]

    @property
    def summary_path(self) -> str:
        """The path of the run's `summary.json`."""
        return os.path.join(self.output_dir, layout.SUMMARY_FILE)

    def check(self, shard_paths: list[str], sizes: list[int]) -> None:
        """Checks that the run is still committed and the shards still have their sizes.

        Args:
          shard_paths: the shards, in index order.
          sizes: their sizes now, in bytes.

        Raises:
          layout.RunCommitError: the run or a shard changed since open.
        """
        if self.run_id is not None:
            layout.check_committed(
                self.output_dir, self.run_id, f"the record store opened on run {self.run_id}"
            )
        for path, size, opened in zip(shard_paths, sizes, self.shard_bytes, strict=True):
            if size != opened:
                raise layout.RunCommitError(
                    f"shard {path} holds {size} bytes, {opened} when the store was opened on "
                    f"{_run_name(self.run_id)}: it was replaced since; open the run again"
                )


def _run_name(run_id: str | None) -> str:
    return f"run {run_id}" if run_id else "a store that is not a run"


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
                    if self._pin is not None:
                        try:
                            self._pin.check(self._shard_paths, [os.fstat(fd).st_size for fd in fds])
                        except layout.RunCommitError:
                            _close_all(fds)
                            raise
                    self._fds = fds
                    weakref.finalize(self, _close_all, self._fds)
        return self._fds

    def locate(self, index: int) -> tuple[str, int]:
        """`(shard path, frame offset)` of record `index`."""
        shard, offset, _ = (int(v) for v in self._offsets[index])
        return self._shard_paths[shard], offset

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[DamagedRecord]]:
        """Reads the payloads of a batch of records, checking each frame.

        Args:
          indices: int64 [B] record numbers.

        Returns:
          `(payloads, ok, damaged)`: object [B] of bytes (b"" for damaged records), bool [B],
          and a `DamagedRecord` for each record not ok.

        Raises:
          layout.RunCommitError: on the first read, the run or a shard changed since open.
          OSError: a shard cannot be opened or read.
        """
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
        # Frames that do not fit in their shard are not read: pread would allocate the length the
        # index claims, whatever the shard holds.
        truncated = ~_fits(rows, self._shard_bytes)
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
        for index in indices.tolist():
            shard, offset, length = (int(v) for v in self._offsets[index])
            size = int(self._shard_bytes[shard])
            if offset + length + layout.FRAME_OVERHEAD_BYTES > size:  # Python ints: no overflow
                reason = past_end(length, offset, size)
            else:
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
    pin: RunPin,
) -> tuple[NativeRead | None, str | None]:
    """The native reader bound to one record set, when `reader` asks for it and it can be used.

    Args:
      reader: "auto", "native" or "python".
      shard_paths: the shards, in index order.
      offsets: the offset index, a memory-mapped little-endian int64 [N, 3].
      verify_crc: check each frame's CRCs.
      payload_check: a Python payload check (which rules the native reader out), or None.
      pin: checked by the op each time it is instantiated (every epoch).

    Returns:
      `(read, None)`, `read` int64 [B] -> (tf.string [B], bool [B] ok); or `(None, why)`: the
      Python reader reads, because of `why` (a tf.data service worker cannot run the Python
      reader, so the store says why).

    Raises:
      ValueError: `reader="native"` and the native reader cannot be used.
    """
    if reader == "python":
        return None, "the store was opened with reader='python'"
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
        read = functools.partial(
            op_module.read_records_by_index,
            shard_paths=shard_paths,
            offsets_path=offsets.filename,
            offsets_header_bytes=int(offsets.offset),
            num_records=len(offsets),
            verify_crc=verify_crc,
            shard_bytes=list(pin.shard_bytes),
            run_id=pin.run_id or "",
            summary_path=pin.summary_path,
        )
        return read, None
    if reader == "native":
        raise ValueError(f"reader='native' cannot be used: {problem}")
    if op_module is None:
        _warn_not_built()
    return None, problem


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


# Rows of the offset index checked at a time: the checks' temporaries stay a few MB at any N.
_CHECK_CHUNK_ROWS = 1 << 18


def check_offsets(
    offsets: np.ndarray, num_records: int, shard_bytes: np.ndarray, where: str
) -> np.ndarray:
    """Checks an offset index (int64 [N, 3]: shard, frame offset, payload length) at open.

    Vectorized over chunks of rows, so the cost is a few ms per million records.

    Args:
      offsets: int64 [N, 3], as read from `offsets.npy`.
      num_records: N as `shards.json` gives it.
      shard_bytes: int64 [S], the size of each shard.
      where: the offsets file, named in errors.

    Returns:
      int64 [K]: the records whose frame (payload + 16 bytes of framing) does not fit in their
      shard: a truncated shard, or a damaged length or offset. The readers report those as
      damaged records without reading them.

    Raises:
      layout.IndexFileError: naming `where` and the first bad record, when the row count
        disagrees with `num_records`, or a row names no shard or holds a negative offset or
        length.
    """
    if len(offsets) != num_records:
        raise layout.IndexFileError(
            f"{where}: {len(offsets)} rows but {layout.SHARDS_FILE} says num_records={num_records}"
        )
    num_shards = len(shard_bytes)
    past_end = []
    for start in range(0, num_records, _CHECK_CHUNK_ROWS):
        rows = np.asarray(offsets[start : start + _CHECK_CHUNK_ROWS])
        # The min of the whole block and the max of one column are the fast checks (a row mask
        # costs several times more); the mask is built only to name a bad row.
        if rows.min() < 0 or rows[:, 0].max() >= num_shards:
            bad = (rows[:, 0] >= num_shards) | (rows < 0).any(axis=1)
            first = int(np.flatnonzero(bad)[0])
            shard, offset, length = (int(v) for v in rows[first])
            raise layout.IndexFileError(
                f"{where}: record {start + first} has shard {shard} (the run has {num_shards} "
                f"shards), offset {offset}, length {length}"
            )
        fits = _fits(rows, shard_bytes)
        if not fits.all():
            past_end.append(np.flatnonzero(~fits) + start)
    return np.concatenate(past_end).astype(np.int64) if past_end else np.zeros(0, np.int64)


def shard_sizes(shard_paths: list[str], where: str) -> np.ndarray:
    """The size in bytes of each shard (one stat each).

    Args:
      shard_paths: the shards (any `tf.io.gfile` file system).
      where: the shard list (`shards.json`), named in errors.

    Returns:
      int64 [S].

    Raises:
      FileNotFoundError: a shard does not exist.
      OSError: a shard cannot be stat'ed (permission denied, ...).
      layout.IndexFileError: a shard is a directory.
    """
    sizes = np.zeros(len(shard_paths), np.int64)
    for shard, path in enumerate(shard_paths):
        try:
            stat = tf.io.gfile.stat(path)
        except tf.errors.NotFoundError as error:
            raise FileNotFoundError(f"{where}: shard {shard} not found: {path}") from error
        except tf.errors.OpError as error:  # permission denied, a name too long, ...
            message = f"{where}: cannot stat shard {shard} ({path}): {error.message}"
            raise OSError(message) from error
        if stat.is_directory:
            raise layout.IndexFileError(f"{where}: shard {shard} is a directory: {path}")
        sizes[shard] = stat.length
    return sizes


def check_shard_contents(
    manifest: layout.ShardManifest, shard_bytes: np.ndarray, where: str
) -> None:
    """Refuses a shard that is not the one the run wrote, by what `shards.json` recorded of it.

    A shard cut short is damage, not another run's: the readers report its records that no
    longer fit as damaged records. Damaged offsets do not matter here: the recorded positions
    are checked, not `offsets.npy`.

    Args:
      manifest: the run's `shards.json`, with the shard sizes and sampled CRCs
        (`layout.sampled_crcs`) it recorded (an index without them is not checked).
      shard_bytes: int64 [S], the shard sizes now.
      where: the `shards.json`, named in errors.

    Raises:
      layout.RunCommitError: a shard larger than recorded, or whose sampled frames all hold
        other CRCs than recorded, naming the shard, `where` and the run.
    """
    if manifest.shard_bytes is None and manifest.shard_crcs is None:
        return  # an index written before they were recorded
    for shard, path in enumerate(manifest.shard_paths):
        size = int(shard_bytes[shard])
        problem = None
        if manifest.shard_bytes is not None and size > manifest.shard_bytes[shard]:
            problem = f"it holds {size} bytes, the run wrote {manifest.shard_bytes[shard]}"
        elif manifest.shard_crcs is not None:
            sampled = [
                (p, c) for p, c in manifest.shard_crcs[shard] if p + layout.CRC_BYTES <= size
            ]
            if sampled:
                found = np.frombuffer(_read_crcs(path, [p for p, _ in sampled]), "<u4")
                if np.all(found != np.array([c for _, c in sampled], np.int64)):
                    problem = (
                        f"none of the {len(sampled)} frames sampled holds the CRC the run recorded"
                    )
        if problem:
            raise layout.RunCommitError(
                f"{where}: shard {path} is not the one {_run_name(manifest.run_id)} wrote "
                f"({problem}): a shard of another run was copied in, or the folder was "
                "overwritten; materialize the run again"
            )


def _read_crcs(path: str, positions: list[int]) -> bytes:
    """`layout.ReadCrcs` through `tf.io.gfile` (any file system the readers reach)."""
    parts = []
    with tf.io.gfile.GFile(path, "rb") as f:
        for position in positions:
            f.seek(position)
            parts.append(f.read(layout.CRC_BYTES))
    return b"".join(parts)


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


def _fits(rows: np.ndarray, shard_bytes: np.ndarray) -> np.ndarray:
    """bool [R]: whether each frame of `rows` (checked rows of an offset index) fits in its shard.

    Not `offset + length + 16 <= size`: that sum wraps around in int64 for a damaged row. Here
    offset and length are >= 0 and `room` >= -16, so `room - offset` wraps only where the first
    comparison is already false.
    """
    room = shard_bytes[rows[:, 0]] - layout.FRAME_OVERHEAD_BYTES
    offsets = rows[:, 1]
    return (offsets <= room) & (rows[:, 2] <= room - offsets)
