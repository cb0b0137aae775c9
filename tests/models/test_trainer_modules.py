"""The trainer user modules' `run_fn`, end to end, with `fn_args` as the trainer component
builds it (a plain namespace here) and the real pair-coverage callback."""

from __future__ import annotations

import glob
import io
import json
import os
import types

import keras
import numpy as np
import pytest
import soundfile
import tensorflow as tf

from tests.models import events, synthetic
from tests.models.chart_checks import read_png
from tfx_dynamic_inputs.inputs.coverage import PairCoverage, PairCoverageCallback
from tfx_dynamic_inputs.models import charts
from tfx_dynamic_inputs.models.cyclegan import LOSS_NAMES
from tfx_dynamic_inputs.models.translation_snapshots import (
    TRANSLATIONS_DIR,
    X_CYCLE_TAG,
    Y_CYCLE_TAG,
)
from tfx_dynamic_inputs.trainer_modules import cyclegan_trainer, speaker_trainer


def make_fn_args(tmp_path, train_dataset, **overrides) -> types.SimpleNamespace:
    fields = {
        "train_dataset": train_dataset,
        "eval_dataset": None,
        "callbacks": [],
        "num_epochs": 2,
        "serving_model_dir": str(tmp_path / "serving_model"),
        "model_run_dir": str(tmp_path / "model_run"),
        "custom_config": {},
    }
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


class EpochRecorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(epoch)


@pytest.fixture(scope="module")
def digit_subset(digits):
    """The first 192 x of the digit domains with their valid pairs (into all 1,797 y)."""
    x, y, valid_pairs = digits
    return x[:192], y, valid_pairs[:192]


def test_cyclegan_run_fn_trains_logs_coverage_and_exports(tmp_path, digit_subset):
    x, y, valid_pairs = digit_subset
    coverage = PairCoverage(valid_pairs, num_y=len(y))
    train = coverage.observe(synthetic.pair_batches(x, y, valid_pairs, batch_size=32))
    recorder = EpochRecorder()
    fn_args = make_fn_args(
        tmp_path,
        train,
        eval_dataset=synthetic.pair_batches(x[:64], y, valid_pairs[:64], batch_size=32),
        callbacks=[PairCoverageCallback(coverage), recorder],
        custom_config={"image_size": 32, "batch_size": 32, "seed": 1},
    )
    metrics = cyclegan_trainer.run_fn(fn_args)

    assert recorder.epochs == [0, 1]
    assert all(isinstance(v, float) for v in metrics.values()), metrics
    for name in LOSS_NAMES:
        assert np.isfinite(metrics[name]) and np.isfinite(metrics[f"val_{name}"]), metrics
    with open(os.path.join(fn_args.model_run_dir, "history.json")) as f:
        history = json.load(f)
    assert metrics["cycle_loss_first_epoch"] == history["cycle_loss"][0]
    assert metrics["cycle_loss_last_epoch"] == history["cycle_loss"][-1] == metrics["cycle_loss"]
    assert metrics["epochs"] == 2.0
    # The executor's coverage callback logged through fit into the history and the metrics:
    # each epoch draws one valid y for each of the 192 x (6 batches of 32).
    assert len(history["pair_coverage_epoch"]) == 2
    assert 0 < metrics["pair_coverage_epoch"] <= 192 / coverage.num_pairs + 1e-9
    assert metrics["pair_coverage_epoch"] < metrics["pair_coverage_total"] <= 1.0
    assert metrics["invalid_pairs"] == 0.0
    assert glob.glob(
        os.path.join(fn_args.model_run_dir, "**", "events.out.tfevents*"), recursive=True
    )
    # Each epoch, 4 fixed held-out x (and y) translated there and back: 4 rows of 3 framed cells.
    translations = events.read_summaries(os.path.join(fn_args.model_run_dir, TRANSLATIONS_DIR))
    assert set(translations) == {X_CYCLE_TAG, Y_CYCLE_TAG}
    for by_epoch in translations.values():
        assert list(by_epoch) == [0, 1]
        assert all(image.shape == (4 * 34, 3 * 34, 1) for image in by_epoch.values())

    # The export serves uint8 pixels by default and takes training-size floats too.
    loaded = tf.saved_model.load(fn_args.serving_model_dir)
    pixels = tf.image.convert_image_dtype(x[:4], tf.uint8, saturate=True)
    translated = loaded.signatures["serving_default"](images=pixels)
    assert translated["images_uint8"].shape == (4, 32, 32, 1)
    np.testing.assert_allclose(
        translated["images"].numpy(),
        loaded.signatures["x_to_y"](images=tf.constant(x[:4]))["images"].numpy(),
        atol=1e-5,
    )


