"""Marks the library's own tests `core`: they need only the core install (TensorFlow, NumPy) and
run there, in a second venv on the newest TensorFlow (`make test-core`). The full install's run
(`make test`'s first step) leaves them out, except those also marked `full`: the ones that need
an extra (skipped on the core install) and a few that check the library on TensorFlow 2.16, the
lowest it supports. A core test skipped on the core install without the `full` mark would run
nowhere: there it fails, naming the mark (where a C++ compiler is present: without one the native
op's tests skip on both installs)."""

from __future__ import annotations

import collections
import os
import shutil

import pytest

from tests.helpers.installs import CORE_INSTALL
from tfx_dynamic_inputs import native

_HERE = os.path.dirname(os.path.abspath(__file__))
# The folders of the record store, the samplers and their plans; a test in them that needs an
# extra skips itself where it is missing (`pytest.importorskip`) and is marked `full`.
CORE_FOLDERS = ("inputs", "class_balanced", "core")
# The core install's skips are checked where nothing but an extra can be missing.
CHECK_SKIPS = CORE_INSTALL and native.compiler() is not None
UNMARKED_SKIP = (
    "skipped on the core install, and not marked `full`, so no install runs it: "
    "mark it @pytest.mark.full (tests/conftest.py)"
)


def _folder(path: str) -> str:
    return os.path.relpath(path, _HERE).split(os.sep)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _folder(str(item.path)) in CORE_FOLDERS:
            item.add_marker(pytest.mark.core)
    # pytest-xdist (`--dist loadfile --no-loadscope-reorder`, the Makefile's) hands whole files to
    # its workers in this order: files with `slow` tests first, then the others by number of
    # tests, most first (xdist's own order). By number alone a file of one long test went last
    # and kept its worker busy 18 s after the other had finished (test_multiworker).
    file_of = {id(item): item.nodeid.split("::")[0] for item in items}
    counts = collections.Counter(file_of.values())
    slow = {file_of[id(item)] for item in items if item.get_closest_marker("slow") is not None}
    # A stable sort: a file's tests keep their order, files of equal keys their collection order.
    items.sort(key=lambda item: (file_of[id(item)] not in slow, -counts[file_of[id(item)]]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if (
        CHECK_SKIPS
        and report.skipped
        and item.get_closest_marker("core") is not None
        and item.get_closest_marker("full") is None
    ):
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: {UNMARKED_SKIP}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    # A whole module skipped at import (a module-level importorskip) in a core folder.
    if (
        CHECK_SKIPS
        and report.skipped
        and isinstance(collector, pytest.Module)
        and _folder(str(collector.path)) in CORE_FOLDERS
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid}: skipped whole on the core install, so no install runs it: "
            "move it out of the core folders (tests/conftest.py)"
        )


@pytest.fixture
def unrun_pipelines() -> list:
    """Pipelines a test builds only to inspect them, appended by the test. Beam makes each
    pipeline's local temp folder (`beam-pipeline-temp*` in the system temp folder) when the
    pipeline is created and removes it only in `run()`: these are removed after the test."""
    pipelines: list = []
    yield pipelines
    for pipeline in pipelines:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)
