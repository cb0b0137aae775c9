"""The Grain samplers refuse bad input in one line naming it, and pickle (Grain's worker
processes take a dataset by pickling it)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.grain import GrainClassBalanced, GrainPairs, class_balanced, dynamic_pairs
from tfx_dynamic_inputs.grain.audio_batches import AudioBatches
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import AdditiveNoise, SpeakerAugmentConfig

X, Y = np.arange(4.0), np.arange(3) * 10
ROWS = [[0], [1, 2], [2], [0, 1]]
# An augmentation whose noise run is never opened: each case below is refused before.
NOISE = SpeakerAugmentConfig(noise=AdditiveNoise("no/such/run"))
PAD = AudioFeatureConfig(mode="pad", sample_rate=8000)
AUDIO = {
    "audio": [np.ones(400, np.int16), np.ones(500, np.int16)],
    "sample_rate": np.array([8000, 8000]),
    "label": np.array([0, 1]),
}
BATCH = {"index": np.array([5, 6]), "label": np.array([0, 0]), "seed": [1, 2], "positions": [0, 1]}


def _balanced_audio(features=None, augment=None) -> GrainClassBalanced:
    return GrainClassBalanced(
        X,
        [0, 1, 1, 0],
        n_classes_per_batch=1,
        n_samples_per_class=1,
        features=features,
        augment=augment,
    )


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: GrainPairs(X, Y, ROWS[:3], batch_size=2), ValueError, "3 rows, x has 4"),
        (lambda: GrainPairs(X, Y, [[0], [3], [2], [0]], batch_size=2), ValueError, "x 1 names y 3"),
        (lambda: GrainPairs(X, Y, [[0], [], [2], [0]], batch_size=2), ValueError, "x 1 has an"),
        (lambda: GrainPairs(X, Y, ROWS, batch_size=0), ValueError, "batch_size"),
        (lambda: GrainPairs(X, Y, ROWS, batch_size=2, strategy="most"), ValueError, "strategy"),
        (lambda: GrainPairs(7, Y, ROWS, batch_size=2), TypeError, "x must be an array"),
        (
            lambda: GrainPairs({"a": X, "b": Y}, Y, ROWS, batch_size=2),
            ValueError,
            "arrays of one length",
        ),
        (
            lambda: GrainPairs(X, Y, ROWS, batch_size=2, worker_index=2, num_workers=2),
            ValueError,
            "worker_index",
        ),
        (lambda: GrainPairs(X, Y, ROWS, batch_size=2).epoch(-1), ValueError, "epoch must be"),
        (lambda: GrainPairs(X, Y, ROWS, batch_size=2).epoch(0, 9), ValueError, "initial_step"),
        (lambda: dynamic_pairs(X, Y, ROWS, batch_size=2, num_epochs=0), ValueError, "num_epochs"),
        (
            lambda: GrainClassBalanced(
                X, None, **{"n_classes_per_batch": 1, "n_samples_per_class": 1}
            ),
            TypeError,
            "pass labels",
        ),
        (
            lambda: GrainClassBalanced(
                X, [0, 1, -1, 0], n_classes_per_batch=1, n_samples_per_class=1
            ),
            ValueError,
            "labels must be int class ids",
        ),
        (
            lambda: GrainClassBalanced(X, [0, 1, 1], n_classes_per_batch=1, n_samples_per_class=1),
            ValueError,
            "labels name 3 records, the source holds 4",
        ),
        (
            lambda: GrainClassBalanced(
                X, [0, 1, 1, 0], n_classes_per_batch=3, n_samples_per_class=1
            ),
            ValueError,
            "n_classes_per_batch=3 is larger",
        ),
        (
            lambda: GrainClassBalanced(
                X, [0, 1, 1, 0], n_classes_per_batch=1, n_samples_per_class=1, features="mel"
            ),
            TypeError,
            "AudioFeatureConfig",
        ),
        (
            lambda: GrainClassBalanced(
                X,
                [0, 1, 1, 0],
                n_classes_per_batch=1,
                n_samples_per_class=1,
                features=AudioFeatureConfig(),
            ).epoch(0)[0],
            ValueError,
            "needs records of audio and sample_rate",
        ),
        (lambda: _balanced_audio(augment=NOISE), ValueError, "augment needs the audio front end"),
        (lambda: _balanced_audio(PAD, augment="noise"), TypeError, "augment must be a Speaker"),
        (lambda: _balanced_audio(PAD, augment=NOISE), ValueError, "needs AudioFeatureConfig"),
        (lambda: AudioBatches(AudioFeatureConfig(), NOISE), TypeError, "num_classes must be"),
        (
            lambda: AudioBatches(PAD).features_of(AUDIO, **BATCH, record_labels=[0, 0]),
            ValueError,
            r"label differs from the class index: \[6\] carry \[1\]",
        ),
        (
            lambda: AudioBatches(AudioFeatureConfig(mode="pad")).features_of(AUDIO, **BATCH),
            ValueError,
            r"expected audio at 16000 Hz; records at other rates: \[5 6\]",
        ),
    ],
)
def test_a_bad_argument_is_one_line_naming_it(make, error, message) -> None:
    with pytest.raises(error, match=message) as raised:
        make()
    assert "\n" not in str(raised.value)


@settings(max_examples=25, deadline=None)
@given(
    labels=st.lists(st.text(alphabet="abc", min_size=1, max_size=2), min_size=2, max_size=30),
    seed=st.integers(0, 2**63 - 1),
)
def test_class_names_are_numbered_in_sorted_order(labels, seed) -> None:
    names = sorted(set(labels))
    numbered = [names.index(label) for label in labels]
    by_name = GrainClassBalanced(
        np.arange(len(labels)), labels, seed=seed, n_classes_per_batch=1, n_samples_per_class=2
    )
    by_id = GrainClassBalanced(
        np.arange(len(labels)), numbered, seed=seed, n_classes_per_batch=1, n_samples_per_class=2
    )
    for got, want in zip(by_name.epoch(1), by_id.epoch(1), strict=True):
        assert all(np.array_equal(got[key], want[key]) for key in want)
        assert [numbered[i] for i in got["index"]] == got["label"].tolist()


def test_an_epoch_and_a_stream_pickle_for_grains_workers() -> None:
    pairs = GrainPairs({"image": np.ones((4, 2, 2)), "id": X}, Y, ROWS, batch_size=2, seed=5)
    epoch = pickle.loads(pickle.dumps(pairs.epoch(2)))
    assert all(
        np.array_equal(got["y_index"], want["y_index"])
        for got, want in zip(epoch, pairs.epoch(2), strict=True)
    )
    stream = class_balanced(
        X, [0, 1, 1, 0], n_classes_per_batch=2, n_samples_per_class=1, num_epochs=2
    )
    assert [b["index"].tolist() for b in pickle.loads(pickle.dumps(stream))] == [
        b["index"].tolist() for b in stream
    ]
