"""The model gate: its executor's decisions and the ModelBlessing it writes, read back by what
reads it in a pipeline (the standard Pusher's executor and `LatestBlessedModelStrategy`); then a
real LocalDagRunner pipeline (stand-in trainer -> resolver -> gate -> Pusher) run after run.

No `from __future__ import annotations`: TFX's `@component` reads the stand-in trainer's
annotations as objects, not strings."""

import json
import os
import time

import pytest
import tensorflow as tf
from tfx.components.evaluator import constants
from tfx.components.pusher import executor as pusher_executor
from tfx.components.pusher.component import Pusher
from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
    LatestBlessedModelStrategy,
)
from tfx.orchestration import metadata
from tfx.orchestration.pipeline import Pipeline
from tfx.proto.pusher_pb2 import PushDestination
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.channel import Channel
from tfx.utils import path_utils, proto_utils

from tests.components.conftest import make_artifact
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.evaluator_component import ModelGate
from tfx_dynamic_inputs.evaluator_component import executor as gate_executor
from tfx_dynamic_inputs.pipeline import run_local

METRIC = "eer"


def _model(tmp_path, model_id: int, **metrics: float) -> standard_artifacts.Model:
    """A Model artifact as the trainer publishes it: a serving folder, metrics as properties."""
    model = make_artifact(standard_artifacts.Model, str(tmp_path / f"model_{model_id}"))
    model.id = model_id
    serving = path_utils.serving_model_dir(model.uri)
    os.makedirs(serving)
    (tmp_path / f"model_{model_id}" / "Format-Serving" / "saved_model.pb").write_bytes(b"model")
    for name, value in metrics.items():
        model.set_float_custom_property(name, value)
    return model


def _gate(tmp_path, model, baseline=None, **parameters) -> standard_artifacts.ModelBlessing:
    """Runs the gate's executor on `model` (and `baseline`); returns its blessing."""
    blessing = make_artifact(standard_artifacts.ModelBlessing, str(tmp_path / "blessing"))
    properties = {
        keys.METRIC_KEY: METRIC,
        keys.DIRECTION_KEY: keys.LOWER_IS_BETTER,
        keys.THRESHOLD_KEY: None,
        keys.TOLERANCE_KEY: 0.0,
        **parameters,
    }
    inputs = {keys.MODEL_KEY: [model], keys.BASELINE_MODEL_KEY: [baseline] if baseline else []}
    gate_executor.Executor().Do(inputs, {keys.BLESSING_KEY: [blessing]}, properties)
    return blessing


def _record(blessing) -> dict:
    with open(os.path.join(blessing.uri, gate_executor.EVALUATION_FILE)) as f:
        return json.load(f)


def test_the_first_model_within_the_threshold_is_blessed(tmp_path):
    model = _model(tmp_path, 7, eer=0.12, loss=1.5)
    blessing = _gate(tmp_path, model, threshold=0.3)
    assert sorted(os.listdir(blessing.uri)) == [
        constants.BLESSED_FILE_NAME,
        gate_executor.EVALUATION_FILE,
    ]
    assert blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY) == 1
    assert blessing.get_string_custom_property("current_model") == model.uri
    assert blessing.get_int_custom_property("current_model_id") == 7
    assert not blessing.has_custom_property("baseline_model")
    assert not blessing.has_custom_property("baseline_model_id")
    message = "blessed (eer 0.12, no baseline: the first blessed model; within the threshold 0.3)"
    assert blessing.get_string_custom_property("blessing_message") == message
    assert blessing.get_float_custom_property(gate_executor.METRIC_VALUE_PROPERTY) == 0.12
    assert _record(blessing) == {
        "metric": METRIC,
        "direction": keys.LOWER_IS_BETTER,
        "threshold": 0.3,
        "tolerance": 0.0,
        "model": {"uri": model.uri, "id": 7, "value": 0.12},
        "baseline": None,
        "blessed": True,
        "reason": "the first blessed model; within the threshold 0.3",
        "message": message,
    }


