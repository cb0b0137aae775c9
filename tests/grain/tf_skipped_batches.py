"""Runs with damaged records, and the tf.data batches that skip them, for the Grain skip tests.

Run in the full install (TensorFlow 2.16) by tests/grain/test_skipped_records.py:
`python -m tests.grain.tf_skipped_batches <folder>` writes, under `<folder>`, a pairs run and an
audio run, damages a few of their records (a flipped payload byte: a CRC mismatch), and saves
tf.data's `dynamic_pairs` and `class_balanced` batches with `on_damaged="skip"` to
`<folder>/tf.npz` (`<sampler>/<epoch>/<number>/<key>`, serialized records as `as_arrays` stores
them).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from tests.grain.tf_batches import as_arrays

EPOCHS = 2
# Damaged records: pairs run x and y, audio run train.
DAMAGED = {"x": [3, 7], "y": [2], "train": [1, 6, 9]}
PAIRS_ARGS = {"batch_size": 4, "strategy": "least_sampled", "seed": 11}
CLASS_ARGS = {"n_classes_per_batch": 2, "n_samples_per_class": 3, "seed": 5}


def _flip_payloads(run_dir: str, record_set: str, numbers: list[int]) -> None:
    """Flips the first payload byte of each record `numbers` (its payload CRC then fails)."""
    from tfx_dynamic_inputs import layout

    offsets = np.load(os.path.join(layout.index_dir(run_dir, record_set), layout.OFFSETS_FILE))
    shards = layout.load_shards(run_dir, record_set).shard_paths
    for number in numbers:
        shard, offset, _ = (int(v) for v in offsets[number])
        with open(shards[shard], "r+b") as f:
            f.seek(offset + 12)
            byte = f.read(1)
            f.seek(offset + 12)
            f.write(bytes([byte[0] ^ 0x40]))


def main(folder: str) -> None:
    from tests.grain.tf_batches import _audio_run, _pairs_run
    from tfx_dynamic_inputs.inputs import StoreOptions, class_balanced, dynamic_pairs, open_run

    num_x, num_y = 12, 6
    rows = [[x % num_y, (x * 5 + 1) % num_y] for x in range(num_x)]
    pairs_inputs = {
        "skip/x_groups": np.zeros(num_x, np.int64),
        "skip/num_y": num_y,
        "skip/row_splits": np.arange(0, 2 * num_x + 1, 2),
        "skip/values": np.array(rows, np.int64).reshape(-1),
    }
    pairs_dir, audio_dir = os.path.join(folder, "pairs"), os.path.join(folder, "audio")
    _pairs_run(pairs_dir, pairs_inputs, "skip")
    _audio_run(audio_dir, np.arange(14) % 4)
    for record_set in ("x", "y"):
        _flip_payloads(pairs_dir, record_set, DAMAGED[record_set])
    _flip_payloads(audio_dir, "train", DAMAGED["train"])
    skip = StoreOptions(on_damaged="skip")
    datasets = {
        "pairs": dynamic_pairs(open_run(pairs_dir), store_options=skip, **PAIRS_ARGS),
        "class": class_balanced(
            open_run(audio_dir),
            record_set="train",
            features=None,
            store_options=skip,
            **CLASS_ARGS,
        ),
    }
    out = {}
    for sampler, dataset in datasets.items():
        for epoch in range(EPOCHS):
            for number, batch in enumerate(dataset):
                for key, value in batch.items():
                    out.update(as_arrays(f"{sampler}/{epoch}/{number}/{key}", value.numpy()))
    np.savez(os.path.join(folder, "tf.npz"), **out)
    with open(os.path.join(folder, "runs.json"), "w") as f:
        json.dump({"pairs": pairs_dir, "audio": audio_dir}, f)


if __name__ == "__main__":
    main(sys.argv[1])
