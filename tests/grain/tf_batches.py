"""The tf.data samplers' batches for tests/grain's equality tests, written to an .npz.

Run by the full install's interpreter (TensorFlow present; `TFX_DYNAMIC_INPUTS_TF_PYTHON`), from
the checkout, as `python -m tests.grain.tf_batches CASES.json INPUTS.npz OUT.npz`: for each case
(a sampler's arguments and how many epochs), `OUT["<case>/<epoch>/<batch>/<key>"]` is that
batch's entry. The Grain venv holds no TensorFlow, so its tests ask this process for the batches
they must equal (and for a committed audio run, written with the tests' helpers: `run_dir` of a
`class_run` case, with the noise and RIR runs its ``augment`` names).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

SAMPLE_RATE = 8000


def _batches(case: dict, inputs: dict) -> list[list[dict]]:
    """Each epoch's batches of the tf.data sampler `case` names."""
    from tfx_dynamic_inputs.inputs import class_balanced, dynamic_pairs
    from tfx_dynamic_inputs.inputs.sources import record_store_from

    name, args = case["name"], case["args"]
    if case["kind"] == "pairs":
        splits, values = inputs[f"{name}/row_splits"], inputs[f"{name}/values"]
        dataset = dynamic_pairs(inputs[f"{name}/x"], inputs[f"{name}/y"], (splits, values), **args)
    elif case["kind"] == "pairs_run":
        dataset = dynamic_pairs(_pairs_run(case["run_dir"], inputs, name), **args)
    elif case["kind"] == "class_run":
        augment = case.get("augment") or {}
        # Cases of one augmentation run share its noise and RIR runs, written once.
        for what, part in (("noise", augment.get("noise")), ("RIR", augment.get("reverb"))):
            if part is not None and not os.path.exists(part["run"]):
                _clip_run(part["run"], what)
        dataset = class_balanced(
            _audio_run(case["run_dir"], inputs[f"{name}/labels"]),
            record_set="train",
            features=feature_config(case["features"]),
            augment=augment_config(case.get("augment")),
            **args,
        )
    else:
        store = record_store_from(inputs[f"{name}/x"])
        dataset = class_balanced(
            store, inputs[f"{name}/labels"], features=None, parse_fn=store.parse_fn, **args
        )
    return [
        [{key: value.numpy() for key, value in batch.items()} for batch in dataset]
        for _ in range(case["epochs"])
    ]


def feature_config(spec: dict | None):
    """The `AudioFeatureConfig` a case's JSON `spec` names (its ``spec_augment`` a dict of
    `SpecAugment`'s arguments), or None."""
    from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig, SpecAugment

    if spec is None:
        return None
    masks = spec.get("spec_augment")
    return AudioFeatureConfig(**{**spec, "spec_augment": masks and SpecAugment(**masks)})


def augment_config(spec: dict | None):
    """The `SpeakerAugmentConfig` a case's JSON `spec` names (``noise`` and ``reverb`` dicts of
    `AdditiveNoise`'s and `Reverberation`'s arguments, or None; ``speed_factors``), or None."""
    from tfx_dynamic_inputs.plans.augment_options import (
        AdditiveNoise,
        Reverberation,
        SpeakerAugmentConfig,
    )

    if spec is None:
        return None
    noise, reverb = spec.get("noise"), spec.get("reverb")
    return SpeakerAugmentConfig(
        noise=noise and AdditiveNoise(**{**noise, "snr_db": tuple(noise["snr_db"])}),
        reverb=reverb and Reverberation(**reverb),
        speed_factors=tuple(spec.get("speed_factors", ())),
    )


def _clip_run(run_dir: str, what: str) -> None:
    """A committed run of noise clips (a tone over white noise, some shorter than a segment, one
    silent) or of RIRs (a peak after a silent delay, then a decay; one silent), at 8 kHz."""
    from tests.class_balanced.runs import write_clip_run

    rng = np.random.default_rng(len(what))
    clips = []
    for _ in range(4):
        if what == "noise":
            t = np.arange(int(rng.integers(1500, 9000))) / SAMPLE_RATE
            signal = 0.3 * np.sin(2 * np.pi * rng.uniform(50, 3000) * t)
            signal += 0.05 * rng.standard_normal(len(t))
        else:
            n = int(rng.integers(100, 800))
            tail = rng.standard_normal(n) * np.exp(-np.arange(n) / rng.uniform(20, 200))
            tail[0] = 4.0
            signal = np.concatenate([np.zeros(int(rng.integers(0, 50))), tail]) / 4.0
        clips.append((signal * rng.uniform(0.05, 1.0) * 32767).astype(np.int16))
    clips.insert(1, np.zeros(600, np.int16))
    write_clip_run(run_dir, clips, sample_rate=SAMPLE_RATE)


