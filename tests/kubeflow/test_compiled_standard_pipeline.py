"""The standard-TFX pipeline compiled to KFP v2 as `tfx_dynamic_inputs.kubeflow.runner` compiles
(its `run_config` and `compile_pipeline`), and every compiled task run through its container
command's entrypoint, in order, in this process, against a local pipeline root: ImportExampleGen ->
StatisticsGen -> SchemaGen -> Transform -> IndexExamples -> ClassBalancedTrainer -> ModelGate ->
Pusher on `standard_data`'s examples.

Not run: ImportExampleGen's pre-cache-check driver (span and version resolution, the input
fingerprint), which `tfx_dynamic_inputs.kubeflow.local_run` does not play; the spec test checks it
is compiled.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any, NamedTuple

import pytest
import tensorflow as tf
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.types import standard_component_specs
from tfx.utils import import_utils

from tests.pipeline import standard_data
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.kubeflow import local_run, runner
from tfx_dynamic_inputs.pipeline import common, config, example_gen, standard_pipeline
from tfx_dynamic_inputs.trainer_component.input_options import TRANSFORMED_SPEC

pytestmark = pytest.mark.slow

IMAGE = "tfx-dynamic-inputs:test"
BLESSING_RESOLVER = f"{common.BASELINE_RESOLVER_ID}-model-blessing-resolver"
MODEL_RESOLVER = f"{common.BASELINE_RESOLVER_ID}-model-resolver"
# standard_data's TFRecord input (the default input_format): ImportExampleGen.
EXAMPLE_GEN = example_gen.node_id(example_gen.TFRECORD)
# Each container task's upstream tasks.
DEPENDENCIES = {
    EXAMPLE_GEN: set(),
    "StatisticsGen": {EXAMPLE_GEN},
    "SchemaGen": {"StatisticsGen"},
    "Transform": {EXAMPLE_GEN, "SchemaGen"},
    "IndexExamples": {"Transform"},
    "ClassBalancedTrainer": {"IndexExamples", "SchemaGen", "Transform"},
    "ModelGate": {"ClassBalancedTrainer", MODEL_RESOLVER},
    "Pusher": {"ClassBalancedTrainer", "ModelGate"},
}
EXECUTORS = {
    "IndexExamples": "tfx_dynamic_inputs.index_component.executor.Executor",
    "ClassBalancedTrainer": "tfx_dynamic_inputs.trainer_component.executor.ClassBalancedExecutor",
    "ModelGate": "tfx_dynamic_inputs.evaluator_component.executor.Executor",
    "Transform": "tfx.components.transform.executor.Executor",
    "Pusher": "tfx.components.pusher.executor.Executor",
}


class Compiled(NamedTuple):
    path: str  # the compiled pipeline job
    root: str  # the test's folder: input examples, specs, local pipeline root, serving folder
    config: standard_pipeline.StandardConfig
    labels: list[int | None]  # of each input example (None: none)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Compiled:
    root = tmp_path_factory.mktemp("kubeflow_standard")
    input_base = str(root / "input")
    labels = standard_data.write_examples(input_base)
    # The pod's push destination, here a local folder.
    pipeline_config = standard_data.config(input_base, serving_dir=str(root / "serving"))
    kubeflow_config = config.KubeflowConfig(
        image=IMAGE, output_dir=str(root / "specs"), pipeline_root="gs://unused-bucket/root"
    )
    path = runner.compile_pipeline(
        standard_pipeline.create_pipeline(pipeline_config, runner.run_config(kubeflow_config)),
        kubeflow_config.output_dir,
        kubeflow_config.image,
    )
    return Compiled(path, str(root), pipeline_config, labels)


@pytest.fixture(scope="module")
def outputs(compiled) -> dict[str, dict[str, Any]]:
    return local_run.run_pipeline_job(
        compiled.path, os.path.join(compiled.root, "local_root"), in_process=True
    )


def _constant(task: pipeline_spec_pb2.PipelineTaskSpec, key: str) -> Any:
    value = task.inputs.parameters[key].runtime_value.constant_value
    return getattr(value, value.WhichOneof("value"))


def _sources(task: pipeline_spec_pb2.PipelineTaskSpec) -> dict[str, tuple[str, str]]:
    """Input key -> (producer task, its output key)."""
    return {
        key: (
            spec.task_output_artifact.producer_task,
            spec.task_output_artifact.output_artifact_key,
        )
        for key, spec in task.inputs.artifacts.items()
    }


def test_spec_wires_the_standard_tasks_and_their_parameters(compiled):
    with open(compiled.path) as f:
        job = json.load(f)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    tasks = spec.root.dag.tasks
    assert set(tasks) == {*DEPENDENCIES, BLESSING_RESOLVER, MODEL_RESOLVER}
    assert {name: set(tasks[name].dependent_tasks) for name in DEPENDENCIES} == DEPENDENCIES

    pipeline_config = compiled.config
    transform = tasks["Transform"]
    assert _constant(transform, "preprocessing_fn") == pipeline_config.preprocessing_fn
    index = tasks["IndexExamples"]
    assert _sources(index) == {keys.EXAMPLES_KEY: ("Transform", "transformed_examples")}
    assert {key: _constant(index, key) for key in index.inputs.parameters} == {
        keys.LABEL_FEATURE_KEY: pipeline_config.label_feature,
        keys.NUM_SHARDS_KEY: pipeline_config.num_shards,
    }
    trainer = tasks["ClassBalancedTrainer"]
    assert _sources(trainer) == {
        keys.EXAMPLES_KEY: ("IndexExamples", keys.INDEXED_EXAMPLES_KEY),
        keys.OFFSET_INDEX_KEY: ("IndexExamples", keys.OFFSET_INDEX_KEY),
        keys.CLASS_INDEX_KEY: ("IndexExamples", keys.CLASS_INDEX_KEY),
        keys.TRANSFORM_GRAPH_KEY: ("Transform", keys.TRANSFORM_GRAPH_KEY),
        keys.SCHEMA_KEY: ("SchemaGen", keys.SCHEMA_KEY),
    }
    # The class-balanced trainer (its executor: EXECUTORS), its batch geometry as constants.
    assert _constant(trainer, keys.N_CLASSES_PER_BATCH_KEY) == pipeline_config.n_classes_per_batch
    assert _constant(trainer, keys.N_SAMPLES_PER_CLASS_KEY) == pipeline_config.n_samples_per_class
    assert json.loads(_constant(trainer, keys.INPUT_OPTIONS_KEY)) == {
        "feature_spec": TRANSFORMED_SPEC,
        "epoch_mode": pipeline_config.epoch_mode,
    }
    gate = tasks["ModelGate"]
    assert _sources(gate) == {
        keys.MODEL_KEY: ("ClassBalancedTrainer", keys.MODEL_KEY),
        keys.BASELINE_MODEL_KEY: (MODEL_RESOLVER, keys.MODEL_KEY),
    }
    assert {key: _constant(gate, key) for key in gate.inputs.parameters} == {
        keys.METRIC_KEY: standard_data.BLESSING_METRIC,
        keys.DIRECTION_KEY: keys.HIGHER_IS_BETTER,
        keys.THRESHOLD_KEY: standard_data.BLESSING_THRESHOLD,
        keys.TOLERANCE_KEY: 0.0,
    }
    destination = json.loads(
        _constant(tasks["Pusher"], standard_component_specs.PUSH_DESTINATION_KEY)
    )
    assert destination == {"filesystem": {"base_directory": pipeline_config.serving_dir}}

    executors = spec.deployment_spec["executors"]
    classes = {}
    for name in DEPENDENCIES:
        container = executors[spec.components[tasks[name].component_ref.name].executor_label][
            "container"
        ]
        assert container["image"] == IMAGE
        args = list(container["args"])
        classes[name] = args[args.index("--executor_class_path") + 1]
        # Every executor class is importable from the installed project.
        import_utils.import_class_by_path(classes[name])
        if name == EXAMPLE_GEN:
            [_, _, driver] = container["lifecycle"]["preCacheCheck"]["command"]
            importlib.import_module(driver)
    assert EXECUTORS.items() <= classes.items()


@pytest.mark.parametrize(
    ("input_format", "executor"),
    [
        (example_gen.CSV, "tfx.components.example_gen.csv_example_gen.executor.Executor"),
        (example_gen.PARQUET, "tfx_dynamic_inputs.pipeline.example_gen.ParquetExecutor"),
    ],
)
def test_the_other_input_formats_compile_with_their_example_gen(tmp_path, input_format, executor):
    pipeline_config = standard_data.config(str(tmp_path / "input"), input_format=input_format)
    kubeflow_config = config.KubeflowConfig(
        image=IMAGE, output_dir=str(tmp_path / "specs"), pipeline_root="gs://unused-bucket/root"
    )
    path = runner.compile_pipeline(
        standard_pipeline.create_pipeline(pipeline_config, runner.run_config(kubeflow_config)),
        kubeflow_config.output_dir,
        kubeflow_config.image,
    )
    with open(path) as f:
        job = json.load(f)
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    name = example_gen.node_id(input_format)
    tasks = spec.root.dag.tasks
    assert set(tasks["StatisticsGen"].dependent_tasks) == {name}
    assert set(tasks["Transform"].dependent_tasks) == {name, "SchemaGen"}
    container = spec.deployment_spec["executors"][
        spec.components[tasks[name].component_ref.name].executor_label
    ]["container"]
    args = list(container["args"])
    assert args[args.index("--executor_class_path") + 1] == executor
    import_utils.import_class_by_path(executor)
    [_, _, driver] = container["lifecycle"]["preCacheCheck"]["command"]
    importlib.import_module(driver)


def _output(outputs: dict, task: str, key: str) -> dict:
    [artifact] = outputs[task]["artifacts"][key]["artifacts"]
    return artifact


def test_every_standard_task_runs_and_hands_on_its_outputs(compiled, outputs):
    assert set(outputs) == {*DEPENDENCIES, BLESSING_RESOLVER, MODEL_RESOLVER}
    examples = _output(outputs, EXAMPLE_GEN, standard_component_specs.EXAMPLES_KEY)
    assert json.loads(examples["metadata"]["split_names"]) == ["train", "eval"]
    transformed = _output(outputs, "Transform", standard_component_specs.TRANSFORMED_EXAMPLES_KEY)
    assert tf.io.gfile.glob(os.path.join(transformed["uri"], "Split-train", "*.gz"))
    unlabelled = compiled.labels.count(None)
    offset_index = _output(outputs, "IndexExamples", keys.OFFSET_INDEX_KEY)
    assert offset_index["metadata"]["num_rejects"] == unlabelled
    assert offset_index["metadata"]["rejects_by_reason"] == {"missing_label": unlabelled}
    num_records = offset_index["metadata"]["num_records"]
    assert sum(num_records.values()) == standard_data.NUM_EXAMPLES - unlabelled
    class_index = _output(outputs, "IndexExamples", keys.CLASS_INDEX_KEY)
    assert class_index["metadata"]["num_classes"] == dict.fromkeys(
        num_records, standard_data.NUM_CLASSES
    )
    model = _output(outputs, "ClassBalancedTrainer", keys.MODEL_KEY)
    metrics = model["metadata"]
    assert (
        metrics["min_classes_per_batch"]
        == metrics["max_classes_per_batch"]
        == standard_data.N_CLASSES_PER_BATCH
    )
    assert metrics["schema_file_found"] == 1.0
    # The resolvers found nothing (a first run): the threshold alone decides.
    accuracy = metrics[standard_data.BLESSING_METRIC]
    blessing = _output(outputs, "ModelGate", keys.BLESSING_KEY)
    assert blessing["metadata"]["blessed"] == 1
    assert blessing["metadata"]["current_model"] == model["uri"]
    assert blessing["metadata"]["blessing_message"] == (
        f"blessed (eval_accuracy {accuracy:.4g}, no baseline: the first blessed model; within "
        f"the threshold {standard_data.BLESSING_THRESHOLD})"
    )
    pushed = _output(outputs, "Pusher", standard_component_specs.PUSHED_MODEL_KEY)
    assert pushed["metadata"]["pushed"] == 1
    destination = pushed["metadata"]["pushed_destination"]
    assert os.path.dirname(destination) == compiled.config.serving_dir
    assert "serving_default" in tf.saved_model.load(destination).signatures