@pytest.fixture(scope="module")
def speakers():
    rng = np.random.default_rng(7)
    envelopes = synthetic.speaker_envelopes(rng, 24)
    train = synthetic.class_balanced_batches(
        rng, envelopes[:18], n_classes_per_batch=4, n_samples_per_class=4, num_batches=24
    )
    held_out = synthetic.plain_batches(rng, envelopes[18:], per_speaker=5, batch_size=10)
    return train, held_out


SPEAKER_CONFIG = {
    "n_classes_per_batch": 4,
    "n_samples_per_class": 4,
    "channels": 48,
    "embedding_dim": 24,
    "learning_rate": 2e-3,
}


def test_speaker_run_fn_reports_eer_on_held_out_speakers_and_exports(tmp_path, speakers):
    train, held_out = speakers
    recorder = EpochRecorder()
    # The front end the batches came from, as the executor passes it on (training-only fields
    # included), here at 8 kHz: the export must serve that rate.
    audio_features = {
        "sample_rate": 8000,
        "num_mel_bins": synthetic.N_MELS,
        "crop_seconds": 1.0,
        "spec_augment": {"freq_mask_param": 4},
    }
    fn_args = make_fn_args(
        tmp_path,
        train,
        eval_dataset=held_out,
        callbacks=[recorder],
        num_epochs=3,
        custom_config={**SPEAKER_CONFIG, "audio_features": audio_features},
    )
    metrics = speaker_trainer.run_fn(fn_args)

    assert recorder.epochs == [0, 1, 2]
    assert all(isinstance(v, float) for v in metrics.values()), metrics
    assert metrics["eer_chance"] == 0.5
    assert metrics["eer"] < 0.25, metrics
    assert metrics["eer"] < metrics["eer_before_training"], metrics
    assert metrics["loss_last_epoch"] < metrics["loss_first_epoch"]
    assert metrics["num_speakers"] == 6 and metrics["num_utterances"] == 30
    assert metrics["epochs"] == 3.0
    with open(os.path.join(fn_args.model_run_dir, "history.json")) as f:
        assert len(json.load(f)["loss"]) == 3
    # Both evaluations, before training (step 0) and after the 3 epochs, in TensorBoard.
    summaries = events.read_summaries(fn_args.model_run_dir)
    for tag in ("eval/eer", "eval/target_scores", "eval/nontarget_scores", "eval/det_curve"):
        assert list(summaries[tag]) == [0, 3], tag
    assert float(summaries["eval/eer"][0]) == pytest.approx(metrics["eer_before_training"])
    assert float(summaries["eval/eer"][3]) == pytest.approx(metrics["eer"])
    assert summaries["eval/target_scores"][3][:, 2].sum() == metrics["num_target_trials"]
    assert summaries["eval/nontarget_scores"][3][:, 2].sum() == metrics["num_nontarget_trials"]
    assert summaries["eval/det_curve"][3].shape == summaries["eval/score_distributions"][0].shape
    # Both pictures of both evaluations also as PNG files beside the events.
    for tag in ("eval/det_curve", "eval/score_distributions"):
        for step in (0, 3):
            png = os.path.join(fn_args.model_run_dir, charts.png_name(tag, step))
            np.testing.assert_array_equal(read_png(png), summaries[tag][step])

    loaded = tf.saved_model.load(fn_args.serving_model_dir)
    batch = next(iter(held_out))
    features = loaded.signatures["embed_log_mel"](
        features=batch["features"], lengths=batch["lengths"]
    )["embedding"]
    assert features.shape == (10, 24)
    pcm = np.random.default_rng(8).integers(-16000, 16000, (2, 4000)).astype(np.int16)
    embedding = loaded.signatures["serving_default"](
        waveforms=tf.constant(pcm / 32768.0, tf.float32), lengths=tf.constant([4000, 2500])
    )["embedding"]
    assert embedding.shape == (2, 24)
    wav_at = {}
    for rate in (8000, 16000):
        buffer = io.BytesIO()
        soundfile.write(buffer, pcm[0], rate, format="WAV", subtype="PCM_16")
        wav_at[rate] = tf.constant([buffer.getvalue()])
    encoded = loaded.signatures["embed_encoded_audio"]
    np.testing.assert_allclose(
        encoded(audio=wav_at[8000])["embedding"].numpy(), embedding.numpy()[:1], atol=1e-5
    )
    # Another rate is resampled in the graph to the training rate (8 kHz here).
    resampled = encoded(audio=wav_at[16000])["embedding"].numpy()
    assert resampled.shape == (1, 24) and np.isfinite(resampled).all()
    with pytest.raises(tf.errors.InvalidArgumentError, match="MP3 audio, not accepted"):
        encoded(audio=tf.constant([b"ID3" + bytes(64)]))


