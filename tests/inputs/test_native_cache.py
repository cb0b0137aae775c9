"""The native op library is loaded only when this installation built it (issue 46, items 2, 8).

A library at the expected name in the build folder used to be loaded as it was, also with the
build at first use off: in a shared cache another user's planted `.so` ran in our process. Here
a planted library is a real shared object whose constructor writes a marker file when it is
loaded, so "not loaded" is proven by the marker never appearing. Tests run as root here, where
owners cannot differ: the states use what root cannot bypass (mode bits checked by the code,
hashes, links, FIFOs, a file in the way of a folder).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tests.inputs import runs
from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.inputs import RecordStore, native_reader
from tfx_dynamic_inputs.native import trusted_files

MARKER_ENV = "TFX_DYNAMIC_INPUTS_PLANTED_MARKER"
PLANTED_SOURCE = f"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {{
  const char* marker = getenv("{MARKER_ENV}");
  if (marker != NULL) {{
    FILE* f = fopen(marker, "w");
    if (f != NULL) fclose(f);
  }}
}}
"""
RECORDS = [bytes([i]) * (i + 1) for i in range(9)]


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    """A shared object that writes `$TFX_DYNAMIC_INPUTS_PLANTED_MARKER` when loaded; checked to
    do so (else "no marker" would prove nothing)."""
    cc = native.compiler()
    if cc is None:
        pytest.skip("no C++ compiler to build the planted library")
    folder = tmp_path_factory.mktemp("planted")
    library = str(folder / "planted.so")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-x", "c", "-", "-o", library],
        input=PLANTED_SOURCE,
        text=True,
        check=True,
    )
    marker = folder / "loaded"
    env = {**os.environ, MARKER_ENV: str(marker)}
    run_python(f"import ctypes; ctypes.CDLL({library!r})", env=env, check=True)
    assert marker.exists()
    return library


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    output_dir = str(tmp_path_factory.mktemp("run"))
    runs.write_record_set(output_dir, "x", RECORDS, num_shards=2)
    return output_dir


class _Warnings(logging.Handler):
    """The warnings the project's loggers log while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _fresh_process_lookup(monkeypatch: pytest.MonkeyPatch):
    """The library looked up as a new process would (`load_outcome` is cached per process: this
    one has loaded the real library), with the project's warnings collected."""
    monkeypatch.setattr(native, "load_outcome", functools.cache(native.load_outcome.__wrapped__))
    native_reader._warn_not_built.cache_clear()
    handler = _Warnings()
    logger = logging.getLogger("tfx_dynamic_inputs")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        native_reader._warn_not_built.cache_clear()


def _python_store_reads(run_dir: str) -> None:
    store = RecordStore.open(run_dir, "x", backend="disk")
    assert store.disk_reader == "python"
    assert store.read(np.arange(len(RECORDS))).numpy().tolist() == RECORDS


