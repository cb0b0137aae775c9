"""The local Kubeflow harness: DAG order, ExecutorInput building, and a compiled Beam task run
through its real container command (`python -m ...kubeflow_v2_run_executor`) in a subprocess."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from tests.smoke.record_writer import RecordWriter
from tfx_dynamic_inputs.kubeflow import local_run

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
    order = local_run.task_order(
        _dag({"train": ["stats", "validate"], "validate": ["stats"], "stats": ["gen"], "gen": []})
    )
    assert order == ["gen", "stats", "validate", "train"]


def test_task_order_rejects_cycles_and_unknown_tasks():
    with pytest.raises(local_run.LocalRunError, match="cycle"):
        local_run.task_order(_dag({"a": ["b"], "b": ["a"]}))
    with pytest.raises(local_run.LocalRunError, match="unknown"):
        local_run.task_order(_dag({"a": ["ghost"]}))


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
    job = local_run.load_pipeline_job(_compile_smoke(str(tmp_path)))
    invocation = local_run.executor_input(job, "RecordWriter", "/root/RecordWriter", {})
    assert invocation["inputs"]["parameters"] == {"num_records": {"intValue": str(NUM_RECORDS)}}
    [output] = invocation["outputs"]["artifacts"]["examples"]["artifacts"]
    assert output["uri"] == "/root/RecordWriter/examples"
    assert output["type"]["instanceSchema"].startswith("title: tfx.Examples")
    assert invocation["outputs"]["outputFile"] == "/root/RecordWriter/executor_output.json"
    command = local_run.container_command(job, "RecordWriter")
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
        local_run.load_pipeline_job(str(path))
