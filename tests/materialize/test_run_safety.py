"""A job deletes only what it wrote and can prove it wrote: its own run, by run id, never
through a link, never a folder of the user's, never its inputs (issue 20, items 1, 2 and the
dangling `--output_dir` link of item 8).

Every case runs the real CLI (`python -m tfx_dynamic_inputs.materialize pairs`) on a folder set up
as a user could have it, and checks both the one-line error and that nothing outside the run moved.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.materialize import readback
from tests.materialize.pair_inputs import write_pairs_inputs
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import claims, spill


def _tree(root: str) -> dict[str, bytes]:
    """Every file below `root` (links not followed) with its bytes: what must not change."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = (
                os.readlink(path).encode()
                if os.path.islink(path)
                else pathlib.Path(path).read_bytes()
            )
    return found


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(20)
    x_names = [f"x{i}.png" for i in range(6)]
    y_names = [f"y{i}.png" for i in range(4)]
    return write_pairs_inputs(root, x_names, y_names, {x: y_names[:2] for x in x_names}, rng)


def _flags(inputs: dict[str, str], output_dir: str, *extra: str) -> list[str]:
    return [
        "pairs",
        *("--x_dir", inputs["x"], "--y_dir", inputs["y"], "--pairs", inputs["pairs"]),
        *("--output_dir", output_dir, *extra),
    ]


def _refused(capsys, flags: list[str], message: str, status: int = 2) -> None:
    """The job fails with one line on stderr that holds `message`, with `status`: 2 for what the
    CLI's preflight refuses, 1 for what the job refuses once it reads the folder's run."""
    got = materialize_cli.main(flags)
    err = capsys.readouterr().err
    assert got == status, err
    assert err.count("\n") == 1 and message in err, err


@pytest.fixture(scope="module")
def committed_run(inputs, tmp_path_factory) -> str:
    """One real run of the job: what `--overwrite` may replace."""
    output_dir = str(tmp_path_factory.mktemp("run") / "out")
    assert materialize_cli.main(_flags(inputs, output_dir)) == 0
    return output_dir


def _copy_of(run: str, tmp_path) -> str:
    copy = str(tmp_path / "out")
    shutil.copytree(run, copy, symlinks=True)
    return copy


# --------------------------------------------------- 1. nothing outside the output folder


def _victim(tmp_path) -> str:
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "f").write_text("keep me")
    return str(victim)


def test_a_refused_run_deletes_nothing_a_spill_pointer_names(inputs, tmp_path, capsys):
    """The issue's repro: a `.spill` file naming another folder, in a folder that is not empty."""
    victim = _victim(tmp_path)
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "n").write_text("x")
    (output_dir / ".spill").write_text(victim)
    for name in (".spill-" + "ab" * 16, ".spill-"):  # pointers under this version's names too
        (output_dir / name).write_text(victim)
    before = _tree(str(tmp_path))
    _refused(capsys, _flags(inputs, str(output_dir)), "is not empty")
    assert _tree(str(tmp_path)) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_spill_link_and_a_users_spill_folder_are_left_alone(inputs, tmp_path, capsys, overwrite):
    victim = _victim(tmp_path)
    output_dir = tmp_path / "out"
    (output_dir / ".spill").mkdir(parents=True)
    (output_dir / ".spill" / "mine.txt").write_text("the user's own .spill folder")
    os.symlink(victim, output_dir / ".spill-link")
    before = _tree(str(tmp_path))
    flags = _flags(inputs, str(output_dir), *(["--overwrite"] if overwrite else []))
    _refused(capsys, flags, *(("no run of this job", 1) if overwrite else ("is not empty",)))
    assert _tree(str(tmp_path)) == before


def test_a_stale_claim_takeover_removes_only_the_dead_runs_spill_folder(inputs, tmp_path):
    """A killed launcher's claim is taken over; a pointer that names a folder the dead run did
    not create (not `materialize-spill-<its run id>`) is not followed."""
    victim = _victim(tmp_path)
    output_dir = str(tmp_path / "out")
    os.makedirs(output_dir)
    dead = subprocess.Popen(["true"])
    dead.wait()
    dead_run = "de" * 16
    assert claims.try_claim(output_dir, claims.Claim(dead_run, socket.gethostname(), dead.pid, "t"))
    with open(spill.spill_dir(output_dir, dead_run), "w") as pointer:
        pointer.write(victim)
    other_run_folder = os.path.join(output_dir, spill.SPILL_PREFIX + "0f" * 16)
    os.makedirs(other_run_folder)  # another run's name: not the dead run's, so kept
    before = _tree(victim)
    # Not empty (the other folder, the pointer): --overwrite may replace the dead run.
    assert materialize_cli.main(_flags(inputs, output_dir, "--overwrite")) == 0
    assert _tree(victim) == before
    assert os.path.isdir(other_run_folder)
    assert not os.path.exists(spill.spill_dir(output_dir, dead_run))  # the pointer itself


