"""The tf.data samplers' batches for tests/grain's equality tests, written to an .npz.

Run by the full install's interpreter (TensorFlow present; `TFX_DYNAMIC_INPUTS_TF_PYTHON`) as
`python tf_batches.py CASES.json INPUTS.npz OUT.npz`: for each case (a sampler's arguments and
how many epochs), `OUT["<case>/<epoch>/<batch>/<key>"]` is that batch's entry. The Grain venv
holds no TensorFlow, so its tests ask this process for the batches they must equal.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def _batches(case: dict, inputs: dict) -> list[list[dict]]:
    """Each epoch's batches of the tf.data sampler `case` names."""
    from tfx_dynamic_inputs.inputs import class_balanced, dynamic_pairs
    from tfx_dynamic_inputs.inputs.sources import record_store_from

    name, args = case["name"], case["args"]
    if case["kind"] == "pairs":
        splits, values = inputs[f"{name}/row_splits"], inputs[f"{name}/values"]
        dataset = dynamic_pairs(inputs[f"{name}/x"], inputs[f"{name}/y"], (splits, values), **args)
    else:
        store = record_store_from(inputs[f"{name}/x"])
        dataset = class_balanced(
            store, inputs[f"{name}/labels"], features=None, parse_fn=store.parse_fn, **args
        )
    return [
        [{key: value.numpy() for key, value in batch.items()} for batch in dataset]
        for _ in range(case["epochs"])
    ]


def main(cases_path: str, inputs_path: str, out_path: str) -> None:
    with open(cases_path) as file:
        cases = json.load(file)
    inputs = dict(np.load(inputs_path))
    out = {}
    for case in cases:
        for epoch, batches in enumerate(_batches(case, inputs)):
            for number, batch in enumerate(batches):
                for key, value in batch.items():
                    out[f"{case['name']}/{epoch}/{number}/{key}"] = value
    np.savez(out_path, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
