"""Grain batches equal the tf.data batches of the same arguments, epoch by epoch.

The cases are generated from a seeded NumPy generator: arrays (sizes, valid pairs, labels,
strategies, seeds, batch sizes, worker splits, epoch modes); three class-balanced cases over a
committed audio run (its serialized records byte for byte; the audio front end's features, crop
and pad with SpecAugment, within 1e-3, their lengths and masks exactly); three class-balanced
cases with speaker augmentation (noise; RIRs with SpecAugment; speed factors with noise and RIRs:
the derived classes' record numbers and labels exactly, the features within 1e-3); three pairs
runs, paired by edges or by groups (their serialized records). They go in one go to the full
install's interpreter (`tf_batches.py`: TensorFlow 2.16, which the Grain venv must not hold):
one TensorFlow process for all of them, where a hypothesis example each would start one each.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess

import numpy as np
import pytest

from tests.grain.tf_batches import SAMPLE_RATE, as_arrays, augment_config, feature_config
from tfx_dynamic_inputs.grain import GrainClassBalanced, GrainPairs

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_EPOCHS = 2
# tests/core/test_audio_front.py's bound on the NumPy front end's log-mels against the graph's.
LOG_MEL_ATOL = 1e-3


def _pair_case(rng: np.random.Generator, number: int) -> tuple[dict, dict]:
    num_x, num_y = int(rng.integers(3, 30)), int(rng.integers(1, 12))
    rows = [
        rng.choice(num_y, size=int(rng.integers(1, num_y + 1)), replace=False) for _ in range(num_x)
    ]
    num_workers = int(rng.choice([1, 2, 3]))
    args = {
        "batch_size": int(rng.integers(1, 6)),
        "strategy": str(rng.choice(["uniform", "least_sampled"])),
        "seed": int(rng.integers(-(2**40), 2**40)),
        "num_workers": num_workers,
        "worker_index": int(rng.integers(0, num_workers)),
        "remainder": "wrap",
    }
    name = f"pairs{number}"
    inputs = {
        f"{name}/x": rng.normal(size=(num_x, 3)).astype(np.float32),
        f"{name}/y": rng.integers(0, 255, size=(num_y, 2, 2)).astype(np.uint8),
        f"{name}/row_splits": np.concatenate([[0], np.cumsum([len(row) for row in rows])]),
        f"{name}/values": np.concatenate(rows).astype(np.int64),
    }
    return {"name": name, "kind": "pairs", "args": args, "epochs": _EPOCHS}, inputs


def _class_case(rng: np.random.Generator, number: int) -> tuple[dict, dict]:
    num_classes = int(rng.integers(3, 8))
    labels = rng.integers(0, num_classes, size=int(rng.integers(num_classes, 40)))
    labels[:num_classes] = np.arange(num_classes)
    num_workers = int(rng.choice([1, 2]))
    args = {
        "n_classes_per_batch": int(rng.integers(1, 4)),
        "n_samples_per_class": int(rng.integers(1, 4)),
        "seed": int(rng.integers(0, 2**31)),
        "epoch_mode": str(rng.choice(["classes", "samples"])),
        "small_classes": "replace",
        "num_workers": num_workers,
        "worker_index": int(rng.integers(0, num_workers)),
    }
    name = f"classes{number}"
    inputs = {
        f"{name}/x": rng.normal(size=(len(labels), 4)).astype(np.float32),
        f"{name}/labels": labels.astype(np.int64),
    }
    return {"name": name, "kind": "class_balanced", "args": args, "epochs": _EPOCHS}, inputs


def _run_case(rng: np.random.Generator, number: int, folder: str) -> tuple[dict, dict]:
    """A committed audio run (written by the TensorFlow process): its serialized records, or the
    front end's features (crop; pad with SpecAugment), by `number`."""
    case, inputs = _class_case(rng, number)
    name = f"run{number}"
    labels = inputs[f"{case['name']}/labels"]
    features = [
        None,
        {"mode": "crop", "sample_rate": SAMPLE_RATE, "crop_seconds": 0.5, "num_mel_bins": 20},
        {
            "mode": "pad",
            "sample_rate": SAMPLE_RATE,
            "num_mel_bins": 16,
            "mean_normalization": False,
            "spec_augment": {"freq_mask_param": 4, "time_mask_param": 8},
        },
    ][number % 3]
    run_dir = os.path.join(folder, name)
    case.update(name=name, kind="class_run", run_dir=run_dir, features=features)
    return case, {f"{name}/labels": labels}


