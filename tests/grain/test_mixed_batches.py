"""The Grain mixed samplers' batches equal the tf.data mixed samplers' of the same runs and
arguments, epoch by epoch; their streams resume from a state; a bad mix is one line.

Three audio runs, three pairs runs (edges, groups with x in none, edges), a noise run and a RIR
run are written by the full install's interpreter (`tf_mixed_batches.py`, TensorFlow 2.16, one
process for all cases), which also computes the tf.data batches of generated mixes: pairs over
two or three runs (strategies, seeds, batch sizes, worker splits), class-balanced over two or
three runs (weights, both weightings, worker splits), as serialized records byte for byte or as
the audio front end's features (crop; pad with SpecAugment; crop with noise and RIRs) within
`LOG_MEL_ATOL`.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess

import numpy as np
import pytest

from tests.grain.test_equal_batches import LOG_MEL_ATOL
from tests.grain.tf_batches import SAMPLE_RATE, as_arrays, augment_config, feature_config
from tfx_dynamic_inputs.grain import (
    FolderMix,
    GrainMixedClassBalanced,
    GrainMixedPairs,
    WeightedFolder,
    mixed_class_balanced,
    mixed_pairs,
)
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.run_mix import one_sample_rate

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_EPOCHS = 2
# Classes of each audio run: at least n_c x workers (4) each, as weighting "batches" needs.
_AUDIO_CLASSES = (4, 5, 6)
_FEATURES = [
    None,
    {"mode": "crop", "sample_rate": SAMPLE_RATE, "crop_seconds": 0.5, "num_mel_bins": 20},
    {
        "mode": "pad",
        "sample_rate": SAMPLE_RATE,
        "num_mel_bins": 16,
        "mean_normalization": False,
        "spec_augment": {"freq_mask_param": 4, "time_mask_param": 8},
    },
]


def _runs(rng: np.random.Generator, folder: str) -> tuple[list[dict], dict]:
    """Three audio runs (labels; record counts differ, so their audio does) and three pairs runs
    (the second paired by groups, some x in none)."""
    runs, inputs = [], {}
    for number, num_classes in enumerate(_AUDIO_CLASSES):
        extra = rng.integers(0, num_classes, size=2 * num_classes + number)
        labels = np.concatenate([np.arange(num_classes), extra]).astype(np.int64)
        runs.append({"name": f"audio{number}", "kind": "audio"})
        inputs[f"audio{number}/labels"] = labels
    for number in range(3):
        name = f"pairs{number}"
        num_x, num_y = 5 + 3 * number + int(rng.integers(0, 3)), int(rng.integers(2, 8))
        inputs[f"{name}/x_groups"] = np.zeros(num_x, np.int64)
        inputs[f"{name}/num_y"] = np.array(num_y)
        if number == 1:
            y_groups = rng.integers(-1, 3, num_y)
            y_groups[0] = 0
            x_groups = rng.choice(np.append(np.unique(y_groups[y_groups >= 0]), -1), num_x)
            x_groups[0] = 0
            inputs.update({f"{name}/x_groups": x_groups, f"{name}/y_groups": y_groups})
        else:
            rows = [
                rng.choice(num_y, size=int(rng.integers(1, num_y + 1)), replace=False)
                for _ in range(num_x)
            ]
            inputs[f"{name}/row_splits"] = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
            inputs[f"{name}/values"] = np.concatenate(rows).astype(np.int64)
        runs.append({"name": name, "kind": "pairs"})
    runs += [{"name": "noise", "kind": "noise"}, {"name": "rirs", "kind": "RIR"}]
    for run in runs:
        run["run_dir"] = os.path.join(folder, run["name"])
    return runs, inputs


def _split(rng: np.random.Generator, most: int) -> dict:
    num_workers = int(rng.integers(1, most + 1))
    return {"num_workers": num_workers, "worker_index": int(rng.integers(0, num_workers))}


def _pair_case(rng: np.random.Generator, number: int) -> dict:
    runs = [f"pairs{k}" for k in rng.permutation(3)[: 2 + number % 2]]
    args = {
        "batch_size": int(rng.integers(1, 5)),
        "strategy": ["uniform", "least_sampled"][number % 2],
        "seed": int(rng.integers(-(2**40), 2**40)),
        **_split(rng, 3),
    }
    return {
        "name": f"mixed_pairs{number}",
        "kind": "mixed_pairs",
        "runs": runs,
        "mix_names": [f"m{k}" for k in range(len(runs))],
        "args": args,
        "epochs": _EPOCHS,
    }


def _class_case(rng: np.random.Generator, number: int) -> dict:
    """Two or three audio runs, weighted; weighting "batches" for odd `number`; the records
    (`number` 0) or the front end's features."""
    runs = [f"audio{k}" for k in rng.permutation(3)[: 2 + number % 2]]
    args = {
        "n_classes_per_batch": int(rng.integers(1, 3)),
        "n_samples_per_class": int(rng.integers(1, 4)),
        "seed": int(rng.integers(0, 2**40)),
        "small_classes": "replace",
        **_split(rng, 2),
    }
    return {
        "name": f"mixed_classes{number}",
        "kind": "mixed_classes",
        "runs": runs,
        "mix_names": [f"r{k}" for k in range(len(runs))],
        "weights": [float(w) for w in rng.integers(1, 7, len(runs)) / 2],
        "weighting": ["classes", "batches"][number % 2],
        "features": _FEATURES[number % 3],
        "args": args,
        "epochs": _EPOCHS,
    }


