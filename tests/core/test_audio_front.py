"""The NumPy audio front end (`plans.audio_front`) against the graph's (`inputs.audio_features`):
over generated clips, seeds, epochs, batches and options, the crop offsets, the SpecAugment masks,
the lengths and the masks are exactly the graph's, and the log-mels agree within `LOG_MEL_ATOL`;
the shared constants (`plans.filterbank`) are tf.signal's within float32 rounding; and running it
imports no TensorFlow."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs.inputs import audio_features as graph
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_seed as graph_epoch_seed
from tfx_dynamic_inputs.inputs.index_shuffle import keyed_seeds as graph_keyed_seeds
from tfx_dynamic_inputs.plans import audio_front
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig, SpecAugment
from tfx_dynamic_inputs.plans.filterbank import hann_window, mel_matrix
from tfx_dynamic_inputs.plans.keyed_hash import keyed_seeds
from tfx_dynamic_inputs.plans.seed_folds import epoch_seed

# float64 FFT here, float32 in the graph: up to 4e-4 measured over these clips (the graph's
# rounding, spread over a record by the mean normalization).
LOG_MEL_ATOL = 1e-3


def generated_clip(rng: np.random.Generator, num_samples: int, sample_rate: int) -> np.ndarray:
    """int16 PCM: a tone over white noise at a random level (every mel bin above the floor)."""
    t = np.arange(num_samples) / sample_rate
    tone = 0.3 * np.sin(2 * np.pi * rng.uniform(50, sample_rate / 2.5) * t)
    signal = (tone + 0.05 * rng.standard_normal(num_samples)) * rng.uniform(0.01, 1.0)
    return np.clip(signal * 32767, -32768, 32767).astype(np.int16)


def batch_seed(seed: int, epoch: int, batch: int) -> np.ndarray:
    """The seed of a global batch, derived as the samplers derive it (and checked here to be
    the graph's derivation bit for bit)."""
    drawn = keyed_seeds(epoch_seed(seed, epoch), np.array([batch]))[0]
    in_graph = graph_keyed_seeds(graph_epoch_seed(seed, epoch), tf.constant([batch], tf.int64))
    np.testing.assert_array_equal(drawn, in_graph.numpy()[0])
    return drawn


configs = st.builds(
    AudioFeatureConfig,
    mode=st.sampled_from(["crop", "pad"]),
    sample_rate=st.sampled_from([8000, 16000, 22050]),
    crop_seconds=st.sampled_from([0.05, 0.3, 1.0]),
    num_mel_bins=st.sampled_from([8, 40, 80]),
    frame_length_ms=st.sampled_from([20.0, 25.0]),
    frame_step_ms=st.sampled_from([10.0, 12.5]),
    mean_normalization=st.booleans(),
    spec_augment=st.none()
    | st.builds(
        SpecAugment,
        freq_mask_param=st.integers(1, 12),
        time_mask_param=st.integers(1, 30),
        num_freq_masks=st.integers(0, 3),
        num_time_masks=st.integers(0, 3),
    ),
    max_pad_seconds=st.sampled_from([None, 0.5, 120.0]),
)


@settings(max_examples=30, deadline=None)
@given(
    config=configs,
    clip_seconds=st.lists(st.floats(0.03, 1.6), min_size=1, max_size=6),
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 1000),
    batch=st.integers(0, 10**6),
    slice_start=st.integers(0, 64),
    data_seed=st.integers(0, 2**32 - 1),
)
def test_the_numpy_front_end_computes_the_graph_features(
    config, clip_seconds, seed, epoch, batch, slice_start, data_seed
):
    rng = np.random.default_rng(data_seed)
    lengths = [max(int(s * config.sample_rate), config.frame_length) for s in clip_seconds]
    clips = [generated_clip(rng, n, config.sample_rate) for n in lengths]
    drawn = batch_seed(seed, epoch, batch)
    positions = slice_start + np.arange(len(clips))

    mine = audio_front.audio_features(clips, config, drawn, positions=positions)
    theirs = graph.audio_features(
        tf.constant([c.tobytes() for c in clips]),
        config,
        tf.constant(drawn),
        positions=tf.constant(positions, tf.int64),
    )

    np.testing.assert_array_equal(mine["lengths"], theirs["lengths"].numpy())
    np.testing.assert_array_equal(mine["mask"], theirs["mask"].numpy())
    assert mine["features"].dtype == np.float32
    np.testing.assert_allclose(mine["features"], theirs["features"].numpy(), atol=LOG_MEL_ATOL)
    if config.mode == "crop":
        # The crop offsets: the windows decoded are the graph's, exactly.
        crop_seed = audio_front.fold_in_int32(drawn, audio_front.SALT_CROP)
        graph_seed = tf.random.experimental.stateless_fold_in(tf.constant(drawn), 0)
        np.testing.assert_array_equal(crop_seed, graph_seed.numpy())
        windows = graph.random_crop(
            tf.constant([c.tobytes() for c in clips]),
            tf.constant(lengths, tf.int64),
            config.crop_samples,
            graph_seed,
            tf.constant(positions, tf.int64),
        )
        np.testing.assert_array_equal(
            audio_front.random_crop(clips, config.crop_samples, crop_seed, positions),
            windows.numpy(),
        )
    if config.spec_augment is not None:
        _assert_the_graph_masks(config, mine["lengths"], drawn, positions)


