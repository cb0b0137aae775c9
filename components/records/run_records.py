"""One record set of a committed run, read by record number without TensorFlow: `RunRecords`.

The run is opened with the checks the TensorFlow record store makes (`RecordStore.open`), the
same functions run inside `layout.filesystem.without_tensorflow()`: `summary.json` commits the
run as ok (`layout.load_summary`), `shards.json` names that run and confined shards
(`layout.load_shards`), `offsets.npy` fits `shards.json` and the shards (`check_offsets`), and
the shards are the ones the run wrote (`check_shard_contents`, on their sampled CRCs).

Record i is then two `os.pread`s on descriptors held from open: its 24-byte row of the offset
index, then its frame, of the length the row gives (`records.frames.read_frame`, which reads
nothing for a frame that does not fit in its shard), its length and masked CRC32Cs checked. A
batch (`read_many`, `read_each`) makes the same reads and checks, once a batch where they are of
a file: its index rows sorted, rows near each other in one pread (`records.index_rows`), then
its frames in file order shard by shard (`records.frames.read_frames`), each file checked once
before it is read.

One run from open to close: the reader keeps the files it opened, and before each read checks
that none of them changed in place since (size and modification time); a changed file, a
damaged frame or row, or a copy opened in another process (it is picklable: a Grain worker
opens its own descriptors) first checks that `summary.json` still commits the run and the
shards kept their sizes (`RunPin`), and fails naming both run ids when it does not.

A batch reads as reading its records one by one in the order given would: the same payloads and
Nones, the same damaged records listed, and the error that reading one by one would raise
first (a damaged record under "fail", a record number out of range, a changed row), raised once
the records before it are served; reads it makes past that point change nothing.
"""

from __future__ import annotations

import functools
import logging
import numbers
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.layout.filesystem import without_tensorflow
from tfx_dynamic_inputs.records.damage import DamagedRecord, DamagedRecordError, damage_message
from tfx_dynamic_inputs.records.frames import read_frame, read_frames
from tfx_dynamic_inputs.records.index_checks import RunPin, check_offsets, check_shard_contents
from tfx_dynamic_inputs.records.index_rows import (
    Row,
    batch_numbers,
    read_row,
    read_rows,
    row_is_sound,
)

_log = logging.getLogger(__name__)

ON_DAMAGED = ("fail", "skip")


