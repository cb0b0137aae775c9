"""Both pipelines end to end on LocalDagRunner (sqlite ML Metadata, Beam DirectRunner) on the
bundled sample data, their models blessed and pushed; then a second run with unchanged inputs,
served from the cache up to the trainer, whose gate compares the model with itself.

The speaker pipeline's first run is the command `python -m tfx_dynamic_inputs.pipeline.run_local
speaker` (config file + data flags, one listed file missing), whose printed report is checked
against ML Metadata; a run whose Beam stage rejects too much ends with the Beam stage's own error.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf
import yaml
from tfx.types import standard_component_specs

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import pictures
from tfx_dynamic_inputs.pipeline import (
    cli,
    common,
    config,
    cyclegan_pipeline,
    run_local,
    speaker_pipeline,
)
from tfx_dynamic_inputs.pipeline.fingerprint import input_fingerprint

# The nodes after the trainer, which run again on a second run (see the cache test).
GATE_NODES = {common.BASELINE_RESOLVER_ID, "ModelGate", "Pusher"}
NODES = {"ImportSchemaGen", "StatisticsGen", "ExampleValidator", *GATE_NODES}
# Each pipeline's trainer node, by its materialize node.
TRAINERS = {"MaterializePairs": "PairsTrainer", "MaterializeAudio": "ClassBalancedTrainer"}
PUSHED_MODEL = standard_component_specs.PUSHED_MODEL_KEY
MISSING = "spk01/not_recorded.wav"

pytestmark = pytest.mark.slow


def _next_second() -> None:
    """Waits for the next whole second: Pusher names a pushed version by `int(time.time())`,
    and a second run served from the cache can reach Pusher within the first one's second."""
    time.sleep(1 - time.time() % 1 + 0.01)


def _run_twice(module, pipeline_config, work_dir):
    run = run_local.run_config(work_dir)
    run_local.run(module.create_pipeline(pipeline_config, run))
    first = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    _next_second()
    run_local.run(module.create_pipeline(pipeline_config, run))
    second = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    return first, second