def _audio_run(run_dir: str, labels: np.ndarray):
    """A committed audio run at `run_dir` of `len(labels)` utterances of 0.25 to 1.1 s at 8 kHz,
    the class of each `labels`' (in its records and its class index)."""
    from tests.class_balanced.runs import audio_example
    from tests.inputs.runs import run_id_of, write_record_set
    from tfx_dynamic_inputs import layout
    from tfx_dynamic_inputs.inputs import open_run

    rng = np.random.default_rng(len(labels))
    records = [
        audio_example(
            f"utt{number:04d}",
            rng.integers(-3000, 3000, int(rng.integers(2000, 9000))),
            int(label),
            f"spk{label}",
            SAMPLE_RATE,
        )
        for number, label in enumerate(labels)
    ]
    write_record_set(run_dir, "train", records, num_shards=2)
    run_id = run_id_of(run_dir)
    layout.save_class_index(run_dir, "train", labels, int(labels.max()) + 1, None, run_id)
    summary = {
        "ok": True,
        "job": "audio",
        "config": {"sample_rate": SAMPLE_RATE},
        "record_sets": {"train": {"num_records": len(records)}},
    }
    layout.commit_run(run_dir, run_id, summary)
    return open_run(run_dir)


def _pairs_run(run_dir: str, inputs: dict, name: str):
    """A committed pairs run at `run_dir` of random images, paired by the case's edge CSR or, where
    it names groups, by group."""
    from tests.inputs.runs import (
        image_example,
        random_images,
        run_id_of,
        write_pairs,
        write_record_set,
    )
    from tfx_dynamic_inputs import layout
    from tfx_dynamic_inputs.inputs import open_run

    rng = np.random.default_rng(len(inputs[f"{name}/x_groups"]))
    for record_set, size in (
        ("x", len(inputs[f"{name}/x_groups"])),
        ("y", inputs[f"{name}/num_y"]),
    ):
        images = random_images(rng, int(size))
        records = [image_example(f"{record_set}{i}", image) for i, image in enumerate(images)]
        write_record_set(run_dir, record_set, records, num_shards=2)
    if f"{name}/values" in inputs:
        splits, values = inputs[f"{name}/row_splits"], inputs[f"{name}/values"]
        write_pairs(
            run_dir, [values[a:b].tolist() for a, b in zip(splits[:-1], splits[1:], strict=True)]
        )
    else:
        x_groups, y_groups = inputs[f"{name}/x_groups"], inputs[f"{name}/y_groups"]
        names = [f"group{number}" for number in range(int(y_groups.max()) + 1)]
        run_id = run_id_of(run_dir)
        layout.save_group_index(run_dir, x_groups, y_groups, names, run_id)
        layout.commit_run(run_dir, run_id)
    return open_run(run_dir)


def as_arrays(key: str, value: np.ndarray) -> dict[str, np.ndarray]:
    """A batch entry as .npz arrays: serialized records (object [B] of bytes) as their bytes
    joined and their lengths, which .npz keeps without pickling."""
    if value.dtype != object:
        return {key: value}
    return {
        key: np.frombuffer(b"".join(value), np.uint8),
        f"{key}#lengths": np.array([len(record) for record in value]),
    }


def main(cases_path: str, inputs_path: str, out_path: str) -> None:
    with open(cases_path) as file:
        cases = json.load(file)
    inputs = dict(np.load(inputs_path))
    out = {}
    for case in cases:
        for epoch, batches in enumerate(_batches(case, inputs)):
            for number, batch in enumerate(batches):
                for key, value in batch.items():
                    out.update(as_arrays(f"{case['name']}/{epoch}/{number}/{key}", value))
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
