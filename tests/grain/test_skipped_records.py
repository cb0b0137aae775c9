"""Damaged records under `on_damaged="skip"`: the Grain samplers leave out the samples that need
them, as tf.data's do (the same short batches, byte for byte), count them and warn once an
epoch naming the records; under "fail" the first damaged record read is one line naming it."""

from __future__ import annotations

import json
import logging
import os
import subprocess

import numpy as np
import pytest

from tests.grain.tf_batches import as_arrays
from tests.grain.tf_skipped_batches import CLASS_ARGS, DAMAGED, EPOCHS, PAIRS_ARGS
from tfx_dynamic_inputs.grain import GrainClassBalanced, GrainPairs
from tfx_dynamic_inputs.records import DamagedRecordError

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def damaged_runs(tf_python: str, tmp_path_factory: pytest.TempPathFactory):
    """The runs with damaged records and tf.data's batches over them (one TensorFlow process)."""
    folder = tmp_path_factory.mktemp("skipped")
    subprocess.run(
        [tf_python, "-m", "tests.grain.tf_skipped_batches", str(folder)],
        check=True,
        cwd=_REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    runs = json.loads((folder / "runs.json").read_text())
    return runs, dict(np.load(folder / "tf.npz"))


def _assert_tf_batches(sampler, name: str, expected: dict) -> None:
    for epoch in range(EPOCHS):
        batches = list(sampler.epoch(epoch))
        assert len(batches) == len(
            {k.split("/")[2] for k in expected if k.startswith(f"{name}/{epoch}/")}
        )
        for number, batch in enumerate(batches):
            for key, value in batch.items():
                for part, got in as_arrays(f"{name}/{epoch}/{number}/{key}", value).items():
                    np.testing.assert_array_equal(got, expected[part], err_msg=part)


def test_pairs_skip_the_pairs_tf_data_skips(damaged_runs, caplog) -> None:
    runs, expected = damaged_runs
    pairs = GrainPairs(runs["pairs"], on_damaged="skip", **PAIRS_ARGS)
    with caplog.at_level(logging.WARNING, logger="tfx_dynamic_inputs.grain.skipped"):
        _assert_tf_batches(pairs, "pairs", expected)
    planned = sum(len(pairs.plan.plan(e)["x_index"].ravel()) for e in range(EPOCHS))
    served = sum(
        len(expected[f"pairs/{e}/{n}/x_index"])
        for e in range(EPOCHS)
        for n in range(pairs.steps_per_epoch)
    )
    assert pairs.skipped.total == planned - served > 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == EPOCHS, warnings  # one an epoch
    damaged = pairs.skipped.damaged_records()
    assert sorted(d.index for d in damaged["x"]) == DAMAGED["x"]
    assert sorted(d.index for d in damaged["y"]) == DAMAGED["y"]
    assert "(shard " in warnings[0] and "payload CRC mismatch" in warnings[0]


def test_class_balanced_skips_the_samples_tf_data_skips(damaged_runs) -> None:
    runs, expected = damaged_runs
    balanced = GrainClassBalanced(
        runs["audio"], record_set="train", decode="bytes", on_damaged="skip", **CLASS_ARGS
    )
    _assert_tf_batches(balanced, "class", expected)
    assert balanced.skipped.total > 0
    assert {d.index for d in balanced.skipped.damaged_records()["records"]} <= set(DAMAGED["train"])


@pytest.mark.parametrize("kind", ["pairs", "class"])
def test_under_fail_a_damaged_record_is_one_line_naming_it(damaged_runs, kind) -> None:
    runs, _ = damaged_runs
    if kind == "pairs":
        sampler = GrainPairs(runs["pairs"], **PAIRS_ARGS)
    else:
        sampler = GrainClassBalanced(
            runs["audio"], record_set="train", decode="bytes", **CLASS_ARGS
        )
    with pytest.raises(DamagedRecordError) as error:
        for epoch in range(EPOCHS):
            list(sampler.epoch(epoch))
    message = str(error.value)
    assert "\n" not in message and "payload CRC mismatch" in message and "(shard " in message


def test_skip_is_for_a_run_a_source_keeps_its_own_policy() -> None:
    with pytest.raises(ValueError, match="on_damaged='skip' is for a run folder"):
        GrainPairs(np.zeros(3), np.zeros(2), [[0], [1], [0]], batch_size=1, on_damaged="skip")


class _HalfDamaged:
    """A random-access source of audio records whose odd records read as None (damaged)."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, number: int):
        if number % 2:
            return None
        audio = np.full(800 + 40 * number, number, np.int16)
        return {"audio": audio, "sample_rate": np.int64(8000)}


def test_a_source_reading_none_skips_and_an_all_skipped_batch_is_empty() -> None:
    from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig

    features = AudioFeatureConfig(sample_rate=8000, mode="pad")
    # Labels by parity: class 1's records are all damaged, so its batches are empty.
    balanced = GrainClassBalanced(
        _HalfDamaged(),
        np.arange(12) % 2,
        n_classes_per_batch=1,
        n_samples_per_class=3,
        seed=3,
        features=features,
    )
    batches = list(balanced.epoch(0))
    for batch in batches:
        whole = batch["label"].size == 3
        assert whole == (set(batch["label"].tolist()) == {0}), batch["label"]
        assert batch["features"].shape[0] == batch["index"].size == batch["mask"].shape[0]
        assert np.all(batch["index"] % 2 == 0)
    planned = balanced.plan.plan(0)["label"]
    assert balanced.skipped.total == int(np.count_nonzero(planned == 1)) > 0
    assert any(batch["index"].size == 0 for batch in batches)
