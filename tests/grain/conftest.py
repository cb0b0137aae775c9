"""tests/grain runs in the Grain venv alone (`make test-grain`: the wheel's grain extra, Keras 3,
JAX, torch, no TensorFlow); the other installs leave this folder out (the Makefile's runs)."""

from __future__ import annotations

import os

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "grain: runs in the Grain venv (make test-grain)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.grain)


@pytest.fixture(scope="session")
def tf_python() -> str:
    """The full install's interpreter (TensorFlow 2.16), which computes the tf.data batches."""
    path = os.environ.get("TFX_DYNAMIC_INPUTS_TF_PYTHON", os.path.join(_REPO, ".venv/bin/python"))
    assert os.access(path, os.X_OK), f"no interpreter with TensorFlow at {path} (make setup)"
    return path
