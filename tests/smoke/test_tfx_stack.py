"""The TFX stack runs here: a Beam-backed component on LocalDagRunner with sqlite ML Metadata,
and KubeflowV2DagRunner compiles the same pipeline to a KFP v2 `PipelineSpec`."""

from __future__ import annotations

import glob
import json
import os

import pytest
import tensorflow as tf
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.orchestration.local.local_dag_runner import LocalDagRunner

from tests.smoke.record_writer import RecordWriter, RecordWriterExecutor

NUM_RECORDS = 37


def _pipeline(root: str, metadata_path: str | None = None) -> tfx_pipeline.Pipeline:
    return tfx_pipeline.Pipeline(
        pipeline_name="smoke",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[RecordWriter(num_records=NUM_RECORDS)],
        metadata_connection_config=(
            metadata.sqlite_metadata_connection_config(metadata_path) if metadata_path else None
        ),
        enable_cache=False,
        beam_pipeline_args=[],
    )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("smoke_local"))
    metadata_path = os.path.join(root, "metadata.sqlite")
    LocalDagRunner().run(_pipeline(root, metadata_path))
    return root, metadata_path


def test_local_dag_runner_writes_a_tfrecord_file(local_run):
    root, _ = local_run
    shards = glob.glob(
        os.path.join(root, "pipeline_root", "**", "Split-train", "*.tfrecord"), recursive=True
    )
    assert len(shards) == 1
    values = sorted(
        tf.train.Example.FromString(record.numpy()).features.feature["value"].int64_list.value[0]
        for record in tf.data.TFRecordDataset(shards)
    )
    assert values == list(range(NUM_RECORDS))


def test_local_run_is_recorded_in_sqlite_metadata(local_run):
    root, metadata_path = local_run
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = metadata_path
    store = metadata_store.MetadataStore(config)
    executions = store.get_executions()
    assert [e.last_known_state for e in executions] == [metadata_store_pb2.Execution.COMPLETE]
    examples = store.get_artifacts_by_type("Examples")
    assert len(examples) == 1
    assert examples[0].uri.startswith(os.path.join(root, "pipeline_root"))
    assert examples[0].properties["split_names"].string_value == '["train"]'


def test_kubeflow_v2_dag_runner_compiles_to_a_pipeline_spec(tmp_path):
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image="smoke:latest"),
        output_dir=str(tmp_path),
        output_filename="smoke.json",
    )
    runner.run(_pipeline(str(tmp_path)))
    with open(tmp_path / "smoke.json") as f:
        job = json.load(f)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    assert spec.pipeline_info.name == "smoke"
    assert list(spec.root.dag.tasks) == ["RecordWriter"]
    container = spec.deployment_spec["executors"]["RecordWriter_executor"]["container"]
    assert container["image"] == "smoke:latest"
    args = list(container["args"])
    executor_path = args[args.index("--executor_class_path") + 1]
    assert executor_path == f"{RecordWriterExecutor.__module__}.{RecordWriterExecutor.__name__}"
    assert list(container["command"])[-1].endswith("kubeflow_v2_run_executor")
