"""A full disk during a materialize job (issue 46, item 12): the run that fails stays provably a
run, and `--overwrite` replaces it once there is room, removing only what it wrote.

Before, a full disk cut `summary.json` short (0 bytes, or the bytes that fit): neither a commit
nor a run id `--overwrite` could read, so the folder was refused until cleaned by hand. Now the
summary is written whole or not at all (`commit_file.commit_whole`), the failure is recorded
whole where it fits, and where it does not the job keeps its claim as the proof.

The disk is filled with `RLIMIT_FSIZE` in a process of its own (`full_disk_worker`): the OS
refuses every write past a size, as a full disk refuses every write, and with the same kind of
error (`EFBIG` there, `ENOSPC` here). Each case sizes the limit so that a chosen write is the
first to fail: the summary, then everything after the claim, then the claim itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.helpers.paths import REPO_ROOT
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import claims, commit_file
from tfx_dynamic_inputs.materialize.pictures import PICTURES_DIR

pytestmark = pytest.mark.slow
X_IDS, Y_IDS = ["a.png", "b.png", "c.png"], ["p.png", "q.png"]
TOO_LARGE = f"[Errno 27] {os.strerror(27)}"  # EFBIG, what RLIMIT_FSIZE makes a write fail with
# What a run writes in its folder, and the user's file written beside a failed run.
RUN_ENTRIES = {
    layout.EXAMPLES_DIR,
    layout.INDEX_DIR,
    layout.SUMMARY_FILE,
    layout.REJECTS_FILE,
    PICTURES_DIR,
}
USERS_FILE = "notes.txt"


@pytest.fixture(scope="module")
def flags(tmp_path_factory) -> list[str]:
    """The pairs job's flags over three 1x1 PNGs in x and two in y (shards of ~200 bytes, far
    below the summary's ~1 KB), one record a shard; the output folder follows."""
    root = tmp_path_factory.mktemp("inputs")
    for folder, ids in (("x", X_IDS), ("y", Y_IDS)):
        (root / folder).mkdir()
        for image in ids:
            Image.fromarray(np.zeros((1, 1), np.uint8)).save(root / folder / image)
    with open(root / "pairs.jsonl", "w") as f:
        for x in X_IDS:
            f.write(json.dumps({"x": x, "y": Y_IDS}) + "\n")
    return ["pairs", "--x_dir", str(root / "x"), "--y_dir", str(root / "y")] + [
        "--pairs",
        str(root / "pairs.jsonl"),
        "--num_shards",
        "3",
        "--output_dir",
    ]


@pytest.fixture(scope="module")
def reference_run(flags, tmp_path_factory) -> pathlib.Path:
    """A run of the job, written with room to spare."""
    output_dir = tmp_path_factory.mktemp("reference") / "out"
    assert materialize_cli.main([*flags, str(output_dir)]) == 0
    return output_dir


@pytest.fixture(scope="module")
def commit_limit(reference_run) -> int:
    """A file size every part of a run fits in, but its summary does not: measured on a run."""
    output_dir = reference_run
    sizes = {}
    for entry in (layout.EXAMPLES_DIR, layout.INDEX_DIR, layout.REJECTS_FILE, layout.SUMMARY_FILE):
        path = output_dir / entry
        files = path.rglob("*") if path.is_dir() else [path]
        sizes.update({str(f): f.stat().st_size for f in files if f.is_file()})
    summary_size = sizes.pop(str(output_dir / layout.SUMMARY_FILE))
    limit = max(sizes.values()) + 1
    assert limit < summary_size, (limit, summary_size)
    return limit


def _limited(limit: int, output_dir, flags: list[str], again: bool = False):
    """Runs the job into `output_dir` under a file size limit in a process of its own; its
    report (`full_disk_worker`) and the last line it wrote to stderr."""
    argv = [*flags, str(output_dir)]
    command = [sys.executable, "-m", "tests.materialize.full_disk_worker", str(limit)]
    command += [str(output_dir), json.dumps(argv)] + (["--again"] if again else [])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    errors = [line for line in done.stderr.splitlines() if line.startswith("materialize pairs:")]
    return report, errors


def _overwritten_keeping_the_users_file(output_dir, flags: list[str], failed_run: str) -> None:
    """Once there is room: `--overwrite` (this process) replaces the failed run, keeps the
    user's file, and leaves nothing of the failed run."""
    (output_dir / USERS_FILE).write_text("mine")
    assert materialize_cli.main([*flags, str(output_dir), "--overwrite"]) == 0
    assert (output_dir / USERS_FILE).read_text() == "mine"
    assert set(os.listdir(output_dir)) == RUN_ENTRIES | {USERS_FILE}
    summary = layout.load_json(str(output_dir / layout.SUMMARY_FILE))
    assert summary["ok"] and summary[layout.RUN_ID_KEY] != failed_run