def _augment_case(rng: np.random.Generator, number: int, folder: str) -> tuple[dict, dict]:
    """A class-balanced case over a committed audio run with speaker augmentation, by `number`:
    noise only; RIRs only (with SpecAugment); speed factors with noise and RIRs. The noise and
    RIR runs (shared by the cases) are written by the TensorFlow process."""
    case, inputs = _run_case(rng, 3 * number + 1, folder)  # a crop-mode front end
    name = f"augmented{number}"
    case.update(name=name, run_dir=os.path.join(folder, name))
    noise = {
        "run": os.path.join(folder, "noise"),
        "snr_db": [float(rng.uniform(-5, 5)), float(rng.uniform(5, 20))],
        "probability": 0.8,
    }
    reverb = {"run": os.path.join(folder, "rirs"), "probability": 0.7, "max_rir_seconds": 0.05}
    case["augment"] = [
        {"noise": noise},
        {"reverb": reverb},
        {"noise": noise, "reverb": reverb, "speed_factors": [1.0, 0.9, 1.1]},
    ][number]
    if number == 1:
        case["features"] = {**case["features"], "spec_augment": {"freq_mask_param": 4}}
    return case, {f"{name}/labels": next(iter(inputs.values()))}


def _pairs_run_case(rng: np.random.Generator, number: int, folder: str) -> tuple[dict, dict]:
    """A committed pairs run (written by the TensorFlow process) of an edge CSR or, for odd
    `number`, of groups (some x in none); its serialized records."""
    case, arrays = _pair_case(rng, number)
    name = f"pairs_run{number}"
    num_x, num_y = len(arrays[f"{case['name']}/x"]), len(arrays[f"{case['name']}/y"])
    inputs = {f"{name}/x_groups": np.zeros(num_x, np.int64), f"{name}/num_y": np.array(num_y)}
    if number % 2:
        y_groups = rng.integers(-1, 3, num_y)
        y_groups[0] = 0
        x_groups = rng.choice(np.append(np.unique(y_groups[y_groups >= 0]), -1), num_x)
        x_groups[0] = 0
        inputs.update({f"{name}/x_groups": x_groups, f"{name}/y_groups": y_groups})
    else:
        for part in ("row_splits", "values"):
            inputs[f"{name}/{part}"] = arrays[f"{case['name']}/{part}"]
    case.update(name=name, kind="pairs_run", run_dir=os.path.join(folder, name))
    return case, inputs


def _grain(case: dict, inputs: dict):
    name, args = case["name"], case["args"]
    if case["kind"] == "pairs_run":
        return GrainPairs(case["run_dir"], decode="bytes", **args)
    if case["kind"] == "class_run":
        features = feature_config(case["features"])
        return GrainClassBalanced(
            case["run_dir"],
            record_set="train",
            decode="bytes" if features is None else "audio",
            features=features,
            augment=augment_config(case.get("augment")),
            **args,
        )
    if case["kind"] == "pairs":
        valid = (inputs[f"{name}/row_splits"], inputs[f"{name}/values"])
        return GrainPairs(inputs[f"{name}/x"], inputs[f"{name}/y"], valid, **args)
    return GrainClassBalanced(inputs[f"{name}/x"], inputs[f"{name}/labels"], **args)


