"""Both pipelines compiled to KFP v2 and every compiled task run through its container command's
entrypoint, in order, against a local pipeline root (small data, one epoch)."""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest
import tensorflow as tf
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.types import standard_component_specs
from tfx.utils import import_utils

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.kubeflow import compiled_tasks, local_run, runner
from tfx_dynamic_inputs.pipeline import cli, common, config
from tfx_dynamic_inputs.pipeline.sample_data import X_DIR, write_digit_domains

pytestmark = pytest.mark.slow

TASKS = ["ImportSchemaGen", "StatisticsGen", "ExampleValidator", "ModelGate", "Pusher"]
# Each pipeline's materialize and trainer tasks.
CYCLEGAN_TASKS = ["MaterializePairs", "PairsTrainer"]
SPEAKER_TASKS = ["MaterializeAudio", "ClassBalancedTrainer"]
# The latest-blessed-model resolver compiles to two ML Metadata queries: the newest blessing
# with blessed=1, then the model it names.
BLESSING_RESOLVER = f"{common.BASELINE_RESOLVER_ID}-model-blessing-resolver"
MODEL_RESOLVER = f"{common.BASELINE_RESOLVER_ID}-model-resolver"
RESOLVERS = [BLESSING_RESOLVER, MODEL_RESOLVER]
# Pod requests and limits for some tasks of each pipeline (the others keep the cluster's).
RESOURCES = {
    "PairsTrainer": config.TaskResources(
        cpu_request=1,
        cpu_limit=2,
        memory_limit=4,
        accelerator_type="nvidia-tesla-t4",
        accelerator_count=1,
    ),
    "MaterializeAudio": config.TaskResources(memory_request=2.5),
    "ClassBalancedTrainer": config.TaskResources(cpu_limit=4),
}
NUM_SPEAKERS = 10
UTTERANCES_PER_SPEAKER = 5


