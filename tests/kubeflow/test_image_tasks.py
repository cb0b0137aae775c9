"""Every compiled task of both demo pipelines run in the task image with podman, `--network none`
(`make image-tasks`); the standard pipeline's tasks in the image with its user modules added
(kubeflow/user-modules.Dockerfile); and the container runner's command line.

The image tests need podman and the image built (`make image`); they skip, saying which is
missing, and never build the task image (minutes; the user-modules layer takes seconds). They
take about 5 minutes on two cores (the demos 3, the standard pipeline 2), so they are marked
`image`, which `make test` leaves out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.pipeline import standard_data, standard_modules
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.kubeflow import compiled_tasks, image_tasks, local_run, runner
from tfx_dynamic_inputs.kubeflow.container_runner import (
    ContainerRunner,
    Mount,
    image_exists,
    pipeline_root_mount,
)
from tfx_dynamic_inputs.pipeline import config, standard_pipeline

IMAGE = os.environ.get("TFX_DYNAMIC_INPUTS_IMAGE", image_tasks.DEFAULT_IMAGE)
USER_MODULES_IMAGE = "tfx-dynamic-inputs-user-modules:test"
USER_MODULES_DOCKERFILE = os.path.join(REPO_ROOT, "kubeflow", "user-modules.Dockerfile")


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
    with pytest.raises(local_run.LocalRunError, match="needs the task's image"):
        local_run.run_task(
            ["python", "-m", local_run.ENTRYPOINT_MODULE],
            {"outputs": {"outputFile": "/nonexistent/x/executor_output.json"}},
            in_process=False,
            cwd=None,
            container=ContainerRunner(),
        )


def _require_image() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: the tasks cannot run in the image here")
    if not image_exists(IMAGE):
        pytest.skip(f"podman has no image {IMAGE}: build it with `make image`")


def _container_tasks(job_path: str) -> list[str]:
    job = compiled_tasks.load_pipeline_job(job_path)
    return [
        task
        for task in compiled_tasks.task_order(job["pipelineSpec"])
        if not compiled_tasks.is_resolver(job, task)
    ]


@pytest.fixture(scope="module")
def image_runs(tmp_path_factory):
    _require_image()
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
        path = os.path.join(work, image_tasks.SPECS_DIR, spec)
        job = compiled_tasks.load_pipeline_job(path)
        containers = _container_tasks(path)
        assert [run.task for run in runs if run.pipeline == pipeline] == containers
        for task in containers:
            assert compiled_tasks.container_image(job, task) == IMAGE
            output = os.path.join(
                work, image_tasks.ROOT_DIR, pipeline, task, compiled_tasks.EXECUTOR_OUTPUT_FILE
            )
            with open(output) as f:
                assert json.load(f)["artifacts"], task


@pytest.fixture(scope="module")
def user_modules_image(tmp_path_factory):
    """The image with the standard pipeline test's modules added, under their import name
    `tests.pipeline.standard_modules` (the image has no tests/)."""
    _require_image()
    context = tmp_path_factory.mktemp("user_modules")
    package = context / "tests" / "pipeline"
    package.mkdir(parents=True)
    for init in (context / "tests" / "__init__.py", package / "__init__.py"):
        init.write_text("")
    shutil.copyfile(standard_modules.__file__, package / "standard_modules.py")
    subprocess.run(
        ["podman", "build", "--runtime", ContainerRunner.runtime, "-f", USER_MODULES_DOCKERFILE,
         "--build-arg", f"IMAGE={IMAGE}", "-t", USER_MODULES_IMAGE, str(context)],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    yield USER_MODULES_IMAGE
    subprocess.run(["podman", "rmi", USER_MODULES_IMAGE], check=True, stdout=subprocess.DEVNULL)


@pytest.mark.image
def test_the_standard_pipeline_runs_in_the_image_with_user_modules(tmp_path, user_modules_image):
    input_base = str(tmp_path / "input")
    standard_data.write_examples(input_base)
    root = str(tmp_path / "root")
    pipeline_config = standard_data.config(
        input_base, serving_dir=os.path.join(root, "serving"), num_epochs=1
    )
    kubeflow_config = config.KubeflowConfig(
        image=user_modules_image, output_dir=str(tmp_path / "specs"), pipeline_root=root
    )
    path = runner.compile_pipeline(
        standard_pipeline.create_pipeline(pipeline_config, runner.run_config(kubeflow_config)),
        kubeflow_config.output_dir,
        kubeflow_config.image,
    )
    started = time.monotonic()
    ran: list[str] = []
    outputs = local_run.run_pipeline_job(
        path,
        root,
        container=ContainerRunner(mounts=(Mount(input_base, input_base),)),
        on_task_done=lambda task, seconds: ran.append(task),
    )
    print(f"standard pipeline: {len(ran)} tasks in {time.monotonic() - started:.0f} s")
    assert ran == _container_tasks(path)
    # Transform ran the user's preprocessing_fn and the trainer its run_fn, both imported from
    # /app/user_modules.
    [graph] = outputs["Transform"]["artifacts"][keys.TRANSFORM_GRAPH_KEY]["artifacts"]
    assert os.path.isdir(os.path.join(graph["uri"], "transform_fn"))
    [model_run] = outputs["ClassBalancedTrainer"]["artifacts"][keys.MODEL_RUN_KEY]["artifacts"]
    assert os.path.exists(os.path.join(model_run["uri"], standard_modules.BATCH_LABELS_FILE))
