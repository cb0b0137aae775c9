"""tfx_dynamic_inputs.native: the build command and how a missing compiler is reported."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess

import pytest

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.native.__main__ import main


@pytest.mark.parametrize("edited", range(len(native.SOURCES) + len(native.HEADERS)))
def test_library_path_names_the_sources_version(tmp_path, monkeypatch, edited):
    built = native.library_path()
    assert os.path.dirname(built) == os.path.dirname(native.SOURCES[0])
    files = list(native.SOURCES + native.HEADERS)
    changed = tmp_path / os.path.basename(files[edited])
    with open(files[edited], "rb") as f:
        changed.write_bytes(f.read() + b"\n// edited\n")
    files[edited] = str(changed)
    monkeypatch.setattr(native, "SOURCES", tuple(files[: len(native.SOURCES)]))
    monkeypatch.setattr(native, "HEADERS", tuple(files[len(native.SOURCES) :]))
    assert native.library_path() != built


def test_compiler_follows_cxx(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(native.COMPILER_ENV, raising=False)
    assert native.compiler() is None
    fake = tmp_path / "my-c++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(native.COMPILER_ENV, "my-c++")
    assert native.compiler() == "my-c++"


def test_missing_compiler_is_a_warning_unless_required(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(native.COMPILER_ENV, raising=False)
    before = sorted(os.listdir(os.path.dirname(native.SOURCES[0])))
    assert main(["--force"]) == 0
    assert "warning: native ops not built: no C++ compiler found" in capsys.readouterr().out
    assert main(["--force", "--required"]) == 1
    assert "error: native ops not built" in capsys.readouterr().out
    # A failed rebuild leaves an existing build alone.
    assert sorted(os.listdir(os.path.dirname(native.SOURCES[0]))) == before


def test_failed_compilation_reports_the_compiler_output(monkeypatch, tmp_path):
    broken = tmp_path / "index_shuffle_op.cc"
    broken.write_text("this is not C++\n")
    # First: the build ends at its first error, before the other file's TensorFlow headers.
    monkeypatch.setattr(native, "SOURCES", (str(broken), native.SOURCES[0]))
    if native.compiler() is None:
        pytest.skip("no C++ compiler")
    with pytest.raises(native.NativeBuildError, match="failed") as raised:
        native.build()
    # The compiler's message names the file and line it failed at.
    assert f"{broken}:1" in str(raised.value)
    assert not os.path.exists(native.library_path())


def test_first_use_builds_for_the_installed_tensorflow(tmp_path, monkeypatch):
    """In a process of its own: a second copy of the library in this one would register its
    kernel twice. A library planted at the build's name beforehand (its record naming other
    bytes) is never loaded but built over (issue 46, item 2): it would write a marker file."""
    cxx = native.compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(native, "library_dir", lambda: str(cache))
    planted = native.library_path()
    marker = tmp_path / "planted-was-loaded"
    subprocess.run(
        [cxx, "-shared", "-fPIC", "-x", "c", "-", "-o", planted],
        input="#include <stdio.h>\n__attribute__((constructor)) static void planted(void) "
        f'{{ FILE* f = fopen({json.dumps(str(marker))}, "w"); if (f) fclose(f); }}\n',
        text=True,
        check=True,
    )
    with open(planted + ".sha256", "w") as f:
        f.write(f"{'0' * 64}  {os.path.basename(planted)}\n")
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "from tfx_dynamic_inputs import native\n"
        f"native.library_dir = lambda: {str(cache)!r}\n"
        "op_module = native.op_library()\n"
        "print('loaded', all(hasattr(op_module, op) for op in "
        "('read_records_by_index', 'permute_positions', 'gather_permuted', 'element_keys')))\n"
        "print('path', native.library_path())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != native.BUILD_AT_FIRST_USE_ENV}
    done = run_python(script, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists()
    assert "building the native ops for TensorFlow" in done.stdout
    assert "loaded True" in done.stdout
    [built] = [line[len("path ") :] for line in done.stdout.splitlines() if line[:5] == "path "]
    name = os.path.basename(built)
    assert sorted(os.listdir(cache)) == [".build.lock", name, name + ".sha256"]
    with open(built, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(built + ".sha256") as f:
        assert f.read() == f"{digest}  {name}\n"  # as `sha256sum` writes it


def test_first_use_without_a_compiler_is_one_warning_and_the_python_reader(
    monkeypatch, tmp_path, caplog
):
    monkeypatch.setattr(native, "library_dir", lambda: str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(native.COMPILER_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.load_outcome.__wrapped__().module is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    assert "no C++ compiler found" in warnings[0].getMessage()
    assert "reads in Python" in warnings[0].getMessage()
    monkeypatch.setenv(native.BUILD_AT_FIRST_USE_ENV, "0")
    caplog.clear()
    assert native.load_outcome.__wrapped__() == native.LoadOutcome(None, None)
    assert not caplog.records


def test_a_read_only_package_folder_builds_into_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(native.os, "access", lambda path, mode: False)
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    assert native.library_dir() == str(tmp_path / "native")
    assert os.path.dirname(native.library_path()) == str(tmp_path / "native")


def test_a_build_says_in_one_warning_line_that_it_starts_and_where_it_writes(
    monkeypatch, tmp_path, caplog
):
    # A compiler that writes an empty library where `-o` says: the build's own steps, in 0 s.
    compiler = tmp_path / "fake-cxx"
    compiler.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n'
        "cat > /dev/null\n"
    )
    compiler.chmod(0o755)
    monkeypatch.setenv(native.COMPILER_ENV, str(compiler))
    monkeypatch.setattr(native, "library_dir", lambda: str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger=native.__name__):
        target = native.build()
    # Shown by Python's default handler (warnings and above), one line naming the library.
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "\n" not in record.getMessage()
    assert record.getMessage().startswith("building the native ops for TensorFlow ")
    assert record.getMessage().endswith(f" into {target}")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.build() == target  # built and verified: no second build, no line
    assert not caplog.records
