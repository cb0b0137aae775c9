"""The local Kubeflow harness: DAG order, ExecutorInput building, and a compiled Beam task run
through its real container command (`python -m ...kubeflow_v2_run_executor`) in a subprocess."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest
import tensorflow as tf
from kfp.client import client as kfp_client
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from tests.smoke.record_writer import RecordWriter
from tfx_dynamic_inputs.kubeflow import compiled_tasks, host_paths, image_tasks, local_run, runner
from tfx_dynamic_inputs.pipeline import config

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_RECORDS = 23


def _compile_smoke(directory: str) -> str:
    pipeline = tfx_pipeline.Pipeline(
        pipeline_name="smoke",
        pipeline_root=os.path.join(directory, "compiled_root"),
        components=[RecordWriter(num_records=NUM_RECORDS)],
        beam_pipeline_args=[],
    )
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image="smoke:latest"),
        output_dir=directory,
        output_filename="smoke.json",
    ).run(pipeline)
    return os.path.join(directory, "smoke.json")


def _dag(edges: dict[str, list[str]]) -> dict:
    return {
        "root": {
            "dag": {
                "tasks": {
                    name: {"dependentTasks": upstream, "componentRef": {"name": name}}
                    for name, upstream in edges.items()
                }
            }
        }
    }


def test_task_order_puts_producers_first():
    order = compiled_tasks.task_order(
        _dag({"train": ["stats", "validate"], "validate": ["stats"], "stats": ["gen"], "gen": []})
    )
    assert order == ["gen", "stats", "validate", "train"]


def test_task_order_rejects_cycles_and_unknown_tasks():
    with pytest.raises(local_run.LocalRunError, match="cycle"):
        compiled_tasks.task_order(_dag({"a": ["b"], "b": ["a"]}))
    with pytest.raises(local_run.LocalRunError, match="unknown"):
        compiled_tasks.task_order(_dag({"a": ["ghost"]}))


def test_compiled_task_runs_through_its_container_command(tmp_path):
    job_path = _compile_smoke(str(tmp_path))
    root = str(tmp_path / "local_root")
    outputs = local_run.run_pipeline_job(job_path, root, cwd=REPO_ROOT)

    [artifact] = outputs["RecordWriter"]["artifacts"]["examples"]["artifacts"]
    assert artifact["uri"] == os.path.join(root, "local-run", "RecordWriter", "examples")
    assert json.loads(artifact["metadata"]["split_names"]) == ["train"]
    shards = tf.io.gfile.glob(os.path.join(artifact["uri"], "Split-train", "*.tfrecord"))
    values = sorted(
        tf.train.Example.FromString(r.numpy()).features.feature["value"].int64_list.value[0]
        for r in tf.data.TFRecordDataset(shards)
    )
    assert values == list(range(NUM_RECORDS))
    # The harness logged the real process's output: the entrypoint ran the Beam executor.
    with open(os.path.join(root, "local-run", "RecordWriter", local_run.LOG_FILE)) as f:
        assert "RecordWriterExecutor" in f.read()


def test_executor_input_follows_the_spec(tmp_path):
    job = compiled_tasks.load_pipeline_job(_compile_smoke(str(tmp_path)))
    invocation = compiled_tasks.executor_input(job, "RecordWriter", "/root/RecordWriter", {})
    assert invocation["inputs"]["parameters"] == {"num_records": {"intValue": str(NUM_RECORDS)}}
    [output] = invocation["outputs"]["artifacts"]["examples"]["artifacts"]
    assert output["uri"] == "/root/RecordWriter/examples"
    assert output["type"]["instanceSchema"].startswith("title: tfx.Examples")
    assert invocation["outputs"]["outputFile"] == "/root/RecordWriter/executor_output.json"
    command = compiled_tasks.container_command(job, "RecordWriter")
    assert command[:3] == ["python", "-m", local_run.ENTRYPOINT_MODULE]
    assert local_run.EXECUTOR_INPUT_PLACEHOLDER in command


def test_failing_task_names_the_task(tmp_path):
    job_path = _compile_smoke(str(tmp_path))
    with open(job_path) as f:
        job = json.load(f)
    container = job["pipelineSpec"]["deploymentSpec"]["executors"]["RecordWriter_executor"]
    args = container["container"]["args"]
    args[args.index("--executor_class_path") + 1] = "tests.smoke.record_writer.NoSuchExecutor"
    with open(job_path, "w") as f:
        json.dump(job, f)
    with pytest.raises(local_run.LocalRunError, match="'RecordWriter' failed.*NoSuchExecutor"):
        local_run.run_pipeline_job(job_path, str(tmp_path / "root"), in_process=True)


def test_a_job_without_pipeline_spec_is_rejected(tmp_path):
    path = tmp_path / "not_a_job.json"
    path.write_text(json.dumps({"displayName": "x"}))
    with pytest.raises(local_run.LocalRunError, match="pipelineSpec"):
        compiled_tasks.load_pipeline_job(str(path))


# What `make kubeflow` writes: the runner's defaults (the image's paths, a gs:// pipeline root).
MAKE_KUBEFLOW_PIPELINES = (config.CycleGanConfig.pipeline_name, config.SpeakerConfig.pipeline_name)


@pytest.fixture(scope="module")
def make_kubeflow(tmp_path_factory):
    """The specs `make kubeflow` writes (in a temporary folder) and the lines it printed."""
    output_dir = tmp_path_factory.mktemp("specs")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runner.main(["--output-dir", str(output_dir)])
    paths = {name: str(output_dir / f"{name}.json") for name in MAKE_KUBEFLOW_PIPELINES}
    return paths, printed.getvalue().splitlines()


def _run_main(argv: list[str]) -> tuple[int | str | None, list[str], list[str]]:
    """`local_run.main(argv)` in this process: its exit status, stdout and stderr lines."""
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            local_run.main(argv)
        except SystemExit as exited:
            status = exited.code
    return status, out.getvalue().splitlines(), err.getvalue().splitlines()


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_make_kubeflow_names_the_yaml_to_upload_which_the_kfp_client_loads(make_kubeflow):
    paths, printed = make_kubeflow
    assert printed == [
        line
        for path in paths.values()
        for line in (
            f"wrote {runner.kfp_package_path(path)}: {runner.UPLOAD_NOTE}",
            f"wrote {path}: {runner.JOB_NOTE}",
        )
    ]
    for name, path in paths.items():
        upload = printed[2 * list(paths).index(name)].split()[1].rstrip(":")
        # kfp 2.5's `upload_pipeline` and `create_run_from_pipeline_package` read the package so;
        # they refuse a `.json` name.
        assert kfp_client._extract_pipeline_yaml(upload).pipeline_spec.pipeline_info.name == name
        with pytest.raises(ValueError, match="should end with one of"):
            kfp_client._extract_pipeline_yaml(path)
    # The docs show the same lines.
    with open(os.path.join(REPO_ROOT, "docs", "kubeflow.md")) as f:
        page = f.read()
    name = config.CycleGanConfig.pipeline_name
    assert f"/{name}.yaml: {runner.UPLOAD_NOTE}\n" in page
    assert f"/{name}.json: {runner.JOB_NOTE}\n" in page


def test_the_image_paths_and_the_pipeline_root_of_what_make_kubeflow_writes_are_this_hosts(
    make_kubeflow, tmp_path
):
    root = str(tmp_path / "root")
    for name, path in make_kubeflow[0].items():
        job, uses = local_run.mapped_job(path, root, in_container=False)
        parameters = {
            task: task_spec.get("inputs", {}).get("parameters", {})
            for task, task_spec in job["pipelineSpec"]["root"]["dag"]["tasks"].items()
        }
        left = [s for s in _strings(parameters) if "/app/" in s or "gs://" in s]
        assert left == [], name
        kinds = {use.substitution.kind for use in uses}
        assert {host_paths.INPUT, host_paths.PIPELINE_ROOT} <= kinds
        for use in uses:
            if use.substitution.kind == host_paths.PIPELINE_ROOT:
                assert use.host_path == os.path.join(root, "serving", name)
            else:
                assert os.path.exists(use.host_path), use
        # The same file in the image: only the pipeline root is replaced.
        in_image, image_uses = local_run.mapped_job(path, root, in_container=True)
        assert [use.substitution.kind for use in image_uses] == [host_paths.PIPELINE_ROOT]
        assert any(s.startswith("/app/") for s in _strings(in_image["pipelineSpec"]))
    # The CycleGAN spec's digits exist in the image only: the run wrote the same ones.
    digits = os.path.join(root, host_paths.GENERATED_DIR, host_paths.DIGITS_DIR)
    with open(os.path.join(digits, "domains.json")) as f:
        written = json.load(f)["parameters"]
    assert written["image_size"] == config.DIGITS_IMAGE_SIZE


@pytest.mark.parametrize(
    ("spec_path", "expected"),
    [
        (
            "/app/sample_data/speakers/absent.csv",
            "task 'MaterializeAudio' parameter 'manifest': '{data}/speakers/absent.csv' does not "
            "exist (the spec's '/app/sample_data/speakers/absent.csv', which the task image "
            "holds)",
        ),
        (
            "/app/components/absent.csv",
            "task 'MaterializeAudio' parameter 'manifest': '/app/components/absent.csv' is in the "
            "task image only (this host stands in for its /app/schemas and /app/sample_data): "
            "run the spec in the image with --container-engine podman",
        ),
    ],
)
def test_an_input_missing_here_is_one_line_and_status_2_before_any_task_runs(
    make_kubeflow, tmp_path, spec_path, expected
):
    with open(make_kubeflow[0][config.SpeakerConfig.pipeline_name]) as f:
        job = json.load(f)
    parameters = job["pipelineSpec"]["root"]["dag"]["tasks"]["MaterializeAudio"]["inputs"]
    parameters["parameters"]["manifest"]["runtimeValue"]["constantValue"]["stringValue"] = spec_path
    path = tmp_path / "speaker.json"
    path.write_text(json.dumps(job))
    root = tmp_path / "root"
    status, out, err = _run_main([str(path), str(root)])
    assert status == 2
    assert err == [f"error: {expected.format(data=host_paths.HOST_DATA_DIR)}"]
    assert out == []
    assert not (root / "local-run").exists()


def test_a_spec_that_is_not_a_pipeline_job_is_one_line_and_status_2(make_kubeflow, tmp_path):
    job_path = make_kubeflow[0][config.SpeakerConfig.pipeline_name]
    package = runner.kfp_package_path(job_path)
    cases = {
        package: f"{package}: not JSON (the KFP package; local_run runs the PipelineJob JSON "
        f"beside it: {job_path})",
        str(tmp_path / "absent.json"): f"{tmp_path / 'absent.json'}: No such file or directory",
    }
    for spec, expected in cases.items():
        assert _run_main([spec, str(tmp_path / "root")])[::2] == (2, [f"error: {expected}"])


def test_a_failed_task_is_one_line_naming_it_its_error_and_its_log(tmp_path):
    job_path = _compile_smoke(str(tmp_path))
    with open(job_path) as f:
        job = json.load(f)
    container = job["pipelineSpec"]["deploymentSpec"]["executors"]["RecordWriter_executor"]
    args = container["container"]["args"]
    args[args.index("--executor_class_path") + 1] = "tests.smoke.record_writer.NoSuchExecutor"
    with open(job_path, "w") as f:
        json.dump(job, f)
    log = tmp_path / "root" / "local-run" / "RecordWriter" / local_run.LOG_FILE
    status, _, err = _run_main([job_path, str(tmp_path / "root")])
    assert status == 1
    assert len(err) == 1
    assert err[0].startswith("error: task 'RecordWriter' failed: container command exited with 1: ")
    assert "NoSuchExecutor" in err[0] and err[0].endswith(f" (log: {log})")
    assert local_run.last_line(str(log)) in err[0]


@pytest.mark.slow
def test_local_run_runs_both_specs_as_make_kubeflow_writes_them(tmp_path):
    """The documented command (in one process) on both files as `make kubeflow` writes them
    but for one short epoch each: every container task runs, the CycleGAN spec on digits the run
    wrote, and the speaker model is pushed under the run's root (the spec: gs://YOUR_BUCKET)."""
    settings = tmp_path / "short.json"
    # No threshold: a first run's speaker model is blessed and pushed.
    speaker = {**image_tasks.TRAINING["speaker"], "blessing_threshold": None}
    settings.write_text(json.dumps({**image_tasks.TRAINING, "speaker": speaker}))
    with contextlib.redirect_stdout(io.StringIO()):
        runner.main(["--config", str(settings), "--output-dir", str(tmp_path / "specs")])
    for name in MAKE_KUBEFLOW_PIPELINES:
        path = str(tmp_path / "specs" / f"{name}.json")
        root = tmp_path / name
        status, out, err = _run_main([path, str(root), "--in-process"])
        assert status == 0, err[-5:]
        job = compiled_tasks.load_pipeline_job(path)
        tasks = compiled_tasks.task_order(job["pipelineSpec"])
        assert [line.split(":")[0] for line in out[-len(tasks) :]] == tasks
        for task in tasks:
            if not compiled_tasks.is_resolver(job, task):
                output = root / "local-run" / task / compiled_tasks.EXECUTOR_OUTPUT_FILE
                assert json.loads(output.read_text())["artifacts"], task
        if name == config.SpeakerConfig.pipeline_name:
            [pushed] = json.loads(
                (root / "local-run" / "Pusher" / compiled_tasks.EXECUTOR_OUTPUT_FILE).read_text()
            )["artifacts"]["pushed_model"]["artifacts"]
            destination = pushed["metadata"]["pushed_destination"]
            assert destination.startswith(str(root / "serving" / name) + "/"), destination
            assert os.path.isdir(destination)
