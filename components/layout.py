"""On-disk layout of a materialized run: the contract between the Beam stage and the readers.

(Over 500 lines on purpose: names, writers, checked readers and the run-commit protocol are one
contract that changes together; split, a reader could drift from the writer it checks.)

One run writes one directory (any path both Beam `FileSystems` and `tf.io.gfile` reach)::

    <output_dir>/
      summary.json                       counts per record set and class, pair degrees, rejects,
                                         "ok" and "run_id": written last, it commits the run
      rejects.jsonl                      one {"source": ..., "reason": ...} per rejected input
      examples/Split-<record_set>/data-SSSSS-of-NNNNN.tfrecord
                                         uncompressed TFRecord shards of tf.train.Example
      index/<record_set>/offsets.npy     int64 [N, 3]: (shard, frame offset, payload length)
      index/<record_set>/shards.json     {"record_set", "num_records", "shards": [paths], "run_id",
                                          "shard_bytes": [size per shard],
                                          "shard_crcs": [[[position, crc], ...] per shard]}
      index/<record_set>/ids.txt         the source id of each record, in record order
      index/<record_set>/classes.txt     class vocabulary (labelled record sets only)
      index/<record_set>/class_ids.npy   int64 [N]: class id of each record
      index/<record_set>/class_records/{row_splits,values}.npy
                                         CSR: the record numbers of each class, ascending
      index/pairs/{row_splits,values}.npy
                                         CSR over the records of `x`: the valid `y` record numbers
      index/pairs/groups.txt             valid pairs by group ("x pairs with every y of its
      index/pairs/{x,y}_groups.npy       group"), O(N_x + N_y): the group names, sorted, and the
                                         int64 [N] group id of each x / y record; the CSR above is
                                         then written too, when it holds at most MAX_GROUP_EDGES
      index/pairs/run.json               {"run_id": ...}: the run that wrote the pair index
      index/<record_set>/class_records/run.json
                                         {"run_id": ...}: the run that wrote the class index
      .claim                             while a job runs: {"run_id", "host", "pid", "started"}

Index files live outside the `Split-*` folders because tfx-bsl rejects a split folder that mixes
file kinds; the `examples/` folder is therefore a valid TFX `Examples` artifact URI as it stands.

A run is committed by its `summary.json` (`commit_run`), written last and naming the run id (a
uuid4 hex the launcher chooses) that every index part carries: the `"run_id"` of each
`shards.json`, and a `run.json` beside the pair index and each class index (those parts are
moved into their own TFX artifact URIs, each of which gets a copy of `summary.json`). There are
no folder renames (on object stores they are full copies). Readers (`load_shards`,
`check_part`) refuse a part whose run is not the one `summary.json` commits as ok: a job killed
before its summary, a failed run, or parts of two runs mixed in one folder (`RunCommitError`
names both run ids). A folder without `summary.json` whose parts name no run is not a run but a
store `components.inputs.sources.record_store_from` cached from user data; it is read as is.

A job claims its folder with `.claim` (`try_claim`: created exclusively on local disks; on
object stores a best-effort write-if-absent, read back), so a second job on the same folder
fails fast; the job removes its claim when it ends.

Shard paths in `shards.json` are relative to the run directory, so a run can be moved or copied.

Writers (`write_shard`, `save_*`) run in Beam workers and go through Beam's `FileSystems`, with
TFRecord frames built in Python, so a worker that only writes never imports TensorFlow (a
10-25 s start-up per worker process). Readers (`load_*`) run in input pipelines and use
`tf.io.gfile`. Both import their file layer on first use: importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import os
import posixpath
import socket
import struct
import tempfile
import uuid
from collections.abc import Callable, Iterable
from typing import IO

import google_crc32c
import numpy as np

SUMMARY_FILE = "summary.json"
REJECTS_FILE = "rejects.jsonl"
EXAMPLES_DIR = "examples"
INDEX_DIR = "index"
PAIRS_INDEX = "pairs"
OFFSETS_FILE = "offsets.npy"
SHARDS_FILE = "shards.json"
IDS_FILE = "ids.txt"
CLASSES_FILE = "classes.txt"
CLASS_IDS_FILE = "class_ids.npy"
CLASS_RECORDS_INDEX = "class_records"
ROW_SPLITS_FILE = "row_splits.npy"
VALUES_FILE = "values.npy"
RUN_FILE = "run.json"
GROUPS_FILE = "groups.txt"
X_GROUPS_FILE = "x_groups.npy"
Y_GROUPS_FILE = "y_groups.npy"
CLAIM_FILE = ".claim"
RUN_ID_KEY = "run_id"


class IndexFileError(ValueError):
    """An index file of a run is unreadable, truncated or not of its declared type and shape, or
    its values contradict the rest of the run. The message names the file (and the record or
    row, where one is at fault)."""


class RunCommitError(IndexFileError):
    """The parts a reader opens are not one committed run: `summary.json` is missing (the job
    was killed, or still runs), says the run failed, or commits another run than a part names.
    The message names the folder, the part and both run ids."""


# The two record sets of a pairs run, and the folder prefix TFX gives each split of `Examples`.
X_RECORD_SET = "x"
Y_RECORD_SET = "y"
SPLIT_PREFIX = "Split-"

# TFRecord framing: uint64 length, uint32 masked crc of the length, payload, uint32 masked crc
# of the payload. Offsets in `offsets.npy` point at the start of the frame.
FRAME_HEADER_BYTES = 12
FRAME_FOOTER_BYTES = 4
FRAME_OVERHEAD_BYTES = FRAME_HEADER_BYTES + FRAME_FOOTER_BYTES
CRC_MASK_DELTA = 0xA282EAD8

# Feature keys of the two record kinds (see schemas/*.pbtxt).
ID_KEY = "id"
IMAGE_KEY = "image"
IMAGE_FORMAT_KEY = "image_format"  # b"png", b"jpeg" (encoded bytes) or b"raw" (uint8 pixels)
HEIGHT_KEY = "height"
WIDTH_KEY = "width"
CHANNELS_KEY = "channels"
AUDIO_KEY = "audio"  # little-endian int16 PCM, mono
NUM_SAMPLES_KEY = "num_samples"
SAMPLE_RATE_KEY = "sample_rate"
LABEL_KEY = "label"  # int64 class id within the record set's vocabulary
SPEAKER_KEY = "speaker"  # class name

# The shortest audio record the audio job stores; `AudioFeatureConfig` refuses frames longer
# than this, so every stored record yields at least one feature frame.
MIN_AUDIO_SECONDS = 0.05


def examples_dir(output_dir: str, record_set: str) -> str:
    return os.path.join(output_dir, EXAMPLES_DIR, f"{SPLIT_PREFIX}{record_set}")


def index_dir(output_dir: str, record_set: str) -> str:
    return os.path.join(output_dir, INDEX_DIR, record_set)


def pairs_index_dir(output_dir: str) -> str:
    return os.path.join(output_dir, INDEX_DIR, PAIRS_INDEX)


def class_records_dir(output_dir: str, record_set: str) -> str:
    return os.path.join(index_dir(output_dir, record_set), CLASS_RECORDS_INDEX)


def resolve(output_dir: str, relative_path: str) -> str:
    """The path of `relative_path` (as stored in `shards.json`) under the run `output_dir`.

    `..` segments are folded here because object stores (gs://, s3://) do not resolve them, and
    `os.path.normpath` would collapse the `//` of a URI scheme.
    """
    if "://" in output_dir:
        scheme, rest = output_dir.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, relative_path))}"
    return os.path.normpath(os.path.join(output_dir, relative_path))


def resolve_shard(output_dir: str, record_set: str, shard_path: object, where: str) -> str:
    """The path of a shard listed in `where` (the `shards.json` of `record_set`), confined.

    A shard path must be relative and resolve inside the run directory, or into the
    `Split-<record_set>` folder of another artifact of the same TFX component execution: the
    materialize component moves the shards into its `Examples` artifact
    (`../../examples/<execution>/Split-x/...` from the `offset_index` artifact, the run
    directory). Anything else (an absolute path, `../../etc/passwd`, `../elsewhere/Split-x/...`)
    is refused, so a damaged or forged index cannot make a reader open files outside the data it
    describes.
    """
    if not isinstance(shard_path, str) or not shard_path:
        raise IndexFileError(
            f"{where}: a shard path must be a non-empty string, got {shard_path!r:.200}"
        )
    # Control characters, NUL and lone surrogates would fail (unnamed) in the file layer.
    if not shard_path.isprintable():
        raise IndexFileError(f"{where}: shard path {shard_path!r} holds unprintable characters")
    if "://" in shard_path or posixpath.isabs(shard_path) or os.path.isabs(shard_path):
        raise IndexFileError(
            f"{where}: shard path {shard_path!r} is absolute; shard paths are relative to the run "
            f"directory {output_dir}"
        )
    resolved = resolve(output_dir, shard_path)
    if not (
        _is_within(resolved, output_dir) or _in_sibling_split(resolved, output_dir, record_set)
    ):
        raise IndexFileError(
            f"{where}: shard path {shard_path!r} resolves to {resolved}, outside the run "
            f"directory {output_dir} and not in the {SPLIT_PREFIX}{record_set} folder of an "
            "artifact of the same component execution"
        )
    return resolved


def _in_sibling_split(path: str, output_dir: str, record_set: str) -> bool:
    """Whether `path` is a file of the `Split-<record_set>` folder of the `Examples` artifact
    beside the `offset_index` artifact `output_dir`, of the same component execution: TFX lays
    out `<component>/<output key>/<execution id>` (executor tests drop the execution id), and
    the materialize and index components move their shards into that artifact."""
    from components import component_keys

    run = resolve(output_dir, ".").replace(os.sep, "/").rstrip("/")
    if "://" not in run:
        run, path = os.path.abspath(run), os.path.abspath(path)
    run_parts, parts = run.split("/"), path.split("/")
    if len(parts) != len(run_parts) + 2 or parts[-2] != f"{SPLIT_PREFIX}{record_set}":
        return False
    examples_keys = (component_keys.EXAMPLES_KEY, component_keys.INDEXED_EXAMPLES_KEY)
    for depth in (len(run_parts) - 1, len(run_parts) - 2):  # no execution id, or one
        if (
            depth > 0
            and run_parts[depth] == component_keys.OFFSET_INDEX_KEY
            and parts[depth] in examples_keys
            and parts[:depth] == run_parts[:depth]
            and parts[depth + 1 : len(run_parts)] == run_parts[depth + 1 :]
        ):
            return True
    return False


def _is_within(path: str, directory: str) -> bool:
    """Whether `path` lies strictly below `directory` (both as `resolve` writes them)."""
    if "://" in directory:
        scheme, rest = directory.split("://", 1)
        prefix = f"{scheme}://{posixpath.normpath(rest).rstrip('/')}/"
        return path.startswith(prefix)
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return path != directory and os.path.commonpath([path, directory]) == directory


def shard_name(shard: int, num_shards: int) -> str:
    return f"data-{shard:05d}-of-{num_shards:05d}.tfrecord"


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


def save_record_set_index(
    output_dir: str,
    record_set: str,
    shard_paths: list[str],
    offsets: np.ndarray,
    ids: list[str],
    run_id: str | None = None,
) -> None:
    """Writes `offsets.npy`, `shards.json` and `ids.txt` of a record set.

    `offsets` is int64 [N, 3] (shard, frame offset, payload length) in record order; shard paths
    are stored relative to `output_dir`. `run_id`: the run writing it (stored in `shards.json`);
    None for a store that is not a run (a `record_store_from` cache).
    """
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, OFFSETS_FILE), np.asarray(offsets, np.int64).reshape(-1, 3))
    offsets = np.asarray(offsets, np.int64).reshape(-1, 3)
    shard_crcs = sampled_crcs(shard_paths, offsets, _read_crcs)
    manifest = {
        "record_set": record_set,
        "num_records": int(len(ids)),
        "shards": [os.path.relpath(p, output_dir) for p in shard_paths],
        "shard_bytes": _file_sizes(shard_paths),
        "shard_crcs": shard_crcs,
    }
    if run_id is not None:
        manifest[RUN_ID_KEY] = run_id
    save_json(os.path.join(directory, SHARDS_FILE), manifest)
    save_lines(os.path.join(directory, IDS_FILE), ids)


# What `shards.json` records of each shard's content: the stored payload CRCs of up to this many
# of its frames, evenly spaced (`sampled_records`).
SAMPLED_FRAMES = 8
CRC_BYTES = 4


def sampled_records(offsets: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """For each shard, the record numbers whose payload CRCs `shards.json` records: up to
    `SAMPLED_FRAMES`, evenly spaced from its first record to its last (none for an empty shard).

    `offsets` int64 [N, 3]; a shard's records need not be contiguous.
    """
    shard_of = np.asarray(offsets[:, 0], np.int64)
    if np.all(shard_of[1:] >= shard_of[:-1]):
        order = np.arange(len(shard_of))  # records in shard order, as every writer here writes
    else:
        order = np.argsort(shard_of, kind="stable")
    bounds = np.searchsorted(shard_of[order], np.arange(num_shards + 1), side="left")
    chosen = []
    for shard in range(num_shards):
        first, end = int(bounds[shard]), int(bounds[shard + 1])
        count = min(SAMPLED_FRAMES, end - first)
        positions = np.unique(np.linspace(first, end - 1, count).round().astype(np.int64))
        chosen.append(order[positions])
    return chosen


# `read_crcs(path, positions)`: the 4 bytes at each of `positions` (ints) of file `path`, joined.
ReadCrcs = Callable[[str, list[int]], bytes]


def sampled_crcs(
    shard_paths: list[str], offsets: np.ndarray, read_crcs: ReadCrcs
) -> list[list[list[int]]]:
    """For each shard, `[position, crc]` of each of its `sampled_records`: where the frame's
    stored payload CRC lies in the shard and its value (uint32), read with `read_crcs`.

    What `shards.json` keeps (with the shard sizes), so a reader tells a shard of another run
    (copied in, or left by an overwrite) from the one this run wrote, at one small read per
    sampled frame, whatever later happens to `offsets.npy`.
    """
    sampled = []
    for shard, records in enumerate(sampled_records(offsets, len(shard_paths))):
        rows = np.asarray(offsets[records], np.int64).reshape(-1, 3)
        positions = (rows[:, 1] + FRAME_HEADER_BYTES + rows[:, 2]).tolist()
        crcs = np.frombuffer(read_crcs(shard_paths[shard], positions), "<u4").tolist()
        sampled.append([[position, crc] for position, crc in zip(positions, crcs, strict=True)])
    return sampled


def _file_sizes(paths: list[str]) -> list[int]:
    from apache_beam.io.filesystems import FileSystems

    # Not `FileSystems.match`: a path is a glob pattern there, and run folders may hold `[` or `*`.
    return [int(FileSystems.get_filesystem(path).size(path)) for path in paths]


def _read_crcs(path: str, positions: list[int]) -> bytes:
    """`ReadCrcs` through Beam's `FileSystems` (writers run in Beam workers)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    if not positions:
        return b""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        parts = []
        for position in positions:
            f.seek(position)
            parts.append(f.read(CRC_BYTES))
    return b"".join(parts)


def write_record_set(
    output_dir: str,
    record_set: str,
    shards: Iterable[list[bytes]],
    num_shards: int,
    ids: list[str],
    run_id: str | None = None,
) -> list[str]:
    """Writes a whole record set: `num_shards` shards in order, then its index.

    `shards` yields the serialized records of each shard in turn (a generator keeps only one
    shard in memory); `ids` are the source ids of all records, in record order; `run_id` as in
    `save_record_set_index` (a run written outside the Beam job is then committed with
    `commit_run`). Returns the shard paths.
    """
    directory = examples_dir(output_dir, record_set)
    paths, rows = [], []
    for shard, records in enumerate(shards):
        path = os.path.join(directory, shard_name(shard, num_shards))
        offsets = write_shard(path, records)
        paths.append(path)
        rows.append(np.column_stack([np.full(len(offsets), shard, np.int64), offsets]))
    if len(paths) != num_shards:
        raise ValueError(f"{record_set}: got {len(paths)} shards, expected {num_shards}")
    offsets = np.concatenate(rows) if rows else np.zeros([0, 3], np.int64)
    save_record_set_index(output_dir, record_set, paths, offsets, ids, run_id)
    return paths


def save_npy(path: str, array: np.ndarray) -> None:
    """Writes `array` as .npy to any Beam `FileSystems` path."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    with create(path) as f:
        f.write(buffer.getvalue())


# `load_npy(dtype=INTEGER)`: any signed or unsigned integer dtype.
INTEGER = "integer"
_NPY_MAGIC = b"\x93NUMPY"


def load_npy(
    path: str,
    mmap: bool = True,
    *,
    shape: tuple[int | None, ...] | None = None,
    dtype: str | np.dtype | None = None,
) -> np.ndarray:
    """Loads a .npy file; local files are memory-mapped so memory does not grow with N.

    Remote files (gs://, s3://, ...) are copied once to a local temporary file first. `shape`
    (None for an axis of any length) and `dtype` (a numpy dtype, or `INTEGER` for any integer
    dtype) are checked when given. A file that is not a readable array of that shape and dtype
    raises `IndexFileError` naming it.
    """
    if "://" in path:
        fd, local = tempfile.mkstemp(suffix=".npy")
        os.close(fd)
        gfile().copy(path, local, overwrite=True)
        source = local
    else:
        source = path
    if not os.path.exists(source):
        raise FileNotFoundError(f"index file not found: {path}")
    with open(source, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    # np.load would also take a zip (.npz) or a pickle; neither is an index array.
    if magic != _NPY_MAGIC:
        raise IndexFileError(f"{path}: not a .npy file (it starts with {magic!r})")
    try:
        # Mapped first even when a copy is wanted: mapping checks the header's shape against the
        # file size, where a plain load of a damaged header would try to allocate what it claims.
        array = np.load(source, mmap_mode="r", allow_pickle=False)
    except Exception as error:
        # numpy's header parser lets through whatever a damaged header makes it raise (ValueError,
        # EOFError, tokenize.TokenError, TypeError, ...); all of them mean this file is damaged.
        raise IndexFileError(f"{path}: not a readable .npy array: {error!r}") from error
    if dtype is not None and not _dtype_matches(array.dtype, dtype):
        expected = "an integer dtype" if dtype == INTEGER else np.dtype(dtype).str
        raise IndexFileError(f"{path}: expected {expected}, got {array.dtype.str}")
    if shape is not None and (
        array.ndim != len(shape)
        or any(w is not None and g != w for g, w in zip(array.shape, shape, strict=True))
    ):
        expected = "[" + ", ".join("N" if s is None else str(s) for s in shape) + "]"
        raise IndexFileError(f"{path}: expected shape {expected}, got {list(array.shape)}")
    return array if mmap else np.array(array)


def _dtype_matches(got: np.dtype, expected: str | np.dtype) -> bool:
    if isinstance(expected, str) and expected == INTEGER:
        return got.kind in "iu"
    return got == np.dtype(expected)


def save_csr(directory: str, row_splits: np.ndarray, values: np.ndarray) -> None:
    save_npy(os.path.join(directory, ROW_SPLITS_FILE), np.asarray(row_splits, np.int64))
    save_npy(os.path.join(directory, VALUES_FILE), np.asarray(values, np.int64))


def load_csr(directory: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(row_splits, values)`, int64; `tf.RaggedTensor.from_row_splits` takes them.

    Both must be 1-D integer arrays, and `row_splits` must start at 0, never decrease and end at
    `len(values)`; otherwise `IndexFileError` names the file. The values are not range-checked
    here: their range depends on the index (y records, record numbers).
    """
    splits_path = os.path.join(directory, ROW_SPLITS_FILE)
    row_splits = load_npy(splits_path, mmap, shape=(None,), dtype=INTEGER)
    values = load_npy(os.path.join(directory, VALUES_FILE), mmap, shape=(None,), dtype=INTEGER)
    row_splits = row_splits.astype(np.int64, copy=False)
    values = values.astype(np.int64, copy=False)
    if len(row_splits) < 1 or row_splits[0] != 0 or row_splits[-1] != len(values):
        raise IndexFileError(
            f"{splits_path}: row_splits must start at 0 and end at the number of values "
            f"({len(values)}), got {len(row_splits)} splits"
            + (f" from {row_splits[0]} to {row_splits[-1]}" if len(row_splits) else "")
        )
    decreasing = np.flatnonzero(np.diff(row_splits) < 0)
    if len(decreasing):
        row = int(decreasing[0])
        raise IndexFileError(
            f"{splits_path}: row_splits decrease at row {row} "
            f"({row_splits[row]} -> {row_splits[row + 1]})"
        )
    return row_splits, values


def class_records(class_ids: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the record numbers of each class, ascending within a class.

    Args:
      class_ids: int64 [N], values in [0, num_classes).
    Returns:
      (row_splits int64 [num_classes + 1], values int64 [N]).
    """
    class_ids = np.asarray(class_ids, np.int64)
    values = np.argsort(class_ids, kind="stable").astype(np.int64)
    counts = np.bincount(class_ids, minlength=num_classes)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return row_splits, values


def save_class_index(
    output_dir: str,
    record_set: str,
    class_ids: np.ndarray,
    num_classes: int,
    vocabulary: list[str] | None = None,
    run_id: str | None = None,
) -> None:
    """Writes `class_ids.npy`, `classes.txt` (when there is a vocabulary) and, last, the
    `class_records/` CSR of one record set: readers take the CSR as the mark of a whole index.
    `run_id`: the run writing it, stored in `class_records/run.json` after the CSR; None for a
    store that is not a run."""
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, CLASS_IDS_FILE), np.asarray(class_ids, np.int64))
    if vocabulary is not None:
        save_lines(os.path.join(directory, CLASSES_FILE), vocabulary)
    row_splits, values = class_records(class_ids, num_classes)
    save_csr(class_records_dir(output_dir, record_set), row_splits, values)
    if run_id is not None:
        save_run_file(class_records_dir(output_dir, record_set), run_id)


# ------------------------------------------------------------------------ valid pairs by group

# A group pairing with more valid pairs than this gets no edge CSR beside its groups: it takes
# 8 bytes a pair on disk and twice that to build (10M x 10M records in 1,000 groups: 10^11
# pairs). `GroupPairs.edges` and `PairCoverage` list at most as many.
MAX_GROUP_EDGES = 50_000_000


def group_edges(x_groups: np.ndarray, y_groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The explicit CSR over x of "x pairs with every y of its group": `(row_splits, values)`,
    the y record numbers of each x ascending. Group ids are >= 0, or -1 for none (no pairs)."""
    x_groups = np.asarray(x_groups, np.int64)
    y_groups = np.asarray(y_groups, np.int64)
    order = np.argsort(y_groups, kind="stable").astype(np.int64)
    sorted_groups = y_groups[order]
    starts = np.searchsorted(sorted_groups, x_groups, side="left")
    ends = np.searchsorted(sorted_groups, x_groups, side="right")
    degrees = np.where(x_groups >= 0, ends - starts, 0).astype(np.int64)
    row_splits = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    positions = np.repeat(starts - row_splits[:-1], degrees) + np.arange(row_splits[-1])
    return row_splits, order[positions]


def save_group_index(
    output_dir: str,
    x_groups: np.ndarray,
    y_groups: np.ndarray,
    names: list[str],
    run_id: str,
) -> dict:
    """Writes the group pairing of a run (and its edge CSR when it holds at most
    `MAX_GROUP_EDGES` pairs), then `run.json`; returns the pair index's summary section.

    `x_groups` / `y_groups`: int64 [N], the group id of each x / y record, an index into
    `names` (sorted) or -1 for none.
    """
    directory = pairs_index_dir(output_dir)
    x_groups = np.asarray(x_groups, np.int64)
    y_groups = np.asarray(y_groups, np.int64)
    save_lines(os.path.join(directory, GROUPS_FILE), names)
    save_npy(os.path.join(directory, X_GROUPS_FILE), x_groups)
    save_npy(os.path.join(directory, Y_GROUPS_FILE), y_groups)
    degrees = group_degrees(x_groups, y_groups, len(names))
    num_pairs = int(degrees.sum())
    edges_written = num_pairs <= MAX_GROUP_EDGES
    if edges_written:
        save_csr(directory, *group_edges(x_groups, y_groups))
    save_run_file(directory, run_id)
    return {
        "pairs": {
            "by_group": True,
            "num_groups": len(names),
            "num_pairs": num_pairs,
            "edges_written": edges_written,
            "degree": {
                "min": int(degrees.min()) if len(degrees) else 0,
                "max": int(degrees.max()) if len(degrees) else 0,
                "mean": round(float(degrees.mean()), 3) if len(degrees) else 0.0,
            },
        }
    }


def group_degrees(x_groups: np.ndarray, y_groups: np.ndarray, num_groups: int) -> np.ndarray:
    """int64 [num_x]: the number of valid y of each x, the y records of its group."""
    y_counts = np.bincount(y_groups[y_groups >= 0], minlength=num_groups)
    return np.where(x_groups >= 0, y_counts[np.maximum(x_groups, 0)], 0).astype(np.int64)


def has_group_index(output_dir: str) -> bool:
    """Whether the pair index of the run at `output_dir` was written from groups."""
    return gfile().exists(os.path.join(pairs_index_dir(output_dir), X_GROUPS_FILE))


def load_group_index(output_dir: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The group pairing of the run at `output_dir`: `(names, x_groups, y_groups)`, the group
    names and the int64 group id of each x and y record (-1: none). `ValidPairs.from_groups`
    takes the two arrays (`components.inputs.open_pairs_run` does).

    Raises `RunCommitError` for an index of a run `summary.json` does not commit as ok, and
    `IndexFileError` naming the file for a damaged one (a group id outside `groups.txt`).
    """
    directory = pairs_index_dir(output_dir)
    check_part(output_dir, directory)
    names = load_lines(os.path.join(directory, GROUPS_FILE))
    groups = []
    for name in (X_GROUPS_FILE, Y_GROUPS_FILE):
        path = os.path.join(directory, name)
        ids = load_npy(path, shape=(None,), dtype=INTEGER).astype(np.int64, copy=False)
        bad = np.flatnonzero((ids < -1) | (ids >= len(names)))
        if len(bad):
            raise IndexFileError(
                f"{path}: entry {int(bad[0])} is group {int(ids[bad[0]])}, outside "
                f"[-1, {len(names)}) ({GROUPS_FILE} lists {len(names)})"
            )
        groups.append(ids)
    return names, groups[0], groups[1]


def save_json(path: str, obj: object) -> None:
    with create(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_json(path: str) -> object:
    """The JSON value in `path`; `IndexFileError` naming the file when it is not JSON."""
    try:
        with gfile().GFile(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise IndexFileError(f"{path}: not valid JSON: {error}") from error


def save_lines(path: str, lines: list[str]) -> None:
    with create(path) as f:
        f.write("".join(f"{line}\n" for line in lines).encode())


def load_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file as `save_lines` writes them; `IndexFileError` naming the
    file when it is not text.

    Lines end at "\n" only: `str.splitlines` would also break at U+2028, \x1c, \x0c, \x0b and
    other separators a class name or id may hold (the writer refuses only "\n" and "\r").
    """
    with gfile().GFile(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IndexFileError(f"{path}: not UTF-8 text: {error}") from error
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


@dataclasses.dataclass(frozen=True)
class ShardManifest:
    """What `shards.json` says of a record set, checked (`load_shards`).

    `shard_paths`: resolved (`resolve_shard`); `run_id`: the run that wrote it, committed by
    `summary.json` (None for a store that is not a run); `shard_bytes` / `shard_crcs`: the
    size and the `sampled_crcs` of each shard as written, None in an index written before
    they were recorded.
    """

    shard_paths: list[str]
    num_records: int
    run_id: str | None
    shard_bytes: list[int] | None
    shard_crcs: list[list[list[int]]] | None


def load_shards(output_dir: str, record_set: str) -> ShardManifest:
    """The checked `shards.json` of `record_set` in the run at `output_dir`.

    Raises FileNotFoundError when the record set has no `shards.json`, `IndexFileError`
    naming it when it is not an object with `"shards"` (a list of relative paths),
    `"num_records"` (an integer >= 0) and, where present, `"shard_bytes"` (one integer >= 0
    per shard) and `"shard_crcs"` (one list of `[position, crc]` pairs per shard), and
    `RunCommitError` when its `"run_id"` is not the run `summary.json` commits (see
    `check_committed`).
    """
    path = os.path.join(index_dir(output_dir, record_set), SHARDS_FILE)
    if not gfile().exists(path):
        raise FileNotFoundError(f"record set {record_set!r} not found in {output_dir}: no {path}")
    manifest = load_json(path)
    if not isinstance(manifest, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    shards, num_records = manifest.get("shards"), manifest.get("num_records")
    if not isinstance(shards, list):
        raise IndexFileError(f'{path}: "shards" must be a list of paths, got {shards!r:.200}')
    if not _is_count(num_records):
        raise IndexFileError(
            f'{path}: "num_records" must be an integer >= 0, got {num_records!r:.200}'
        )
    per_shard = {}
    for key, is_entry in (("shard_bytes", _is_count), ("shard_crcs", _is_crc_list)):
        values = manifest.get(key)
        if values is not None and not (
            isinstance(values, list) and len(values) == len(shards) and all(map(is_entry, values))
        ):
            raise IndexFileError(
                f'{path}: "{key}" must hold one entry per shard ({len(shards)}) of integers >= 0, '
                f"got {values!r:.200}"
            )
        per_shard[key] = values
    resolved = [resolve_shard(output_dir, record_set, shard, path) for shard in shards]
    run_id = check_committed(output_dir, _run_id_field(manifest, path), path)
    return ShardManifest(resolved, num_records, run_id, **per_shard)


def _is_count(value: object) -> bool:
    # bool is an int subclass: `true` is not a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_crc_list(value: object) -> bool:
    """Whether `value` is a list of `[position, crc]` pairs of counts (`sampled_crcs`)."""
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(map(_is_count, pair)) for pair in value
    )


# ----------------------------------------------------------------------- run ids and commits


def new_run_id() -> str:
    return uuid.uuid4().hex


def save_run_file(directory: str, run_id: str) -> None:
    """Writes `<directory>/run.json`, naming the run that wrote the index in `directory`."""
    save_json(os.path.join(directory, RUN_FILE), {RUN_ID_KEY: run_id})


def load_run_file(directory: str) -> str | None:
    """The run id in `<directory>/run.json`; None when there is none (a store, not a run)."""
    path = os.path.join(directory, RUN_FILE)
    if not gfile().exists(path):
        return None
    value = load_json(path)
    if not isinstance(value, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(value).__name__}")
    run_id = _run_id_field(value, path)
    if run_id is None:
        raise IndexFileError(f'{path}: no "{RUN_ID_KEY}"')
    return run_id


def _run_id_field(obj: dict, path: str) -> str | None:
    run_id = obj.get(RUN_ID_KEY)
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise IndexFileError(
            f'{path}: "{RUN_ID_KEY}" must be a non-empty string, got {run_id!r:.200}'
        )
    return run_id


def commit_run(output_dir: str, run_id: str, summary: dict | None = None) -> dict:
    """Writes `summary.json` naming `run_id`: the last file of a run, which commits it.

    `summary` defaults to `{"ok": True}` (a run written outside the Beam job, as tests do);
    the Beam job passes its own, with `"ok"` false for a failed run. Returns what was written.
    """
    committed = {"ok": True} if summary is None else dict(summary)
    committed[RUN_ID_KEY] = run_id
    save_json(os.path.join(output_dir, SUMMARY_FILE), committed)
    return committed


def check_committed(output_dir: str, part_run_id: str | None, part: str) -> str | None:
    """Refuses `part` (a file or folder of the run at `output_dir`, written by `part_run_id`)
    unless `summary.json` there commits that run as ok. Returns the run id.

    A part that names no run in a folder without `summary.json` is a store that is not a run
    (`record_store_from` caches from user data): accepted, None returned. Raises
    `RunCommitError` otherwise.
    """
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    if not gfile().exists(summary_path):
        if part_run_id is None:
            return None
        raise RunCommitError(
            f"{part} belongs to run {part_run_id}, which was never committed: {summary_path} is "
            "missing (the job was killed or still runs); run the job again with --overwrite"
        )
    summary = load_json(summary_path)
    if not isinstance(summary, dict):
        raise IndexFileError(
            f"{summary_path}: expected a JSON object, got {type(summary).__name__}"
        )
    committed = _run_id_field(summary, summary_path)
    if summary.get("ok") is not True:
        raise RunCommitError(
            f"{summary_path}: {_run_name(committed)} failed ({summary.get('error') or 'not ok'}); "
            f"{part} is not readable"
        )
    if part_run_id != committed:
        raise RunCommitError(
            f"{output_dir} mixes parts of two runs: {part} names {_run_name(part_run_id)} but "
            f"{summary_path} commits {_run_name(committed)}"
        )
    return committed


def _run_name(run_id: str | None) -> str:
    return f"run {run_id}" if run_id else "no run id"


def check_part(output_dir: str, directory: str) -> str | None:
    """`check_committed` for an index folder of the run at `output_dir` that names its run in a
    `run.json` (the pair index, a class index)."""
    return check_committed(output_dir, load_run_file(directory), directory)


def check_same_run(run_dir: str, other_dir: str) -> None:
    """Refuses two folders of one run (the TFX `offset_index` and `pair_index` artifacts, each
    with its copy of `summary.json`) whose summaries name different runs."""
    run_ids = []
    for directory in (run_dir, other_dir):
        path = os.path.join(directory, SUMMARY_FILE)
        summary = load_json(path) if gfile().exists(path) else {}
        run_ids.append(_run_id_field(summary, path) if isinstance(summary, dict) else None)
    if run_ids[0] != run_ids[1]:
        raise RunCommitError(
            f"parts of two runs: {run_dir} holds {_run_name(run_ids[0])} but {other_dir} holds "
            f"{_run_name(run_ids[1])}"
        )


# --------------------------------------------------------------------------------- the claim


@dataclasses.dataclass(frozen=True)
class Claim:
    """Who holds a run folder: the job's run id, and the host, pid and start time (UTC, ISO
    8601) of its launcher."""

    run_id: str
    host: str
    pid: int
    started: str

    @classmethod
    def of_this_process(cls, run_id: str) -> Claim:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return cls(run_id, socket.gethostname(), os.getpid(), started)

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}, started {self.started})"


def claim_path(output_dir: str) -> str:
    return os.path.join(output_dir, CLAIM_FILE)


def try_claim(output_dir: str, claim: Claim) -> bool:
    """Creates the claim file of `output_dir` (an existing folder) unless there is one; returns
    whether `claim` now holds the folder.

    Locally the file is created exclusively (O_CREAT | O_EXCL) and written in one call. Object
    stores have no exclusive create: the claim is written when absent and read back, so of two
    jobs writing at once the one overwritten backs off (best effort).
    """
    path = claim_path(output_dir)
    data = json.dumps(dataclasses.asdict(claim), sort_keys=True).encode()
    if "://" not in path:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return True
    if gfile().exists(path):
        return False
    with gfile().GFile(path, "wb") as f:
        f.write(data)
    holder = load_claim(output_dir)
    return holder is not None and holder.run_id == claim.run_id


def load_claim(output_dir: str) -> Claim | None:
    """The claim on `output_dir`; None when unclaimed. `IndexFileError` naming the file when it
    is not a claim (empty while its job is writing it, or damaged)."""
    path = claim_path(output_dir)
    if not gfile().exists(path):
        return None
    value = load_json(path)
    try:
        return Claim(**value)
    except TypeError as error:  # not an object, or other fields
        raise IndexFileError(f"{path}: not a claim: {value!r:.200}") from error


def claimed_run_id(output_dir: str) -> str:
    """The run id of the job that holds `output_dir`: the Beam writers stamp it into the parts
    they write, read when the pipeline is built (so workers of a killed job keep theirs)."""
    claim = load_claim(output_dir)
    if claim is None:
        raise FileNotFoundError(
            f"no job claims {output_dir} (no {claim_path(output_dir)}): run the pipeline through "
            "components.materialize.common.run_job"
        )
    return claim.run_id


def release_claim(output_dir: str, run_id: str) -> None:
    """Removes the claim on `output_dir` when `run_id` holds it (never another job's)."""
    claim = load_claim(output_dir)
    if claim is not None and claim.run_id == run_id:
        gfile().remove(claim_path(output_dir))


def create(path: str) -> IO[bytes]:
    """Opens `path` for writing, uncompressed whatever its name; a local parent folder is made."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def gfile():
    """`tf.io.gfile`, imported on first use: code that Beam workers import must not pull in
    TensorFlow (a 10-25 s start-up per worker process) unless it really reads through it."""
    import tensorflow as tf

    return tf.io.gfile
