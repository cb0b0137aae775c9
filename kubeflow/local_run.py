"""Runs a compiled KFP v2 pipeline job locally, task by task, through its container commands.

A task compiled by `KubeflowV2DagRunner` runs in its pod as::

    python -m tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor \
        --executor_class_path <module.Executor> --json_serialized_invocation_args {{$}} [beam args]

where the Kubeflow launcher replaces `{{$}}` with an `ExecutorInput` JSON: input parameters,
input artifacts (type, uri, metadata of what upstream tasks produced), output artifact URIs and
the `outputFile` the entrypoint writes its `ExecutorOutput` to. This module plays the launcher's
part: it orders the DAG, builds each `ExecutorInput` from the spec and from the upstream tasks'
`ExecutorOutput` files, substitutes it into the task's own `command` + `args` and runs it against
a local pipeline root. What it proves is that every task's container command, with the arguments
the spec gives it, runs the real executor and hands valid artifacts to the next task; what it does
not prove is the cluster's Beam runner, nor (but in `container` mode) the image itself.

Resolver tasks (the two a `LatestBlessedModelStrategy` resolver compiles to) are ML Metadata
queries the cluster answers; a local run has no earlier artifacts to find, so they resolve to
nothing, as on a pipeline's first run: the tasks that read them get an empty artifact list.

Three modes:
- `subprocess`: each task is a fresh `python -m ...` process, exactly the container command
  (`python` is this interpreter). About 20-25 s per task here, mostly importing TFX.
- `in_process`: each task calls the same entrypoint module's `main` with the same arguments in
  this process, for test suites that cannot afford one TFX import per task.
- `container` (a `ContainerRunner`): each task's container command runs in its compiled image
  with a local container engine (`tfx_dynamic_inputs.kubeflow.container_runner`), the pipeline
  root mounted at its own path; `make image-tasks` runs both demos so.

Run as `python -m tfx_dynamic_inputs.kubeflow.local_run <pipeline.json> <pipeline_root>
[--in-process | --container-engine podman]`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfx_dynamic_inputs.kubeflow.container_runner import ContainerRunner, pipeline_root_mount

ENTRYPOINT_MODULE = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
EXECUTOR_OUTPUT_FILE = "executor_output.json"
LOG_FILE = "log.txt"
_LOG_TAIL_CHARS = 4000


class LocalRunError(RuntimeError):
    """A compiled task could not be built or its container command failed."""


def load_pipeline_job(path: str) -> dict[str, Any]:
    """Reads a `KubeflowV2DagRunner` output file and checks it parses as a KFP `PipelineSpec`.

    Args:
      path: the compiled pipeline job (JSON).

    Returns:
      The job as a dict, with its `pipelineSpec`.

    Raises:
      LocalRunError: when it has no `pipelineSpec`.
      google.protobuf.json_format.ParseError: when that is not a KFP `PipelineSpec`.
    """
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    with open(path) as f:
        job = json.load(f)
    if "pipelineSpec" not in job:
        raise LocalRunError(f"{path}: not a compiled pipeline job (no 'pipelineSpec')")
    json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
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


def run_task(
    command: list[str],
    invocation: Mapping[str, Any],
    *,
    in_process: bool,
    cwd: str | None,
    container: ContainerRunner | None = None,
    image: str = "",
) -> None:
    """Runs one container command with `{{$}}` replaced by the `ExecutorInput` JSON.

    Args:
      command: the task's `container_command`.
      invocation: its `ExecutorInput` (`executor_input`).
      in_process: call the entrypoint's `main` in this process instead of a subprocess.
      cwd: the subprocess's working folder (None: this one's); unused in a container.
      container: run the command in `image` with this engine, whose mounts must hold every
        path of `invocation` (not with `in_process`).
      image: the task's compiled image (`container_image`), for `container`.

    Raises:
      LocalRunError: for leftover placeholders, a command that is not the TFX Kubeflow V2
        entrypoint, both `in_process` and `container`, `container` without an image, or
        (subprocess, container) a non-zero exit, with the log's tail.
    """
    if in_process and container is not None:
        raise LocalRunError("in_process and container are exclusive")
    if container is not None and not (image or container.image):
        raise LocalRunError("a container run needs the task's image")
    invocation_json = json.dumps(invocation)
    argv = [invocation_json if arg == EXECUTOR_INPUT_PLACEHOLDER else arg for arg in command]
    leftover = [arg for arg in argv if "{{$" in arg and arg != invocation_json]
    if leftover:
        raise LocalRunError(f"unsupported placeholders in container args: {leftover}")
    task_root = os.path.dirname(invocation["outputs"]["outputFile"])
    os.makedirs(task_root, exist_ok=True)
    if argv[:3] != ["python", "-m", ENTRYPOINT_MODULE]:
        raise LocalRunError(f"not a TFX Kubeflow V2 container command: {argv[:3]}")
    if in_process:
        from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

        kubeflow_v2_run_executor.main(kubeflow_v2_run_executor._parse_flags(argv[3:]))
        return
    # In the container, `python` is the image's; here it is this interpreter.
    process_argv = [sys.executable, *argv[1:]] if container is None else container.argv(image, argv)
    log_path = os.path.join(task_root, LOG_FILE)
    with open(log_path, "w") as log:
        completed = subprocess.run(process_argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    if completed.returncode != 0:
        with open(log_path) as log:
            tail = log.read()[-_LOG_TAIL_CHARS:]
        raise LocalRunError(
            f"container command exited with {completed.returncode} (log: {log_path}):\n{tail}"
        )


def run_pipeline_job(
    job_path: str,
    pipeline_root: str,
    *,
    in_process: bool = False,
    run_id: str = "local-run",
    cwd: str | None = None,
    container: ContainerRunner | None = None,
    on_task_done: Callable[[str, float], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Runs every task of a compiled job in order; returns each task's `ExecutorOutput` JSON
    (a resolver task's: `resolved_nothing`).

    Task `T` writes under `<pipeline_root>/<run_id>/T/`: one folder per output key, the
    `executor_output.json` and (subprocess mode) `log.txt`; a resolver task writes nothing.

    Args:
      job_path: the compiled pipeline job (JSON).
      pipeline_root: the local folder for the tasks' artifacts.
      in_process: run every task in this process (`run_task`).
      run_id: the run's folder name below `pipeline_root`.
      cwd: the tasks' working folder (subprocess mode).
      container: run each task in its compiled image with this engine (container mode), with
        `pipeline_root` mounted read-write at its own path besides the runner's mounts.
      on_task_done: called with each container task's name and its seconds once it succeeded.

    Returns:
      Task name -> its `ExecutorOutput` JSON.

    Raises:
      LocalRunError: when a task cannot be built, fails, or writes no executor output.

    Example:
      run_pipeline_job("kubeflow/speaker-class-balanced.json", "/tmp/kfp-root", in_process=True)
    """
    job = load_pipeline_job(job_path)
    if container is not None:
        os.makedirs(pipeline_root, exist_ok=True)
        container = dataclasses.replace(
            container, mounts=(*container.mounts, pipeline_root_mount(pipeline_root))
        )
    outputs: dict[str, dict[str, Any]] = {}
    for task_name in task_order(job["pipelineSpec"]):
        if is_resolver(job, task_name):
            outputs[task_name] = resolved_nothing(job, task_name)
            continue
        task_root = os.path.join(pipeline_root, run_id, task_name)
        invocation = executor_input(job, task_name, task_root, outputs)
        started = time.monotonic()
        try:
            run_task(
                container_command(job, task_name),
                invocation,
                in_process=in_process,
                cwd=cwd,
                container=container,
                image=container_image(job, task_name),
            )
        except Exception as error:
            raise LocalRunError(f"task {task_name!r} failed: {error}") from error
        output_file = invocation["outputs"]["outputFile"]
        if not os.path.exists(output_file):
            raise LocalRunError(f"task {task_name!r} wrote no executor output {output_file}")
        with open(output_file) as f:
            outputs[task_name] = json.load(f)
        if on_task_done is not None:
            on_task_done(task_name, time.monotonic() - started)
    return outputs