def _run_local(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", *argv],
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def cyclegan_runs(tmp_path_factory):
    work_dir = str(tmp_path_factory.mktemp("cyclegan"))
    pipeline_config = config.for_tests(
        run_local.cyclegan_config(
            os.path.join(work_dir, run_local.DIGITS_DIR),
            image_size=config.TEST_OVERRIDES[config.CycleGanConfig]["image_size"],
        )
    )
    return (*_run_twice(cyclegan_pipeline, pipeline_config, work_dir), pipeline_config, work_dir)


@pytest.fixture(scope="module")
def speaker_command(tmp_path_factory):
    """`python -m tfx_dynamic_inputs.pipeline.run_local speaker --config FILE --manifest M
    --audio_root R --work_dir W` on the bundled corpus, with one more manifest row whose file is
    missing; the config file holds the test overrides. Returns the finished process, the
    SpeakerConfig it ran and its work dir."""
    work_dir = tmp_path_factory.mktemp("speaker")
    manifest = work_dir / "manifest.csv"
    with open(config.SPEAKER_MANIFEST) as f:
        manifest.write_text(f.read() + f"{MISSING},spk01\n")
    config_file = work_dir / "speaker.yaml"
    config_file.write_text(yaml.safe_dump({"speaker": config.TEST_OVERRIDES[config.SpeakerConfig]}))
    done = _run_local(
        "speaker",
        "--config",
        str(config_file),
        "--manifest",
        str(manifest),
        "--audio_root",
        config.SPEAKER_CORPUS_DIR,
        "--work_dir",
        str(work_dir),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pipeline_config = config.SpeakerConfig(
        manifest=str(manifest),
        audio_root=config.SPEAKER_CORPUS_DIR,
        **config.TEST_OVERRIDES[config.SpeakerConfig],
    )
    return done, pipeline_config, str(work_dir)


@pytest.fixture(scope="module")
def speaker_runs(speaker_command):
    """The command's run, then the same pipeline run again in this process; their config and
    work dir."""
    _, pipeline_config, work_dir = speaker_command
    run = run_local.run_config(work_dir)
    first = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    _next_second()
    run_local.run(speaker_pipeline.create_pipeline(pipeline_config, run))
    second = run_local.latest_run(run.metadata_path, pipeline_config.pipeline_name)
    return first, second, pipeline_config, work_dir


def _trainer(results):
    """The trainer node's result of a run of either pipeline."""
    [trainer] = [results[node] for node in TRAINERS.values() if node in results]
    return trainer


def _metrics(results) -> dict:
    with open(os.path.join(_trainer(results).uri(keys.MODEL_RUN_KEY), "metrics.json")) as f:
        return json.load(f)


def _check_first_run(results, pipeline_config, work_dir: str, materialize_node: str, splits):
    assert set(results) == NODES | {materialize_node, TRAINERS[materialize_node]}
    assert {r.state for r in results.values()} == {"COMPLETE"}
    [examples] = results[materialize_node].outputs[keys.EXAMPLES_KEY]
    assert json.loads(examples.properties["split_names"]) == splits
    for split in splits:
        assert tf.io.gfile.glob(
            os.path.join(examples.uri, f"{layout.SPLIT_PREFIX}{split}", "*.tfrecord")
        )
    [anomalies] = results["ExampleValidator"].outputs[standard_component_specs.ANOMALIES_KEY]
    assert anomalies.properties["blessed"] == {split: 1 for split in splits}
    model_dir = os.path.join(_trainer(results).uri(keys.MODEL_KEY), "Format-Serving")
    assert tf.saved_model.load(model_dir).signatures
    # Nothing blessed before: the gate checks the threshold only, blesses, and Pusher pushes.
    [blessing] = results["ModelGate"].outputs[keys.BLESSING_KEY]
    assert blessing.properties["blessed"] == 1
    assert blessing.properties["current_model"] == _trainer(results).uri(keys.MODEL_KEY)
    assert "baseline_model" not in blessing.properties
    metric = pipeline_config.blessing_metric
    # As ML Metadata holds it: its sqlite store keeps 6 significant digits of a double.
    assert blessing.properties["metric_value"] == pytest.approx(_metrics(results)[metric], 1e-5)
    assert os.path.exists(os.path.join(blessing.uri, "BLESSED"))
    [pushed] = results["Pusher"].outputs[PUSHED_MODEL]
    assert pushed.properties["pushed"] == 1
    destination = pushed.properties["pushed_destination"]
    serving_dir = common.serving_dir(pipeline_config, run_local.run_config(work_dir))
    assert os.path.dirname(destination) == serving_dir
    assert serving_dir.startswith(work_dir)
    assert tf.saved_model.load(destination).signatures


def test_cyclegan_pipeline_runs_and_the_cycle_loss_falls(cyclegan_runs):
    first, _, pipeline_config, work_dir = cyclegan_runs
    _check_first_run(first, pipeline_config, work_dir, "MaterializePairs", ["x", "y"])
    metrics = _metrics(first)
    assert metrics["cycle_loss_last_epoch"] < metrics["cycle_loss_first_epoch"]
    assert 0 < metrics["pair_coverage_epoch"] <= metrics["pair_coverage_total"] <= 1
    assert metrics["invalid_pairs"] == 0
    # The held-out x and y images (CycleGanConfig.held_out) are scored, never trained on.
    assert 0 < metrics["val_cycle_loss"] < metrics["cycle_loss_first_epoch"]
    [model_run] = first["PairsTrainer"].outputs[keys.MODEL_RUN_KEY]
    assert model_run.properties["cycle_loss_last_epoch"] == pytest.approx(
        metrics["cycle_loss_last_epoch"]
    )


def test_speaker_pipeline_runs_and_beats_chance_on_held_out_speakers(speaker_runs):
    first, _, pipeline_config, work_dir = speaker_runs
    _check_first_run(first, pipeline_config, work_dir, "MaterializeAudio", ["eval", "train"])
    metrics = _metrics(first)
    assert metrics["eer"] < 0.25 < metrics["eer_chance"]
    assert metrics["eer"] < metrics["eer_before_training"]
    assert metrics["num_speakers"] >= 5


@pytest.mark.parametrize("runs", ["cyclegan_runs", "speaker_runs"])
def test_second_run_with_unchanged_inputs_is_served_from_the_cache_up_to_the_trainer(runs, request):
    first, second, _, _ = request.getfixturevalue(runs)
    assert set(second) == set(first)
    cached = {node_id for node_id, result in second.items() if result.state == "CACHED"}
    assert cached == set(first) - GATE_NODES
    for node_id in cached:
        assert {k: [a.uri for a in v] for k, v in second[node_id].outputs.items()} == {
            k: [a.uri for a in v] for k, v in first[node_id].outputs.items()
        }
    # The resolver now finds the first run's model blessed: a new baseline input, so the gate
    # runs again, and its baseline is the cached trainer's model itself. It blesses it again,
    # and Pusher pushes the same model as a new version.
    assert {second[node_id].state for node_id in GATE_NODES} == {"COMPLETE"}
    model = _trainer(first).uri(keys.MODEL_KEY)
    [blessing] = second["ModelGate"].outputs[keys.BLESSING_KEY]
    assert blessing.properties["current_model"] == blessing.properties["baseline_model"] == model
    assert blessing.properties["blessed"] == 1
    assert blessing.properties["blessing_message"].endswith(
        ": the baseline is this same model (its trainer run was cached))"
    )
    [first_push] = first["Pusher"].outputs[PUSHED_MODEL]
    [second_push] = second["Pusher"].outputs[PUSHED_MODEL]
    assert second_push.properties["pushed"] == 1
    versions = [p.properties["pushed_destination"] for p in (first_push, second_push)]
    assert versions[0] != versions[1]
    assert os.path.dirname(versions[0]) == os.path.dirname(versions[1])
    for version in versions:
        assert tf.saved_model.contains_saved_model(version)


def test_the_gate_and_pusher_take_their_settings_from_the_config(tmp_path):
    run = run_local.run_config(str(tmp_path))
    speaker = config.SpeakerConfig(
        blessing_threshold=0.2, blessing_tolerance=0.01, serving_dir=str(tmp_path / "models")
    )
    nodes = {c.id: c for c in speaker_pipeline.create_pipeline(speaker, run).components}
    assert set(nodes) >= GATE_NODES
    gate, pusher = nodes["ModelGate"], nodes["Pusher"]
    baseline = gate.inputs[keys.BASELINE_MODEL_KEY]
    assert baseline.producer_component_id == common.BASELINE_RESOLVER_ID
    blessing = pusher.inputs[standard_component_specs.MODEL_BLESSING_KEY]
    assert blessing.producer_component_id == "ModelGate"
    assert dict(gate.exec_properties) == {
        keys.METRIC_KEY: "eer",
        keys.DIRECTION_KEY: keys.LOWER_IS_BETTER,
        keys.THRESHOLD_KEY: 0.2,
        keys.TOLERANCE_KEY: 0.01,
    }
    destination = json.loads(pusher.exec_properties[standard_component_specs.PUSH_DESTINATION_KEY])
    assert destination == {"filesystem": {"base_directory": str(tmp_path / "models")}}
    assert common.serving_dir(config.SpeakerConfig(), run) == os.path.join(
        run.pipeline_root, config.SERVING_DIR, speaker.pipeline_name
    )


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


def _printed_outputs(stdout: str) -> dict[str, dict[str, str]]:
    """Node -> {output key: URI} as the report's first section lists them: "  Node [state]",
    then "    key  uri" per output."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("== ")) + 1
    outputs: dict[str, dict[str, str]] = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        words = line.split()
        if line.startswith("    "):
            [*_, last_node] = outputs.values()
            last_node[words[0]] = words[1]
        else:
            outputs[words[0]] = {}
    return outputs


def test_run_local_prints_what_ran_where_the_artifacts_are_rejects_metrics_and_the_push(
    speaker_command, speaker_runs
):
    done, _, _ = speaker_command
    first, *_ = speaker_runs
    lines = done.stdout.splitlines()
    for node in NODES | {"MaterializeAudio", "ClassBalancedTrainer"}:
        assert f"  {node} [ran]" in lines
    printed = _printed_outputs(done.stdout)
    assert printed == {
        node: {key: result.uri(key) for key in result.outputs} for node, result in first.items()
    }
    assert all(os.path.exists(uri) for outputs in printed.values() for uri in outputs.values())
    rejects = lines[lines.index("== rejects by reason") + 1 :]
    assert rejects[0].startswith("  MaterializeAudio: 1 input record rejected")
    assert rejects[1].split() == ["missing_file", "1"]
    with open(
        os.path.join(first["MaterializeAudio"].uri(keys.OFFSET_INDEX_KEY), layout.REJECTS_FILE)
    ) as f:
        [reject] = [json.loads(line) for line in f]
    assert MISSING in reject["source"]
    assert any(line.startswith("  EER on ") for line in lines)
    [blessing] = first["ModelGate"].outputs[keys.BLESSING_KEY]
    [pushed] = first["Pusher"].outputs[PUSHED_MODEL]
    start = lines.index("== model gate and push")
    assert lines[start : start + 3] == [
        "== model gate and push",
        f"  {blessing.properties['blessing_message']}",
        f"  pushed to {pushed.properties['pushed_destination']}",
    ]
    # How to look at the pictures, as the demo says it: TensorBoard, or the PNG files.
    [model_run] = first["ClassBalancedTrainer"].outputs[keys.MODEL_RUN_KEY]
    assert f"tensorboard --logdir {model_run.uri}" in done.stdout
    data_dir = pictures.run_pictures_dir(first["MaterializeAudio"].uri(keys.OFFSET_INDEX_KEY))
    assert f"tensorboard --logdir {data_dir}" in done.stdout
    assert "*.png" in lines[-1]


def test_a_run_whose_beam_stage_rejects_too_much_ends_with_its_error(tmp_path):
    with open(config.SPEAKER_MANIFEST) as f:
        rows = list(csv.DictReader(f))
    kept = [
        next(r for r in rows if r["speaker"] == s) for s in sorted({r["speaker"] for r in rows})[:4]
    ]
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "path,speaker\n"
        + "".join(f"{r['path']},{r['speaker']}\n" for r in kept)
        + "spk01/gone_1.wav,spk01\nspk02/gone_2.wav,spk02\n"
    )
    done = _run_local(
        "speaker",
        "--manifest",
        str(manifest),
        "--audio_root",
        config.SPEAKER_CORPUS_DIR,
        "--max_reject_fraction",
        "0.01",
        # Within the 3 training speakers of the 4: the run gets past the batch check to the Beam
        # stage (pipeline/speakers.py), which then rejects too much.
        "--n_classes_per_batch",
        "2",
        "--work_dir",
        str(tmp_path / "work"),
    )
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("error: 2 of 6 inputs rejected"), last
    assert "max_reject_fraction=0.01" in last and "missing_file=2" in last
    lines = done.stdout.splitlines()
    assert "  MaterializeAudio [failed]" in lines
    assert "  ClassBalancedTrainer [not run]" in lines
    assert "  Pusher [not run]" in lines


def test_speaker_folders_instead_of_a_manifest_reach_the_beam_stage(tmp_path):
    run = run_local.run_config(str(tmp_path))
    args = cli.parse_local_args(
        ["speaker", "--audio_root", str(tmp_path), "--speaker_from_path", "true"]
    )
    speaker, _ = run_local.local_configs(args)
    assert speaker.speaker_from_path and speaker.input_paths() == [str(tmp_path)]
    [materialize] = [
        c
        for c in speaker_pipeline.create_pipeline(speaker, run).components
        if c.id == "MaterializeAudio"
    ]
    assert materialize.exec_properties[keys.SPEAKER_FROM_PATH_KEY] is True
    assert materialize.exec_properties[keys.MANIFEST_KEY] is None
    assert materialize.exec_properties[keys.ROOT_KEY] == str(tmp_path)
    for argv, message in (
        (["--speaker_from_path", "true"], "missing: --audio_root"),
        (["--speaker_from_path", "true", "--audio_root", "a", "--manifest", "m"], "not both"),
    ):
        with pytest.raises(cli.ConfigError, match=message):
            cli.parse_local_args(["speaker", *argv])
