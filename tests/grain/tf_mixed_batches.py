"""The tf.data mixed samplers' batches for tests/grain/test_mixed_batches.py, written to an .npz.

Run by the full install's interpreter (TensorFlow present), from the checkout, as
`python -m tests.grain.tf_mixed_batches CASES.json INPUTS.npz OUT.npz`. It first writes the
committed runs `CASES["runs"]` names (audio runs, pairs runs, and a noise and a RIR run for the
augmentation, with `tf_batches`' writers),
then, for each case of `CASES["cases"]` (a mix of those runs and a sampler's arguments),
`OUT["<case>/<epoch>/<batch>/<key>"]` is that batch's entry, as `tf_batches` writes them.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from tests.grain.tf_batches import (
    _audio_run,
    _clip_run,
    _pairs_run,
    as_arrays,
    augment_config,
    feature_config,
)


def _write_runs(runs: list[dict], inputs: dict) -> dict[str, str]:
    """Writes each run (an audio run of its labels, a pairs run, a noise or a RIR run): run
    name -> folder."""
    for run in runs:
        if run["kind"] == "audio":
            _audio_run(run["run_dir"], inputs[f"{run['name']}/labels"])
        elif run["kind"] == "pairs":
            _pairs_run(run["run_dir"], inputs, run["name"])
        else:
            _clip_run(run["run_dir"], run["kind"])
    return {run["name"]: run["run_dir"] for run in runs}


def _batches(case: dict, folders: dict[str, str]) -> list[list[dict]]:
    """Each epoch's batches of the tf.data mixed sampler `case` names."""
    from tfx_dynamic_inputs.inputs import open_run
    from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler
    from tfx_dynamic_inputs.inputs.mixed_pairs import MixedPairsSampler
    from tfx_dynamic_inputs.inputs.run_mix import RunMix, WeightedRun

    names = case["mix_names"]
    if case["kind"] == "mixed_pairs":
        runs = {name: folders[run] for name, run in zip(names, case["runs"], strict=True)}
        sampler = MixedPairsSampler(runs, **case["args"])
    else:
        mix = RunMix(
            tuple(
                WeightedRun(open_run(folders[run]), weight, name)
                for name, run, weight in zip(names, case["runs"], case["weights"], strict=True)
            ),
            case["weighting"],
        )
        sampler = MixedClassBalancedSampler(
            mix,
            record_set="train",
            features=feature_config(case["features"]),
            augment=augment_config(case.get("augment")),
            **case["args"],
        )
    # Each call of `dataset()` plans the state's next epoch.
    return [
        [{key: value.numpy() for key, value in batch.items()} for batch in sampler.dataset()]
        for _ in range(case["epochs"])
    ]


def main(cases_path: str, inputs_path: str, out_path: str) -> None:
    with open(cases_path) as file:
        spec = json.load(file)
    inputs = dict(np.load(inputs_path))
    folders = _write_runs(spec["runs"], inputs)
    out = {}
    for case in spec["cases"]:
        for epoch, batches in enumerate(_batches(case, folders)):
            for number, batch in enumerate(batches):
                for key, value in batch.items():
                    out.update(as_arrays(f"{case['name']}/{epoch}/{number}/{key}", value))
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
