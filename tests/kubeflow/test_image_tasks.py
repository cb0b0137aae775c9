"""Every compiled task of both demo pipelines run in the task image with podman, `--network none`
(`make image-tasks`), and the container runner's command line.

The image test needs podman and the image built (`make image`); it skips, saying which is
missing, and never builds the image (minutes). It takes ~N minutes, so it is marked `image` and
`make test` leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tfx_dynamic_inputs.kubeflow import image_tasks, local_run
from tfx_dynamic_inputs.kubeflow.container_runner import (
    ContainerRunner,
    Mount,
    image_exists,
    pipeline_root_mount,
)

IMAGE = os.environ.get("TFX_DYNAMIC_INPUTS_IMAGE", image_tasks.DEFAULT_IMAGE)


def test_the_runner_starts_the_task_in_its_image_with_no_network_and_the_root_mounted():
    runner = ContainerRunner(mounts=(Mount("/data", "/data"),))
    root = pipeline_root_mount("/tmp/root")
    argv = ContainerRunner(mounts=(*runner.mounts, root)).argv(
        "img:1", ["python", "-m", local_run.ENTRYPOINT_MODULE]
    )
    assert argv == [
        "podman", "run", "--rm", "--network", "none", "--runtime", "runc",
        "-v", "/data:/data:ro", "-v", "/tmp/root:/tmp/root:U",
        "img:1", "python", "-m", local_run.ENTRYPOINT_MODULE,
    ]  # fmt: skip
    assert ContainerRunner(runtime=None, image="other:2").argv("img:1", ["x"])[-2:] == [
        "other:2",
        "x",
    ]


def test_bad_runner_options_fail_where_written():
    with pytest.raises(ValueError, match="absolute"):
        Mount("data", "/data")
    with pytest.raises(ValueError, match="no ':'"):
        Mount("/a:b", "/data")
    with pytest.raises(ValueError, match="engine must be one of"):
        ContainerRunner(engine="dockerd")
    with pytest.raises(TypeError, match="Mounts"):
        ContainerRunner(mounts=("/data:/data",))  # type: ignore[arg-type]
    with pytest.raises(local_run.LocalRunError, match="exclusive"):
        local_run.run_task(
            ["python", "-m", local_run.ENTRYPOINT_MODULE],
            {"outputs": {"outputFile": "/nonexistent/x/executor_output.json"}},
            in_process=True,
            cwd=None,
            container=ContainerRunner(),
            image="img:1",
        )


@pytest.fixture(scope="module")
def image_runs(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: the tasks cannot run in the image here")
    if not image_exists(IMAGE):
        pytest.skip(f"podman has no image {IMAGE}: build it with `make image`")
    work = str(tmp_path_factory.mktemp("image_tasks"))
    started = time.monotonic()
    runs = image_tasks.run_demos(work, ContainerRunner(), IMAGE)
    print(image_tasks.summary(runs, IMAGE, "none", time.monotonic() - started))
    return work, runs


@pytest.mark.image
def test_every_container_task_of_both_demos_ran_in_the_image(image_runs):
    work, runs = image_runs
    specs = sorted(os.listdir(os.path.join(work, image_tasks.SPECS_DIR)))
    assert specs == [
        "cyclegan-dynamic-pairs.json",
        "cyclegan-dynamic-pairs.yaml",
        "speaker-class-balanced.json",
        "speaker-class-balanced.yaml",
    ]
    for spec in specs[::2]:
        pipeline = os.path.splitext(spec)[0]
        job = local_run.load_pipeline_job(os.path.join(work, image_tasks.SPECS_DIR, spec))
        containers = [
            task
            for task in local_run.task_order(job["pipelineSpec"])
            if not local_run.is_resolver(job, task)
        ]
        assert [run.task for run in runs if run.pipeline == pipeline] == containers
        for task in containers:
            assert local_run.container_image(job, task) == IMAGE
            output = os.path.join(
                work, image_tasks.ROOT_DIR, pipeline, "local-run", task, "executor_output.json"
            )
            with open(output) as f:
                assert json.load(f)["artifacts"], task
