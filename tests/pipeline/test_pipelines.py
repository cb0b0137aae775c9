"""Both pipelines end to end on LocalDagRunner (sqlite ML Metadata, Beam DirectRunner) on the
bundled sample data; then a second run with unchanged inputs, served from the cache."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from tfx.types import standard_component_specs

from components import component_keys as keys
from components import layout
from pipeline import config, cyclegan_pipeline, run_local, speaker_pipeline
from pipeline.fingerprint import input_fingerprint

NODES = {"ImportSchemaGen", "StatisticsGen", "ExampleValidator", "ResampledTrainer"}

pytestmark = pytest.mark.slow


def _run_twice(module, pipeline_config, work_dir):
    run = run_local.run_config(work_dir)
    run_local.run(module.create_pipeline(pipeline_config, run))
    first = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    run_local.run(module.create_pipeline(pipeline_config, run))
    second = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    return first, second


@pytest.fixture(scope="module")
def cyclegan_runs(tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp("cyclegan"))
    pipeline_config = run_local.cyclegan_config(
        os.path.join(work_dir, run_local.DIGITS_DIR),
        **config.TEST_OVERRIDES[config.CycleGanConfig],
    )
    return _run_twice(cyclegan_pipeline, pipeline_config, work_dir)


@pytest.fixture(scope="module")
def speaker_runs(tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp("speaker"))
    pipeline_config = config.for_tests(config.SpeakerConfig())
    return _run_twice(speaker_pipeline, pipeline_config, work_dir)


def _metrics(results) -> dict:
    with open(
        os.path.join(results["ResampledTrainer"].uri(keys.MODEL_RUN_KEY), "metrics.json")
    ) as f:
        return json.load(f)


def _check_first_run(results, materialize_node: str, splits: list[str]):
    assert set(results) == NODES | {materialize_node}
    assert {r.state for r in results.values()} == {"COMPLETE"}
    [examples] = results[materialize_node].outputs[keys.EXAMPLES_KEY]
    assert json.loads(examples.properties["split_names"]) == splits
    for split in splits:
        assert tf.io.gfile.glob(
            os.path.join(examples.uri, f"{layout.SPLIT_PREFIX}{split}", "*.tfrecord")
        )
    [anomalies] = results["ExampleValidator"].outputs[standard_component_specs.ANOMALIES_KEY]
    assert anomalies.properties["blessed"] == {split: 1 for split in splits}
    model_dir = os.path.join(results["ResampledTrainer"].uri(keys.MODEL_KEY), "Format-Serving")
    assert tf.saved_model.load(model_dir).signatures


def test_cyclegan_pipeline_runs_and_the_cycle_loss_falls(cyclegan_runs):
    first, _ = cyclegan_runs
    _check_first_run(first, "MaterializePairs", ["x", "y"])
    metrics = _metrics(first)
    assert metrics["cycle_loss_last_epoch"] < metrics["cycle_loss_first_epoch"]
    assert 0 < metrics["pair_coverage_epoch"] <= metrics["pair_coverage_total"] <= 1
    assert metrics["invalid_pairs"] == 0
    [model_run] = first["ResampledTrainer"].outputs[keys.MODEL_RUN_KEY]
    assert model_run.properties["cycle_loss_last_epoch"] == pytest.approx(
        metrics["cycle_loss_last_epoch"]
    )


def test_speaker_pipeline_runs_and_beats_chance_on_held_out_speakers(speaker_runs):
    first, _ = speaker_runs
    _check_first_run(first, "MaterializeAudio", ["eval", "train"])
    metrics = _metrics(first)
    assert metrics["eer"] < 0.25 < metrics["eer_chance"]
    assert metrics["eer"] < metrics["eer_before_training"]
    assert metrics["num_speakers"] >= 5


@pytest.mark.parametrize("runs", ["cyclegan_runs", "speaker_runs"])
def test_second_run_with_unchanged_inputs_is_served_from_the_cache(runs, request):
    first, second = request.getfixturevalue(runs)
    assert set(second) == set(first)
    assert {r.state for r in second.values()} == {"CACHED"}
    for node_id, result in second.items():
        assert {k: [a.uri for a in v] for k, v in result.outputs.items()} == {
            k: [a.uri for a in v] for k, v in first[node_id].outputs.items()
        }


def test_materialize_gets_the_input_fingerprint(tmp_path):
    speaker = config.SpeakerConfig()
    run = run_local.run_config(str(tmp_path))
    [materialize] = [
        c
        for c in speaker_pipeline.create_pipeline(speaker, run).components
        if c.id == "MaterializeAudio"
    ]
    assert materialize.exec_properties[keys.INPUT_FINGERPRINT_KEY] == input_fingerprint(
        speaker.input_paths()
    )
    unfingerprinted = run_local.run_config(str(tmp_path), fingerprint_inputs=False)
    [materialize] = [
        c
        for c in speaker_pipeline.create_pipeline(speaker, unfingerprinted).components
        if c.id == "MaterializeAudio"
    ]
    assert materialize.exec_properties[keys.INPUT_FINGERPRINT_KEY] is None
