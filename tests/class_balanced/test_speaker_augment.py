"""Speaker augmentation (`speaker_augment`): noise at the drawn SNR, unit-energy peak-aligned RIRs,
speed perturbation against soxr, derived classes in the plan, and replay: the same (seed, epoch,
batch) gives bit-equal features, after a checkpoint and resume too, on another replica count."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_audio_run, write_clip_run
from tests.inputs.test_elastic_resume import _contexts, _interrupted_and_resumed
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, ClassBalancedSampler, SpecAugment
from tfx_dynamic_inputs.inputs.augment_clips import ClipBank
from tfx_dynamic_inputs.inputs.augment_signals import (
    perturb_speed,
    reverberate,
    speed_input_samples,
    unit_energy,
)
from tfx_dynamic_inputs.inputs.run import StoreOptions, open_run
from tfx_dynamic_inputs.inputs.speaker_augment import (
    AdditiveNoise,
    Reverberation,
    SpeakerAugmentConfig,
    SpeakerAugmenter,
)

CLASS_SIZES = [5, 3, 6, 4, 7, 2]  # C = 6: 18 derived classes with three speeds
SPEEDS = (1.0, 0.9, 1.1)
FEATURES = AudioFeatureConfig(crop_seconds=0.1, num_mel_bins=20, spec_augment=SpecAugment(4, 3))
SEGMENT = FEATURES.crop_samples


def _noise_clips(rng: np.random.Generator) -> list[np.ndarray]:
    """White and pink (1/f, shaped in the spectrum) noise, some shorter than a segment."""
    clips = []
    for i in range(6):
        n = int(rng.integers(SEGMENT // 3, 3 * SEGMENT))
        white = rng.standard_normal(n)
        if i % 2:
            spectrum = np.fft.rfft(white) / np.sqrt(np.arange(n // 2 + 1) + 1.0)
            white = np.fft.irfft(spectrum, n)
        clips.append((white / np.abs(white).max() * 12000).astype(np.int16))
    return clips


def _rirs(rng: np.random.Generator) -> list[np.ndarray]:
    """Exponentially decaying noise, half of them after a silent direct-path delay."""
    rirs = []
    for i in range(6):
        n = int(rng.integers(300, 2500))
        decay = np.exp(-np.arange(n) / rng.uniform(50, 400))
        tail = rng.standard_normal(n) * decay
        tail[0] = 4.0  # the direct path
        delay = np.zeros(int(rng.integers(20, 200)) if i % 2 else 0)
        rir = np.concatenate([delay, tail])
        rirs.append((rir / np.abs(rir).max() * 30000).astype(np.int16))
    return rirs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("augment")
    rng = np.random.default_rng(7)
    paths = {name: str(root / name) for name in ("speech", "noise", "rirs", "noise8k", "empty")}
    write_audio_run(paths["speech"], CLASS_SIZES, seed=2, min_samples=900, max_samples=4000)
    write_clip_run(paths["noise"], _noise_clips(rng))
    write_clip_run(paths["rirs"], _rirs(rng))
    write_clip_run(paths["noise8k"], _noise_clips(rng), sample_rate=8000)
    write_clip_run(paths["empty"], [], num_shards=1)
    return paths


def _config(runs, **changes) -> SpeakerAugmentConfig:
    options = dict(
        noise=AdditiveNoise(runs["noise"], snr_db=(0.0, 15.0), probability=0.6),
        reverb=Reverberation(runs["rirs"], probability=0.5),
        speed_factors=SPEEDS,
    )
    return SpeakerAugmentConfig(**{**options, **changes})


def _speech_batch(runs, size: int = 24):
    sampler = ClassBalancedSampler(
        runs["speech"], n_classes_per_batch=3, n_samples_per_class=2, features=FEATURES
    )
    records = sampler.store.read(tf.range(size, dtype=tf.int64) % sampler.store.num_records)
    from tfx_dynamic_inputs.inputs.audio_features import parse_audio_examples

    return parse_audio_examples(records, FEATURES.sample_rate)["audio"]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**40), low=st.floats(-10, 20), width=st.floats(0, 25))
def test_noise_is_mixed_at_the_drawn_snr(runs, seed, low, width):
    noise = AdditiveNoise(runs["noise"], snr_db=(low, low + width), probability=1.0)
    augmenter = SpeakerAugmenter(SpeakerAugmentConfig(noise=noise), FEATURES, len(CLASS_SIZES))
    audio = _speech_batch(runs)
    positions = tf.range(24, dtype=tf.int64) + 5
    out = augmenter.waveforms(audio, tf.zeros([24], tf.int64), tf.constant([seed, 3]), positions)
    clean, added = out["clean"].numpy(), (out["audio"] - out["clean"]).numpy()
    measured = 10 * np.log10(np.mean(clean**2, 1) / np.mean(added**2, 1))
    drawn = out["snr_db"].numpy()
    assert out["noisy"].numpy().all()
    assert np.all((drawn >= low - 1e-4) & (drawn <= low + width + 1e-4))
    np.testing.assert_allclose(measured, drawn, atol=1e-3)


def test_noise_and_reverb_apply_with_their_probability(runs):
    augmenter = SpeakerAugmenter(_config(runs, speed_factors=()), FEATURES, len(CLASS_SIZES))
    n = 2000
    audio = tf.repeat(_speech_batch(runs, 1), n)
    out = augmenter.waveforms(
        audio, tf.zeros([n], tf.int64), tf.constant([11, 0]), tf.range(n, dtype=tf.int64)
    )
    for key, p in (("noisy", 0.6), ("reverberated", 0.5)):
        share = out[key].numpy().mean()
        assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / n), key
    untouched = ~(out["noisy"].numpy() | out["reverberated"].numpy())
    np.testing.assert_array_equal(out["audio"].numpy()[untouched], out["clean"].numpy()[untouched])


def test_rirs_are_taken_from_their_direct_path_peak_at_unit_energy(runs):
    rng = np.random.default_rng(7)  # the fixture's clips: noise drawn first, then the RIRs
    _noise_clips(rng)
    rirs = _rirs(rng)
    kept = 1000
    bank = ClipBank.open(open_run(runs["rirs"]), "train", "RIR", StoreOptions(), kept)
    clips = tf.range(bank.num_clips, dtype=tf.int64)
    taken = bank.windows(clips, tf.zeros_like(clips), bank.longest, loop=False)
    normalized = unit_energy(taken).numpy()
    np.testing.assert_allclose((normalized**2).sum(1), 1.0, rtol=1e-5)
    assert bank.longest == max(min(len(r) - int(np.argmax(np.abs(r))), kept) for r in rirs)
    floats = [r.astype(np.float32) / 32768 for r in rirs]
    for row, rir in zip(normalized, floats, strict=True):
        peak = int(np.argmax(np.abs(rir)))
        expected = rir[peak : peak + kept] / np.sqrt((rir[peak : peak + kept] ** 2).sum())
        np.testing.assert_allclose(row[: len(expected)], expected, rtol=1e-5, atol=1e-7)
        assert not row[len(expected) :].any()
    # The FFT convolution is the truncated linear one; an impulse gives the RIR back.
    signal = np.random.default_rng(0).standard_normal([len(floats), SEGMENT]).astype(np.float32)
    signal[0] = 0.0
    signal[0, 0] = 1.0
    wet = reverberate(tf.constant(signal), tf.constant(normalized)).numpy()
    for row, dry, rir in zip(wet, signal, normalized, strict=True):
        np.testing.assert_allclose(row, np.convolve(dry, rir)[:SEGMENT], atol=2e-5)
    np.testing.assert_allclose(wet[0, : bank.longest], normalized[0], atol=1e-6)


@pytest.mark.full
@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_perturbation_matches_soxr_on_band_limited_signals(factor):
    soxr = pytest.importorskip("soxr")
    rng = np.random.default_rng(int(factor * 10))
    needed = speed_input_samples(factor, SEGMENT * 4)
    for _ in range(3):
        t = np.arange(needed) / FEATURES.sample_rate
        # Below the filter's pass band (0.9 x the output Nyquist, / factor): where both are flat.
        signal = sum(
            rng.uniform(0.05, 0.2) * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
            for f in rng.uniform(50, 4500, 8)
        ).astype(np.float32)
        ours = perturb_speed(tf.constant(signal[None]), factor, SEGMENT * 4).numpy()[0]
        # ours[n] = signal(n * factor + 16): the crop starts 16 samples (the filter's half) early.
        theirs = soxr.resample(signal[16:].astype(np.float64), 1000 * factor, 1000, "VHQ")
        inner = slice(200, min(len(theirs), len(ours)) - 200)
        error = np.sqrt(np.mean((ours[inner] - theirs[inner]) ** 2) / np.mean(theirs[inner] ** 2))
        assert error < 0.01


def _sampler(runs, context=None, **changes) -> ClassBalancedSampler:
    options = dict(
        n_classes_per_batch=4,
        n_samples_per_class=2,
        seed=4,
        features=FEATURES,
        augment=_config(runs),
    )
    if context is not None:
        options["n_classes_per_batch"] = 6 // context.num_replicas_in_sync
    return ClassBalancedSampler(runs["speech"], input_context=context, **{**options, **changes})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_speed_perturbed_speakers_are_new_classes_covered_every_epoch(runs, seed):
    sampler = _sampler(runs, seed=seed)
    num_classes = len(CLASS_SIZES)
    assert sampler.report.num_classes == len(SPEEDS) * num_classes
    assert len(sampler.classes) == len(SPEEDS) * num_classes
    assert sampler.classes[num_classes + 1] == "spk00001@speed0.9"
    class_of_record = np.empty(sum(CLASS_SIZES), np.int64)
    store_labels = sampler.store.read(tf.range(sum(CLASS_SIZES), dtype=tf.int64))
    from tfx_dynamic_inputs.inputs.audio_features import parse_audio_examples

    class_of_record[:] = parse_audio_examples(store_labels, 16000)["label"].numpy()
    for epoch in range(3):
        plan = {k: v.numpy() for k, v in sampler.epoch_plan(epoch).items()}
        labels = plan["label"]
        assert labels.min() >= 0 and labels.max() < len(SPEEDS) * num_classes
        assert set(labels.ravel()) == set(range(len(SPEEDS) * num_classes))
        for row in labels:
            assert len(set(row.tolist())) == 4
        np.testing.assert_array_equal(class_of_record[plan["index"]], labels % num_classes)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**40), start=st.integers(0, 1000))
def test_the_same_seed_and_positions_give_bit_equal_features(runs, seed, start):
    augmenter = SpeakerAugmenter(_config(runs), FEATURES, len(CLASS_SIZES))
    audio, labels = _speech_batch(runs, 12), tf.range(12, dtype=tf.int64) + 3
    positions = tf.range(12, dtype=tf.int64) + start
    first, again, other = (
        augmenter.features_of(audio, labels, tf.constant([s, 1], tf.int64), positions)["features"]
        for s in (seed, seed, seed + 1)
    )
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.array_equal(first.numpy(), other.numpy())
    # A sample's features do not depend on the slice it is computed in (another replica count):
    # the draws are keyed by its position, and the arithmetic is the same bits for any batch.
    for part in (slice(6, None), slice(7, 8), slice(0, 5)):
        sliced = augmenter.features_of(
            audio[part], labels[part], tf.constant([seed, 1], tf.int64), positions[part]
        )["features"]
        np.testing.assert_array_equal(sliced.numpy(), first.numpy()[part])


# Kill and resume on the same topology across an epoch's end; and on another replica count.
@pytest.mark.parametrize(
    "before, after, stop, extra", [((1, 1), (1, 1), 3, 2), ((1, 2), (3, 1), 1, 0)]
)
def test_augmentation_is_replayed_after_a_resume(runs, before, after, stop, extra, tmp_path):
    probe = _sampler(runs, _contexts(*before)[0])
    assert probe.plan.elastic
    steps_per_epoch = probe.num_batches // (before[0] * before[1])
    num_steps = steps_per_epoch - stop + extra
    expected, got = _interrupted_and_resumed(
        lambda c: _sampler(runs, c), before, after, stop, tmp_path, num_steps=num_steps
    )
    assert len(got) == len(expected) == num_steps
    for a, b in zip(got, expected, strict=True):
        for key in ("index", "label", "features"):
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda r: AdditiveNoise(r["noise"], snr_db=(10, 0)), "low <= high"),
        (lambda r: AdditiveNoise(r["noise"], probability=1.5), r"in \[0, 1\]"),
        (lambda r: SpeakerAugmentConfig(speed_factors=(1.0, 1.0)), "distinct"),
        (lambda r: _sampler(r, augment=_config(r, noise=AdditiveNoise(r["empty"]))), "no records"),
        (lambda r: _sampler(r, augment=_config(r, noise=AdditiveNoise(r["noise8k"]))), "8000 Hz"),
        (
            lambda r: _sampler(r, features=AudioFeatureConfig(mode="pad")),
            "mode='crop'",
        ),
    ],
)
def test_bad_options_are_refused_in_one_line(runs, build, message):
    with pytest.raises(ValueError, match=message) as raised:
        build(runs)
    assert "\n" not in str(raised.value)


@pytest.mark.full
def test_the_callback_writes_clean_and_augmented_log_mels_to_tensorboard(runs, tmp_path):
    pytest.importorskip("tensorboard")
    from tfx_dynamic_inputs.inputs.augment_images import AugmentationImagesCallback

    sampler = _sampler(runs)
    labels = np.arange(sampler.store.num_records) % len(CLASS_SIZES)
    callback = AugmentationImagesCallback(
        sampler.store, labels, sampler.augmenter, str(tmp_path), num_examples=3
    )
    callback.on_epoch_end(0)
    callback.on_epoch_end(1)
    [events] = (tmp_path / "augmentation").glob("events.*")
    images = {}
    for record in tf.data.TFRecordDataset(str(events)):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for value in event.summary.value:
            images.setdefault(value.tag, []).append(event.step)
    assert images == {"clean": [0, 1], "augmented": [0, 1]}