def test_a_model_over_the_threshold_is_not_blessed_even_without_baseline(tmp_path):
    blessing = _gate(tmp_path, _model(tmp_path, 1, eer=0.31), threshold=0.3)
    assert os.listdir(blessing.uri).count(constants.NOT_BLESSED_FILE_NAME) == 1
    assert constants.BLESSED_FILE_NAME not in os.listdir(blessing.uri)
    assert blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY) == 0
    assert blessing.get_string_custom_property("blessing_message") == (
        "not blessed (eer 0.31, no baseline: above the threshold 0.3)"
    )


@pytest.mark.parametrize(
    ("value", "baseline", "parameters", "blessed", "reason"),
    [
        (0.10, 0.12, {}, True, "better by 0.02"),
        (0.12, 0.12, {}, True, "equal"),
        (0.13, 0.12, {}, False, "worse by 0.01, more than the tolerance 0"),
        (0.13, 0.12, {keys.TOLERANCE_KEY: 0.02}, True, "worse by 0.01, within the tolerance 0.02"),
        # Better than the baseline is not enough: the threshold holds too.
        (0.35, 0.40, {keys.THRESHOLD_KEY: 0.3}, False, "above the threshold 0.3"),
        (
            0.80,
            0.90,
            {keys.DIRECTION_KEY: keys.HIGHER_IS_BETTER},
            False,
            "worse by 0.1, more than the tolerance 0",
        ),
        (
            0.85,
            0.90,
            {keys.DIRECTION_KEY: keys.HIGHER_IS_BETTER, keys.THRESHOLD_KEY: 0.9},
            False,
            "below the threshold 0.9",
        ),
    ],
)
def test_against_the_baseline(tmp_path, value, baseline, parameters, blessed, reason):
    model = _model(tmp_path, 2, eer=value)
    baseline_model = _model(tmp_path, 1, eer=baseline)
    blessing = _gate(tmp_path, model, baseline_model, **parameters)
    assert blessing.get_int_custom_property("blessed") == int(blessed)
    assert blessing.get_string_custom_property("baseline_model") == baseline_model.uri
    assert blessing.get_int_custom_property("baseline_model_id") == 1
    assert blessing.get_float_custom_property(gate_executor.BASELINE_METRIC_VALUE_PROPERTY) == (
        baseline
    )
    verdict = "blessed" if blessed else "not blessed"
    assert blessing.get_string_custom_property("blessing_message") == (
        f"{verdict} (eer {value:.4g} vs baseline {baseline:.4g}: {reason})"
    )
    assert _record(blessing)["baseline"] == {"uri": baseline_model.uri, "id": 1, "value": baseline}


def test_the_baseline_is_the_model_itself_when_the_trainer_was_cached(tmp_path):
    model = _model(tmp_path, 5, eer=0.2)
    blessing = _gate(tmp_path, model, model, threshold=0.3)
    assert blessing.get_int_custom_property("blessed") == 1
    assert blessing.get_int_custom_property("baseline_model_id") == 5
    assert _record(blessing)["reason"] == (
        "the baseline is this same model (its trainer run was cached)"
    )


def test_a_baseline_without_the_metric_leaves_only_the_threshold(tmp_path):
    # E.g. blessed by an earlier trainer module that reported other metrics: refusing would
    # refuse every later model too, since the latest blessed model would never change.
    baseline = _model(tmp_path, 1, loss=0.5)
    blessing = _gate(tmp_path, _model(tmp_path, 2, eer=0.2), baseline, threshold=0.3)
    assert blessing.get_int_custom_property("blessed") == 1
    assert blessing.get_string_custom_property("blessing_message") == (
        "blessed (eer 0.2 vs a baseline without it: the latest blessed model records no eer, "
        "not compared; within the threshold 0.3)"
    )
    assert not blessing.has_custom_property(gate_executor.BASELINE_METRIC_VALUE_PROPERTY)


