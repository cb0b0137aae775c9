"""Serialized records of one record set, read by global record number, a batch at a time.

Two backends behind one interface:

* ``memory``: every record in one `tf.string` tensor, read with `tf.gather` (fully native).
* ``disk``: the offset index (`components.layout` `offsets.npy`, int64 [N, 3]: shard, frame
  offset, payload length) is memory-mapped and each batch of indices is read with one `pread` per
  record on shard files kept open. Memory does not grow with the number or size of records.
  Two readers do this: the native op `ReadRecordsByIndex` (`components.native`, C++, no Python
  per batch; used when it is built, the default) and a Python reader (`os.pread` in one
  `tf.numpy_function` per batch; used without a compiler, or for a `payload_check`).

Every record is checked against its TFRecord frame, as `tf.data.TFRecordDataset` does (the length
field against the index, and the masked CRC32C of the length and of the payload) unless
`verify_crc=False` (the length is checked always), and, when a `payload_check` is given, its payload
too (for example `parsing.example_check`: is it a parsable `tf.train.Example` with the
features the parser needs). A damaged record (CRC mismatch, truncated shard, wrong frame length,
failed payload check) either fails the read with an error naming the record, shard path and offset
(`on_damaged="fail"`, the default), or comes back as `b""` with `ok=False`, is counted in
`damaged_count` and listed in `damaged_records` (`on_damaged="skip"`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable, Sequence

import google_crc32c
import numpy as np
import tensorflow as tf

from components import layout, native
from components.inputs.epoch_plan import index_variable

# A payload check returns None for a good payload and the reason otherwise.
PayloadCheck = Callable[[bytes], "str | None"]
# The native op bound to one record set: int64 [B] -> (tf.string [B] records, tf.bool [B] ok).
NativeRead = Callable[[tf.Tensor], "tuple[tf.Tensor, tf.Tensor]"]

BACKENDS = ("auto", "memory", "disk")
READERS = ("auto", "native", "python")
ON_DAMAGED = ("fail", "skip")

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


class DamagedRecordError(ValueError):
    """A record failed its TFRecord frame check and the store was opened with on_damaged="fail"."""


class RecordStore:
    """Serialized records of one record set, addressable by global record number.

    Build one with `RecordStore.open` (a materialized run, see `components.layout`),
    `RecordStore.from_serialized` (records already in memory) or
    `components.inputs.sources.record_store_from` (arrays, datasets, ids + a load function).

    `read(indices)` (int64 [B] -> tf.string [B]) works eagerly and inside `Dataset.map`.
    """

    def __init__(
        self,
        *,
        backend: str,
        num_records: int,
        record_set: str | None = None,
        records: tf.Variable | None = None,
        records_ok: tf.Variable | None = None,
        reader: _ShardReader | None = None,
        native_reader: NativeRead | None = None,
        on_damaged: str = "fail",
        damaged_records: Sequence[DamagedRecord] = (),
        parse_fn: Callable[[tf.Tensor], object] | None = None,
    ):
        """Use the classmethods; this signature is internal."""
        if on_damaged not in ON_DAMAGED:
            raise ValueError(f"on_damaged must be one of {ON_DAMAGED}, got {on_damaged!r}")
        self._backend = backend
        self._num_records = int(num_records)
        self._record_set = record_set
        self._records = records
        self._records_ok = records_ok
        self._reader = reader
        self._native_reader = native_reader
        self._on_damaged = on_damaged
        self._damaged = {d.index: d for d in damaged_records}
        self._damaged_lock = threading.Lock()
        self.damaged_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="damaged_count")
        # Set by `components.inputs.sources` for stores it builds: turns tf.string [B] into tensors.
        self.parse_fn = parse_fn

    # ----------------------------------------------------------------------------- constructors

    @classmethod
    def open(
        cls,
        output_dir: str,
        record_set: str,
        *,
        backend: str = "auto",
        memory_budget_bytes: int = 1 << 30,
        on_damaged: str = "fail",
        verify_crc: bool = True,
        payload_check: PayloadCheck | None = None,
        reader: str = "auto",
    ) -> RecordStore:
        """Opens record set `record_set` of the materialized run at `output_dir`.

        `backend="auto"` loads the records into memory when the shard bytes fit in
        `memory_budget_bytes`, and reads them from disk otherwise. The memory backend checks every
        record once, at open; the disk backend checks the records it reads, with the native
        reader when `reader="auto"` and it is built (and no `payload_check` is given), else in
        Python; `reader="native"` fails when it cannot be used.
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if reader not in READERS:
            raise ValueError(f"reader must be one of {READERS}, got {reader!r}")
        if on_damaged not in ON_DAMAGED:
            raise ValueError(f"on_damaged must be one of {ON_DAMAGED}, got {on_damaged!r}")
        index_dir = layout.index_dir(output_dir, record_set)
        shards_path = os.path.join(index_dir, layout.SHARDS_FILE)
        if not tf.io.gfile.exists(shards_path):
            raise FileNotFoundError(
                f"record set {record_set!r} not found in {output_dir}: no {shards_path}"
            )
        manifest = layout.load_json(shards_path)
        shard_paths = [layout.resolve(output_dir, p) for p in manifest["shards"]]
        offsets = layout.load_npy(os.path.join(index_dir, layout.OFFSETS_FILE), mmap=True)
        num_records = int(manifest["num_records"])
        _check_offsets(offsets, num_records, len(shard_paths), index_dir)
        if backend == "auto":
            total_bytes = sum(tf.io.gfile.stat(p).length for p in shard_paths)
            backend = "memory" if total_bytes <= memory_budget_bytes else "disk"
        if backend == "memory":
            records, ok, damaged = _load_all(shard_paths, offsets, verify_crc, payload_check)
            if damaged and on_damaged == "fail":
                raise DamagedRecordError(_damage_message(damaged))
            return cls(
                backend="memory",
                num_records=num_records,
                record_set=record_set,
                records=records,
                records_ok=ok,
                reader=_ShardReader(shard_paths, offsets, verify_crc, payload_check),
                on_damaged=on_damaged,
                damaged_records=damaged,
            )
        return cls(
            backend="disk",
            num_records=num_records,
            record_set=record_set,
            reader=_ShardReader(shard_paths, offsets, verify_crc, payload_check),
            native_reader=_open_native_reader(
                reader, shard_paths, offsets, verify_crc, payload_check
            ),
            on_damaged=on_damaged,
        )

    @classmethod
    def from_serialized(cls, records, *, record_set: str | None = None) -> RecordStore:
        """An in-memory store over `records`: list[bytes], numpy array or tf.string [N]."""
        records = tf.convert_to_tensor(records, dtype=tf.string)
        if records.shape.rank != 1:
            raise ValueError(f"records must be a vector [N], got shape {records.shape}")
        records = index_variable(records, name="records")
        return cls(
            backend="memory",
            num_records=int(records.shape[0]),
            record_set=record_set,
            records=records,
        )

    # ----------------------------------------------------------------------------- properties

    @property
    def num_records(self) -> int:
        return self._num_records

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def record_set(self) -> str | None:
        return self._record_set

    @property
    def disk_reader(self) -> str | None:
        """ "native" or "python": how the disk backend reads; None for the memory backend."""
        if self._backend != "disk":
            return None
        return "native" if self._native_reader is not None else "python"

    @property
    def on_damaged(self) -> str:
        return self._on_damaged

    @property
    def damaged_records(self) -> list[DamagedRecord]:
        """The distinct damaged records found so far (at open or read), by record number."""
        with self._damaged_lock:
            return [self._damaged[i] for i in sorted(self._damaged)]

    def locate(self, index: int) -> tuple[str, int] | None:
        """`(shard path, frame offset)` of record `index`, or None for a store without shards."""
        _check_index_in_range(index, self._num_records)
        return None if self._reader is None else self._reader.locate(index)

    # ----------------------------------------------------------------------------- reads

    def read(self, indices) -> tf.Tensor:
        """Returns tf.string [B]: the records at `indices` (int64 [B]).

        Raises an error naming the index and `num_records` for an index out of range, and one
        naming the shard and offset for a damaged record when `on_damaged="fail"`.
        """
        records, _ = self.read_checked(indices)
        return records

    def read_checked(self, indices) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns `(records, ok)`: tf.string [B] and tf.bool [B].

        With `on_damaged="skip"` a damaged record is `b""` with `ok=False`, and each such read
        adds one to `damaged_count`.
        """
        indices = tf.convert_to_tensor(indices, dtype=tf.int64)
        indices = self._checked_indices(indices)
        if self._backend == "memory":
            records = tf.gather(self._records, indices)
            if self._records_ok is None:
                # No damaged records were found at open: nothing to count.
                return records, tf.ones_like(indices, dtype=tf.bool)
            ok = tf.gather(self._records_ok, indices)
        elif self._native_reader is not None:
            records, ok = self._native_reader(indices)
            # Python runs only for a batch with a damaged record: to name it, and fail or note it.
            ok = tf.cond(
                tf.reduce_all(ok),
                lambda: ok,
                lambda: tf.ensure_shape(
                    tf.numpy_function(self._note_damaged, [indices, ok], tf.bool, stateful=True),
                    ok.shape,
                ),
            )
        else:
            records, ok = tf.numpy_function(
                self._read_from_disk, [indices], (tf.string, tf.bool), stateful=False
            )
            records = tf.ensure_shape(records, indices.shape)
            ok = tf.ensure_shape(ok, indices.shape)
        damaged_reads = tf.reduce_sum(tf.cast(tf.logical_not(ok), tf.int64))
        count = self.damaged_count.assign_add(damaged_reads)
        with tf.control_dependencies([count]):
            return tf.identity(records), tf.identity(ok)

    def _checked_indices(self, indices: tf.Tensor) -> tf.Tensor:
        in_range = tf.logical_and(indices >= 0, indices < self._num_records)
        # The first out-of-range index; the padding keeps argmin defined for an empty batch.
        first_bad = tf.gather(
            tf.concat([indices, [-1]], 0),
            tf.argmin(tf.cast(tf.concat([in_range, [False]], 0), tf.int32)),
        )
        message = tf.strings.format(
            "record index {} out of range in record set {}: num_records = {}",
            (first_bad, self._record_set or "<in memory>", self._num_records),
        )
        check = tf.debugging.Assert(tf.reduce_all(in_range), [message])
        with tf.control_dependencies([check]):
            return tf.identity(indices)

    def _read_from_disk(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        records, ok, damaged = self._reader.read(indices)
        self._handle_damaged(damaged)
        return records, ok

    def _note_damaged(self, indices: np.ndarray, ok: np.ndarray) -> np.ndarray:
        self._handle_damaged(self._reader.describe(indices[~ok]))
        return ok

    def _handle_damaged(self, damaged: list[DamagedRecord]) -> None:
        if not damaged:
            return
        if self._on_damaged == "fail":
            raise DamagedRecordError(_damage_message(damaged))
        with self._damaged_lock:
            for d in damaged:
                self._damaged.setdefault(d.index, d)

    def __repr__(self) -> str:
        return (
            f"RecordStore(record_set={self._record_set!r}, num_records={self._num_records}, "
            f"backend={self._backend!r})"
        )


class _ShardReader:
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
            reason = _frame_problem(frame, length, self._verify_crc)
            reason = reason or "frame changed while reading"
            damaged.append(DamagedRecord(index, self._shard_paths[shard], offset, reason))
        return damaged


def _open_native_reader(
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


def _frame_problem(frame: bytes, length: int, verify_crc: bool) -> str | None:
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


def _load_all(
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
            reason = _frame_problem(frame, length, verify_crc)
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


def _check_offsets(offsets: np.ndarray, num_records: int, num_shards: int, where: str) -> None:
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


def _check_index_in_range(index: int, num_records: int) -> None:
    if not 0 <= index < num_records:
        raise IndexError(f"record index {index} out of range: num_records = {num_records}")


def _damage_message(damaged: list[DamagedRecord]) -> str:
    shown = "; ".join(str(d) for d in damaged[:5])
    more = f" (and {len(damaged) - 5} more)" if len(damaged) > 5 else ""
    return f"{len(damaged)} damaged record(s): {shown}{more}"
