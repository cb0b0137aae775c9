"""Marks the library's own tests `core`: they need only the core install (TensorFlow, NumPy), and
`make test` also runs them in a second venv on the newest TensorFlow (`make test-core`)."""

from __future__ import annotations

import os
import shutil

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
# The folders of the record store, the samplers and their plans; a test in them that needs an
# extra skips itself where it is missing (`pytest.importorskip`).
CORE_FOLDERS = ("inputs", "class_balanced", "core")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = os.path.relpath(str(item.path), _HERE).split(os.sep)[0]
        if folder in CORE_FOLDERS:
            item.add_marker(pytest.mark.core)


@pytest.fixture
def unrun_pipelines() -> list:
    """Pipelines a test builds only to inspect them, appended by the test. Beam makes each
    pipeline's local temp folder (`beam-pipeline-temp*` in the system temp folder) when the
    pipeline is created and removes it only in `run()`: these are removed after the test."""
    pipelines: list = []
    yield pipelines
    for pipeline in pipelines:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
