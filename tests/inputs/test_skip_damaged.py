"""Skip-and-count: both samplers leave damaged records out, count them and log once per epoch."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tests.inputs import skipping
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import (
    ClassBalancedSampler,
    DynamicPairsSampler,
    ImageSpec,
    StoreOptions,
)
from tfx_dynamic_inputs.inputs.audio_features import AudioFeatureConfig

EPOCHS = 3
CROP = AudioFeatureConfig(mode="crop", crop_seconds=0.05, num_mel_bins=8)


def _flip_payload_byte(shard: str, offset: int) -> None:
    # A byte inside the payload (past the 12-byte frame header): the payload CRC no longer
    # matches, so the record is damaged while the shard stays readable.
    with open(shard, "r+b") as f:
        f.seek(offset + layout.FRAME_HEADER_BYTES + 3)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def _damage_record(output_dir: str, record_set: str, record: int) -> None:
    index_dir = layout.index_dir(output_dir, record_set)
    shards = layout.load_json(os.path.join(index_dir, layout.SHARDS_FILE))["shards"]
    shard, offset, _ = np.load(os.path.join(index_dir, layout.OFFSETS_FILE))[record]
    _flip_payload_byte(layout.resolve(output_dir, shards[int(shard)]), int(offset))


@pytest.mark.parametrize("backend", ["disk", "memory"])
def test_class_balanced_skips_counts_and_logs_damaged_records(tmp_path, caplog, backend):
    output_dir = str(tmp_path)
    info = write_audio_run(output_dir, [4, 5, 6, 4], seed=3)
    damaged = 7
    _damage_record(output_dir, "train", damaged)
    sampler = ClassBalancedSampler(
        output_dir,
        n_classes_per_batch=2,
        n_samples_per_class=3,
        features=CROP,
        store_options=StoreOptions(backend=backend, on_damaged="skip"),
        epoch_mode="samples",
        seed=5,
    )
    planned = skipping.times_planned(sampler.epoch_plan, "index", damaged, EPOCHS)
    assert planned >= EPOCHS  # the samples mode plans every record every epoch
    for batch in skipping.batches_of_epochs(sampler.dataset(), EPOCHS, caplog):
        assert damaged not in batch["index"]
        assert len(batch["index"]) == len(batch["label"]) == len(batch["features"])
        np.testing.assert_array_equal(info["class_ids"][batch["index"]], batch["label"])
    assert sampler.skipped_samples == planned
    assert sampler.state.skipped_samples.numpy() == planned
    messages = skipping.warnings_of(caplog, "class_balanced: epoch")
    assert len(messages) == EPOCHS, messages
    for epoch, message in enumerate(messages):
        assert f"epoch {epoch} skips" in message
    assert f"record {damaged}" in messages[-1]


def test_class_balanced_fails_naming_the_damaged_record_by_default(tmp_path):
    output_dir = str(tmp_path)
    write_audio_run(output_dir, [4, 5], seed=4)
    _damage_record(output_dir, "train", 2)
    sampler = ClassBalancedSampler(
        output_dir,
        n_classes_per_batch=2,
        n_samples_per_class=2,
        features=CROP,
        store_options=StoreOptions(backend="disk"),
    )
    with pytest.raises(tf.errors.OpError, match=r"record 2 \(shard .*data-"):
        for _ in range(3):
            list(sampler.dataset().as_numpy_iterator())


def test_dynamic_pairs_over_a_run_skips_counts_and_logs(tmp_path, caplog):
    output_dir = str(tmp_path)
    skipping.write_pairs_run(output_dir)
    _damage_record(output_dir, "y", 1)
    sampler = DynamicPairsSampler(
        output_dir,
        batch_size=4,
        image=ImageSpec(2, 2, 3),
        store_options=StoreOptions(backend="disk", on_damaged="skip"),
        seed=2,
    )
    planned = skipping.times_planned(sampler.planner.plan, "y_index", 1, EPOCHS)
    assert planned > 0
    kept = 0
    for batch in skipping.batches_of_epochs(sampler.dataset(), EPOCHS, caplog):
        assert 1 not in batch["y_index"]
        kept += len(batch["y_index"])
    assert sampler.skipped_samples == planned
    assert kept + planned == EPOCHS * skipping.NUM_X
    messages = skipping.warnings_of(caplog, "dynamic_pairs: epoch")
    epochs_with_skips = [
        epoch
        for epoch in range(EPOCHS)
        if np.any(sampler.planner.plan(epoch)["y_index"].numpy() == 1)
    ]
    assert [m.split(" skips")[0] for m in messages] == [
        f"dynamic_pairs: epoch {e}" for e in epochs_with_skips
    ]
    assert "y record 1" in messages[-1]
