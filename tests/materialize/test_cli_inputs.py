"""The materialize CLI refuses input folders that hold nothing of its job's kind: one line,
status 2, before Beam or TensorFlow load (not "nothing left to materialize: 0 of 0" after them)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.materialize import generate
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import preflight
from tfx_dynamic_inputs.materialize.config import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from tfx_dynamic_inputs.materialize.errors import MaterializeError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pairs_argv(tmp_path) -> list[str]:
    argv = generate.empty_pairs_argv(tmp_path)
    for folder in ("x", "y"):
        os.remove(tmp_path / folder / "a.png")
    return argv


@pytest.mark.parametrize("stray", [None, "notes.txt", "a.png.txt"])
def test_a_pairs_folder_without_images_is_one_line_and_status_2(tmp_path, capsys, stray):
    argv = _pairs_argv(tmp_path)
    (tmp_path / "y" / "b.jpg").write_bytes(b"")
    if stray:
        (tmp_path / "x" / stray).write_text("not an image")
    assert materialize_cli.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"no image files (.png .jpg .jpeg) under --x_dir {tmp_path / 'x'}" in line, line
    assert not os.path.exists(tmp_path / "out")


def test_the_y_folder_is_checked_too(tmp_path, capsys):
    argv = _pairs_argv(tmp_path)
    (tmp_path / "x" / "deep" / "er").mkdir(parents=True)
    (tmp_path / "x" / "deep" / "er" / "A.JPEG").write_bytes(b"")
    assert materialize_cli.main(argv) == 2
    assert "under --y_dir" in capsys.readouterr().err


def test_audio_by_speaker_folder_needs_an_audio_file_under_root(tmp_path, capsys):
    (tmp_path / "speaker" / "clip").mkdir(parents=True)
    (tmp_path / "speaker" / "clip" / "readme.md").write_text("no audio here")
    argv = ["audio", "--speaker_from_path", "--root", str(tmp_path / "speaker")]
    assert materialize_cli.main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no audio files (.wav .wave .flac" in err, err
    assert f"under --root {tmp_path / 'speaker'}" in err


@pytest.mark.parametrize("extension", [*AUDIO_EXTENSIONS, ".WAV", ".Flac"])
def test_any_audio_extension_in_any_case_passes(tmp_path, extension):
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / f"clip{extension}").write_bytes(b"")
    preflight.check_holds_inputs({"--root": str(tmp_path)}, {"--root": ("audio", AUDIO_EXTENSIONS)})


def test_unlisted_flags_and_object_store_folders_are_not_checked(tmp_path):
    empty = str(tmp_path)
    preflight.check_holds_inputs({"--root": empty}, {})
    preflight.check_holds_inputs(
        {"--x_dir": "gs://bucket/x"}, {"--x_dir": ("image", IMAGE_EXTENSIONS)}
    )
    with pytest.raises(MaterializeError, match="no image files"):
        preflight.check_holds_inputs({"--x_dir": empty}, {"--x_dir": ("image", IMAGE_EXTENSIONS)})


def test_the_refusal_comes_before_tensorflow_or_beam_load(tmp_path):
    (tmp_path / "empty").mkdir()
    argv = ["audio", "--speaker_from_path", "--root", str(tmp_path / "empty")]
    argv += ["--output_dir", str(tmp_path / "out")]
    code = (
        "import sys\n"
        "from tfx_dynamic_inputs.materialize.__main__ import main\n"
        f"status = main({argv!r})\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'apache_beam'})\n"
        "assert not heavy, heavy\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("materialize audio: error: no audio files"), done.stderr
