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
[--in-process | --container-engine podman]`: it runs what `make kubeflow` writes as it is, the
paths the spec names in the image and its pipeline root replaced by this host's
(`tfx_dynamic_inputs.kubeflow.host_paths`, each replacement printed). A spec or an input it
names that is not usable here is one line and exit status 2 before any task runs; a failed task
is one line naming it, its log's last line and its log, and exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from tfx_dynamic_inputs.kubeflow import host_paths
from tfx_dynamic_inputs.kubeflow.compiled_tasks import (
    LocalRunError,
    SpecError,
    container_command,
    container_image,
    executor_input,
    is_resolver,
    load_pipeline_job,
    resolved_nothing,
    task_order,
)
from tfx_dynamic_inputs.kubeflow.container_runner import ContainerRunner, pipeline_root_mount

ENTRYPOINT_MODULE = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
LOG_FILE = "log.txt"
_LOG_TAIL_CHARS = 4000


def mapped_job(
    job_path: str, pipeline_root: str, *, in_container: bool
) -> tuple[dict[str, Any], list[host_paths.Use]]:
    """The compiled job at `job_path` as a local run against `pipeline_root` runs it
    (`host_paths.mapped_job`: the image's paths and the pipeline root replaced, the image's
    digits written, every input checked).

    Args:
      job_path: the compiled pipeline job (JSON).
      pipeline_root: the local run's pipeline root.
      in_container: the tasks run in their image.

    Returns:
      The job and each path replaced in it.

    Raises:
      SpecError: the spec is not a compiled job, an input it names is missing here, or the
        image's digits cannot be written; one line.
    """
    job = load_pipeline_job(job_path)
    try:
        return host_paths.mapped_job(job, pipeline_root, in_container=in_container)
    except OSError as error:
        message = f"{error.filename}: {error.strerror}" if error.filename else str(error)
        raise SpecError(message) from None


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
        (subprocess, container) a non-zero exit, with the log's last line and its path.
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
        raise LocalRunError(
            f"container command exited with {completed.returncode}: "
            f"{last_line(log_path)} (log: {log_path})",
            log_path,
        )


def log_tail(log_path: str) -> str:
    """The end of a task's log: its last `_LOG_TAIL_CHARS` characters.

    Args:
      log_path: the log.

    Returns:
      The text.
    """
    with open(log_path, "rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_CHARS))
        return log.read().decode(errors="replace")


def last_line(log_path: str) -> str:
    """The last line of a task's log that is not blank: a failed Python task's exception.

    Args:
      log_path: the log.

    Returns:
      The line, stripped ("" for an empty log).
    """
    lines = log_tail(log_path).splitlines()
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


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
    The tasks' parameters name this host's paths for the image's and `pipeline_root` for the
    compiled pipeline root (`host_paths.mapped_job`); the image's digits are written first.

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
      SpecError: the spec, or an input it names, is not usable here (no task ran).
      LocalRunError: when a task cannot be built, fails, or writes no executor output.

    Example:
      run_pipeline_job("kubeflow/speaker-class-balanced.json", "/tmp/kfp-root", in_process=True)
    """
    job = mapped_job(job_path, pipeline_root, in_container=container is not None)[0]
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
            raise LocalRunError(
                f"task {task_name!r} failed: {' '.join(str(error).split())}",
                getattr(error, "log_path", None),
            ) from error
        output_file = invocation["outputs"]["outputFile"]
        if not os.path.exists(output_file):
            raise LocalRunError(f"task {task_name!r} wrote no executor output {output_file}")
        with open(output_file) as f:
            outputs[task_name] = json.load(f)
        if on_task_done is not None:
            on_task_done(task_name, time.monotonic() - started)
    return outputs


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        _fail(message, 2)


def _fail(message: str, status: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """`python -m tfx_dynamic_inputs.kubeflow.local_run`: runs a compiled job, printing each path
    it replaced, then each task's output URIs.

    Args:
      argv: `<pipeline.json> <pipeline_root> [--in-process | --container-engine ENGINE]`;
        None reads `sys.argv`.

    Raises:
      SystemExit: a bad flag, or a spec or input not usable here (`SpecError`): one line, status
        2, no task run; a failed task: one line naming it, status 1.

    Example:
      main(["kubeflow/speaker-class-balanced.json", "/tmp/kfp-root", "--in-process"])
    """
    parser = _OneLineParser(description=__doc__.split("\n")[0])
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
    try:
        container = ContainerRunner(engine=args.container_engine) if args.container_engine else None
        _, uses = mapped_job(args.job, args.pipeline_root, in_container=container is not None)
        for use in uses:
            print(f"{use.task} {use.parameter}: {use.spec_path} -> {use.host_path}", flush=True)
        outputs = run_pipeline_job(
            args.job, args.pipeline_root, in_process=args.in_process, container=container
        )
    except (SpecError, ValueError) as error:
        _fail(str(error), 2)
    except LocalRunError as error:
        _fail(str(error), 1)
    for task, output in outputs.items():
        uris = {k: [a["uri"] for a in v["artifacts"]] for k, v in output["artifacts"].items()}
        print(f"{task}: {json.dumps(uris)}")


if __name__ == "__main__":
    main()
