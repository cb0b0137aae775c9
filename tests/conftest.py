"""Marks the library's own tests `core`: they need only the core install (TensorFlow, NumPy), and
`make test` also runs them in a second venv on the newest TensorFlow (`make test-core`)."""

from __future__ import annotations

import os

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
