"""`gate_and_push` takes plain arguments, with ModelGate's own defaults, and wires the resolver,
ModelGate and Pusher to the model (the pipelines' runs test what they decide)."""

from __future__ import annotations

import inspect
import json

import pytest
from tfx.types import standard_artifacts
from tfx.types.channel import Channel

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.evaluator_component import ModelGate
from tfx_dynamic_inputs.pipeline.common import BASELINE_RESOLVER_ID, gate_and_push

RULE = ("direction", "threshold", "tolerance")


def _model() -> Channel:
    return Channel(type=standard_artifacts.Model)


def test_the_rule_defaults_are_model_gates():
    ours = inspect.signature(gate_and_push).parameters
    gates = inspect.signature(ModelGate.__init__).parameters
    assert {name: ours[name].default for name in RULE} == {
        name: gates[name].default for name in RULE
    }


def test_plain_arguments_reach_the_gate_and_the_pusher(tmp_path):
    model = _model()
    resolver, gate, pusher = gate_and_push(
        model,
        metric="eer",
        serving_dir=str(tmp_path / "serving"),
        threshold=0.2,
        tolerance=0.01,
    )
    assert resolver.id == BASELINE_RESOLVER_ID
    assert gate.exec_properties == {
        "metric": "eer",
        "direction": keys.LOWER_IS_BETTER,
        "threshold": 0.2,
        "tolerance": 0.01,
    }
    assert gate.inputs[keys.MODEL_KEY] is model
    assert pusher.inputs["model"] is model
    assert pusher.inputs["model_blessing"] is gate.outputs[keys.BLESSING_KEY]
    # Pusher keeps its destination as the proto's JSON.
    destination = json.loads(pusher.exec_properties["push_destination"])
    assert destination == {"filesystem": {"base_directory": str(tmp_path / "serving")}}


def test_a_bad_rule_fails_when_the_pipeline_is_built():
    with pytest.raises(ValueError, match="direction"):
        gate_and_push(_model(), metric="eer", serving_dir="s", direction="up")
