"""The tasks of a compiled KFP v2 PipelineJob as the Kubeflow launcher reads them: the job file,
the root DAG's order, each task's executor (container or resolver), its container command and
image, and the `ExecutorInput` the launcher passes it (`tfx_dynamic_inputs.kubeflow.local_run`
runs the tasks). Nothing here imports TFX.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import Any

EXECUTOR_OUTPUT_FILE = "executor_output.json"


class LocalRunError(RuntimeError):
    """A compiled task could not be built or its container command failed; the message is one
    line.

    Args:
      message: what failed.
      log_path: the failed task's log (subprocess and container runs), else None.
    """

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message)
        self.log_path = log_path


class SpecError(LocalRunError):
    """The spec, or an input it names, is not usable here: no task ran."""


def load_pipeline_job(path: str) -> dict[str, Any]:
    """Reads a `KubeflowV2DagRunner` output file and checks it parses as a KFP `PipelineSpec`.

    Args:
      path: the compiled pipeline job (JSON).

    Returns:
      The job as a dict, with its `pipelineSpec`.

    Raises:
      SpecError: it cannot be read, is not JSON (the KFP package `.yaml` is refused, naming
        the `.json` beside it), has no `pipelineSpec` or that is not a KFP `PipelineSpec`.
    """
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    try:
        with open(path, "rb") as f:
            job = json.load(f)
    except OSError as error:
        raise SpecError(f"{path}: {error.strerror or error}") from None
    except ValueError:
        hint = ""
        if path.endswith((".yaml", ".yml")):
            hint = " (the KFP package; local_run runs the PipelineJob JSON beside it: "
            hint += f"{os.path.splitext(path)[0]}.json)"
        raise SpecError(f"{path}: not JSON{hint}") from None
    if not isinstance(job, dict) or "pipelineSpec" not in job:
        raise SpecError(f"{path}: not a compiled pipeline job (no 'pipelineSpec')")
    try:
        json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    except json_format.ParseError as error:
        message = " ".join(str(error).split())
        raise SpecError(f"{path}: not a KFP PipelineSpec: {message}") from None
    return job


def task_order(pipeline_spec: Mapping[str, Any]) -> list[str]:
    """Task names of the root DAG in dependency order (ties broken by name, so deterministic).

    Args:
      pipeline_spec: the job's `pipelineSpec`.

    Returns:
      The task names, each after the tasks it depends on.

    Raises:
      LocalRunError: when a task depends on an unknown task, or the tasks form a cycle.
    """
    tasks = pipeline_spec["root"]["dag"]["tasks"]
    upstream = {name: set(_upstream_tasks(task)) for name, task in tasks.items()}
    for name, producers in upstream.items():
        unknown = producers - tasks.keys()
        if unknown:
            raise LocalRunError(f"task {name!r} depends on unknown tasks {sorted(unknown)}")
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(tasks):
        ready = sorted(n for n in tasks if n not in done and upstream[n] <= done)
        if not ready:
            raise LocalRunError(f"cycle among tasks {sorted(tasks.keys() - done)}")
        order.extend(ready)
        done.update(ready)
    return order


def _upstream_tasks(task: Mapping[str, Any]) -> list[str]:
    producers = list(task.get("dependentTasks", []))
    for spec in task.get("inputs", {}).get("artifacts", {}).values():
        if "taskOutputArtifact" in spec:
            producers.append(spec["taskOutputArtifact"]["producerTask"])
    return producers


def executor_input(
    job: Mapping[str, Any],
    task_name: str,
    task_root: str,
    upstream_outputs: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The `ExecutorInput` JSON the Kubeflow launcher would pass to `task_name`.

    `upstream_outputs[task]` is that task's `ExecutorOutput` (as JSON); output artifacts go to
    `<task_root>/<output key>`, the entrypoint writes `<task_root>/executor_output.json`.

    Args:
      job: the compiled pipeline job.
      task_name: the task to run.
      task_root: its folder for outputs.
      upstream_outputs: task name -> `ExecutorOutput` JSON of every task run before.

    Returns:
      The `ExecutorInput` as a JSON-ready dict.

    Raises:
      LocalRunError: for an input source or parameter this runner does not support, a
        parameter without a value, or an upstream task (not a resolver) that produced nothing.
    """
    spec = job["pipelineSpec"]
    task = spec["root"]["dag"]["tasks"][task_name]
    component = spec["components"][task["componentRef"]["name"]]
    task_inputs = task.get("inputs", {})

    parameters: dict[str, Any] = {}
    parameter_values: dict[str, Any] = {}
    for key, source in task_inputs.get("parameters", {}).items():
        value = _parameter_value(job, task_name, key, source)
        if "constantValue" in value:
            parameters[key] = value["constantValue"]
        else:
            parameter_values[key] = value["constant"]

    artifacts: dict[str, Any] = {}
    for key, source in task_inputs.get("artifacts", {}).items():
        if "taskOutputArtifact" not in source:
            raise LocalRunError(f"task {task_name!r} input {key!r}: unsupported source {source}")
        producer = source["taskOutputArtifact"]["producerTask"]
        output_key = source["taskOutputArtifact"]["outputArtifactKey"]
        produced = upstream_outputs[producer].get("artifacts", {}).get(output_key)
        if not produced or not produced.get("artifacts"):
            if is_resolver(job, producer):
                artifacts[key] = {"artifacts": []}
                continue
            raise LocalRunError(
                f"task {task_name!r} input {key!r}: {producer!r} produced no {output_key!r}"
            )
        producer_component = spec["components"][
            spec["root"]["dag"]["tasks"][producer]["componentRef"]["name"]
        ]
        artifact_type = producer_component["outputDefinitions"]["artifacts"][output_key][
            "artifactType"
        ]
        artifacts[key] = {
            "artifacts": [
                {**copy.deepcopy(a), "type": artifact_type} for a in produced["artifacts"]
            ]
        }

    outputs: dict[str, Any] = {}
    for key, definition in component.get("outputDefinitions", {}).get("artifacts", {}).items():
        outputs[key] = {
            "artifacts": [
                {
                    "name": f"{task_name}/{key}",
                    "type": definition["artifactType"],
                    "uri": os.path.join(task_root, key),
                }
            ]
        }

    result: dict[str, Any] = {
        "inputs": {"artifacts": artifacts},
        "outputs": {
            "artifacts": outputs,
            "outputFile": os.path.join(task_root, EXECUTOR_OUTPUT_FILE),
        },
    }
    if parameters:
        result["inputs"]["parameters"] = parameters
    if parameter_values:
        result["inputs"]["parameterValues"] = parameter_values
    return result