def test_a_model_without_the_metric_is_an_error_naming_what_it_records(tmp_path):
    with pytest.raises(ValueError, match=r"records no metric 'eer' \(.*loss.*run_fn must"):
        _gate(tmp_path, _model(tmp_path, 1, loss=0.5))
    assert not (tmp_path / "blessing").exists()


def test_bad_settings_fail_when_the_pipeline_is_built():
    model = Channel(type=standard_artifacts.Model)
    with pytest.raises(ValueError, match="direction must be one of"):
        ModelGate(model=model, metric=METRIC, direction="smaller")
    with pytest.raises(ValueError, match="tolerance must be finite and >= 0"):
        ModelGate(model=model, metric=METRIC, tolerance=-0.1)
    with pytest.raises(ValueError, match="needs the name of the metric"):
        ModelGate(model=model, metric="")
    gate = ModelGate(model=model, metric=METRIC, threshold=1, tolerance=0)
    assert gate.exec_properties[keys.THRESHOLD_KEY] == 1.0
    assert isinstance(gate.exec_properties[keys.TOLERANCE_KEY], float)


def _push(tmp_path, model, blessing) -> standard_artifacts.PushedModel:
    """The standard Pusher's executor on `model` and `blessing`."""
    pushed = make_artifact(standard_artifacts.PushedModel, str(tmp_path / "pushed"))
    destination = PushDestination(
        filesystem=PushDestination.Filesystem(base_directory=str(tmp_path / "serving"))
    )
    pusher_executor.Executor().Do(
        {
            standard_component_specs.MODEL_KEY: [model],
            standard_component_specs.MODEL_BLESSING_KEY: [blessing],
        },
        {standard_component_specs.PUSHED_MODEL_KEY: [pushed]},
        {standard_component_specs.PUSH_DESTINATION_KEY: proto_utils.proto_to_json(destination)},
    )
    return pushed


@pytest.mark.parametrize(("value", "pushed"), [(0.2, 1), (0.4, 0)])
def test_the_standard_pusher_pushes_only_what_the_gate_blessed(tmp_path, value, pushed):
    model = _model(tmp_path, 1, eer=value)
    push = _push(tmp_path, model, _gate(tmp_path, model, threshold=0.3))
    assert push.get_int_custom_property("pushed") == pushed
    versions = os.listdir(tmp_path / "serving") if pushed else []
    assert (tmp_path / "serving").exists() == bool(pushed)
    for version in versions:
        assert (tmp_path / "serving" / version / "saved_model.pb").read_bytes() == b"model"


def test_the_latest_blessed_model_strategy_finds_the_newest_blessed_model(tmp_path):
    models, blessings = [], []
    for model_id, value in [(1, 0.2), (2, 0.1), (3, 0.5)]:
        model = _model(tmp_path / str(model_id), model_id, eer=value)
        models.append(model)
        blessings.append(_gate(tmp_path / str(model_id), model, threshold=0.3))
    resolved = LatestBlessedModelStrategy().resolve_artifacts(
        None, {"model": models, "model_blessing": blessings}
    )
    # Model 3 is newer but over the threshold: model 2 is the latest blessed one.
    assert [m.id for m in resolved["model"]] == [2]
    assert resolved["model_blessing"] == [blessings[1]]


@component
def StandInTrainer(  # noqa: N802 (a component class name)
    model: OutputArtifact[standard_artifacts.Model], eer: Parameter[float]
):
    """Exports a SavedModel holding `eer` and records `eer` on the model, as the trainers
    record the metrics their run_fn returns."""
    module = tf.Module()
    module.eer = tf.Variable(eer)
    tf.saved_model.save(module, path_utils.serving_model_dir(model.uri))
    model.set_float_custom_property(METRIC, eer)


