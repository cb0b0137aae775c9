"""The pipeline modules import the TFX modules they use, not `tfx.v1`: that facade also imports
every TFX extension, Google Cloud AI Platform's client among them, about 3 s of every
`run_local` start, Kubeflow compile and pipeline task."""

from __future__ import annotations

from tests.helpers.subprocesses import run_python

PIPELINE_MODULES = (
    "tfx_dynamic_inputs.pipeline.run_local",
    "tfx_dynamic_inputs.pipeline.cyclegan_pipeline",
    "tfx_dynamic_inputs.pipeline.speaker_pipeline",
    "tfx_dynamic_inputs.pipeline.standard_pipeline",
    "tfx_dynamic_inputs.pipeline.standard_evaluator",
    "tfx_dynamic_inputs.pipeline.report",
    "tfx_dynamic_inputs.kubeflow.runner",
)
FACADES = ("tfx.v1", "google.cloud.aiplatform")


def test_the_pipeline_modules_leave_out_the_tfx_v1_facade_and_its_extensions():
    script = (
        "import importlib, sys\n"
        f"for name in {PIPELINE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "from tfx.orchestration.local.local_dag_runner import LocalDagRunner\n"
        f"print(sorted(name for name in {FACADES!r} if name in sys.modules))\n"
    )
    done = run_python(script, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]"