FOLDER_MODES = st.sampled_from([0o700, 0o755, 0o775, 0o757, 0o777, 0o1777, 0o1770])
FILE_MODES = st.sampled_from([0o755, 0o644, 0o600, 0o664, 0o646, 0o666, 0o777])
LIBRARIES = st.sampled_from(["planted", "link to planted", "fifo"])
RECORDS_KINDS = st.sampled_from(
    ["missing", "garbled", "other digest", "planted digest", "other name", "link to a record"]
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    folder_mode=FOLDER_MODES,
    library_kind=LIBRARIES,
    library_mode=FILE_MODES,
    record_kind=RECORDS_KINDS,
    record_mode=FILE_MODES,
    garbage=st.binary(max_size=200),
)
def test_a_library_this_installation_did_not_build_is_never_loaded(
    tmp_path_factory,
    monkeypatch,
    planted,
    run_dir,
    folder_mode,
    library_kind,
    library_mode,
    record_kind,
    record_mode,
    garbage,
):
    """Every cache state but "our library, its record, a private folder" (which, all files
    being root's here, is what a build leaves) loads nothing, with one warning naming why, and
    the disk store reads with its Python reader."""
    private = not folder_mode & 0o022
    assume(
        not private
        or library_kind != "planted"
        or library_mode & 0o022
        or record_kind != "planted digest"
        or record_mode & 0o022
    )
    base = tmp_path_factory.mktemp("cache")
    folder = base / "native"
    folder.mkdir()
    monkeypatch.setattr(native, "library_dir", lambda: str(folder))
    library = native.library_path()
    name = os.path.basename(library)
    with open(planted, "rb") as f:
        planted_bytes = f.read()
    copy = base / "planted-copy.so"
    copy.write_bytes(planted_bytes)
    if library_kind == "planted":
        with open(library, "wb") as f:
            f.write(planted_bytes)
        os.chmod(library, library_mode)
    elif library_kind == "link to planted":
        os.symlink(copy, library)
    else:
        os.mkfifo(library, library_mode)
    digest = hashlib.sha256(planted_bytes).hexdigest()
    record = library + trusted_files.RECORD_SUFFIX
    lines = {
        "garbled": garbage,
        "other digest": f"{hashlib.sha256(garbage).hexdigest()}  {name}\n".encode(),
        "planted digest": f"{digest}  {name}\n".encode(),
        "other name": f"{digest}  other{name}\n".encode(),
    }
    if record_kind == "link to a record":
        elsewhere = base / "record"
        elsewhere.write_bytes(lines["planted digest"])
        os.symlink(elsewhere, record)
    elif record_kind != "missing":
        with open(record, "wb") as f:
            f.write(lines[record_kind])
        os.chmod(record, record_mode)
    os.chmod(folder, folder_mode)

    marker = base / "loaded"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.setenv(native.BUILD_AT_FIRST_USE_ENV, "0")
    with _fresh_process_lookup(monkeypatch) as warnings:
        _python_store_reads(run_dir)
        outcome = native.load_outcome()
    assert outcome.module is None
    assert not marker.exists()
    assert warnings == [outcome.warning]
    assert "\n" not in outcome.warning and "not loading it" in outcome.warning
    assert str(folder) in outcome.warning


def test_the_library_is_loaded_through_the_descriptor_that_was_checked(tmp_path, planted):
    """Between the check and the load a name swapped in the folder changes nothing (TOCTOU):
    the path handed to the loader is the checked file's descriptor."""
    folder = tmp_path / "native"
    trusted_files.make_private_folder(str(folder))
    library = str(folder / "ours.so")
    ours = b"\x7fELF our build"
    with open(library, "wb") as f:
        f.write(ours)
    trusted_files.save_record(library, hashlib.sha256(ours).hexdigest())
    with trusted_files.open_verified(library) as checked:
        os.replace(planted, library)  # the swap, after the check
        with open(checked, "rb") as f:
            assert f.read() == ours
    refused = pytest.raises(trusted_files.UntrustedLibraryError, match="does not hold the bytes")
    with refused, trusted_files.open_verified(library):
        pass


@pytest.mark.parametrize("blocked", ["a file in the path", "a folder others may write"])
def test_an_unusable_cache_is_one_warning_and_the_python_reader(
    tmp_path, monkeypatch, run_dir, blocked
):
    """Item 8: the build folder `$TFX_DYNAMIC_INPUTS_CACHE/native` cannot be created (a regular
    file stands in its path: refused to root too), or exists but others may write to it. Opening
    a disk store raised the `OSError` of `os.makedirs`; now: one warning, the Python reader."""
    if native.compiler() is None:
        pytest.skip("no C++ compiler: the build fails before it reaches the folder")
    cache = tmp_path / "cache"
    if blocked == "a file in the path":
        cache.write_text("not a folder\n")
    else:
        (cache / "native").mkdir(parents=True)
        os.chmod(cache / "native", 0o777)
    # The package folder is not writable (as for a system-wide install): builds go to the cache.
    monkeypatch.setattr(native, "_HERE", str(tmp_path / "missing" / "native"))
    monkeypatch.setenv(native.CACHE_ENV, str(cache))
    monkeypatch.delenv(native.BUILD_AT_FIRST_USE_ENV, raising=False)
    assert native.library_dir() == str(cache / "native")
    with _fresh_process_lookup(monkeypatch) as warnings:
        _python_store_reads(run_dir)
        outcome = native.load_outcome()
    assert outcome.module is None
    assert warnings == [outcome.warning]
    assert f"cannot build into {cache / 'native'}" in outcome.warning
    assert "\n" not in outcome.warning
    assert not os.path.isdir(cache) or os.listdir(cache / "native") == []


def test_a_package_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    package = tmp_path / "package"
    package.mkdir()
    os.chmod(package, 0o775)
    monkeypatch.setattr(native, "_HERE", str(package))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    assert native.library_dir() == str(tmp_path / "cache" / "native")
    os.chmod(package, 0o755)
    assert native.library_dir() == str(package)
