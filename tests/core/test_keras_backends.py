"""The README's Keras block (`keras_inputs` into `model.fit`) on Keras 3's TensorFlow, JAX and
PyTorch backends, each in a process of its own (`KERAS_BACKEND` is read when Keras is imported):
the fit runs every epoch, its losses are finite and equal to TensorFlow's (the data pipeline is
the same tf.data graph, the model starts from zeros), so the samplers' epochs reach every backend
alike. The core venv holds JAX and, where its CPU wheel is at hand, torch (the Makefile)."""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os

import numpy as np
import pytest

from tests.docs import snippets
from tests.helpers.installs import CORE_INSTALL
from tests.helpers.paths import REPO_ROOT
from tests.helpers.subprocesses import run_python

README = os.path.join(REPO_ROOT, "README.md")
KERAS_TAG = "keras"
# Where the Makefile takes torch's CPU wheel from (PyPI's Linux torch is a CUDA build of GBs).
TORCH_CPU_WHEELS = os.environ.get("TORCH_CPU_WHEELS", "/opt/wheels")
HAS_TORCH = importlib.util.find_spec("torch") is not None
TORCH_WHEEL_AT_HAND = bool(glob.glob(os.path.join(TORCH_CPU_WHEELS, "torch-*+cpu-cp311-*.whl")))
# Float32 sums in another order (XLA, ATen, Eigen): the losses differ by ~1e-7 relative.
LOSS_RTOL = 1e-4
# The block's epochs, its steps and losses, as the process reports them.
_REPORT = """
import json, keras
with open({path!r}, "w") as f:
    json.dump({{"backend": keras.backend.backend(), "params": history.params,
               "loss": history.history["loss"]}}, f)
"""


def readme_blocks_to_keras() -> list[snippets.Block]:
    """The README's `core` blocks up to its Keras block (tagged `keras`): the page's namespace
    as the block finds it."""
    blocks = [block for block in snippets.python_blocks(README) if snippets.CORE_TAG in block.tags]
    keras_at = [number for number, block in enumerate(blocks) if KERAS_TAG in block.tags]
    assert len(keras_at) == 1, f"README.md has {len(keras_at)} blocks tagged {KERAS_TAG!r}"
    return blocks[: keras_at[0] + 1]


def fit_on(backend: str, folder: str) -> dict:
    """Runs the README's blocks to its Keras block with `backend`, from the empty `folder` (so
    the installed package is what they import), and returns what the fit reported."""
    os.makedirs(folder)
    result_path = os.path.join(folder, "fit.json")
    script = "namespace = {'__name__': '__main__'}\n"
    for block in readme_blocks_to_keras():
        script += f"exec(compile({block.code!r}, {block.where!r}, 'exec'), namespace)\n"
    script += f"exec({_REPORT.format(path=result_path)!r}, namespace)\n"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(KERAS_BACKEND=backend, KERAS_HOME=os.path.join(folder, "keras-home"))
    done = run_python(script, cwd=folder, env=env, timeout=600)
    assert done.returncode == 0, f"KERAS_BACKEND={backend}: {done.stderr[-6000:]}"
    with open(result_path) as f:
        fitted = json.load(f)
    assert fitted["backend"] == backend
    losses, params = fitted["loss"], fitted["params"]
    assert params["epochs"] >= 2 and len(losses) == params["epochs"], fitted
    assert params["steps"] > 0, fitted
    assert all(math.isfinite(loss) for loss in losses), fitted
    return fitted


@pytest.fixture(scope="module")
def tensorflow_fit(tmp_path_factory) -> dict:
    return fit_on("tensorflow", str(tmp_path_factory.mktemp("keras") / "tensorflow"))


TORCH = pytest.param(
    "torch",
    marks=[
        # `full`: skipped here where no install can run it (tests/conftest.py), and in the full
        # install, which has no torch (it runs the block on TensorFlow 2.16: tests/docs).
        pytest.mark.full,
        pytest.mark.skipif(
            not CORE_INSTALL,
            reason="no torch in the full install: the core venv runs Keras's torch backend",
        ),
        pytest.mark.skipif(
            not HAS_TORCH and not TORCH_WHEEL_AT_HAND,
            reason=f"no torch CPU wheel in {TORCH_CPU_WHEELS} (TORCH_CPU_WHEELS), so the core "
            "venv has no torch: PyPI's Linux torch is a CUDA build of several GB",
        ),
    ],
)


@pytest.mark.parametrize("backend", ["tensorflow", "jax", TORCH])
def test_the_readme_keras_block_fits_alike_on_every_backend(backend, tensorflow_fit, tmp_path):
    if backend == "torch":
        assert HAS_TORCH, (
            f"no torch here, yet {TORCH_CPU_WHEELS} holds its CPU wheel: make core-venv"
        )
    fitted = tensorflow_fit if backend == "tensorflow" else fit_on(backend, str(tmp_path / "fit"))
    assert fitted["params"] == tensorflow_fit["params"]
    np.testing.assert_allclose(fitted["loss"], tensorflow_fit["loss"], rtol=LOSS_RTOL)