def _gate_pipeline(root: str, eer: float) -> Pipeline:
    trainer = StandInTrainer(eer=eer)
    resolver = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    gate = ModelGate(
        model=trainer.outputs[keys.MODEL_KEY],
        baseline_model=resolver.outputs[keys.MODEL_KEY],
        metric=METRIC,
        threshold=0.3,
    )
    pusher = Pusher(
        model=trainer.outputs[keys.MODEL_KEY],
        model_blessing=gate.outputs[keys.BLESSING_KEY],
        push_destination=PushDestination(
            filesystem=PushDestination.Filesystem(base_directory=os.path.join(root, "serving"))
        ),
    )
    return Pipeline(
        pipeline_name="gate",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[trainer, resolver, gate, pusher],
        enable_cache=True,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")
        ),
    )


@pytest.mark.slow
def test_runs_bless_against_the_latest_blessed_model_and_push_only_blessed_models(tmp_path):
    root = str(tmp_path)
    runs = []
    for eer in (0.2, 0.25, 0.1, 0.1, 0.1):
        # Pusher names a version by the UNIX time in seconds and skips a push whose version
        # folder exists: each run starts in a new second, so each push gets its own folder.
        time.sleep(1 - time.time() % 1)
        run_local.run(_gate_pipeline(root, eer))
        runs.append(run_local.latest_run(os.path.join(root, "metadata.sqlite"), "gate"))

    def outcome(run):
        [blessing] = run["ModelGate"].outputs[keys.BLESSING_KEY]
        [pushed] = run["Pusher"].outputs[standard_component_specs.PUSHED_MODEL_KEY]
        return (
            run["StandInTrainer"].state,
            run["ModelGate"].state,
            blessing.properties["blessing_message"],
            pushed.properties["pushed"],
        )

    assert [outcome(run) for run in runs] == [
        (
            "COMPLETE",
            "COMPLETE",
            "blessed (eer 0.2, no baseline: the first blessed model; within the threshold 0.3)",
            1,
        ),
        (
            "COMPLETE",
            "COMPLETE",
            "not blessed (eer 0.25 vs baseline 0.2: worse by 0.05, more than the tolerance 0)",
            0,
        ),
        # The second run's model was not blessed: the first one is still the baseline.
        ("COMPLETE", "COMPLETE", "blessed (eer 0.1 vs baseline 0.2: better by 0.1)", 1),
        # Unchanged inputs: the trainer is cached, the resolver now finds its model blessed,
        # so the gate's inputs changed and it runs again, against the model itself.
        (
            "CACHED",
            "COMPLETE",
            "blessed (eer 0.1 vs baseline 0.1: the baseline is this same "
            "model (its trainer run was cached))",
            1,
        ),
        # The same baseline again: the gate and Pusher are served from the cache too.
        (
            "CACHED",
            "CACHED",
            "blessed (eer 0.1 vs baseline 0.1: the baseline is this same "
            "model (its trainer run was cached))",
            1,
        ),
    ]
    first_model = runs[0]["StandInTrainer"].uri(keys.MODEL_KEY)
    third_model = runs[2]["StandInTrainer"].uri(keys.MODEL_KEY)
    baselines = [
        run["ModelGate"].outputs[keys.BLESSING_KEY][0].properties.get("baseline_model")
        for run in runs
    ]
    assert baselines == [None, first_model, first_model, third_model, third_model]
    # Each blessed model went to its own version folder; what is there is that model.
    destinations = [
        run["Pusher"]
        .outputs[standard_component_specs.PUSHED_MODEL_KEY][0]
        .properties.get("pushed_destination")
        for run in runs
    ]
    assert destinations[1] is None and destinations[3] == destinations[4]
    pushed = [destinations[0], destinations[2], destinations[3]]
    assert sorted(os.listdir(os.path.join(root, "serving"))) == sorted(
        os.path.basename(d) for d in pushed
    )
    assert [float(tf.saved_model.load(d).eer.numpy()) for d in pushed] == pytest.approx(
        [0.2, 0.1, 0.1]
    )
