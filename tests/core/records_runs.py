"""Small committed runs, as the audio and pairs jobs write them, for the tests of the reader
without TensorFlow (`tfx_dynamic_inputs.records`)."""

from __future__ import annotations

import numpy as np

from tests.class_balanced.runs import audio_example
from tests.inputs.runs import image_example, run_id_of, write_record_set
from tfx_dynamic_inputs import layout

SAMPLE_RATE = 8000


def write_audio_run(output_dir: str, num_records: int = 11, seed: int = 0) -> list[bytes]:
    """An audio run of `num_records` utterances of 0 to 900 samples over 3 shards, committed
    with the summary the audio job writes (its job, rate and count). Returns the payloads."""
    rng = np.random.default_rng(seed)
    records = [
        audio_example(
            f"utt{i:04d}",
            rng.integers(-32768, 32768, int(rng.integers(0, 900))),
            int(rng.integers(0, 4)),
            f"spk{i % 3}",
            SAMPLE_RATE,
        )
        for i in range(num_records)
    ]
    write_record_set(output_dir, "train", records, num_shards=3)
    _commit(output_dir, "audio", "train", len(records), {"sample_rate": SAMPLE_RATE})
    return records


def write_image_run(output_dir: str, num_records: int = 7, seed: int = 1) -> list[bytes]:
    """A pairs run's `x` of raw 5x4x3 images over 2 shards, committed with the summary the pairs
    job writes. Returns the payloads."""
    rng = np.random.default_rng(seed)
    records = [
        image_example(f"x{i:03d}.png", rng.integers(0, 256, (5, 4, 3), dtype=np.uint8))
        for i in range(num_records)
    ]
    write_record_set(output_dir, "x", records, num_shards=2)
    config = {"image_storage": "raw", "raw_size": [5, 4, 3]}
    _commit(output_dir, "pairs", "x", len(records), config)
    return records


def _commit(output_dir: str, job: str, record_set: str, num_records: int, config: dict) -> None:
    summary = {
        "ok": True,
        "job": job,
        "config": config,
        "record_sets": {record_set: {"num_records": num_records}},
    }
    layout.commit_run(output_dir, run_id_of(output_dir), summary)
