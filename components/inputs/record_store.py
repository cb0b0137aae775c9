"""Serialized records of one record set, read by global record number, a batch at a time.

Two backends behind one interface:

* ``memory``: every record in one `tf.string` tensor, read with `tf.gather` (fully native).
* ``disk``: the offset index (`tfx_dynamic_inputs.layout` `offsets.npy`, int64 [N, 3]: shard, frame
  offset, payload length) is memory-mapped and each batch of indices is read with one `pread` per
  record on shard files kept open. Memory does not grow with the number or size of records.
  Two readers do this: the native op `ReadRecordsByIndex` (`tfx_dynamic_inputs.native`, C++, no
  Python per batch; used when it is built, the default) and a Python reader (`os.pread` in one
  `tf.numpy_function` per batch; used without a compiler, or for a `payload_check`).
  `reader="mapped"` is the native op over shards mapped into memory: each record is copied out of
  the mapping, without a system call, and the shard pages it has read count in the process's
  resident memory (page cache, which the kernel takes back under memory pressure).

Every record is checked against its TFRecord frame, as `tf.data.TFRecordDataset` does (the length
field against the index, and the masked CRC32C of the length and of the payload) unless
`verify_crc=False` (the length is checked always), and, when a `payload_check` is given, its payload
too (for example `parsing.example_check`: is it a parsable `tf.train.Example` with the
features the parser needs). A damaged record (CRC mismatch, truncated shard, wrong frame length,
failed payload check) either fails the read with an error naming the record, shard path and offset
(`on_damaged="fail"`, the default), or comes back as `b""` with `ok=False`, is counted in
`damaged_count` and listed in `damaged_records` (`on_damaged="skip"`).

On a tf.data service worker (another process) only what runs without Python works:
`service_problems()` say why a store cannot be read there, and `read_checked(..., for_service=True)`
fails a damaged read with the record numbers instead of calling back to name shard and offset.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.damaged_records import (
    DamagedRecord,
    DamagedRecordError,
    damage_message,
)
from tfx_dynamic_inputs.inputs.graph_functions import as_given
from tfx_dynamic_inputs.inputs.native_reader import NativeRead, open_native_reader
from tfx_dynamic_inputs.inputs.parsing import ParseFn
from tfx_dynamic_inputs.inputs.shard_checks import PayloadCheck, read_crcs, shard_sizes
from tfx_dynamic_inputs.inputs.shard_readers import ShardReader, load_all
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.records.index_checks import RunPin, check_offsets, check_shard_contents

_log = logging.getLogger(__name__)

BACKENDS = ("auto", "memory", "disk")
READERS = ("auto", "native", "mapped", "python")
ON_DAMAGED = ("fail", "skip")


class RecordStore:
    """Serialized records of one record set, addressable by global record number.

    Build one with `RecordStore.open` (a materialized run, see `tfx_dynamic_inputs.layout`),
    `RecordStore.from_serialized` (records already in memory) or
    `tfx_dynamic_inputs.inputs.sources.record_store_from` (arrays, datasets, ids + a load function).

    `read(indices)` (int64 [B] -> tf.string [B]) works eagerly and inside `Dataset.map`.

    Example:

        store = RecordStore.open("runs/digits", "x")
        ds = tf.data.Dataset.range(store.num_records).batch(32).map(store.read)
    """

    def __init__(
        self,
        *,
        backend: str,
        num_records: int,
        record_set: str | None = None,
        records: tf.Variable | None = None,
        records_ok: tf.Variable | None = None,
        reader: ShardReader | None = None,
        native_reader: NativeRead | None = None,
        maps_shards: bool = False,
        python_reader_reason: str | None = None,
        on_damaged: str = "fail",
        damaged_records: Sequence[DamagedRecord] = (),
        parse_fn: ParseFn | None = None,
        run_id: str | None = None,
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
        self._maps_shards = maps_shards
        self._python_reader_reason = python_reader_reason
        self._on_damaged = on_damaged
        self._damaged = {d.index: d for d in damaged_records}
        self._damaged_lock = threading.Lock()
        self.damaged_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="damaged_count")
        self._parse_fn = as_given(parse_fn)
        self._run_id = run_id

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
        parse_fn: ParseFn | None = None,
    ) -> RecordStore:
        """Opens record set `record_set` of the materialized run at `output_dir`.

        `backend="auto"` loads the records into memory when the shard bytes fit in
        `memory_budget_bytes`, and reads them from disk otherwise. The memory backend checks every
        record once, at open; the disk backend checks the records it reads, with the native
        reader when `reader="auto"` and it is built (and no `payload_check` is given), else in
        Python; `reader="native"` (and `"mapped"`, the native reader over mapped shards) fails
        when it cannot be used.

        The index is checked first: `shards.json` (confined shard paths, see
        `layout.resolve_shard`), `offsets.npy` (int64 [num_records, 3], rows naming a shard, no
        negative offset or length) and, with one stat per shard, where each frame ends. A
        damaged index file raises `layout.IndexFileError` naming it (and the record); a frame
        that does not fit in its shard is a damaged record (named with its shard and offset; at
        open for the memory backend, when read for the disk backend). A record set of a run that
        `summary.json` does not commit as ok raises `layout.RunCommitError` (see
        `layout.load_shards`), and so does a shard that is not the one the run wrote
        (`records.index_checks.check_shard_contents`: another run's, copied in or left by an
        overwrite).

        The store serves that one run until it is dropped: the memory backend holds its
        records; the disk readers check, whenever they open the shards (the native op every
        epoch), that the run is still committed and its shards unchanged (`RunPin`), and fail
        naming both run ids when the folder was overwritten.

        Args:
          output_dir: the run folder (or the TFX `OffsetIndex` artifact holding its record sets).
          record_set: the record set's name, e.g. "train" or "x".
          backend, memory_budget_bytes, on_damaged, verify_crc, reader: as in `run.StoreOptions`.
          payload_check: a check of each record's bytes (None: good, else the reason; it runs in
            Python), e.g. `parsing.example_check`; None: no check.
          parse_fn: tf.string [B] -> tensors, kept as `store.parse_fn`; None: unknown.

        Returns:
          The `RecordStore`.

        Raises:
          ValueError: an unknown `backend`, `reader` or `on_damaged`, or `reader="native"` or
            `"mapped"` where it cannot be used.
          FileNotFoundError: the run has no record set `record_set`.
          layout.IndexFileError, layout.RunCommitError: as described above.
          DamagedRecordError: a damaged record at open (memory backend, `on_damaged="fail"`).

        Example:

            store = RecordStore.open("runs/speakers", "train", backend="disk", on_damaged="skip")
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if reader not in READERS:
            raise ValueError(f"reader must be one of {READERS}, got {reader!r}")
        if on_damaged not in ON_DAMAGED:
            raise ValueError(f"on_damaged must be one of {ON_DAMAGED}, got {on_damaged!r}")
        index_dir = layout.index_dir(output_dir, record_set)
        manifest = layout.load_shards(output_dir, record_set)
        shard_paths, num_records = manifest.shard_paths, manifest.num_records
        offsets_path = os.path.join(index_dir, layout.OFFSETS_FILE)
        # Little-endian int64, C order: what the native reader maps as it is.
        offsets = layout.load_npy(offsets_path, mmap=True, shape=(None, 3), dtype="<i8")
        shards_path = os.path.join(index_dir, layout.SHARDS_FILE)
        shard_bytes = shard_sizes(shard_paths, shards_path)
        past_end = check_offsets(offsets, num_records, shard_bytes, offsets_path)
        check_shard_contents(manifest, shard_bytes, shards_path, read_crcs)
        pin = RunPin(output_dir, manifest.run_id, tuple(shard_bytes.tolist()))
        disk_reader = ShardReader(shard_paths, offsets, verify_crc, payload_check, shard_bytes, pin)
        if backend == "auto":
            backend = "memory" if int(shard_bytes.sum()) <= memory_budget_bytes else "disk"
        if backend == "disk" and len(past_end):
            # Reads report these (on_damaged decides); said here too, so it is known at once.
            shard, offset, _ = (int(v) for v in offsets[past_end[0]])
            _log.warning(
                "record set %r of %s: %d record(s) do not fit in their shard and will read as "
                "damaged; the first is record %d (shard %s, offset %d)",
                record_set,
                output_dir,
                len(past_end),
                int(past_end[0]),
                shard_paths[shard],
                offset,
            )
        opened = functools.partial(
            cls,
            num_records=num_records,
            record_set=record_set,
            reader=disk_reader,
            on_damaged=on_damaged,
            parse_fn=parse_fn,
            run_id=manifest.run_id,
        )
        if backend == "memory":
            records, ok, damaged = load_all(shard_paths, offsets, verify_crc, payload_check)
            if damaged and on_damaged == "fail":
                raise DamagedRecordError(damage_message(damaged))
            return opened(backend="memory", records=records, records_ok=ok, damaged_records=damaged)
        native_reader, python_reader_reason = open_native_reader(
            reader, shard_paths, offsets, verify_crc, payload_check, pin
        )
        return opened(
            backend="disk",
            native_reader=native_reader,
            maps_shards=native_reader is not None and reader == "mapped",
            python_reader_reason=python_reader_reason,
        )

    @classmethod
    def from_serialized(
        cls, records, *, record_set: str | None = None, parse_fn: ParseFn | None = None
    ) -> RecordStore:
        """An in-memory store over `records`: list[bytes], numpy array or tf.string [N].

        Args:
          records: the serialized records, bytes [N].
          record_set: a name for the store in error messages, or None.
          parse_fn: tf.string [B] -> tensors, kept as `store.parse_fn`; None: unknown.

        Returns:
          A memory-backend `RecordStore` of N records.

        Raises:
          ValueError: `records` is not a vector.

        Example:

            store = RecordStore.from_serialized([b"a", b"bc", b"def"])
            store.read([2, 0])                        # [b"def", b"a"]
        """
        records = tf.convert_to_tensor(records, dtype=tf.string)
        if records.shape.rank != 1:
            raise ValueError(f"records must be a vector [N], got shape {records.shape}")
        records = index_variable(records, name="records")
        return cls(
            backend="memory",
            num_records=int(records.shape[0]),
            record_set=record_set,
            records=records,
            parse_fn=parse_fn,
        )

    # ----------------------------------------------------------------------------- properties

    @property
    def parse_fn(self) -> ParseFn | None:
        """The decoder of these records when the store knows it (stores built by
        `sources.record_store_from`, or opened with one), else None."""
        return self._parse_fn

    @property
    def num_records(self) -> int:
        """The number of records N: record numbers are in [0, N)."""
        return self._num_records

    @property
    def backend(self) -> str:
        """ "memory" or "disk": where the records are read from ("auto" is resolved at open)."""
        return self._backend

    @property
    def record_set(self) -> str | None:
        """The record set's name (e.g. "train"); None for an unnamed in-memory store."""
        return self._record_set

    @property
    def run_id(self) -> str | None:
        """The run the store was opened on (`summary.json`'s run id); None when it is not one."""
        return self._run_id

    @property
    def disk_reader(self) -> str | None:
        """ "native", "mapped" or "python": how the disk backend reads; None for the memory
        backend."""
        if self._backend != "disk":
            return None
        if self._native_reader is None:
            return "python"
        return "mapped" if self._maps_shards else "native"

    @property
    def on_damaged(self) -> str:
        """ "fail" or "skip": what a read does with a damaged record."""
        return self._on_damaged

    @property
    def damaged_records(self) -> list[DamagedRecord]:
        """The distinct damaged records found so far (at open or read), by record number."""
        with self._damaged_lock:
            return [self._damaged[i] for i in sorted(self._damaged)]

    @property
    def memory_bytes(self) -> int:
        """Bytes of the records held in memory (the memory backend), 0 for the disk backend.

        A dataset shipped to tf.data service workers carries them inside its graph.
        """
        if self._records is None:
            return 0
        return int(tf.reduce_sum(tf.strings.length(self._records.value(), unit="BYTE")))

    def service_problems(self) -> list[str]:
        """Why a tf.data service worker cannot read this store (empty: it can).

        A worker runs the dataset graph in another process, so nothing that calls back into this
        Python process works there: the Python disk reader (`tf.numpy_function`), and
        `on_damaged="skip"`, which names, counts and logs the damaged records here.

        Returns:
          One sentence per problem, each saying what to change.
        """
        name = self._describe()
        problems = []
        if self._on_damaged == "skip":
            problems.append(
                f"{name} was opened with on_damaged='skip', which names, counts and logs the "
                "skipped records in this Python process; open it with on_damaged='fail' (a "
                "damaged record then fails the worker's read, naming its record number)"
            )
        if self._backend == "disk" and self._native_reader is None:
            problems.append(
                f"{name} is read from disk by the Python reader (os.pread in a "
                f"tf.numpy_function): {self._python_reader_reason}. Build the native op "
                "(python -m tfx_dynamic_inputs.native) and open the store with reader='auto' and "
                "no payload_check, or use backend='memory'"
            )
        return problems

    def locate(self, index: int) -> tuple[str, int] | None:
        """`(shard path, frame offset)` of record `index`, or None for a store without shards.

        Args:
          index: the record number, in [0, num_records).

        Returns:
          `(shard path, frame offset)`, or None for a store built from records in memory.

        Raises:
          IndexError: `index` out of range.
        """
        _check_index_in_range(index, self._num_records)
        return None if self._reader is None else self._reader.locate(index)

    # ----------------------------------------------------------------------------- reads

    def read(self, indices) -> tf.Tensor:
        """Returns tf.string [B]: the records at `indices` (int64 [B]).

        Args:
          indices: int64 [B] record numbers, each in [0, num_records).

        Returns:
          tf.string [B], in the order of `indices` (`b""` for a record skipped as damaged).

        Raises:
          tf.errors.InvalidArgumentError: an index out of range (naming it and `num_records`).
          DamagedRecordError: a damaged record with `on_damaged="fail"`, naming the shard and
            offset (a `tf.errors.OpError` with that message inside a dataset).

        Example:

            records = store.read(tf.constant([3, 1], tf.int64))
        """
        records, _ = self.read_checked(indices)
        return records

    def read_checked(self, indices, *, for_service: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns `(records, ok)`: tf.string [B] and tf.bool [B].

        With `on_damaged="skip"` a damaged record is `b""` with `ok=False`, and each such read
        adds one to `damaged_count`.

        `for_service`: the read runs on a tf.data service worker, which cannot call back into
        this process; a damaged record then fails the read naming the record numbers (not the
        shard and offset, which only the Python side knows). Requires `service_problems()` to
        be empty.

        Args:
          indices: int64 [B] record numbers, each in [0, num_records).
          for_service: see above.

        Returns:
          `(records, ok)`: tf.string [B], and tf.bool [B] False where a record was skipped.

        Raises:
          tf.errors.InvalidArgumentError: an index out of range, or a damaged record read with
            `for_service`.
          DamagedRecordError: as `read`.

        Example:

            records, ok = store.read_checked([0, 12])  # skip, 12 damaged: ok = [True, False]
        """
        indices = tf.convert_to_tensor(indices, dtype=tf.int64)
        indices = self._checked_indices(indices)
        if self._backend == "memory":
            records = tf.gather(self._records, indices)
            if self._records_ok is None:
                # No damaged records were found at open: nothing to count.
                return records, tf.ones_like(indices, dtype=tf.bool)
            ok = tf.gather(self._records_ok, indices)
        elif self._native_reader is not None and for_service:
            records, ok = self._native_reader(indices)
            damaged = tf.debugging.Assert(
                tf.reduce_all(ok),
                [
                    f"damaged record(s) in {self._describe()}, read on a tf.data "
                    "service worker (RecordStore.open(...).read([...]) in Python names the shard, "
                    "offset and reason); record numbers:",
                    tf.boolean_mask(indices, tf.logical_not(ok)),
                ],
                summarize=16,
            )
            with tf.control_dependencies([damaged]):
                ok = tf.identity(ok)
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

    def _describe(self) -> str:
        return f"record set {self._record_set!r}" if self._record_set else "an in-memory store"

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
            raise DamagedRecordError(damage_message(damaged))
        with self._damaged_lock:
            for d in damaged:
                self._damaged.setdefault(d.index, d)

    def __repr__(self) -> str:
        return (
            f"RecordStore(record_set={self._record_set!r}, num_records={self._num_records}, "
            f"backend={self._backend!r})"
        )


def _check_index_in_range(index: int, num_records: int) -> None:
    if not 0 <= index < num_records:
        raise IndexError(f"record index {index} out of range: num_records = {num_records}")