@pytest.fixture(scope="module")
def tf_cases(tf_python: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[list, dict, dict]:
    rng = np.random.default_rng(48)
    cases, inputs = [], {}
    for number in range(8):
        for make in (_pair_case, _class_case):
            case, arrays = make(rng, number)
            cases.append(case)
            inputs.update(arrays)
    folder = tmp_path_factory.mktemp("tf_batches")
    for number in range(3):
        for make in (_run_case, _pairs_run_case):
            case, arrays = make(rng, number, str(folder))
            cases.append(case)
            inputs.update(arrays)
    for number in range(3):
        case, arrays = _augment_case(rng, number, str(folder))
        cases.append(case)
        inputs.update(arrays)
    (folder / "cases.json").write_text(json.dumps(cases))
    np.savez(folder / "inputs.npz", **inputs)
    subprocess.run(
        [
            tf_python,
            "-m",
            "tests.grain.tf_batches",
            folder / "cases.json",
            folder / "inputs.npz",
            folder / "out.npz",
        ],
        check=True,
        cwd=_REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return cases, inputs, dict(np.load(folder / "out.npz"))


def test_grain_batches_are_the_tf_data_batches(tf_cases: tuple[list, dict, dict]) -> None:
    cases, inputs, expected = tf_cases
    for case in cases:
        sampler = _grain(case, inputs)
        for epoch in range(case["epochs"]):
            batches = list(sampler.epoch(epoch))
            keys = {key for key in expected if key.startswith(f"{case['name']}/{epoch}/")}
            assert len({key.split("/")[2] for key in keys}) == len(batches), case
            for number, batch in enumerate(batches):
                for key, value in batch.items():
                    entry = f"{case['name']}/{epoch}/{number}/{key}"
                    for part, got in as_arrays(entry, value).items():
                        want = expected[part]
                        if key == "features" and case.get("features"):
                            # The front end's log-mels: float64 FFT here, float32 in the graph.
                            np.testing.assert_allclose(got, want, atol=LOG_MEL_ATOL, rtol=0)
                        else:
                            np.testing.assert_array_equal(got, want, err_msg=f"{case} {part}")
                        assert got.dtype == want.dtype, (case, part, got.dtype, want.dtype)


def test_the_stream_is_the_epochs_in_turn(tf_cases: tuple[list, dict, dict]) -> None:
    cases, inputs, expected = tf_cases
    for case in cases:
        sampler = _grain(case, inputs)
        streamed = list(sampler.stream(num_epochs=case["epochs"]))
        assert len(streamed) == case["epochs"] * sampler.steps_per_epoch
        for step, batch in enumerate(streamed):
            epoch, number = divmod(step, sampler.steps_per_epoch)
            key = "x_index" if "x_index" in batch else "index"
            want = expected[f"{case['name']}/{epoch}/{number}/{key}"]
            np.testing.assert_array_equal(batch[key], want, err_msg=f"{case} {step}")


def test_a_state_of_another_augmentation_is_refused(tf_cases: tuple[list, dict, dict]) -> None:
    """An augmented stream resumes from its own state (and pickles for Grain's workers), and
    refuses a state saved with another augmentation or none: its batches would differ."""
    cases, inputs, _ = tf_cases
    case = next(case for case in cases if case.get("augment", {}).keys() == {"noise"})
    sampler = _grain(case, inputs)
    iterator = iter(sampler.stream())
    next(iterator)
    state = iterator.get_state()
    resumed = iter(pickle.loads(pickle.dumps(sampler.stream())))
    resumed.set_state(state)
    np.testing.assert_array_equal(next(resumed)["features"], next(iterator)["features"])
    noise = {**case["augment"]["noise"], "probability": 0.5}
    for other in ({"noise": noise}, None):
        changed = iter(_grain({**case, "augment": other}, inputs).stream())
        with pytest.raises(ValueError, match="saved by another plan") as refused:
            changed.set_state(state)
        assert "probability=0.8" in str(refused.value) and "\n" not in str(refused.value)
