"""`make image-tasks`: every compiled task of both demo pipelines run in the image, no network.

    python -m tfx_dynamic_inputs.kubeflow.image_tasks [--image tfx-dynamic-inputs:local]
        [--work-dir build/image-tasks] [--engine podman] [--runtime runc]

Compiles both pipelines for `--image` as `tfx_dynamic_inputs.kubeflow.runner` does (the bundled
sample data and schemas at the image's `/app`), with a local pipeline root under `--work-dir`
and a shorter training (`TRAINING`), then runs each spec task by task with
`tfx_dynamic_inputs.kubeflow.local_run` in container mode: each task's own container command in its
compiled image, `--network none`, the pipeline root mounted read-write at its own path. Prints
one line per task (pipeline, task, status, seconds) and the totals; exits 1 at the first
failing task, naming it, with its log's tail.

The image is built with `make image` (kubeflow/Dockerfile on the base of
kubeflow/build_base_image.sh); this module does not build it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any

from tfx_dynamic_inputs.kubeflow import local_run, runner
from tfx_dynamic_inputs.kubeflow.container_runner import ContainerRunner, image_exists
from tfx_dynamic_inputs.pipeline import config

DEFAULT_IMAGE = "tfx-dynamic-inputs:local"
DEFAULT_WORK_DIR = os.path.join(config.OUTPUT_DIR, "image-tasks")
SPECS_DIR = "specs"
ROOT_DIR = "root"
# One short epoch each: the point is that every task runs in the image, not the models.
TRAINING: Mapping[str, Mapping[str, Any]] = {
    "cyclegan": {"num_epochs": 1, "batch_size": 128},
    "speaker": {"num_epochs": 1},
}


@dataclasses.dataclass(frozen=True)
class TaskRun:
    """One task that ran in the image.

    Args:
      pipeline: the pipeline's name.
      task: the task's name in its spec.
      seconds: how long its container ran (start to exit).
    """

    pipeline: str
    task: str
    seconds: float


def compile_demos(image: str, work_dir: str) -> list[str]:
    """Compiles both demo pipelines for `image` under `<work_dir>/specs`, their pipeline root
    (and so the default push destinations) `<work_dir>/root`.

    Args:
      image: the image every task runs in.
      work_dir: the run's folder on the host (an absolute path: the tasks see it at that path).

    Returns:
      The PipelineJob paths, CycleGAN's first.
    """
    kubeflow_config = config.KubeflowConfig(
        image=image,
        output_dir=os.path.join(work_dir, SPECS_DIR),
        pipeline_root=os.path.join(work_dir, ROOT_DIR),
    )
    cyclegan, speaker = runner.pipeline_configs(
        kubeflow_config.data_root,
        kubeflow_config.schemas_dir,
        cyclegan=TRAINING["cyclegan"],
        speaker=TRAINING["speaker"],
    )
    return runner.compile_all(kubeflow_config, cyclegan, speaker)


def run_demos(work_dir: str, container: ContainerRunner, image: str) -> list[TaskRun]:
    """Compiles both demos for `image` and runs every container task of each in it.

    `<work_dir>` is emptied first. Task `T` writes under `<work_dir>/root/<pipeline>/T/`, a pushed
    model under `<work_dir>/root/serving/<pipeline>/`: the compiled pipeline root is the local
    run's, mounted whole.

    Args:
      work_dir: the run's folder (absolute, without ':' or ',': it is mounted).
      container: how the tasks' containers start.
      image: the image the specs name.

    Returns:
      Every task that ran, in order (resolver tasks run no container and are not listed).

    Raises:
      ValueError: `work_dir` is not absolute.
      local_run.LocalRunError: the first task that failed, one line naming it and its log.
    """
    if not os.path.isabs(work_dir):
        raise ValueError(f"work_dir must be absolute (the tasks see it at its path): {work_dir!r}")
    shutil.rmtree(work_dir, ignore_errors=True)
    runs: list[TaskRun] = []
    for path in compile_demos(image, work_dir):
        pipeline = os.path.splitext(os.path.basename(path))[0]

        def done(task: str, seconds: float, pipeline: str = pipeline) -> None:
            runs.append(TaskRun(pipeline, task, seconds))
            print(f"{pipeline:<24} {task:<22} ok {seconds:7.1f} s", flush=True)

        local_run.run_pipeline_job(
            path,
            os.path.join(work_dir, ROOT_DIR),
            run_id=pipeline,
            container=container,
            on_task_done=done,
        )
    return runs


def summary(runs: list[TaskRun], image: str, network: str, seconds: float) -> str:
    """The closing line of a run: how many tasks of which pipelines ran where, and how long.

    Args:
      runs: the tasks that ran (`run_demos`).
      image: the image they ran in.
      network: their containers' network.
      seconds: the whole run's seconds, compiling included.

    Returns:
      One line.
    """
    pipelines = sorted({run.pipeline for run in runs})
    return (
        f"{len(runs)} tasks of {len(pipelines)} pipelines ({', '.join(pipelines)}) ran in "
        f"{image} with --network {network}: all ok, "
        f"{sum(run.seconds for run in runs):.0f} s in tasks, {seconds:.0f} s in all"
    )


def main(argv: list[str] | None = None) -> None:
    """Runs both demos' tasks in the image and prints the summary.

    Args:
      argv: the command-line arguments (None: `sys.argv[1:]`).

    Raises:
      SystemExit: 2 when the engine has no such image; 1 when a task failed.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"default: {DEFAULT_IMAGE}")
    parser.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help=f"default: {DEFAULT_WORK_DIR}")
    parser.add_argument("--engine", default=ContainerRunner.engine, help="default: podman")
    parser.add_argument(
        "--runtime", default=ContainerRunner.runtime, help="OCI runtime; default: runc"
    )
    args = parser.parse_args(argv)
    if not image_exists(args.image, args.engine):
        print(f"error: {args.engine} has no image {args.image}: build it with `make image`")
        sys.exit(2)
    container = ContainerRunner(engine=args.engine, runtime=args.runtime)
    started = time.monotonic()
    try:
        runs = run_demos(os.path.abspath(args.work_dir), container, args.image)
    except local_run.LocalRunError as error:
        print(f"FAILED after {time.monotonic() - started:.0f} s: {error}")
        if error.log_path is not None:
            print(local_run.log_tail(error.log_path))
        sys.exit(1)
    print(summary(runs, args.image, container.network, time.monotonic() - started))


if __name__ == "__main__":
    main()
