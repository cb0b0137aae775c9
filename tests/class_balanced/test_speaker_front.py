"""The NumPy speaker augmentation (`plans.speaker_front`) against the graph's
(`inputs.speaker_augment.SpeakerAugmenter`): over generated speech, noise and RIR runs, seeds,
epochs, batches, labels and options, every draw (speed class and factor, RIR, noise clip and
window, SNR, whether noise and reverberation apply) is exactly the graph's, the waveforms agree
within `WAVEFORM_ATOL` and the features within `LOG_MEL_ATOL`; and running it imports no
TensorFlow."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_clip_run
from tests.core.test_audio_front import batch_seed, generated_clip
from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs.inputs import speaker_augment as graph_augment
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmenter
from tfx_dynamic_inputs.plans import audio_front, speaker_front
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig, SpecAugment
from tfx_dynamic_inputs.plans.augment_options import (
    AdditiveNoise,
    Reverberation,
    SpeakerAugmentConfig,
)
from tfx_dynamic_inputs.plans.speaker_front import SpeakerFront

NUM_CLASSES = 4
# float64 here, float32 in the graph (conv1d, FFTs, the gain): measured up to 7e-7 on the
# waveforms and 5e-5 on the log-mels (30 batches of 8, every augmentation on).
WAVEFORM_ATOL = 2e-5
LOG_MEL_ATOL = 1e-3
DRAWS = ("factor", "rir", "noise_clip", "reverberated", "noisy", "snr_db")


@pytest.fixture(scope="module")
def clip_runs(tmp_path_factory) -> dict[str, str]:
    """A noise run (white and tonal clips, some shorter than a segment, one silent) and a RIR
    run (decays after a silent delay, one silent)."""
    root = tmp_path_factory.mktemp("front")
    rng = np.random.default_rng(3)
    noise = [generated_clip(rng, int(rng.integers(500, 9000)), 16000) for _ in range(5)]
    noise.insert(2, np.zeros(3000, np.int16))
    rirs = []
    for _ in range(5):
        n = int(rng.integers(200, 1500))
        tail = rng.standard_normal(n) * np.exp(-np.arange(n) / rng.uniform(30, 300))
        tail[0] = 4.0
        rir = np.concatenate([np.zeros(int(rng.integers(0, 100))), tail])
        rirs.append((rir / np.abs(rir).max() * 30000).astype(np.int16))
    rirs.insert(1, np.zeros(400, np.int16))
    paths = {"noise": str(root / "noise"), "rirs": str(root / "rirs")}
    write_clip_run(paths["noise"], noise)
    write_clip_run(paths["rirs"], rirs)
    return paths


@settings(max_examples=25, deadline=None)
@given(
    speeds=st.sampled_from([(), (1.0,), (1.0, 0.9, 1.1), (0.9, 1.0), (1.1,)]),
    noise=st.none() | st.tuples(st.floats(-20, 30), st.floats(0, 20), st.floats(0, 1)),
    reverb=st.none() | st.tuples(st.floats(0, 1), st.sampled_from([0.01, 0.05, 1.0])),
    spec_augment=st.booleans(),
    crop_seconds=st.sampled_from([0.05, 0.2]),
    clip_seconds=st.lists(st.floats(0.02, 0.5), min_size=1, max_size=8),
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 100),
    batch=st.integers(0, 10**5),
    slice_start=st.integers(0, 64),
    data_seed=st.integers(0, 2**32 - 1),
)
def test_the_numpy_augmentation_draws_and_computes_the_graphs(
    clip_runs,
    speeds,
    noise,
    reverb,
    spec_augment,
    crop_seconds,
    clip_seconds,
    seed,
    epoch,
    batch,
    slice_start,
    data_seed,
):
    config = SpeakerAugmentConfig(
        noise=None
        if noise is None
        else AdditiveNoise(
            clip_runs["noise"], snr_db=(noise[0], noise[0] + noise[1]), probability=noise[2]
        ),
        reverb=None
        if reverb is None
        else Reverberation(clip_runs["rirs"], probability=reverb[0], max_rir_seconds=reverb[1]),
        speed_factors=speeds,
    )
    features = AudioFeatureConfig(
        crop_seconds=crop_seconds,
        num_mel_bins=40,
        spec_augment=SpecAugment(6, 5, 2, 2) if spec_augment else None,
    )
    rng = np.random.default_rng(data_seed)
    audio = [generated_clip(rng, max(int(s * 16000), 1), 16000) for s in clip_seconds]
    label = rng.integers(0, NUM_CLASSES * max(len(speeds), 1), len(audio))
    drawn = batch_seed(seed, epoch, batch)
    positions = slice_start + np.arange(len(audio))

    front = SpeakerFront(config, features, NUM_CLASSES)
    augmenter = SpeakerAugmenter(config, features, NUM_CLASSES)
    graph_inputs = (
        tf.constant([a.tobytes() for a in audio]),
        tf.constant(label, tf.int64),
        tf.constant(drawn),
        tf.constant(positions, tf.int64),
    )
    mine = front.waveforms(audio, label, drawn, positions)
    theirs = {k: v.numpy() for k, v in augmenter.waveforms(*graph_inputs).items()}
    for key in DRAWS:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
    for key in ("clean", "audio"):
        np.testing.assert_allclose(mine[key], theirs[key], atol=WAVEFORM_ATOL, err_msg=key)
    if front.noise is not None:
        # The noise windows' offsets, drawn from the noise crop's seed (a wrong one would move
        # the waveforms by the noise's scale, not 1e-6).
        clip = np.searchsorted(front.noise.records, mine["noise_clip"])
        lengths = front.noise.lengths(clip)
        noise_seed = audio_front.fold_in_int32(drawn, speaker_front.SALT_NOISE_CROP)
        graph_seed = tf.random.experimental.stateless_fold_in(
            tf.constant(drawn), graph_augment._SALT_NOISE_CROP
        )
        graph_starts = graph_augment._window_start(
            tf.constant(lengths), features.crop_samples, graph_seed, graph_inputs[3]
        )
        np.testing.assert_array_equal(
            audio_front.keyed_starts(lengths, features.crop_samples, noise_seed, positions),
            graph_starts.numpy(),
        )
    # Factor 1.0 is a crop: its samples are the graph's, exactly.
    same = mine["factor"] == 1.0
    np.testing.assert_array_equal(mine["clean"][same], theirs["clean"][same])

    mine_features = front.features_of(audio, label, drawn, positions)
    their_features = augmenter.features_of(*graph_inputs)
    np.testing.assert_array_equal(mine_features["lengths"], their_features["lengths"].numpy())
    np.testing.assert_allclose(
        mine_features["features"], their_features["features"].numpy(), atol=LOG_MEL_ATOL
    )


def test_both_executors_salt_their_draws_alike():
    for name in ("NOISE_PICK", "NOISE_APPLY", "NOISE_SNR", "NOISE_CROP", "RIR_PICK", "RIR_APPLY"):
        assert getattr(speaker_front, f"SALT_{name}") == getattr(graph_augment, f"_SALT_{name}")
    assert graph_augment._SALT_SPEECH_CROP == audio_front.SALT_CROP


def test_a_run_of_silence_only_is_refused_in_one_line(tmp_path):
    silent = str(tmp_path / "silent")
    write_clip_run(silent, [np.zeros(500, np.int16), np.ones(500, np.int16)])
    config = SpeakerAugmentConfig(noise=AdditiveNoise(silent))
    with pytest.raises(ValueError, match="are silent") as refused:
        SpeakerFront(config, AudioFeatureConfig(), NUM_CLASSES)
    assert "\n" not in str(refused.value)


_AUGMENT = """
import json, sys
import numpy as np
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import (
    AdditiveNoise, Reverberation, SpeakerAugmentConfig
)
from tfx_dynamic_inputs.plans.speaker_front import SpeakerFront
config = SpeakerAugmentConfig(
    noise=AdditiveNoise({noise!r}, probability=1.0),
    reverb=Reverberation({rirs!r}, probability=1.0),
    speed_factors=(1.0, 0.9),
)
front = SpeakerFront(config, AudioFeatureConfig(crop_seconds=0.2), 4)
audio = [(np.arange(n) % 200 * 100).astype(np.int16) for n in (3000, 5000)]
out = front.features_of(audio, np.array([1, 6]), np.array([3, 4]), np.array([0, 1]))
shape = list(out["features"].shape)
print(json.dumps({{"shape": shape, "tensorflow": "tensorflow" in sys.modules}}))
"""


def test_the_numpy_augmentation_imports_no_tensorflow(clip_runs):
    done = run_python(_AUGMENT.format(**clip_runs))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"shape": [2, 18, 80], "tensorflow": False}