def test_a_commit_cut_short_leaves_a_whole_failed_summary(flags, commit_limit, tmp_path):
    output_dir = tmp_path / "out"
    report, errors = _limited(commit_limit, output_dir, flags)
    assert report["limited"] == 1
    assert errors == [
        f"materialize pairs: error: could not write the run to {output_dir}: {TOO_LARGE}; its "
        f"{layout.SUMMARY_FILE} says the run failed: free space, then run the same command with "
        "--overwrite"
    ]
    state = report["after_failure"]
    # Not the ~1 KB summary cut at the limit: the failure's own, whole.
    summary = json.loads(state["texts"][layout.SUMMARY_FILE])
    assert summary["ok"] is False and TOO_LARGE in summary["error"]
    run_id = summary[layout.RUN_ID_KEY]
    # The parts it wrote name it: --overwrite can prove they are a run's.
    assert json.loads(_shards_json(output_dir))[layout.RUN_ID_KEY] == run_id
    # Its claim is released, its staging folder gone.
    assert not [name for name in state["sizes"] if name.startswith((".claim", ".commit-"))]
    _overwritten_keeping_the_users_file(output_dir, flags, run_id)


def _shards_json(output_dir) -> str:
    return (output_dir / layout.INDEX_DIR / "x" / layout.SHARDS_FILE).read_text()


def _claim_size() -> int:
    """The bytes of a claim of this host, with the longest pid and the start time's length."""
    claim = claims.Claim("0" * 32, socket.gethostname(), 4194304, "2026-01-01T00:00:00+00:00")
    return len(json.dumps(dataclasses.asdict(claim), sort_keys=True))


@pytest.mark.parametrize("overwrite_by", ["a new process", "the failed run's process"])
def test_where_not_even_the_failure_fits_the_claim_stays_as_the_proof(
    flags, tmp_path, overwrite_by
):
    # The failure's summary names the run and the error: ~190 bytes; the claim ~120.
    if _claim_size() > 150:
        pytest.skip(f"a claim of host {socket.gethostname()!r} is as long as a failure's summary")
    output_dir = tmp_path / "out"
    again = overwrite_by == "the failed run's process"
    report, errors = _limited(_claim_size(), output_dir, flags, again=again)
    assert report["limited"] == 1
    claim_path = claims.claim_path(str(output_dir))
    assert errors[0] == (
        f"materialize pairs: error: could not write the run to {output_dir}: {TOO_LARGE}; its "
        f"claim {claim_path} stays as the run's: free space, then run the same command with "
        "--overwrite"
    )
    state = report["after_failure"]
    assert layout.SUMMARY_FILE not in state["sizes"], state  # no summary rather than a cut one
    run_id = json.loads(state["texts"][layout.CLAIM_FILE])["run_id"]
    assert not [name for name in state["sizes"] if name.startswith(commit_file.STAGING_PREFIX)]
    if again:  # the same process, once the limit is lifted: its own kept claim is stale
        assert report["again"] == 0 and errors[1:] == []
        summary = layout.load_json(str(output_dir / layout.SUMMARY_FILE))
        assert summary["ok"] and summary[layout.RUN_ID_KEY] != run_id
        assert claims.load_claim(str(output_dir)) is None
    else:  # this process: the failed run's is gone, its claim is stale
        _overwritten_keeping_the_users_file(output_dir, flags, run_id)


def test_a_claim_with_no_room_is_one_line_and_leaves_no_empty_claim(flags, tmp_path):
    output_dir = tmp_path / "out"
    report, errors = _limited(0, output_dir, flags)
    assert report["limited"] == 1
    assert errors == [
        f"materialize pairs: error: --output_dir {output_dir}: cannot write its claim "
        f"{claims.claim_path(str(output_dir))}: {TOO_LARGE}"
    ]
    assert report["after_failure"]["sizes"] == {}
    # Nothing to overwrite: the folder takes a run as it is.
    assert materialize_cli.main([*flags, str(output_dir)]) == 0


def test_a_summary_an_older_version_cut_short_is_overwritten(reference_run, flags, tmp_path):
    """A folder a full disk left before this fix: parts naming the run, a 0-byte summary."""
    output_dir = tmp_path / "out"
    shutil.copytree(reference_run, output_dir)
    run_id = json.loads(_shards_json(output_dir))[layout.RUN_ID_KEY]
    (output_dir / layout.SUMMARY_FILE).write_bytes(b"")
    _overwritten_keeping_the_users_file(output_dir, flags, run_id)