class RunRecords:
    """The serialized records of one record set of a committed run, by record number.

    Args:
      run_dir: the run folder (the materialize job's `--output_dir`, or a pipeline's
        `offset_index` artifact), local.
      record_set: the record set's name, e.g. "train" or "x".
      verify_crc: check each frame's masked CRC32Cs (the length is checked always).
      on_damaged: "fail": a damaged record raises `DamagedRecordError` naming it, its shard,
        offset and run; "skip": it reads as None and is listed in `damaged_records`.

    Raises:
      TypeError, ValueError: an argument of another type or value; a remote `run_dir`.
      FileNotFoundError: no `summary.json`, no such record set, or a shard is missing.
      layout.IndexFileError, layout.RunCommitError: as `RecordStore.open`.

    Example:

        records = RunRecords("runs/speakers", "train")
        payload = records.read(0)  # bytes of a tf.train.Example
        payloads = records.read_many([7, 3, 7])  # as [records.read(i) for i in [7, 3, 7]]
    """

    def __init__(
        self, run_dir: str, record_set: str, *, verify_crc: bool = True, on_damaged: str = "fail"
    ):
        if not isinstance(run_dir, str | os.PathLike):
            raise TypeError(f"run_dir must be a folder path, got {run_dir!r:.200}")
        run_dir = os.fspath(run_dir)
        if not isinstance(run_dir, str):
            raise TypeError(f"run_dir must be a str path, got {run_dir!r:.200}")
        if "://" in run_dir:
            raise ValueError(
                f"{run_dir} is remote: RunRecords reads local shards with os.pread; copy the run "
                "to a local folder"
            )
        if not layout.is_record_set_name(record_set):
            raise ValueError(f"record_set must name a record set, got {record_set!r:.200}")
        if not isinstance(verify_crc, bool):
            raise TypeError(f"verify_crc must be a bool, got {verify_crc!r:.100}")
        if on_damaged not in ON_DAMAGED:
            raise ValueError(f"on_damaged must be one of {ON_DAMAGED}, got {on_damaged!r:.100}")
        self._run_dir = run_dir.rstrip("/") or run_dir
        self._record_set = record_set
        self._verify_crc = verify_crc
        self._on_damaged = on_damaged
        self._init_process_state()
        opened = _open(self._run_dir, record_set)
        self._summary = opened.summary
        self._pin = RunPin(self._run_dir, opened.summary[layout.RUN_ID_KEY], opened.sizes)
        self._shard_paths = opened.shard_paths
        self._num_records = opened.num_records
        self._identities = opened.identities
        self._opened = opened

    def _init_process_state(self) -> None:
        """What each process holds for itself: its open files and the damage it found."""
        self._opened: _OpenedRun | None = None
        self._lock = threading.Lock()
        self._damaged: dict[int, DamagedRecord] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key in ("_opened", "_lock", "_damaged"):
            del state[key]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_process_state()

    # ----------------------------------------------------------------------------- properties

    @property
    def run_dir(self) -> str:
        """The run folder."""
        return self._run_dir

    @property
    def record_set(self) -> str:
        """The record set's name."""
        return self._record_set

    @property
    def run_id(self) -> str:
        """The run the records were opened on: every read serves it, or fails."""
        return self._pin.run_id

    @property
    def summary(self) -> dict:
        """A copy of the `summary.json` committing the run (its `"config"`, `"job"`, ...)."""
        return dict(self._summary)

    @property
    def num_records(self) -> int:
        """The number of records N: record numbers are in [0, N)."""
        return self._num_records

    @property
    def on_damaged(self) -> str:
        """ "fail" or "skip": what a read does with a damaged record."""
        return self._on_damaged

    @property
    def damaged_records(self) -> list[DamagedRecord]:
        """The damaged records this process has read so far (`on_damaged="skip"`), in order."""
        with self._lock:
            return [self._damaged[i] for i in sorted(self._damaged)]

    def __len__(self) -> int:
        return self._num_records

    # ----------------------------------------------------------------------------- reads

    def read(self, index: int) -> bytes | None:
        """The payload of record `index` (a serialized `tf.train.Example`).

        Args:
          index: a record number in [0, num_records) (an int or NumPy integer).

        Returns:
          The payload; None for a damaged record under `on_damaged="skip"`.

        Raises:
          TypeError: `index` is not an integer.
          IndexError: `index` is out of range.
          DamagedRecordError: a damaged record under `on_damaged="fail"`, naming its record
            number, shard, offset and the run.
          layout.RunCommitError: the run changed since it was opened (both run ids named, or
            the file that changed in place).
        """
        index = self._checked_index(index)
        opened = self._process_files()
        self._check_unchanged(opened.index_fd, -1)
        shard, offset, length = self._row(opened, index)
        self._check_unchanged(opened.fds[shard], shard)
        payload, problem = read_frame(
            opened.fds[shard], offset, length, self._pin.shard_bytes[shard], self._verify_crc
        )
        if problem is None:
            return payload
        self.damaged(index, problem)
        return None

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[bytes | None]:
        """The payloads of records `indices`: `[self.read(i) for i in indices]`, read at once.

        Args:
          indices: record numbers (a sequence of ints or NumPy integers, or a 1-D integer
            array), in any order, repeats allowed.

        Returns:
          The payloads in the order given; None for each damaged record under
          `on_damaged="skip"`.

        Raises:
          TypeError: `indices` is not a sequence or 1-D array, or holds a non-integer.
          IndexError, DamagedRecordError, layout.RunCommitError: as `read` raises them, the
            first that reading one by one in the order given would raise (see the module).

        Example:
          records.read_many(np.array([9, 2, 9]))  # [payload 9, payload 2, payload 9]
        """
        return list(self.read_each(indices))

    def read_each(self, indices: Sequence[int] | np.ndarray) -> Iterator[bytes | None]:
        """`read_many`'s payloads one at a time, for a reader that checks each as it comes (a
        decoder's damaged record then raises in its place in the order, as one by one).

        The batch is read when this is called; each error is raised when iteration reaches
        its record (`TypeError` for `indices` itself, and an error of a file changed, at once).

        Args:
          indices: as `read_many`.

        Returns:
          An iterator of the payloads, in the order given.

        Raises:
          As `read_many`.

        Example:
          decoded = [decode(p) for p in records.read_each([4, 1])]
        """
        numbers, error = batch_numbers(indices, self._num_records, self._checked_index)
        refusal = None if error is None else functools.partial(_raise, error)
        if not numbers:
            return self._served(numbers, {}, {}, refusal)
        opened = self._process_files()
        self._check_unchanged(opened.index_fd, -1)
        rows = read_rows(opened.index_fd, opened.rows_start, sorted(set(numbers)))
        for position, index in enumerate(numbers):
            if not row_is_sound(rows[index], len(opened.fds)):
                # Served up to the first record whose row fails, then refused as `read` would.
                numbers = numbers[:position]
                refusal = functools.partial(self._row_changed, opened, index)
                break
        in_shards: dict[int, list[int]] = {}
        for index in sorted(set(numbers)):
            in_shards.setdefault(rows[index][0], []).append(index)
        payloads: dict[int, bytes] = {}
        reasons: dict[int, str] = {}
        for shard in sorted(in_shards):
            self._check_unchanged(opened.fds[shard], shard)
            indices_there = in_shards[shard]
            frames = read_frames(
                opened.fds[shard],
                [rows[index][1] for index in indices_there],
                [rows[index][2] for index in indices_there],
                self._pin.shard_bytes[shard],
                self._verify_crc,
            )
            for index, (payload, reason) in zip(indices_there, frames, strict=True):
                if reason is None:
                    payloads[index] = payload
                else:
                    reasons[index] = reason
        return self._served(numbers, payloads, reasons, refusal)

    def locate(self, index: int) -> tuple[str, int]:
        """`(shard path, frame offset)` of record `index`.

        Args:
          index: a record number in [0, num_records).

        Returns:
          The path of the record's shard and the offset of its frame there.

        Raises:
          TypeError, IndexError, layout.RunCommitError: as `read`.
        """
        shard, offset, _ = self._row(self._process_files(), self._checked_index(index))
        return self._shard_paths[shard], offset

    def damaged(self, index: int, reason: str) -> None:
        """Reports record `index` as damaged (its frame, or its payload as a reader of it found):
        raises under `on_damaged="fail"`, else lists it in `damaged_records`. First checks that
        the run is still the one opened, so an overwrite is never reported as damage.

        Args:
          index: the record number.
          reason: what is wrong with it.

        Raises:
          DamagedRecordError: under `on_damaged="fail"`, naming the record, shard, offset, run.
          layout.RunCommitError: the run changed since it was opened.
        """
        self.check_run()
        shard, offset = self.locate(index)
        record = DamagedRecord(int(index), shard, offset, reason)
        if self._on_damaged == "fail":
            raise DamagedRecordError(
                f"{damage_message([record])} (record set {self._record_set!r} of run "
                f"{self.run_id} at {self._run_dir})"
            )
        with self._lock:
            self._damaged.setdefault(record.index, record)

    def check_run(self) -> None:
        """Checks that the run is still the one opened: `summary.json` commits it as ok, and no
        file the reader holds changed size or was modified since (a sampler calls it at each
        epoch, as the TensorFlow readers check theirs).

        Raises:
          layout.RunCommitError: naming both run ids when another run is committed, or the
            file that changed.
        """
        opened = self._process_files()
        with without_tensorflow():
            self._pin.check(self._shard_paths, [os.fstat(fd).st_size for fd in opened.fds])
        for fd, path, identity in zip(
            [*opened.fds, opened.index_fd],
            [*self._shard_paths, opened.index_path],
            self._identities,
            strict=True,
        ):
            _check_identity(fd, path, identity, self.run_id)

    def close(self) -> None:
        """Closes the files this process holds (a later read opens them again, checked)."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()

    # ----------------------------------------------------------------------------- internals

    def _checked_index(self, index: object) -> int:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"a record number must be an integer, got {index!r:.100}")
        index = int(index)
        if not 0 <= index < self._num_records:
            raise IndexError(
                f"record {index} out of range: record set {self._record_set!r} of run "
                f"{self.run_id} holds {self._num_records}"
            )
        return index

    def _served(
        self,
        numbers: list[int],
        payloads: dict[int, bytes],
        reasons: dict[int, str],
        refusal: Callable[[], None] | None,
    ) -> Iterator[bytes | None]:
        """A batch's payloads in order, each damaged record reported where `read` reports it."""
        for index in numbers:
            reason = reasons.get(index)
            if reason is None:
                yield payloads[index]
            else:
                self.damaged(index, reason)
                yield None
        if refusal is not None:
            refusal()

    def _process_files(self) -> _OpenedRun:
        """The files this process reads; opened and checked again in a new process (a copy
        unpickled in a Grain worker), where they must be the run's files opened first."""
        opened = self._opened
        if opened is not None:
            return opened
        with self._lock:
            if self._opened is None:
                reopened = _open(self._run_dir, self._record_set, self._pin)
                if reopened.identities != self._identities:
                    reopened.close()
                    raise layout.RunCommitError(
                        f"record set {self._record_set!r} of run {self.run_id} at "
                        f"{self._run_dir}: its files changed since it was opened (sizes or "
                        "modification times); open the run again"
                    )
                self._opened = reopened
            return self._opened

    def _row(self, opened: _OpenedRun, index: int) -> Row:
        row = read_row(opened.index_fd, opened.rows_start, index)
        if not row_is_sound(row, len(opened.fds)):
            self._row_changed(opened, index)
        return row

    def _row_changed(self, opened: _OpenedRun, index: int) -> None:
        """Raises for row `index`, which no longer passes the checks of open: it was written
        since (or the run changed, which `check_run` names first)."""
        self.check_run()
        raise layout.RunCommitError(
            f"{opened.index_path}: row {index} changed since the run {self.run_id} was "
            "opened; open the run again"
        )

    def _check_unchanged(self, fd: int, position: int) -> None:
        """Checks the file `fd` (the `position`-th of `_identities`) was not written since open;
        one fstat, and `check_run` (which raises) when it was."""
        if _identity(fd) != self._identities[position]:
            self.check_run()

    def __repr__(self) -> str:
        return (
            f"RunRecords(run_dir={self._run_dir!r}, record_set={self._record_set!r}, "
            f"run_id={self.run_id!r}, num_records={self._num_records})"
        )


