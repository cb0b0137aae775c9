"""On-disk layout of a materialized run: the contract between the Beam stage and the readers.

One run writes one directory (any path both Beam `FileSystems` and `tf.io.gfile` reach)::

    <output_dir>/
      summary.json                       counts per record set and class, pair degrees, rejects
      rejects.jsonl                      one {"source": ..., "reason": ...} per rejected input
      examples/Split-<record_set>/data-SSSSS-of-NNNNN.tfrecord
                                         uncompressed TFRecord shards of tf.train.Example
      index/<record_set>/offsets.npy     int64 [N, 3]: (shard, frame offset, payload length)
      index/<record_set>/shards.json     {"record_set", "num_records", "shards": [paths]}
      index/<record_set>/ids.txt         the source id of each record, in record order
      index/<record_set>/classes.txt     class vocabulary (labelled record sets only)
      index/<record_set>/class_ids.npy   int64 [N]: class id of each record
      index/<record_set>/class_records/{row_splits,values}.npy
                                         CSR: the record numbers of each class, ascending
      index/pairs/{row_splits,values}.npy
                                         CSR over the records of `x`: the valid `y` record numbers

Index files live outside the `Split-*` folders because tfx-bsl rejects a split folder that mixes
file kinds; the `examples/` folder is therefore a valid TFX `Examples` artifact URI as it stands.

Shard paths in `shards.json` are relative to the run directory, so a run can be moved or copied.

Writers (`write_shard`, `save_*`) run in Beam workers and go through Beam's `FileSystems`, with
TFRecord frames built in Python, so a worker that only writes never imports TensorFlow (a
10-25 s start-up per worker process). Readers (`load_*`) run in input pipelines and use
`tf.io.gfile`. Both import their file layer on first use: importing this module is cheap.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import struct
import tempfile
from collections.abc import Iterable
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
) -> None:
    """Writes `offsets.npy`, `shards.json` and `ids.txt` of a record set.

    `offsets` is int64 [N, 3] (shard, frame offset, payload length) in record order; shard paths
    are stored relative to `output_dir`.
    """
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, OFFSETS_FILE), np.asarray(offsets, np.int64).reshape(-1, 3))
    save_json(
        os.path.join(directory, SHARDS_FILE),
        {
            "record_set": record_set,
            "num_records": int(len(ids)),
            "shards": [os.path.relpath(p, output_dir) for p in shard_paths],
        },
    )
    save_lines(os.path.join(directory, IDS_FILE), ids)


def write_record_set(
    output_dir: str,
    record_set: str,
    shards: Iterable[list[bytes]],
    num_shards: int,
    ids: list[str],
) -> list[str]:
    """Writes a whole record set: `num_shards` shards in order, then its index.

    `shards` yields the serialized records of each shard in turn (a generator keeps only one
    shard in memory); `ids` are the source ids of all records, in record order. Returns the
    shard paths.
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
    save_record_set_index(output_dir, record_set, paths, offsets, ids)
    return paths


def save_npy(path: str, array: np.ndarray) -> None:
    """Writes `array` as .npy to any Beam `FileSystems` path."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    with create(path) as f:
        f.write(buffer.getvalue())


def load_npy(path: str, mmap: bool = True) -> np.ndarray:
    """Loads a .npy file; local files are memory-mapped so memory does not grow with N.

    Remote files (gs://, s3://, ...) are copied once to a local temporary file first.
    """
    if "://" in path:
        fd, local = tempfile.mkstemp(suffix=".npy")
        os.close(fd)
        gfile().copy(path, local, overwrite=True)
        path = local
    if not os.path.exists(path):
        raise FileNotFoundError(f"index file not found: {path}")
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def save_csr(directory: str, row_splits: np.ndarray, values: np.ndarray) -> None:
    save_npy(os.path.join(directory, ROW_SPLITS_FILE), np.asarray(row_splits, np.int64))
    save_npy(os.path.join(directory, VALUES_FILE), np.asarray(values, np.int64))


def load_csr(directory: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(row_splits, values)`, int64; `tf.RaggedTensor.from_row_splits` takes them."""
    return (
        load_npy(os.path.join(directory, ROW_SPLITS_FILE), mmap),
        load_npy(os.path.join(directory, VALUES_FILE), mmap),
    )


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
) -> None:
    """Writes `class_ids.npy`, `classes.txt` (when there is a vocabulary) and, last, the
    `class_records/` CSR of one record set: readers take the CSR as the mark of a whole index."""
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, CLASS_IDS_FILE), np.asarray(class_ids, np.int64))
    if vocabulary is not None:
        save_lines(os.path.join(directory, CLASSES_FILE), vocabulary)
    row_splits, values = class_records(class_ids, num_classes)
    save_csr(class_records_dir(output_dir, record_set), row_splits, values)


def save_json(path: str, obj: object) -> None:
    with create(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_json(path: str) -> object:
    with gfile().GFile(path) as f:
        return json.loads(f.read())


def save_lines(path: str, lines: list[str]) -> None:
    with create(path) as f:
        f.write("".join(f"{line}\n" for line in lines).encode())


def load_lines(path: str) -> list[str]:
    with gfile().GFile(path) as f:
        return f.read().splitlines()


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
