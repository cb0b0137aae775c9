"""Which install a test runs in: the full one (`make setup`: TFX 1.16, TensorFlow 2.16) or the
core one (`make test-core`: the wheel on the newest TensorFlow, no Beam or TFX)."""

from __future__ import annotations

import importlib.util

import pytest

# The core install is the one without Beam (`make test-core`'s venv; `tests/conftest.py`).
CORE_INSTALL = importlib.util.find_spec("apache_beam") is None

# The library's multi-process runs (MultiWorkerMirroredStrategy workers, tf.data service
# workers) each start several TensorFlow processes, 20-45 s a test. They run once, in the core
# install on the newest TensorFlow, where the library's users are: the full install's pipelines
# train with one process (the trainer's MirroredStrategy is tested there, `test_kill_resume`).
NEWEST_TENSORFLOW_ONLY = pytest.mark.skipif(
    importlib.util.find_spec("tfx") is not None,
    reason="a multi-process run of the library: the core install runs it (make test-core)",
)