def _parameter_value(
    job: Mapping[str, Any], task_name: str, key: str, source: Mapping[str, Any]
) -> dict[str, Any]:
    """`{"constantValue": Value}` (schema 2.0) or `{"constant": json}` (schema 2.1)."""
    if "runtimeValue" in source:
        return dict(source["runtimeValue"])
    if "componentInputParameter" in source:
        name = source["componentInputParameter"]
        runtime = job.get("runtimeConfig", {})
        if name in runtime.get("parameters", {}):
            return {"constantValue": runtime["parameters"][name]}
        if name in runtime.get("parameterValues", {}):
            return {"constant": runtime["parameterValues"][name]}
        raise LocalRunError(f"task {task_name!r} parameter {key!r}: no value for {name!r}")
    raise LocalRunError(f"task {task_name!r} parameter {key!r}: unsupported source {source}")


def _component(job: Mapping[str, Any], task_name: str) -> Mapping[str, Any]:
    spec = job["pipelineSpec"]
    return spec["components"][spec["root"]["dag"]["tasks"][task_name]["componentRef"]["name"]]


def _executor(job: Mapping[str, Any], task_name: str) -> Mapping[str, Any]:
    label = _component(job, task_name)["executorLabel"]
    return job["pipelineSpec"]["deploymentSpec"]["executors"][label]


def is_resolver(job: Mapping[str, Any], task_name: str) -> bool:
    """Whether `task_name` is an ML Metadata query (a resolver), not a container.

    Args:
      job: the compiled pipeline job.
      task_name: a task of its root DAG.

    Returns:
      True for a resolver task.
    """
    return "resolver" in _executor(job, task_name)


def resolved_nothing(job: Mapping[str, Any], task_name: str) -> dict[str, Any]:
    """The output of resolver task `task_name` that found nothing: each of its output keys with
    an empty artifact list.

    Args:
      job: the compiled pipeline job.
      task_name: a resolver task.

    Returns:
      `{"artifacts": {key: {"artifacts": []}, ...}}`.
    """
    keys = _component(job, task_name).get("outputDefinitions", {}).get("artifacts", {})
    return {"artifacts": {key: {"artifacts": []} for key in keys}}


def container_command(job: Mapping[str, Any], task_name: str) -> list[str]:
    """The task's container `command + args`, as compiled (still holding the placeholder).

    Args:
      job: the compiled pipeline job.
      task_name: a container task.

    Returns:
      The argv, e.g. `["python", "-m", ENTRYPOINT_MODULE, ...]`.

    Raises:
      LocalRunError: when the task's executor is not a container.
    """
    executor = _executor(job, task_name)
    if "container" not in executor:
        raise LocalRunError(f"task {task_name!r}: only container executors run locally")
    container = executor["container"]
    return [*container.get("command", []), *container.get("args", [])]


def container_image(job: Mapping[str, Any], task_name: str) -> str:
    """The image the task's container runs in, as compiled.

    Args:
      job: the compiled pipeline job.
      task_name: a container task.

    Returns:
      The image reference.

    Raises:
      LocalRunError: when the task's executor is not a container.
    """
    executor = _executor(job, task_name)
    if "container" not in executor:
        raise LocalRunError(f"task {task_name!r}: only container executors run locally")
    return executor["container"]["image"]