def test_speaker_run_fn_refuses_bad_setups_before_training(tmp_path, speakers):
    train, held_out = speakers
    cases = [
        ({"eval_dataset": None}, ValueError, "eval_dataset is required"),
        ({"custom_config": {"n_classes_per_batch": 4}}, ValueError, "n_samples_per_class"),
        (
            {"custom_config": {**SPEAKER_CONFIG, "n_classes_per_batch": 3}},
            ValueError,
            "batch size 16 != n_classes_per_batch",
        ),
        (
            {"custom_config": {**SPEAKER_CONFIG, "n_samples_per_class": 3}},
            ValueError,
            "not a multiple",
        ),
        (
            {"custom_config": {**SPEAKER_CONFIG, "audio_features": {"num_mel_bins": 40}}},
            ValueError,
            "num_mel_bins=40 but the batches hold 80",
        ),
        (
            {"custom_config": {**SPEAKER_CONFIG, "serving_audio_formats": ["wav", "mp3"]}},
            ValueError,
            "audio_formats",
        ),
        ({"num_epochs": 0}, ValueError, "num_epochs"),
        ({"train_dataset": [1, 2]}, ValueError, "tf.data.Dataset"),
        ({"serving_model_dir": None}, ValueError, "serving_model_dir"),
    ]
    for overrides, error, message in cases:
        fields = {"eval_dataset": held_out, "custom_config": SPEAKER_CONFIG, **overrides}
        with pytest.raises(error, match=message):
            speaker_trainer.run_fn(
                make_fn_args(tmp_path, fields.pop("train_dataset", train), **fields)
            )
    pairs = tf.data.Dataset.from_tensors({"x": tf.zeros([2, 8, 8, 1]), "y": tf.zeros([2, 8, 8, 1])})
    with pytest.raises(ValueError, match="keys"):
        speaker_trainer.run_fn(
            make_fn_args(tmp_path, pairs, eval_dataset=held_out, custom_config=SPEAKER_CONFIG)
        )
    assert not os.path.exists(tmp_path / "serving_model")


def test_cyclegan_run_fn_refuses_bad_setups_before_training(tmp_path, speakers, digit_subset):
    x, y, valid_pairs = digit_subset
    pairs = synthetic.pair_batches(x, y, valid_pairs, batch_size=32)
    with pytest.raises(ValueError, match="image_size=64"):
        cyclegan_trainer.run_fn(make_fn_args(tmp_path, pairs, custom_config={"image_size": 64}))
    with pytest.raises(ValueError, match="pair batches"):
        cyclegan_trainer.run_fn(make_fn_args(tmp_path, speakers[0]))
    mismatched = tf.data.Dataset.from_tensors(
        {"x": tf.zeros([2, 32, 32, 1]), "y": tf.zeros([2, 32, 32, 3])}
    )
    with pytest.raises(ValueError, match="same known H, W, C"):
        cyclegan_trainer.run_fn(make_fn_args(tmp_path, mismatched))
    assert not os.path.exists(tmp_path / "serving_model")


def test_diverged_training_is_an_error_not_a_metric(tmp_path, speakers):
    train, held_out = speakers
    poisoned = train.map(lambda batch: {**batch, "features": batch["features"] * np.nan})
    fn_args = make_fn_args(
        tmp_path,
        poisoned,
        eval_dataset=held_out,
        num_epochs=1,
        custom_config={**SPEAKER_CONFIG, "channels": 8, "embedding_dim": 4},
    )
    with pytest.raises(RuntimeError, match="diverged"):
        speaker_trainer.run_fn(fn_args)
    assert not os.path.exists(fn_args.serving_model_dir)
