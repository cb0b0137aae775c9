"""Keras 3 trains from the Grain datasets on its JAX and PyTorch backends, in the Grain venv,
where `import tensorflow` fails: docs/samplers.md's `grain` blocks, then the README's Keras model
(a max over frames into a dense layer from zeros) on class-balanced batches of framed clips, each
backend in a process of its own (`KERAS_BACKEND` is read when Keras is imported). The fits see
the stream's epochs in turn (not epoch 0 again), their losses fall and agree across backends.
The tf.data datasets' fit on all three backends is tests/core/test_keras_backends.py's, in the
core venv (TensorFlow present)."""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.docs import snippets

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLERS = os.path.join(_REPO, "docs", "samplers.md")
TORCH_CPU_WHEELS = os.environ.get("TORCH_CPU_WHEELS", "/opt/wheels")
# Float32 sums in another order (XLA, ATen): the losses differ by ~1e-7 relative.
LOSS_RTOL = 1e-4
# After the page's blocks: the README's Keras model on class-balanced Grain batches, recording
# the batches the stream gave (Keras first peeks at a batch or two with iterators of its own,
# then trains with one iterator: its batches are the last taken), and what the process saw.
_FIT = """
import importlib.util, json, sys
import keras
import numpy as np
from tfx_dynamic_inputs.grain import GrainClassBalanced

t = np.arange(8000) / 16000  # 4 speakers x 20 clips: a pitch each, in bursts; 50 frames of 160
clips = [np.float32(np.sin(600 * np.pi * (1 + i % 4) * t) * (t * 8 % 2 < 1)) for i in range(80)]
balanced = GrainClassBalanced(np.stack(clips).reshape(80, 50, 160), np.arange(80) % 4, seed=0,
                              n_classes_per_batch=4, n_samples_per_class=4, epoch_mode="samples")
taken = []

def inputs_and_targets(batch):
    taken.append(batch["index"].tolist())
    return batch["features"], batch["label"]

model = keras.Sequential(
    [keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(4, kernel_initializer="zeros")]
)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(balanced.stream(num_epochs=3).map(inputs_and_targets), epochs=3,
                    steps_per_epoch=balanced.steps_per_epoch, shuffle=False, verbose=0)
planned = [balanced.epoch(e)[s]["index"].tolist()
           for e in range(3) for s in range(balanced.steps_per_epoch)]
try:
    import tensorflow
    tensorflow_imports = True
except ImportError:
    tensorflow_imports = False
with open({path!r}, "w") as f:
    json.dump({{"backend": keras.backend.backend(), "loss": history.history["loss"],
               "taken_is_planned": taken[-len(planned):] == planned, "planned": len(planned),
               "tensorflow_imports": tensorflow_imports,
               "tensorflow_loaded": "tensorflow" in sys.modules}}, f)
"""

TORCH = pytest.param(
    "torch",
    marks=pytest.mark.skipif(
        importlib.util.find_spec("torch") is None
        and not glob.glob(os.path.join(TORCH_CPU_WHEELS, "torch-*+cpu-cp311-*.whl")),
        reason=f"no torch CPU wheel in {TORCH_CPU_WHEELS} (PyPI's Linux torch is a CUDA build)",
    ),
)


def _fit(backend: str, folder: str) -> dict:
    """docs/samplers.md's `grain` blocks and `_FIT` with `backend`, from the empty `folder` (the
    installed package is what they import)."""
    os.makedirs(folder)
    result_path = os.path.join(folder, "fit.json")
    script = "namespace = {'__name__': '__main__'}\n"
    for block in snippets.python_blocks(SAMPLERS):
        if snippets.GRAIN_TAG in block.tags:
            script += f"exec(compile({block.code!r}, {block.where!r}, 'exec'), namespace)\n"
    script += f"exec({_FIT.format(path=result_path)!r}, namespace)\n"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(KERAS_BACKEND=backend, KERAS_HOME=os.path.join(folder, "keras-home"))
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"KERAS_BACKEND={backend}: {done.stderr[-6000:]}"
    with open(result_path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def jax_fit(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _fit("jax", str(tmp_path_factory.mktemp("keras") / "jax"))


def test_the_grain_venv_holds_no_tensorflow(jax_fit: dict) -> None:
    assert importlib.util.find_spec("tensorflow") is None
    assert not jax_fit["tensorflow_imports"] and not jax_fit["tensorflow_loaded"], jax_fit


@pytest.mark.parametrize("backend", ["jax", TORCH])
def test_keras_fits_the_grain_epochs_in_turn(backend: str, jax_fit: dict, tmp_path) -> None:
    fitted = jax_fit if backend == "jax" else _fit(backend, str(tmp_path / backend))
    losses = fitted["loss"]
    assert fitted["backend"] == backend and len(losses) == 3, fitted
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0], fitted
    assert fitted["taken_is_planned"], f"the fit did not take epochs 0, 1, 2 in turn: {fitted}"
    assert losses == pytest.approx(jax_fit["loss"], rel=LOSS_RTOL), (fitted, jax_fit)
