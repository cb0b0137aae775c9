"""components.native: the build command and how a missing compiler is reported."""

from __future__ import annotations

import os

import pytest

from components import native
from components.native.__main__ import main


def test_library_path_names_the_source_version(tmp_path, monkeypatch):
    built = native.library_path()
    assert os.path.dirname(built) == os.path.dirname(native.SOURCE)
    changed = tmp_path / "read_records_op.cc"
    with open(native.SOURCE, "rb") as f:
        changed.write_bytes(f.read() + b"\n// edited\n")
    monkeypatch.setattr(native, "SOURCE", str(changed))
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
    before = sorted(os.listdir(os.path.dirname(native.SOURCE)))
    assert main(["--force"]) == 0
    assert "warning: native ops not built: no C++ compiler found" in capsys.readouterr().out
    assert main(["--force", "--required"]) == 1
    assert "error: native ops not built" in capsys.readouterr().out
    # A failed rebuild leaves an existing build alone.
    assert sorted(os.listdir(os.path.dirname(native.SOURCE))) == before


def test_failed_compilation_reports_the_compiler_output(monkeypatch, tmp_path):
    broken = tmp_path / "read_records_op.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(native, "SOURCE", str(broken))
    if native.compiler() is None:
        pytest.skip("no C++ compiler")
    with pytest.raises(native.NativeBuildError, match="failed"):
        native.build()
    assert not os.path.exists(native.library_path())
