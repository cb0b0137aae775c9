"""Writes small materialized runs (the layout the Beam stage writes) for the input tests.

Each helper stamps its part with the folder's run id and commits the run again
(`layout.commit_run`), so whatever parts a test writes, the folder is one committed run, as the
Beam job leaves it.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout


def image_example(record_id: str, pixels: np.ndarray, label: int | None = None) -> bytes:
    """A raw-image `tf.train.Example` as the Beam stage writes it."""
    height, width, channels = pixels.shape
    feature = {
        layout.ID_KEY: _bytes(record_id.encode()),
        layout.IMAGE_KEY: _bytes(pixels.astype(np.uint8).tobytes()),
        layout.IMAGE_FORMAT_KEY: _bytes(b"raw"),
        layout.HEIGHT_KEY: _int(height),
        layout.WIDTH_KEY: _int(width),
        layout.CHANNELS_KEY: _int(channels),
    }
    if label is not None:
        feature[layout.LABEL_KEY] = _int(label)
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def run_id_of(output_dir: str) -> str:
    """The run written by hand at `output_dir`: the one its `summary.json` commits, else new."""
    path = os.path.join(output_dir, layout.SUMMARY_FILE)
    return (
        layout.load_json(path)[layout.RUN_ID_KEY] if os.path.exists(path) else layout.new_run_id()
    )


def write_record_set(
    output_dir: str,
    record_set: str,
    records: list[bytes],
    num_shards: int = 3,
    ids: list[str] | None = None,
) -> list[str]:
    """Writes `records` in order to `num_shards` shards plus the offset index and commits the
    run; returns the shard paths."""
    bounds = np.linspace(0, len(records), num_shards + 1).astype(int)
    if ids is None:
        ids = [f"{record_set}-{i:06d}" for i in range(len(records))]
    run_id = run_id_of(output_dir)
    paths = layout.write_record_set(
        output_dir,
        record_set,
        (records[begin:end] for begin, end in zip(bounds[:-1], bounds[1:], strict=True)),
        num_shards,
        ids,
        run_id,
    )
    layout.commit_run(output_dir, run_id)
    return paths


def write_pairs(output_dir: str, valid_pairs: list[list[int]]) -> None:
    lengths = np.array([len(row) for row in valid_pairs], np.int64)
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.array([y for row in valid_pairs for y in row], np.int64)
    run_id = run_id_of(output_dir)
    layout.save_csr(layout.pairs_index_dir(output_dir), row_splits, values)
    layout.save_run_file(layout.pairs_index_dir(output_dir), run_id)
    layout.commit_run(output_dir, run_id)


def random_images(rng: np.random.Generator, n: int, shape=(4, 5, 3)) -> list[np.ndarray]:
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