@pytest.mark.parametrize("entry", [layout.EXAMPLES_DIR, layout.INDEX_DIR, "tensorboard"])
def test_overwrite_never_deletes_through_a_link(committed_run, tmp_path, capsys, entry, inputs):
    output_dir = _copy_of(committed_run, tmp_path)
    victim = _victim(tmp_path)
    shutil.rmtree(os.path.join(output_dir, entry))
    os.symlink(victim, os.path.join(output_dir, entry))
    before = _tree(str(tmp_path))
    _refused(
        capsys,
        _flags(inputs, output_dir, "--overwrite"),
        f"{os.path.join(output_dir, entry)} is a symbolic link",
        status=1,
    )
    assert _tree(str(tmp_path)) == before


def test_overwrite_replaces_a_run_and_keeps_the_users_other_files(committed_run, tmp_path, inputs):
    output_dir = _copy_of(committed_run, tmp_path)
    with open(os.path.join(output_dir, "notes.txt"), "w") as f:
        f.write("mine")
    old_run = layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))[layout.RUN_ID_KEY]
    assert materialize_cli.main(_flags(inputs, output_dir, "--overwrite")) == 0
    summary = layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))
    assert summary["ok"] and summary[layout.RUN_ID_KEY] != old_run
    assert pathlib.Path(output_dir, "notes.txt").read_text() == "mine"
    assert readback.spill_entries(output_dir) == []


# ------------------------------------------------------ 2. only a run can be overwritten


def test_overwrite_refuses_a_folder_that_holds_no_run(inputs, tmp_path, capsys):
    output_dir = tmp_path / "out"
    for entry in (layout.EXAMPLES_DIR, layout.INDEX_DIR, "tensorboard"):
        (output_dir / entry).mkdir(parents=True)
        (output_dir / entry / "mine.txt").write_text(entry)
    before = _tree(str(output_dir))
    _refused(
        capsys,
        _flags(inputs, str(output_dir), "--overwrite"),
        "but no run of this job (no summary.json or index naming a run id): nothing deleted",
        status=1,
    )
    assert _tree(str(output_dir)) == before


@pytest.mark.parametrize("where", ["x", "x/inner", "y", "parent"])
def test_an_output_folder_that_is_in_or_holds_an_input_is_refused(inputs, tmp_path, capsys, where):
    """`--output_dir` equal to `--x_dir` (which deleted six inputs), inside it (the job read its
    own claim and the previous run as inputs), or around it."""
    parent = os.path.dirname(inputs["x"])
    output_dir = {
        "x": inputs["x"],
        "x/inner": os.path.join(inputs["x"], "inner"),
        "y": inputs["y"],
        "parent": parent,
    }[where]
    before = _tree(parent)
    domain = "y" if where == "y" else "x"
    relation = {"x": "is", "x/inner": "lies inside", "y": "is", "parent": "holds"}[where]
    _refused(
        capsys,
        _flags(inputs, output_dir, "--overwrite"),
        f"{relation} --{domain}_dir {inputs[domain]}",
    )
    assert _tree(parent) == before


# ---------------------------------------------------------------- 8. a dangling link


def test_a_dangling_output_dir_link_is_one_line(inputs, tmp_path, capsys):
    link = tmp_path / "out"
    os.symlink(tmp_path / "gone", link)
    _refused(capsys, _flags(inputs, str(link)), f"is a symbolic link to {str(tmp_path / 'gone')!r}")
    assert not os.path.exists(tmp_path / "gone")


@pytest.mark.parametrize("case", ["not empty", "missing input", "inside an input"])
def test_the_cli_refuses_a_bad_folder_before_importing_beam_or_tensorflow(inputs, tmp_path, case):
    """A bad folder is one line at once: the checks need neither Beam nor TensorFlow (which
    cost 4-5 s to import)."""
    output_dir = tmp_path / "out"
    flags = _flags(inputs, str(output_dir))
    if case == "not empty":
        output_dir.mkdir()
        (output_dir / "mine.txt").write_text("x")
    elif case == "missing input":
        flags[flags.index("--x_dir") + 1] = str(tmp_path / "nowhere")
    else:
        flags[flags.index("--output_dir") + 1] = os.path.join(inputs["x"], "out")
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs.materialize import __main__ as cli\n"
        f"status = cli.main({flags!r})\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'apache_beam'})\n"
        "print(status, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.stdout.strip() == "2 []", result.stderr
    assert result.stderr.count("\n") == 1 and "materialize pairs: error:" in result.stderr