def _assert_the_graph_masks(config, lengths, drawn, positions):
    """Every SpecAugment band (start, width) is the graph's `_random_bands` draw."""
    augment = config.spec_augment
    bands = audio_front.spec_augment_bands(config.num_mel_bins, lengths, augment, drawn, positions)
    seed = tf.constant(drawn)
    where = tf.constant(positions, tf.int64)
    for axis, salt, param, extent in (
        ("freq", 1, augment.freq_mask_param, np.full(len(lengths), config.num_mel_bins)),
        ("time", 2, augment.time_mask_param, lengths),
    ):
        axis_seed = tf.random.experimental.stateless_fold_in(seed, salt)
        assert len(bands[axis]) == (
            augment.num_freq_masks if axis == "freq" else augment.num_time_masks
        )
        for i, (start, width) in enumerate(bands[axis]):
            mask_seed = tf.random.experimental.stateless_fold_in(axis_seed, i)
            graph_start, graph_width = graph._random_bands(
                tf.constant(extent, tf.int64), param, mask_seed, where
            )
            np.testing.assert_array_equal(start, graph_start.numpy())
            np.testing.assert_array_equal(width, graph_width.numpy())


@settings(max_examples=20, deadline=None)
@given(
    length=st.integers(2, 1200),
    num_mel_bins=st.integers(1, 128),
    fft_exponent=st.integers(6, 11),
    sample_rate=st.sampled_from([8000, 16000, 22050, 44100]),
    edges=st.tuples(st.floats(0.0, 0.45), st.floats(0.5, 1.0)),
)
def test_the_shared_constants_are_tf_signals(
    length, num_mel_bins, fft_exponent, sample_rate, edges
):
    np.testing.assert_allclose(
        hann_window(length), tf.signal.hann_window(length, periodic=True).numpy(), atol=3e-7
    )
    nyquist = sample_rate / 2
    low, high = edges[0] * nyquist, edges[1] * nyquist
    args = (num_mel_bins, 2**fft_exponent // 2 + 1, sample_rate, low, high)
    # tf.signal computes the slopes from float32 mels: a few ulps of the highest mel over the
    # spacing of the band edges (1.1e-5 for 80 bins over 20 Hz .. 8 kHz).
    mels = [1127.0 * np.log1p(f / 700.0) for f in (low, high)]
    spacing = (mels[1] - mels[0]) / (num_mel_bins + 1)
    atol = max(1e-5, 4 * float(np.spacing(np.float32(mels[1]))) / spacing)
    np.testing.assert_allclose(
        mel_matrix(*args), tf.signal.linear_to_mel_weight_matrix(*args).numpy(), atol=atol
    )


def test_the_numpy_front_end_refuses_what_the_graph_refuses_in_one_line():
    config = AudioFeatureConfig(mode="pad")
    short = np.zeros(config.frame_length - 1, np.int16)
    for audio, rates, message in (
        ([np.zeros(400, np.int16), np.zeros(0, np.int16)], None, "empty records: [1]"),
        ([np.zeros(400, np.int16), short], None, "shorter records: [1]"),
        ([np.zeros(400, np.int16)], [8000], "records at other rates: [0]"),
        ([np.zeros(400, np.float32)], None, "must be a 1-D int16 array"),
    ):
        try:
            audio_front.audio_features(audio, config, sample_rate=rates)
        except (ValueError, TypeError) as error:
            assert message in str(error) and "\n" not in str(error)
        else:
            raise AssertionError(f"accepted {audio}")
    try:
        audio_front.audio_features([np.zeros(400, np.int16)], AudioFeatureConfig())
    except ValueError as error:
        assert "needs a seed" in str(error)


_FRONT_END = """
import json, sys
import numpy as np
from tfx_dynamic_inputs.plans import audio_front
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig, SpecAugment
config = AudioFeatureConfig(spec_augment=SpecAugment())
clips = [np.arange(n, dtype=np.int16) for n in (8000, 40000)]
out = audio_front.audio_features(clips, config, np.array([3, 4]), positions=np.array([5, 6]))
print(json.dumps({"shape": list(out["features"].shape), "tensorflow": "tensorflow" in sys.modules}))
"""


def test_the_numpy_front_end_imports_no_tensorflow():
    done = run_python(_FRONT_END)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"shape": [2, 198, 80], "tensorflow": False}
