"""In-graph audio features: crop/pad, log-mel against a NumPy reference, normalization, masks."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs import audio_features as af

SAMPLE_RATE = 16000


def pcm_batch(waveforms) -> tf.Tensor:
    return tf.constant([np.asarray(w).astype("<i2").tobytes() for w in waveforms])


def random_waveforms(rng, lengths):
    return [rng.integers(-20000, 20000, n).astype(np.int16) for n in lengths]


def reference_log_mel(waveform: np.ndarray, config: af.AudioFeatureConfig) -> np.ndarray:
    """Frames fully inside the signal, periodic Hann, |rfft|^2, mel matrix, log."""
    signal = waveform.astype(np.float64) / 32768.0
    length, step = config.frame_length, config.frame_step
    count = 1 + (len(signal) - length) // step
    frames = np.stack([signal[t * step : t * step + length] for t in range(count)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / length)
    power = np.abs(np.fft.rfft(frames * window, n=config.fft_length)) ** 2
    mel_matrix = tf.signal.linear_to_mel_weight_matrix(
        config.num_mel_bins,
        config.fft_length // 2 + 1,
        config.sample_rate,
        config.lower_edge_hertz,
        config.upper_edge_hertz or config.sample_rate / 2,
    ).numpy()
    return np.log(power @ mel_matrix + config.log_offset)


def test_log_mel_matches_numpy_reference():
    rng = np.random.default_rng(0)
    waveforms = random_waveforms(rng, [4000, 2600])
    config = af.AudioFeatureConfig(mode="pad", mean_normalization=False)
    out = af.audio_features(pcm_batch(waveforms), config)
    for row, waveform in enumerate(waveforms):
        expected = reference_log_mel(waveform, config)
        length = int(out["lengths"][row])
        assert length == len(expected) == af.num_frames(len(waveform), config)
        np.testing.assert_allclose(out["features"][row, :length], expected, atol=2e-3, rtol=1e-3)
        assert not out["features"][row, length:].numpy().any()


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9000), min_size=1, max_size=6),
    crop_samples=st.sampled_from([400, 1601, 4000]),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_crop_is_a_window_or_a_tiling(lengths, crop_samples, seed):
    rng = np.random.default_rng(seed)
    waveforms = random_waveforms(rng, lengths)
    crops = af.random_crop(
        pcm_batch(waveforms),
        tf.constant(lengths, tf.int64),
        crop_samples,
        tf.constant([seed, 1], tf.int64),
    ).numpy()
    assert crops.shape == (len(lengths), crop_samples)
    for waveform, crop in zip(waveforms, crops, strict=True):
        pcm = np.round(crop * 32768).astype(np.int64)
        source = waveform.astype(np.int64)
        if len(source) <= crop_samples:
            np.testing.assert_array_equal(pcm, np.resize(source, crop_samples))
        else:
            starts = [
                s
                for s in range(len(source) - crop_samples + 1)
                if source[s] == pcm[0] and np.array_equal(source[s : s + crop_samples], pcm)
            ]
            assert starts, "the crop is not a window of the record"


def test_crop_offsets_cover_the_record_and_depend_on_the_seed():
    waveform = np.arange(2000, dtype=np.int16)
    starts = set()
    for seed in range(200):
        crop = af.random_crop(
            pcm_batch([waveform]),
            tf.constant([2000], tf.int64),
            1000,
            tf.constant([seed, 0], tf.int64),
        ).numpy()
        starts.add(int(round(crop[0, 0] * 32768)))
    assert min(starts) < 50 and max(starts) > 950 and len(starts) > 150


def test_pad_mode_features_equal_single_record_features():
    rng = np.random.default_rng(1)
    waveforms = random_waveforms(rng, [500, 3000, 1234, 8000])
    config = af.AudioFeatureConfig(mode="pad")
    batch = af.audio_features(pcm_batch(waveforms), config)
    assert batch["features"].shape[1] == af.num_frames(8000, config)
    for row, waveform in enumerate(waveforms):
        alone = af.audio_features(pcm_batch([waveform]), config)
        length = int(alone["lengths"][0])
        assert int(batch["lengths"][row]) == length
        np.testing.assert_array_equal(
            batch["mask"][row], np.arange(batch["mask"].shape[1]) < length
        )
        np.testing.assert_allclose(batch["features"][row, :length], alone["features"][0], atol=1e-4)


@pytest.mark.parametrize(
    "config",
    [
        af.AudioFeatureConfig(mode="pad"),
        af.AudioFeatureConfig(crop_seconds=0.1, num_mel_bins=20, spec_augment=af.SpecAugment(4, 3)),
        af.AudioFeatureConfig(
            mode="pad", num_mel_bins=40, lower_edge_hertz=100.0, upper_edge_hertz=7000.0
        ),
    ],
    ids=["pad", "crop-masked", "pad-edges"],
)
def test_a_dataset_computes_the_features_bit_for_bit_as_eager_code_does(config):
    """The window and the filterbank enter the graph as constants computed once: a tf.data
    function (the samplers), a `tf.function` (serving) and eager code give the same bits."""
    audio = pcm_batch(random_waveforms(np.random.default_rng(1), [4000, 2600, 16000, 9000]))
    seed = tf.constant([3, 4], tf.int64)

    def features(batch):
        return af.audio_features(batch, config, seed)["features"]

    eager = features(audio).numpy()
    in_function = tf.function(features)(audio).numpy()
    in_dataset = next(iter(tf.data.Dataset.from_tensors(audio).map(features))).numpy()
    assert np.array_equal(in_function, eager) and np.array_equal(in_dataset, eager)


def test_pad_mode_cuts_records_to_max_pad_seconds():
    """A record longer than the cap is featurized from its first `max_pad_seconds` only, so the
    batch pads to the cap, not to the longest record."""
    rng = np.random.default_rng(5)
    waveforms = random_waveforms(rng, [20000, 3000, 8000])
    config = af.AudioFeatureConfig(mode="pad", max_pad_seconds=0.5)
    assert config.max_pad_samples == 8000
    batch = af.audio_features(pcm_batch(waveforms), config)
    capped = af.num_frames(8000, config)
    assert batch["features"].shape[1] == capped
    assert batch["lengths"].numpy().tolist() == [capped, af.num_frames(3000, config), capped]
    head = af.audio_features(pcm_batch([waveforms[0][:8000]]), config)
    np.testing.assert_allclose(batch["features"][0], head["features"][0], atol=1e-4)
    uncapped = af.audio_features(
        pcm_batch(waveforms), af.AudioFeatureConfig(mode="pad", max_pad_seconds=None)
    )
    assert uncapped["lengths"].numpy()[0] == af.num_frames(20000, config)
    # The default cap: 120 s.
    assert af.AudioFeatureConfig().max_pad_seconds == 120.0
    assert af.AudioFeatureConfig(mode="pad").max_pad_samples == 120 * SAMPLE_RATE


def test_mean_normalization_zeroes_the_mean_of_valid_frames():
    rng = np.random.default_rng(2)
    config = af.AudioFeatureConfig(mode="pad")
    out = af.audio_features(pcm_batch(random_waveforms(rng, [900, 5000])), config)
    for row in range(2):
        length = int(out["lengths"][row])
        valid = out["features"][row, :length].numpy()
        np.testing.assert_allclose(valid.mean(axis=0), 0.0, atol=1e-4)
        assert np.abs(valid).max() > 0.1


def test_crop_mode_shapes_are_static():
    config = af.AudioFeatureConfig(crop_seconds=0.5, num_mel_bins=40)

    @tf.function
    def features(audio, seed):
        return af.audio_features(audio, config, seed)

    spec = features.get_concrete_function(
        tf.TensorSpec([6], tf.string), tf.TensorSpec([2], tf.int64)
    ).structured_outputs
    assert spec["features"].shape.as_list() == [6, config.crop_frames, 40]
    assert config.crop_frames == 1 + (8000 - 400) // 160


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    freq_param=st.integers(1, 30),
    time_param=st.integers(1, 40),
    masks=st.integers(1, 3),
)
def test_spec_augment_masks_are_bands_within_limits(seed, freq_param, time_param, masks):
    lengths = tf.constant([50, 17, 3], tf.int64)
    features = tf.ones([3, 50, 40])
    augment = af.SpecAugment(freq_param, time_param, masks, masks)
    out = af.spec_augment(features, lengths, augment, tf.constant([seed, 5], tf.int64)).numpy()
    for row, length in enumerate(lengths.numpy()):
        zero = out[row] == 0
        masked_bins = np.flatnonzero(zero.all(axis=0))
        masked_frames = np.flatnonzero(zero.all(axis=1))
        # Every zero lies in a masked bin or a masked frame.
        assert (zero <= (zero.all(axis=0)[None, :] | zero.all(axis=1)[:, None])).all()
        # Time masks that cover every frame leave every bin zero, and the reverse.
        assert len(masked_bins) <= masks * (freq_param - 1) or len(masked_frames) == 50
        assert len(masked_frames) <= masks * (time_param - 1) or len(masked_frames) == 50
        if len(masked_bins) < 40:
            assert (masked_frames < length).all()
    again = af.spec_augment(features, lengths, augment, tf.constant([seed, 5], tf.int64))
    np.testing.assert_array_equal(out, again)


@pytest.mark.full
def test_spec_augment_band_has_the_tensorflow_io_mask_shape():
    """One frequency mask is a contiguous band of width < param, like tfio.audio.freq_mask."""
    tfio = pytest.importorskip("tensorflow_io")
    widths = {"ours": set(), "tfio": set()}
    tf.random.set_seed(0)
    for seed in range(40):
        ours = af.spec_augment(
            tf.ones([1, 20, 40]),
            tf.constant([20], tf.int64),
            af.SpecAugment(8, 1, 1, 0),
            tf.constant([seed, 0], tf.int64),
        ).numpy()[0]
        theirs = tfio.audio.freq_mask(tf.ones([20, 40]), param=8).numpy()
        for name, masked in (("ours", ours), ("tfio", theirs)):
            bins = np.flatnonzero((masked == 0).all(axis=0))
            if len(bins):
                assert np.array_equal(bins, np.arange(bins[0], bins[0] + len(bins)))
            widths[name].add(len(bins))
    assert widths["ours"] == widths["tfio"] == set(range(8))


def test_bad_audio_is_a_clear_error_naming_the_record():
    config = af.AudioFeatureConfig(mode="pad")
    good = np.ones(1000, np.int16).tobytes()
    seed = tf.constant([0, 0], tf.int64)
    index = tf.constant([10, 11], tf.int64)
    cases = [
        ([good, b""], "positive, even number of bytes", config),
        ([good, good + b"x"], "positive, even number of bytes", config),
        ([good, np.ones(300, np.int16).tobytes()], "at least one frame", config),
    ]
    for records, message, cfg in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message) as error:
            af.audio_features(tf.constant(records), cfg, seed, index=index)
        assert "11" in str(error.value)
    with pytest.raises(tf.errors.InvalidArgumentError, match="16000 Hz"):
        af.audio_features(
            tf.constant([good, good]),
            config,
            index=index,
            sample_rate=tf.constant([16000, 8000], tf.int64),
        )
    # Crop mode repeats short records instead of failing.
    short = af.audio_features(
        tf.constant([np.ones(7, np.int16).tobytes()]), af.AudioFeatureConfig(), seed
    )
    assert np.isfinite(short["features"].numpy()).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="trim"), "mode"),
        (dict(crop_seconds=0.01), "shorter than one frame"),
        (dict(lower_edge_hertz=9000.0), "lower_edge_hertz"),
        (dict(frame_length_ms=0.05), "too short"),
        (dict(mode="pad", max_pad_seconds=0.01), "max_pad_seconds"),
        (dict(mode="pad", max_pad_seconds=float("nan")), "max_pad_seconds"),
        (dict(mode="pad", max_pad_seconds=float("inf")), "max_pad_seconds"),
    ],
)
def test_bad_configs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        af.AudioFeatureConfig(**kwargs)
    with pytest.raises(ValueError, match="needs a seed"):
        af.audio_features(tf.constant([b"\0\0" * 500]), af.AudioFeatureConfig())
