"""Writes small materialized audio runs (the layout the Beam stage writes) for these tests."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tests.inputs.runs import run_id_of, write_record_set
from tfx_dynamic_inputs import layout


def audio_example(
    record_id: str, pcm: np.ndarray, label: int, speaker: str, sample_rate: int = 16000
) -> bytes:
    """An audio `tf.train.Example` as the Beam stage writes it (int16 LE PCM, mono)."""
    pcm = np.asarray(pcm).astype("<i2")
    feature = {
        layout.ID_KEY: _bytes(record_id.encode()),
        layout.AUDIO_KEY: _bytes(pcm.tobytes()),
        layout.NUM_SAMPLES_KEY: _int(len(pcm)),
        layout.SAMPLE_RATE_KEY: _int(sample_rate),
        layout.LABEL_KEY: _int(label),
        layout.SPEAKER_KEY: _bytes(speaker.encode()),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_audio_run(
    output_dir: str,
    class_sizes,
    *,
    record_set: str = "train",
    seed: int = 0,
    min_samples: int = 800,
    max_samples: int = 6000,
    num_shards: int = 3,
    sample_rate: int = 16000,
) -> dict[str, np.ndarray]:
    """Writes a labelled audio record set with `class_sizes[c]` records of class `c`.

    Records are in id order, and ids are assigned so that each class's records are scattered
    over the shards. The record set and its class index are committed as one run. Returns the
    waveforms (int16 arrays, record order) and class ids.
    """
    rng = np.random.default_rng(seed)
    class_ids = np.repeat(np.arange(len(class_sizes)), class_sizes).astype(np.int64)
    class_ids = class_ids[rng.permutation(len(class_ids))]
    speakers = [f"spk{c:05d}" for c in range(len(class_sizes))]
    waveforms = [
        rng.integers(-20000, 20000, rng.integers(min_samples, max_samples + 1)).astype(np.int16)
        for _ in class_ids
    ]
    ids = [f"utt{i:07d}" for i in range(len(class_ids))]
    records = [
        audio_example(i, w, int(c), speakers[c], sample_rate)
        for i, w, c in zip(ids, waveforms, class_ids, strict=True)
    ]
    write_record_set(output_dir, record_set, records, num_shards, ids)
    run_id = run_id_of(output_dir)
    index_dir = layout.index_dir(output_dir, record_set)
    layout.save_npy(os.path.join(index_dir, layout.CLASS_IDS_FILE), class_ids)
    layout.save_lines(os.path.join(index_dir, layout.CLASSES_FILE), speakers)
    row_splits = np.concatenate([[0], np.cumsum(class_sizes)]).astype(np.int64)
    layout.save_csr(
        layout.class_records_dir(output_dir, record_set),
        row_splits,
        np.argsort(class_ids, kind="stable").astype(np.int64),
    )
    layout.save_run_file(layout.class_records_dir(output_dir, record_set), run_id)
    layout.commit_run(output_dir, run_id)
    return {"waveforms": waveforms, "class_ids": class_ids, "row_splits": row_splits}


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def write_clip_run(
    output_dir: str,
    waveforms: list[np.ndarray],
    *,
    record_set: str = "train",
    sample_rate: int = 16000,
    num_shards: int = 2,
) -> None:
    """Writes `waveforms` (int16) as an audio run of clips (noise or RIRs) and commits it with
    the summary parts a run of the audio job has: its rate and record set sizes."""
    ids = [f"clip{i:05d}" for i in range(len(waveforms))]
    records = [
        audio_example(i, w, 0, "clips", sample_rate) for i, w in zip(ids, waveforms, strict=True)
    ]
    write_record_set(output_dir, record_set, records, num_shards, ids)
    summary = {
        "ok": True,
        "config": {"sample_rate": sample_rate},
        "record_sets": {record_set: {"num_records": len(records)}},
    }
    layout.commit_run(output_dir, run_id_of(output_dir), summary)