def main(argv: list[str] | None = None) -> None:
    """`python -m tfx_dynamic_inputs.kubeflow.local_run`: runs a compiled job and prints each task's
    output URIs.

    Args:
      argv: `<pipeline.json> <pipeline_root> [--in-process | --container-engine ENGINE]`;
        None reads `sys.argv`.

    Raises:
      LocalRunError: as `run_pipeline_job`.

    Example:
      main(["kubeflow/speaker-class-balanced.json", "/tmp/kfp-root", "--in-process"])
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job", help="compiled pipeline JSON (KubeflowV2DagRunner output)")
    parser.add_argument("pipeline_root", help="local folder for the tasks' artifacts")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--in-process", action="store_true", help="one process for all tasks")
    mode.add_argument(
        "--container-engine",
        metavar="ENGINE",
        help="run each task in its compiled image with ENGINE (podman), with no network",
    )
    args = parser.parse_args(argv)
    container = ContainerRunner(engine=args.container_engine) if args.container_engine else None
    for task, output in run_pipeline_job(
        args.job, args.pipeline_root, in_process=args.in_process, container=container
    ).items():
        uris = {k: [a["uri"] for a in v["artifacts"]] for k, v in output["artifacts"].items()}
        print(f"{task}: {json.dumps(uris)}")


if __name__ == "__main__":
    main()