def _copy_speaker_subset(target: str) -> None:
    """A corpus folder with part of the bundled speakers (copied: symlinks leaving the data
    root would be rejected by the Beam stage)."""
    with open(config.SPEAKER_MANIFEST) as f:
        rows = list(csv.DictReader(f))
    speakers = sorted({r["speaker"] for r in rows})[:NUM_SPEAKERS]
    kept = [
        row
        for speaker in speakers
        for row in [r for r in rows if r["speaker"] == speaker][:UTTERANCES_PER_SPEAKER]
    ]
    for row in kept:
        os.makedirs(os.path.join(target, os.path.dirname(row["path"])), exist_ok=True)
        shutil.copyfile(
            os.path.join(config.SPEAKER_CORPUS_DIR, row["path"]), os.path.join(target, row["path"])
        )
    with open(os.path.join(target, "manifest.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "speaker"])
        writer.writeheader()
        writer.writerows({"path": r["path"], "speaker": r["speaker"]} for r in kept)


def _json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _yaml(path: str) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("kubeflow")
    data_root = str(root / "sample_data")
    write_digit_domains(os.path.join(data_root, runner.DIGITS_DIR), image_size=8)
    _copy_speaker_subset(os.path.join(data_root, runner.SPEAKERS_DIR))
    cyclegan, speaker = runner.pipeline_configs(
        data_root,
        config.SCHEMAS_DIR,
        # The pods' push destinations, here local folders. A held-out cycle loss is never 0:
        # the CycleGAN model is refused and not pushed; the speaker model has no threshold and
        # nothing blessed before it: it is blessed and pushed.
        cyclegan={
            "image_size": 8,
            "num_epochs": 1,
            "batch_size": 128,
            "blessing_threshold": 0.0,
            "serving_dir": str(root / "serving" / "cyclegan"),
        },
        speaker={
            "num_epochs": 1,
            "n_classes_per_batch": 3,
            "n_samples_per_class": 2,
            "crop_seconds": 0.5,
            "num_mel_bins": 24,
            "blessing_threshold": None,
            "serving_dir": str(root / "serving" / "speaker"),
        },
    )
    kubeflow_config = config.KubeflowConfig(
        image="tfx-dynamic-inputs:test",
        output_dir=str(root / "specs"),
        pipeline_root="gs://unused-bucket/root",
        resources=RESOURCES,
    )
    paths = runner.compile_all(kubeflow_config, cyclegan, speaker)
    names = (cyclegan.pipeline_name, speaker.pipeline_name)
    return dict(zip(names, paths, strict=True)), root


@pytest.fixture(scope="module")
def local_runs(compiled):
    specs, root = compiled
    return {
        name: (
            local_run.run_pipeline_job(path, str(root / "local_root" / name), in_process=True),
            str(root / "local_root" / name / "local-run"),
        )
        for name, path in specs.items()
    }


def test_the_runner_takes_the_config_file_and_its_flags_win(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "kubeflow: {image: from/file:1, pipeline_root: gs://b/root, data_root: gs://b/data,"
        " beam_pipeline_args: [--runner=DataflowRunner]}\n"
        "speaker: {manifest: gs://b/voices/m.csv, audio_root: gs://b/voices, num_epochs: 5}\n"
        "run: {work_dir: out/local}\n"
    )
    kubeflow_config, cyclegan, speaker = runner.parse_args(
        ["--config", str(path), "--image", "from/flag:2", "--beam-arg=--project=p"]
    )
    assert kubeflow_config == config.KubeflowConfig(
        image="from/flag:2",
        pipeline_root="gs://b/root",
        data_root="gs://b/data",
        beam_pipeline_args=("--project=p",),
    )
    assert runner.parse_args(["--trainer-retries", "0"])[0].trainer_retries == 0
    assert (speaker.manifest, speaker.audio_root, speaker.num_epochs) == (
        "gs://b/voices/m.csv",
        "gs://b/voices",
        5,
    )
    assert cyclegan.x_dir == os.path.join("gs://b/data", runner.DIGITS_DIR, X_DIR)


def test_compiled_tasks_carry_their_resources(compiled):
    specs, _ = compiled
    seen = set()
    for path in specs.values():
        for job in (_json(path), {"pipelineSpec": _yaml(runner.kfp_package_path(path))}):
            spec = job["pipelineSpec"]
            # The container spec's own proto takes them (its field names and types).
            deployment = json_format.ParseDict(
                spec["deploymentSpec"], pipeline_spec_pb2.PipelineDeploymentConfig()
            )
            for name, task in spec["root"]["dag"]["tasks"].items():
                label = spec["components"][task["componentRef"]["name"]]["executorLabel"]
                executor = deployment.executors[label]
                if not executor.HasField("container"):
                    continue
                got = executor.container.resources
                wanted = RESOURCES.get(name, config.TaskResources())
                assert (got.cpu_request, got.cpu_limit, got.memory_request, got.memory_limit) == (
                    wanted.cpu_request or 0,
                    wanted.cpu_limit or 0,
                    wanted.memory_request or 0,
                    wanted.memory_limit or 0,
                ), name
                assert (got.accelerator.type or None, got.accelerator.count) == (
                    wanted.accelerator_type,
                    wanted.accelerator_count,
                ), name
                seen.add(name)
    assert set(RESOURCES) <= seen


def test_resources_for_a_task_that_is_not_there_fail_naming_the_tasks(compiled):
    specs, _ = compiled
    job = _json(next(iter(specs.values())))
    with pytest.raises(ValueError, match=r"'PairTrainer' is not a container task .*did you mean"):
        runner.set_resources(job, {"PairTrainer": config.TaskResources(cpu_limit=1)})
    with pytest.raises(ValueError, match="is not a container task"):
        runner.set_resources(job, {MODEL_RESOLVER: config.TaskResources(cpu_limit=1)})


def test_the_config_file_sets_resources_checked_by_field(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(
        "kubeflow: {resources: {PairsTrainer: {cpu_limit: 2, memory_limit: 8,"
        " accelerator_type: nvidia-tesla-t4, accelerator_count: 1}}}\n"
    )
    kubeflow_config, _, _ = runner.parse_args(["--config", str(path)])
    assert kubeflow_config.resources == {
        "PairsTrainer": config.TaskResources(
            cpu_limit=2, memory_limit=8, accelerator_type="nvidia-tesla-t4", accelerator_count=1
        )
    }
    for body, message in (
        (
            "{PairsTrainer: {memory_limt: 8}}",
            "'memory_limt' is not a field of TaskResources (did you mean memory_limit?)",
        ),
        ("{PairsTrainer: {cpu_request: 4, cpu_limit: 2}}", "cpu_request (4.0) is above cpu_limit"),
        ("{PairsTrainer: {cpu_limit: lots}}", "'cpu_limit': expected a float, got 'lots'"),
    ):
        path.write_text(f"kubeflow: {{resources: {body}}}\n")
        with pytest.raises(SystemExit) as exited:
            runner.parse_args(["--config", str(path)])
        assert exited.value.code == 2
        [line] = capsys.readouterr().err.splitlines()
        assert message in line, line


def test_resources_for_a_node_of_neither_pipeline_stop_the_runner_with_one_line(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("kubeflow: {resources: {PairTrainer: {cpu_limit: 2}}}\n")
    with pytest.raises(SystemExit) as exited:
        runner.main(["--config", str(path), "--output-dir", str(tmp_path / "specs")])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: resources: 'PairTrainer' is a node of neither pipeline; nodes: ")
    assert "PairsTrainer" in line
    assert not (tmp_path / "specs").exists()


def test_a_bad_config_key_stops_the_runner_with_one_line(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text('{"kubeflow": {"imag": "x"}}')
    with pytest.raises(SystemExit) as exited:
        runner.parse_args(["--config", str(path)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: config key 'imag' is not a field of KubeflowConfig (did you mean image?)"
    ]


def test_specs_parse_and_wire_the_tasks(compiled):
    specs, root = compiled
    for name, path in specs.items():
        with open(path) as f:
            job = json.load(f)
        spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
        tasks = spec.root.dag.tasks
        materialize, trainer = CYCLEGAN_TASKS if "cyclegan" in name else SPEAKER_TASKS
        assert set(tasks) == {materialize, trainer, *TASKS, *RESOLVERS}
        assert set(tasks["StatisticsGen"].dependent_tasks) == {materialize}
        assert set(tasks[trainer].dependent_tasks) == {materialize, "ExampleValidator"}
        # A preempted trainer pod is retried (and resumes from its checkpoints); nothing else is.
        retried = {task for task, value in tasks.items() if value.HasField("retry_policy")}
        assert retried == {trainer}
        assert tasks[trainer].retry_policy.max_retry_count == (
            config.KubeflowConfig.trainer_retries
        )
        blessings = tasks[MODEL_RESOLVER].inputs.artifacts["input"]
        assert blessings.task_output_artifact.producer_task == BLESSING_RESOLVER
        assert set(tasks["ModelGate"].dependent_tasks) == {trainer, MODEL_RESOLVER}
        assert set(tasks["Pusher"].dependent_tasks) == {trainer, "ModelGate"}
        baseline = tasks["ModelGate"].inputs.artifacts[keys.BASELINE_MODEL_KEY]
        assert baseline.task_output_artifact.producer_task == MODEL_RESOLVER
        destination = json.loads(
            tasks["Pusher"]
            .inputs.parameters["push_destination"]
            .runtime_value.constant_value.string_value
        )
        serving = "cyclegan" if "cyclegan" in name else "speaker"
        assert destination == {"filesystem": {"base_directory": str(root / "serving" / serving)}}
        queries = {}
        for label, executor in spec.deployment_spec["executors"].items():
            if "resolver" in executor:
                [query] = executor["resolver"]["outputArtifactQueries"].values()
                queries[label] = query["filter"]
                continue
            container = executor["container"]
            assert container["image"] == "tfx-dynamic-inputs:test"
            args = list(container["args"])
            # Every executor class is importable from the installed project.
            import_utils.import_class_by_path(args[args.index("--executor_class_path") + 1])
        # The queries read the custom properties the gate writes on its blessing.
        assert "metadata.blessed.number_value=1" in queries[f"{BLESSING_RESOLVER}_executor"]
        assert "metadata['current_model_id']" in queries[f"{MODEL_RESOLVER}_executor"]
        index_types = {
            definition.artifact_type.instance_schema.splitlines()[0]
            for key, definition in spec.components[materialize].output_definitions.artifacts.items()
            if key != keys.EXAMPLES_KEY
        }
        assert (
            index_types
            <= {
                "title: tfx_dynamic_inputs.OffsetIndex",
                "title: tfx_dynamic_inputs.PairIndex",
                "title: tfx_dynamic_inputs.ClassIndex",
            }
            and len(index_types) == 2
        )


def _output(outputs: dict, task: str, key: str) -> dict:
    [artifact] = outputs[task]["artifacts"][key]["artifacts"]
    return artifact


def test_tasks_ran_after_their_producers(compiled, local_runs):
    specs, _ = compiled
    for name, path in specs.items():
        outputs, _ = local_runs[name]
        order = list(outputs)
        spec = compiled_tasks.load_pipeline_job(path)["pipelineSpec"]
        for task_name, task in spec["root"]["dag"]["tasks"].items():
            for producer in task.get("dependentTasks", []):
                assert order.index(producer) < order.index(task_name)


def test_every_task_of_the_cyclegan_spec_runs_and_hands_on_its_outputs(compiled, local_runs):
    _, root = compiled
    outputs, run_root = local_runs["cyclegan-dynamic-pairs"]
    assert set(outputs) == {*CYCLEGAN_TASKS, *TASKS, *RESOLVERS}
    examples = _output(outputs, "MaterializePairs", keys.EXAMPLES_KEY)
    assert examples["uri"] == os.path.join(run_root, "MaterializePairs", keys.EXAMPLES_KEY)
    assert json.loads(examples["metadata"]["split_names"]) == ["x", "y"]
    assert tf.io.gfile.glob(
        os.path.join(examples["uri"], f"{layout.SPLIT_PREFIX}{layout.X_RECORD_SET}", "*.tfrecord")
    )
    offset_index = _output(outputs, "MaterializePairs", keys.OFFSET_INDEX_KEY)
    assert offset_index["metadata"]["num_records"] == {"x": 1797.0, "y": 1797.0}
    anomalies = _output(outputs, "ExampleValidator", standard_component_specs.ANOMALIES_KEY)
    assert anomalies["metadata"]["blessed"] == {"x": 1.0, "y": 1.0}
    model_run = _output(outputs, "PairsTrainer", keys.MODEL_RUN_KEY)
    with open(os.path.join(model_run["uri"], "metrics.json")) as f:
        metrics = json.load(f)
    assert model_run["metadata"]["cycle_loss"] == pytest.approx(metrics["cycle_loss"])
    assert metrics["invalid_pairs"] == 0
    model = _output(outputs, "PairsTrainer", keys.MODEL_KEY)
    assert tf.saved_model.load(os.path.join(model["uri"], "Format-Serving")).signatures
    # Refused by its threshold (0) with nothing to compare with; so not pushed.
    blessing = _output(outputs, "ModelGate", keys.BLESSING_KEY)
    assert blessing["metadata"]["blessed"] == 0
    assert blessing["metadata"]["blessing_message"] == (
        f"not blessed (val_cycle_loss {metrics['val_cycle_loss']:.4g}, no baseline: above the "
        "threshold 0)"
    )
    assert os.path.exists(os.path.join(blessing["uri"], "NOT_BLESSED"))
    pushed = _output(outputs, "Pusher", standard_component_specs.PUSHED_MODEL_KEY)
    assert pushed["metadata"]["pushed"] == 0
    assert not os.path.exists(root / "serving" / "cyclegan")


def test_every_task_of_the_speaker_spec_runs_and_hands_on_its_outputs(compiled, local_runs):
    _, root = compiled
    outputs, run_root = local_runs["speaker-class-balanced"]
    assert set(outputs) == {*SPEAKER_TASKS, *TASKS, *RESOLVERS}
    examples = _output(outputs, "MaterializeAudio", keys.EXAMPLES_KEY)
    assert json.loads(examples["metadata"]["split_names"]) == ["eval", "train"]
    class_index = _output(outputs, "MaterializeAudio", keys.CLASS_INDEX_KEY)
    assert class_index["metadata"]["num_classes"] == {"eval": 3.0, "train": 7.0}
    model_run = _output(outputs, "ClassBalancedTrainer", keys.MODEL_RUN_KEY)
    with open(os.path.join(model_run["uri"], "metrics.json")) as f:
        metrics = json.load(f)
    assert 0.0 <= metrics["eer"] <= 1.0
    assert model_run["metadata"]["eer"] == pytest.approx(metrics["eer"])
    # The resolvers found nothing (a first run): blessed without a threshold, and pushed.
    assert outputs[MODEL_RESOLVER] == {"artifacts": {keys.MODEL_KEY: {"artifacts": []}}}
    blessing = _output(outputs, "ModelGate", keys.BLESSING_KEY)
    model = _output(outputs, "ClassBalancedTrainer", keys.MODEL_KEY)
    assert blessing["metadata"]["blessed"] == 1
    assert blessing["metadata"]["current_model"] == model["uri"]
    assert blessing["metadata"]["blessing_message"] == (
        f"blessed (eer {metrics['eer']:.4g}, no baseline: the first blessed model; no threshold)"
    )
    pushed = _output(outputs, "Pusher", standard_component_specs.PUSHED_MODEL_KEY)
    assert pushed["metadata"]["pushed"] == 1
    destination = pushed["metadata"]["pushed_destination"]
    assert os.path.dirname(destination) == str(root / "serving" / "speaker")
    assert tf.saved_model.load(destination).signatures
    for task in outputs:
        written = os.path.exists(os.path.join(run_root, task, compiled_tasks.EXECUTOR_OUTPUT_FILE))
        assert written == (task not in RESOLVERS)


def test_the_kfp_client_loads_the_yaml_package_beside_each_spec(compiled):
    """What `kfp.Client().create_run_from_pipeline_package` reads: the pinned client refuses
    the `.json` name and, given the whole PipelineJob, fails on `displayName`; the `.yaml`
    holds the bare PipelineSpec (issue 23.5)."""
    from kfp.client import client as kfp_client

    specs, _ = compiled
    for name, path in specs.items():
        with pytest.raises(ValueError, match="should end with one of"):
            kfp_client._extract_pipeline_yaml(path)
        package = runner.kfp_package_path(path)
        loaded = kfp_client._extract_pipeline_yaml(package)
        with open(path) as f:
            job_spec = json.load(f)["pipelineSpec"]
        assert loaded.pipeline_spec.pipeline_info.name == job_spec["pipelineInfo"]["name"]
        assert sorted(loaded.pipeline_spec.root.dag.tasks) == sorted(
            job_spec["root"]["dag"]["tasks"]
        )
        assert name.replace("_", "-") in loaded.pipeline_spec.pipeline_info.name


@pytest.mark.parametrize("variant", ["mix", "augment"])
def test_a_speaker_mix_and_the_augmentation_compile_their_materializations_into_the_trainer(
    tmp_path, variant
):
    """The nodes a mix (`--mix`: one MaterializeAudio a further corpus) and the speaker
    augmentation (`--noise_dir`, `--rir_dir`: MaterializeNoise, MaterializeRirs) add compile
    into tasks the trainer task reads, in a package the KFP client loads."""
    from kfp.client import client as kfp_client

    from tfx_dynamic_inputs.pipeline import speaker_pipeline

    speakers = str(tmp_path / "speakers")
    _copy_speaker_subset(speakers)
    manifest = os.path.join(speakers, os.path.basename(config.SPEAKER_MANIFEST))
    if variant == "mix":
        mix_file = tmp_path / "mix.json"
        mix_file.write_text(
            json.dumps([{"audio_root": speakers, "manifest": manifest, "weight": 2.0}])
        )
        extra = {"mix": str(mix_file)}
        producers = {"MaterializeAudio_mix1": keys.MIXED_CLASS_INDEX_KEY}
    else:
        extra = {"noise_dir": speakers, "rir_dir": speakers, "speed_perturb": True}
        producers = {
            "MaterializeNoise": keys.NOISE_EXAMPLES_KEY,
            "MaterializeRirs": keys.RIR_EXAMPLES_KEY,
        }
    speaker = config.SpeakerConfig(
        manifest=manifest,
        audio_root=speakers,
        schema_file=os.path.join(config.SCHEMAS_DIR, config.AUDIO_SCHEMA),
        epoch_mode="classes",
        **extra,
    )
    kubeflow_config = config.KubeflowConfig(
        image="tfx-dynamic-inputs:test",
        output_dir=str(tmp_path / "specs"),
        pipeline_root="gs://unused-bucket/root",
    )
    path = runner.compile_pipeline(
        speaker_pipeline.create_pipeline(speaker, runner.run_config(kubeflow_config)),
        kubeflow_config.output_dir,
        kubeflow_config.image,
    )
    with open(path) as f:
        tasks = json.load(f)["pipelineSpec"]["root"]["dag"]["tasks"]
    trainer_inputs = tasks["ClassBalancedTrainer"]["inputs"]["artifacts"]
    for producer, key in producers.items():
        assert producer in tasks["ClassBalancedTrainer"]["dependentTasks"]
        assert trainer_inputs[key]["taskOutputArtifact"]["producerTask"] == producer
    loaded = kfp_client._extract_pipeline_yaml(runner.kfp_package_path(path))
    assert set(producers) <= set(loaded.pipeline_spec.root.dag.tasks)


def test_a_mix_of_two_further_corpora_stops_the_runner_with_one_line(tmp_path):
    speakers = str(tmp_path / "speakers")
    _copy_speaker_subset(speakers)
    manifest = os.path.join(speakers, os.path.basename(config.SPEAKER_MANIFEST))
    mix_file = tmp_path / "mix.json"
    corpus = {"audio_root": speakers, "manifest": manifest, "weight": 1.0}
    mix_file.write_text(json.dumps([corpus, corpus]))
    cyclegan, speaker = runner.pipeline_configs(
        str(tmp_path), config.SCHEMAS_DIR, speaker={"mix": str(mix_file), "epoch_mode": "classes"}
    )
    kubeflow_config = config.KubeflowConfig(output_dir=str(tmp_path / "specs"))
    with pytest.raises(cli.ConfigError, match="2 further corpora do not compile for Kubeflow"):
        runner.compile_all(kubeflow_config, cyclegan, speaker)