def _raise(error: Exception) -> None:
    raise error


# (size, modification time in ns) of an open file: what changes when it is written in place.
_Identity = tuple[int, int]


def _identity(fd: int) -> _Identity:
    result = os.fstat(fd)
    return result.st_size, result.st_mtime_ns


def _check_identity(fd: int, path: str, identity: _Identity, run_id: str) -> None:
    now = _identity(fd)
    if now != identity:
        raise layout.RunCommitError(
            f"{path} was written in place since the run {run_id} was opened (size, modification "
            f"time {identity} -> {now}); open the run again"
        )


class _OpenedRun:
    """The files of a record set one process holds open, and what was checked at open."""

    def __init__(
        self,
        summary: dict,
        shard_paths: list[str],
        fds: list[int],
        index_path: str,
        index_fd: int,
        rows_start: int,
        num_records: int,
    ):
        self.summary = summary
        self.shard_paths = shard_paths
        self.fds = fds
        self.index_path = index_path
        self.index_fd = index_fd
        self.rows_start = rows_start
        self.num_records = num_records
        # The shards' identities, then the index's.
        self.identities = tuple(_identity(fd) for fd in [*fds, index_fd])
        self.sizes = tuple(size for size, _ in self.identities[:-1])
        self._finalizer = weakref.finalize(self, _close_all, [*fds, index_fd])

    def close(self) -> None:
        self._finalizer()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _open(run_dir: str, record_set: str, pin: RunPin | None = None) -> _OpenedRun:
    """Opens and checks a record set of the run at `run_dir` (see the module); with `pin`, the
    run must be the one pinned."""
    summary_path = os.path.join(run_dir, layout.SUMMARY_FILE)
    index_dir = layout.index_dir(run_dir, record_set)
    offsets_path = os.path.join(index_dir, layout.OFFSETS_FILE)
    shards_path = os.path.join(index_dir, layout.SHARDS_FILE)
    with without_tensorflow():
        if not os.path.isfile(summary_path):
            raise FileNotFoundError(
                f"{run_dir} is not a committed run: no {summary_path} (a materialize output "
                "folder, or the offset_index artifact of a pipeline execution)"
            )
        if pin is not None:
            layout.check_committed(run_dir, pin.run_id, f"the records opened on run {pin.run_id}")
        summary = layout.load_summary(run_dir)
        manifest = layout.load_shards(run_dir, record_set)
        fds: list[int] = []
        try:
            for path in [*manifest.shard_paths, offsets_path]:
                fds.append(_open_file(path, shards_path))
            offsets = layout.load_npy(offsets_path, mmap=True, shape=(None, 3), dtype="<i8")
            opened = _OpenedRun(
                summary,
                manifest.shard_paths,
                fds[:-1],
                offsets_path,
                fds[-1],
                int(offsets.offset),
                manifest.num_records,
            )
        except BaseException:
            _close_all(fds)
            raise
        sizes = np.array(opened.sizes, np.int64)
        try:
            past_end = check_offsets(offsets, manifest.num_records, sizes, offsets_path)
            del offsets  # rows are read with pread: no mapping to fault on a file cut short
            check_shard_contents(manifest, sizes, shards_path, _CrcReader(opened))
            if pin is not None:
                pin.check(opened.shard_paths, list(opened.sizes))
        except BaseException:
            opened.close()
            raise
    if len(past_end):
        _log.warning(
            "record set %r of %s: %d record(s) do not fit in their shard and will read as "
            "damaged; the first is record %d",
            record_set,
            run_dir,
            len(past_end),
            int(past_end[0]),
        )
    return opened


def _open_file(path: str, where: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: {path} is missing") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise layout.IndexFileError(f"{where}: {path} is not a regular file")
    return fd


class _CrcReader:
    """`layout.ReadCrcs` on the shards a reader holds open (the files it will read)."""

    def __init__(self, opened: _OpenedRun):
        self._fds = dict(zip(opened.shard_paths, opened.fds, strict=True))

    def __call__(self, path: str, positions: list[int]) -> bytes:
        fd = self._fds[path]
        return b"".join(os.pread(fd, layout.CRC_BYTES, position) for position in positions)