def _augmented_case(rng: np.random.Generator, folders: dict[str, str]) -> dict:
    """A class mix with noise and RIRs over a crop-mode front end."""
    case = _class_case(rng, 4)
    noise = {"run": folders["noise"], "snr_db": [-2.0, 12.0], "probability": 0.8}
    reverb = {"run": folders["rirs"], "probability": 0.7, "max_rir_seconds": 0.05}
    return {**case, "name": "mixed_augmented", "augment": {"noise": noise, "reverb": reverb}}


def _grain(case: dict, folders: dict[str, str]):
    names, runs = case["mix_names"], case["runs"]
    if case["kind"] == "mixed_pairs":
        return GrainMixedPairs(
            {name: folders[run] for name, run in zip(names, runs, strict=True)}, **case["args"]
        )
    mix = FolderMix(
        tuple(
            WeightedFolder(folders[run], weight, name)
            for name, run, weight in zip(names, runs, case["weights"], strict=True)
        ),
        case["weighting"],
    )
    features = feature_config(case["features"])
    return GrainMixedClassBalanced(
        mix,
        record_set="train",
        decode="bytes" if features is None else "audio",
        features=features,
        augment=augment_config(case.get("augment")),
        **case["args"],
    )


@pytest.fixture(scope="module")
def tf_mixed(tf_python: str, tmp_path_factory: pytest.TempPathFactory):
    """`(cases, folders, expected)`: the generated cases, the runs' folders (name -> folder) and
    the tf.data batches."""
    rng = np.random.default_rng(4848)
    folder = tmp_path_factory.mktemp("tf_mixed_batches")
    runs, inputs = _runs(rng, str(folder))
    cases = [_pair_case(rng, number) for number in range(2)]
    cases += [_class_case(rng, number) for number in range(3)]
    folders = {run["name"]: run["run_dir"] for run in runs}
    cases.append(_augmented_case(rng, folders))
    (folder / "cases.json").write_text(json.dumps({"runs": runs, "cases": cases}))
    np.savez(folder / "inputs.npz", **inputs)
    subprocess.run(
        [
            tf_python,
            "-m",
            "tests.grain.tf_mixed_batches",
            folder / "cases.json",
            folder / "inputs.npz",
            folder / "out.npz",
        ],
        check=True,
        cwd=_REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return cases, folders, dict(np.load(folder / "out.npz"))


def test_grain_mixed_batches_are_the_tf_data_batches(tf_mixed) -> None:
    cases, folders, expected = tf_mixed
    for case in cases:
        sampler = _grain(case, folders)
        for epoch in range(case["epochs"]):
            batches = list(sampler.epoch(epoch))
            keys = {key for key in expected if key.startswith(f"{case['name']}/{epoch}/")}
            assert len({key.split("/")[2] for key in keys}) == len(batches) > 0, case
            for number, batch in enumerate(batches):
                entries = {}
                for key, value in batch.items():
                    entries.update(as_arrays(f"{case['name']}/{epoch}/{number}/{key}", value))
                assert entries.keys() == {
                    key for key in keys if key.split("/")[2] == str(number)
                }, case
                for part, got in entries.items():
                    want = expected[part]
                    assert got.dtype == want.dtype, (case, part, got.dtype, want.dtype)
                    if part.endswith("/features"):
                        # The front end's log-mels: float64 FFT here, float32 in the graph.
                        np.testing.assert_allclose(got, want, atol=LOG_MEL_ATOL, rtol=0)
                    else:
                        np.testing.assert_array_equal(got, want, err_msg=f"{case} {part}")


def _mix(folders: dict[str, str], weights=(1.0, 2.0, 1.0), weighting="batches") -> FolderMix:
    return FolderMix(
        tuple(
            WeightedFolder(folders[f"audio{k}"], weight, f"r{k}")
            for k, weight in enumerate(weights)
        ),
        weighting,
    )


def _balanced(folders: dict[str, str], n_c: int, num_workers: int, worker: int, **mix_args):
    return GrainMixedClassBalanced(
        _mix(folders, **mix_args),
        record_set="train",
        decode="bytes",
        n_classes_per_batch=n_c,
        n_samples_per_class=2,
        seed=11,
        num_workers=num_workers,
        worker_index=worker,
    )


def _same(batch: dict, other: dict) -> bool:
    return batch.keys() == other.keys() and all(
        np.array_equal(batch[key], other[key]) for key in batch
    )


def test_a_state_resumes_the_mixed_streams_exactly_and_elastically(tf_mixed) -> None:
    _, folders, _ = tf_mixed
    pairs = GrainMixedPairs(
        {"a": folders["pairs0"], "b": folders["pairs1"]}, batch_size=3, seed=5, num_workers=2
    )
    balanced = _balanced(folders, 2, 1, 0)
    for sampler in (pairs, balanced, pickle.loads(pickle.dumps(balanced))):
        stream = sampler.stream(first_epoch=2, num_epochs=2)
        whole = list(stream)
        assert len(whole) == 2 * sampler.steps_per_epoch
        for taken in sorted({0, 1, sampler.steps_per_epoch, len(whole) - 1}):
            iterator = iter(stream)
            for _ in range(taken):
                next(iterator)
            resumed = iter(stream)
            # Through JSON, as a checkpoint keeps it.
            resumed.set_state(json.loads(json.dumps(iterator.get_state())))
            assert all(map(_same, list(resumed), whole[taken:]))
    # Worker 0 of 2 (n_c = 1) saves; one worker of n_c = 2 takes both workers' batches on.
    two = [_balanced(folders, 1, 2, worker) for worker in (0, 1)]
    iterator = iter(two[0].stream())
    for _ in range(3):
        next(iterator)
    one = iter(_balanced(folders, 2, 1, 0).stream())
    one.set_state(iterator.get_state())
    for number in range(3, two[0].steps_per_epoch):
        halves = [sampler.epoch(0)[number] for sampler in two]
        assert _same(
            next(one), {key: np.concatenate([h[key] for h in halves]) for key in halves[0]}
        )


def test_a_state_of_other_weights_or_weighting_is_refused(tf_mixed) -> None:
    _, folders, _ = tf_mixed
    iterator = iter(_balanced(folders, 2, 1, 0).stream())
    next(iterator)
    state = iterator.get_state()
    for other in ({"weights": (1.0, 3.0, 1.0)}, {"weighting": "classes"}):
        resumed = iter(_balanced(folders, 2, 1, 0, **other).stream())
        with pytest.raises(ValueError, match="saved by another plan") as refused:
            resumed.set_state(state)
        assert "\n" not in str(refused.value)


def _bad_mixes(folders: dict[str, str], copy: str) -> list[tuple]:
    """`(make, error, message)` of bad mixes, each refused in one line."""
    audio, pairs = folders["audio0"], folders["pairs0"]
    arguments = {"record_set": "train", "n_classes_per_batch": 1, "n_samples_per_class": 1}
    one = FolderMix((WeightedFolder(audio, 1.0, "a"),))
    # A weight of ~all of a unit's 5 class slots, over a run of 4 classes.
    front, speeds = (
        AudioFeatureConfig(sample_rate=SAMPLE_RATE),
        SpeakerAugmentConfig(speed_factors=(1.0, 0.9)),
    )
    greedy = FolderMix(
        (WeightedFolder(audio, 99.0, "a"), WeightedFolder(folders["audio1"], 1, "b"))
    )
    return [
        (lambda: FolderMix(()), ValueError, "at least one run"),
        (lambda: FolderMix((audio,)), TypeError, "must be WeightedFolder"),
        (lambda: FolderMix((one.runs[0], one.runs[0])), ValueError, "names name 'a' twice"),
        (
            lambda: FolderMix((one.runs[0], WeightedFolder(audio + "/.", 1.0, "b"))),
            ValueError,
            "names run folder .* twice",
        ),
        (lambda: FolderMix(one.runs, "sometimes"), ValueError, "weighting must be one of"),
        (lambda: WeightedFolder(audio, 0, "a"), ValueError, "must be > 0"),
        (lambda: WeightedFolder(audio, -1.0, "a"), ValueError, "must be > 0"),
        (lambda: WeightedFolder(audio, math.nan, "a"), ValueError, "must be > 0"),
        (lambda: WeightedFolder(audio, math.inf, "a"), ValueError, "must be > 0"),
        (lambda: WeightedFolder(audio, True, "a"), TypeError, "must be a number"),
        (lambda: WeightedFolder(audio, "2", "a"), TypeError, "must be a number"),
        (lambda: WeightedFolder(audio, 1.0, "a/b"), ValueError, "without '/'"),
        (lambda: WeightedFolder(audio, 1.0, ""), ValueError, "without '/'"),
        (lambda: WeightedFolder(7, 1.0, "a"), TypeError, "must be a path"),
        (lambda: GrainMixedPairs([pairs], batch_size=1), TypeError, "mapping of name"),
        (
            lambda: GrainMixedPairs({"a": pairs, "b": copy}, batch_size=1),
            ValueError,
            "names run id .* twice",
        ),
        (
            lambda: GrainMixedPairs({"a": pairs}, batch_size=1, on_damaged="skip"),
            ValueError,
            "reads with on_damaged='fail'",
        ),
        (lambda: GrainMixedClassBalanced(audio, **arguments), TypeError, "must be a FolderMix"),
        (
            lambda: GrainMixedClassBalanced(one, **arguments, on_damaged="skip"),
            ValueError,
            "reads with on_damaged='fail'",
        ),
        (
            lambda: GrainMixedClassBalanced(one, **arguments, features="mel"),
            TypeError,
            "AudioFeatureConfig",
        ),
        (
            lambda: GrainMixedClassBalanced(greedy, **{**arguments, "n_classes_per_batch": 5}),
            ValueError,
            "run 'a' has 4 usable classes but its weight asks for up to 5",
        ),
        (
            lambda: GrainMixedClassBalanced(one, **arguments, augment=speeds),
            ValueError,
            "augment needs the audio front end",
        ),
        (
            lambda: GrainMixedClassBalanced(one, **arguments, features=front, augment=speeds),
            ValueError,
            "speed perturbation does not run over a mix",
        ),
        (
            lambda: one_sample_rate({"a": 8000, "b": 16000}),
            ValueError,
            "must store one sample rate",
        ),
    ]


def test_a_bad_mix_is_one_line_naming_it(tf_mixed, tmp_path) -> None:
    _, folders, _ = tf_mixed
    copy = shutil.copytree(folders["pairs0"], tmp_path / "copy")
    for make, error, message in _bad_mixes(folders, str(copy)):
        with pytest.raises(error, match=message) as refused:
            make()
        assert "\n" not in str(refused.value), message


def test_the_stream_functions_are_the_samplers_streams(tf_mixed) -> None:
    _, folders, _ = tf_mixed
    runs = {"a": folders["pairs2"], "b": folders["pairs0"]}
    got = list(mixed_pairs(runs, batch_size=2, seed=3, first_epoch=1, num_epochs=1))
    want = list(GrainMixedPairs(runs, batch_size=2, seed=3).epoch(1))
    assert len(got) == len(want) and all(map(_same, got, want))
    arguments = {"record_set": "train", "n_classes_per_batch": 2, "n_samples_per_class": 2}
    got = list(mixed_class_balanced(_mix(folders), decode="bytes", num_epochs=1, **arguments))
    want = list(GrainMixedClassBalanced(_mix(folders), decode="bytes", **arguments).epoch(0))
    assert len(got) == len(want) and all(map(_same, got, want))
