"""What the speaker augmentation lets in (issue 46): SNR ranges that float32 cannot mix at, runs of
silent noise clips or RIRs, and memory that grew with the clips instead of the segments drawn."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_clip_run
from tfx_dynamic_inputs.inputs import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.augment_clips import SILENCE_FLOOR_DB, ClipBank
from tfx_dynamic_inputs.inputs.augment_signals import snr_scale
from tfx_dynamic_inputs.inputs.run import StoreOptions, open_run
from tfx_dynamic_inputs.inputs.speaker_augment import (
    MAX_RIR_SECONDS,
    MAX_SNR_DB,
    MIN_SNR_DB,
    AdditiveNoise,
    Reverberation,
    SpeakerAugmentConfig,
    SpeakerAugmenter,
    check_snr_range,
)

FEATURES = AudioFeatureConfig(crop_seconds=0.05, num_mel_bins=16)
SEGMENT = FEATURES.crop_samples
BATCH = 12
FLOOR_POWER = 10 ** (SILENCE_FLOOR_DB / 10)


def _noise(rng: np.random.Generator, n: int, amplitude: float = 9000) -> np.ndarray:
    return (rng.standard_normal(n) * amplitude).clip(-32768, 32767).astype(np.int16)


def _rir(rng: np.random.Generator, n: int) -> np.ndarray:
    tail = rng.standard_normal(n) * np.exp(-np.arange(n) / 200.0)
    tail[0] = 4.0
    return np.round(tail / np.abs(tail).max() * 30000).astype(np.int16)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    rng = np.random.default_rng(3)
    root = tmp_path_factory.mktemp("augment_inputs")
    paths = {name: str(root / name) for name in ("noise", "silence", "zero_rirs")}
    write_clip_run(paths["noise"], [_noise(rng, int(n)) for n in rng.integers(300, 3000, 5)])
    write_clip_run(paths["silence"], [np.zeros(2000, np.int16), np.zeros(900, np.int16)])
    write_clip_run(paths["zero_rirs"], [np.zeros(800, np.int16)])
    return paths


def _speech(size: int = BATCH, seed: int = 0) -> tf.Tensor:
    rng = np.random.default_rng(seed)
    return tf.constant([_noise(rng, 3 * SEGMENT, 6000).tobytes() for _ in range(size)])


def _waveforms(augmenter: SpeakerAugmenter, seed: int = 1, size: int = BATCH) -> dict:
    out = augmenter.waveforms(
        _speech(size),
        tf.zeros([size], tf.int64),
        tf.constant([seed, 2], tf.int64),
        tf.range(size, dtype=tf.int64),
    )
    return {key: value.numpy() for key, value in out.items()}


# --------------------------------------------------------------------------- SNR range (46.4)


@pytest.mark.parametrize(
    "snr_db, message",
    [
        ((-400, -400), r"within \[-100, 100\] dB"),
        ((-250, 0), r"within \[-100, 100\] dB"),
        ((0, 100.5), r"within \[-100, 100\] dB"),
        ((float("nan"), 0), r"within \[-100, 100\] dB"),
        ((0, float("inf")), r"within \[-100, 100\] dB"),
        ((10, 0), "low <= high"),
    ],
)
def test_snr_ranges_float32_cannot_mix_are_refused_in_one_line(runs, snr_db, message):
    with pytest.raises(ValueError, match=message) as raised:
        AdditiveNoise(runs["noise"], snr_db=snr_db)
    assert "\n" not in str(raised.value) and "AdditiveNoise.snr_db" in str(raised.value)


@pytest.mark.parametrize("snr_db", [(0,), (1, 2, 3), "0,15", (0, "15"), (True, 3)])
def test_snr_ranges_that_are_not_two_numbers_are_refused_in_one_line(runs, snr_db):
    with pytest.raises(TypeError, match="AdditiveNoise.snr_db") as raised:
        AdditiveNoise(runs["noise"], snr_db=snr_db)
    assert "\n" not in str(raised.value)


_ends = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(MIN_SNR_DB - 5, MAX_SNR_DB + 5),
    st.sampled_from([MIN_SNR_DB, MAX_SNR_DB, -400.0, -250.0, 0.0]),
    st.integers(-500, 500),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(low=_ends, high=_ends, seed=st.integers(0, 2**32))
def test_generated_snr_ranges_are_refused_in_one_line_or_mix_finite_batches(runs, low, high, seed):
    try:
        noise = AdditiveNoise(runs["noise"], snr_db=(low, high), probability=1.0)
    except ValueError as refused:
        assert "\n" not in str(refused)
        assert not (MIN_SNR_DB <= low <= high <= MAX_SNR_DB)
        return
    assert MIN_SNR_DB <= low <= high <= MAX_SNR_DB
    augmenter = SpeakerAugmenter(SpeakerAugmentConfig(noise=noise), FEATURES, num_classes=1)
    out = _waveforms(augmenter, seed)
    assert out["noisy"].all() and np.isfinite(out["audio"]).all()
    features = augmenter.features_of(
        _speech(), tf.zeros([BATCH], tf.int64), tf.constant([seed, 2]), tf.range(BATCH)
    )["features"]
    assert np.isfinite(features.numpy()).all()


_energies = st.sampled_from([0.0, 1e-42, 1e-30, 1e-20, 1 / 32768, 0.01, 1.0])


@settings(max_examples=40, deadline=None)
@given(snr=st.floats(MIN_SNR_DB, MAX_SNR_DB), speech=_energies, noise=_energies)
def test_the_gain_is_finite_across_the_snr_range_for_any_energies(snr, speech, noise):
    # Denormal, tiny and full-scale rows: the gain and the mix stay finite at every allowed SNR.
    rng = np.random.default_rng(0)
    speech_rows = (rng.standard_normal([2, SEGMENT]) * speech).astype(np.float32)
    noise_rows = (rng.standard_normal([2, SEGMENT]) * noise).astype(np.float32)
    gain = snr_scale(tf.constant(speech_rows), tf.constant(noise_rows), tf.fill([2], snr))
    assert np.isfinite(gain.numpy()).all()
    assert np.isfinite(speech_rows + gain.numpy() * noise_rows).all()


def test_the_bounds_are_shared_as_one_check():
    assert check_snr_range(-100, 100, "min_snr_db/max_snr_db") == (MIN_SNR_DB, MAX_SNR_DB)
    with pytest.raises(ValueError, match="min_snr_db/max_snr_db must be within"):
        check_snr_range(-400, 0, "min_snr_db/max_snr_db")
    for seconds in (600, 0, float("nan"), MAX_RIR_SECONDS + 0.1):
        with pytest.raises(ValueError, match=r"max_rir_seconds must be in \(0, 10\]"):
            Reverberation("rirs", max_rir_seconds=seconds)


# --------------------------------------------------------------------------- silence (46.3)


def test_a_noise_run_of_digital_silence_is_refused_in_one_line(runs):
    config = SpeakerAugmentConfig(noise=AdditiveNoise(runs["silence"], probability=1.0))
    with pytest.raises(ValueError, match=r"all 2 clips .* are silent \(below the -80 dB") as err:
        SpeakerAugmenter(config, FEATURES, num_classes=1)
    assert "\n" not in str(err.value) and runs["silence"] in str(err.value)


def test_an_all_zero_rir_run_is_refused_in_one_line(runs):
    config = SpeakerAugmentConfig(reverb=Reverberation(runs["zero_rirs"], probability=1.0))
    with pytest.raises(ValueError, match=r"the RIR run .* all 1 clips .* are silent") as err:
        SpeakerAugmenter(config, FEATURES, num_classes=1)
    assert "\n" not in str(err.value)


def test_silent_clips_are_left_out_counted_and_said_once(tmp_path, caplog):
    rng = np.random.default_rng(5)
    clips = [np.zeros(1500, np.int16), _noise(rng, 1200), np.zeros(400, np.int16)]
    clips += [_noise(rng, 900), np.ones(700, np.int16)]  # +1 step DC: -90 dB, below the floor
    faint = np.zeros(300, np.int16)
    faint[[3, 4, 9]] = [2, 1, -1]  # 6 squared steps: -82 dB re a full-scale impulse
    rirs = [np.zeros(600, np.int16), _rir(rng, 500), faint]
    write_clip_run(str(tmp_path / "noise"), clips)
    write_clip_run(str(tmp_path / "rirs"), rirs)
    config = SpeakerAugmentConfig(
        noise=AdditiveNoise(str(tmp_path / "noise"), probability=1.0),
        reverb=Reverberation(str(tmp_path / "rirs"), probability=1.0),
    )
    with caplog.at_level(logging.WARNING):
        augmenter = SpeakerAugmenter(config, FEATURES, num_classes=1)
    assert augmenter.noise_report.silent == (0, 2, 4) and augmenter.noise_report.num_used == 2
    assert augmenter.rir_report.silent == (0, 2) and augmenter.rir_report.num_used == 1
    warned = [r.getMessage() for r in caplog.records if "silent" in r.getMessage()]
    assert len(warned) == 2 and "3 of 5 clips" in warned[0] and "records 0, 2, 4" in warned[0]
    out = _waveforms(augmenter, size=64)
    assert set(out["noise_clip"]) == {1, 3} and set(out["rir"]) == {1}
    assert out["noisy"].all() and out["reverberated"].all()
    assert (np.abs(out["audio"] - out["clean"]).max(axis=1) > 1e-3).all()


_levels = st.sampled_from(["zeros", "one_step", "dither", "three_steps", "quiet", "loud"])


def _clip_of(level: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if level == "zeros":
        return np.zeros(n, np.int16)
    if level == "one_step":  # a single nonzero sample
        clip = np.zeros(n, np.int16)
        clip[rng.integers(n)] = 1
        return clip
    if level == "dither":  # +-1 step everywhere: -90 dB
        return rng.choice(np.array([-1, 1], np.int16), n)
    amplitude = {"three_steps": 3.0, "quiet": 40.0, "loud": 9000.0}[level]
    return _noise(rng, n, amplitude)


@settings(max_examples=15, deadline=None)
@given(
    levels=st.lists(st.tuples(_levels, st.integers(50, 2500)), min_size=1, max_size=5),
    what=st.sampled_from(["noise", "RIR"]),
    seed=st.integers(0, 2**16),
)
def test_generated_clip_energies_silent_clips_are_never_mixed_in(levels, what, seed):
    rng = np.random.default_rng(seed)
    clips = [_clip_of(level, n, rng) for level, n in levels]
    powers = [np.mean((c.astype(np.float64) / 32768) ** 2) for c in clips]
    # Noise: mean power; a RIR: the energy of its used part (the whole clip here, from its peak).
    peaks = [int(np.argmax(np.abs(c.astype(np.int32)))) for c in clips]
    energies = [
        np.sum((c[p:].astype(np.float64) / 32768) ** 2) for c, p in zip(clips, peaks, strict=True)
    ]
    level = powers if what == "noise" else energies
    silent = {i for i, value in enumerate(level) if value < FLOOR_POWER}
    with tempfile.TemporaryDirectory() as folder:
        write_clip_run(folder, clips, num_shards=1)
        part = (
            dict(noise=AdditiveNoise(folder, probability=1.0))
            if what == "noise"
            else dict(reverb=Reverberation(folder, probability=1.0))
        )
        config = SpeakerAugmentConfig(**part)
        if len(silent) == len(clips):
            with pytest.raises(ValueError, match="are silent") as refused:
                SpeakerAugmenter(config, FEATURES, num_classes=1)
            assert "\n" not in str(refused.value)
            return
        augmenter = SpeakerAugmenter(config, FEATURES, num_classes=1)
        out = _waveforms(augmenter, seed, size=32)
    report = augmenter.noise_report if what == "noise" else augmenter.rir_report
    assert set(report.silent) == silent
    drawn = out["noise_clip"] if what == "noise" else out["rir"]
    applied = out["noisy"] if what == "noise" else out["reverberated"]
    assert not silent & set(drawn[applied].tolist())
    # What is applied changes the segment; a noise window below the floor is not applied.
    changed = np.abs(out["audio"] - out["clean"]).max(axis=1) > 0
    assert (changed == applied).all()
    assert np.isfinite(out["audio"]).all()


# --------------------------------------------------------------------------- memory (46.9)


def test_windows_read_from_disk_are_the_windows_held_in_memory(runs, tmp_path):
    rng = np.random.default_rng(9)
    write_clip_run(str(tmp_path / "rirs"), [_rir(rng, n) for n in (700, 1800, 300)])
    config = SpeakerAugmentConfig(
        noise=AdditiveNoise(runs["noise"], probability=0.8),
        reverb=Reverberation(str(tmp_path / "rirs"), probability=0.7, max_rir_seconds=10.0),
    )
    held = SpeakerAugmenter(config, FEATURES, num_classes=1)
    read = SpeakerAugmenter(config, FEATURES, num_classes=1, memory_budget_bytes=1000)
    assert held.noise_report.backend == "memory" and read.noise_report.backend == "disk"
    assert read.rir_report.backend == "disk" and read.service_problems()
    # RIRs are padded to the longest one kept (1800 samples from its peak), not to 10 s.
    assert held._rirs.longest == 1800
    for seed in (1, 2):
        a, b = _waveforms(held, seed), _waveforms(read, seed)
        for key in ("audio", "noise_clip", "rir"):
            np.testing.assert_array_equal(a[key], b[key])


def test_a_clip_bank_refuses_records_without_pcm_in_one_line(tmp_path):
    from tests.inputs.runs import run_id_of, write_record_set
    from tfx_dynamic_inputs import layout

    example = tf.train.Example()
    example.features.feature["audio"].bytes_list.value.append(b"abc")  # odd: not int16 PCM
    write_record_set(str(tmp_path), "train", [example.SerializeToString()], 1, ["odd"])
    summary = {"ok": True, "config": {}, "record_sets": {"train": {"num_records": 1}}}
    layout.commit_run(str(tmp_path), run_id_of(str(tmp_path)), summary)
    with pytest.raises(ValueError, match="record 0 holds no int16 PCM 'audio'") as raised:
        ClipBank.open(open_run(str(tmp_path)), "train", "noise", StoreOptions())
    assert "\n" not in str(raised.value)


_RSS_PROBE = textwrap.dedent(
    """
    import resource, sys
    import numpy as np, tensorflow as tf
    from tfx_dynamic_inputs.inputs import AudioFeatureConfig
    from tfx_dynamic_inputs.inputs.speaker_augment import (
        AdditiveNoise, SpeakerAugmentConfig, SpeakerAugmenter)

    def rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    config = SpeakerAugmentConfig(noise=AdditiveNoise(sys.argv[1], probability=1.0))
    augmenter = SpeakerAugmenter(config, AudioFeatureConfig(crop_seconds=1.0), num_classes=1)
    speech = tf.constant([np.ones(32000, "<i2").tobytes()] * 8)
    labels, positions = tf.zeros([8], tf.int64), tf.range(8, dtype=tf.int64)
    opened = rss()
    for step in range(3):
        augmenter.waveforms(speech, labels, tf.constant([step, 1], tf.int64), positions)
    print(rss() - opened)
    """
)


@pytest.mark.slow
def test_batch_memory_follows_the_segments_not_a_10_minute_clip(tmp_path):
    # 10 minutes of noise (19 MB of PCM): a batch of 8 one-second segments copied the clip per
    # sample (and its parsed bytes): +170 MB peak; windows of it are 8 x 64 KB.
    rng = np.random.default_rng(0)
    write_clip_run(str(tmp_path), [_noise(rng, 600 * 16000)], num_shards=1)
    probe = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    grown_mb = float(probe.stdout.split()[-1])
    assert math.isfinite(grown_mb) and grown_mb < 40, grown_mb
