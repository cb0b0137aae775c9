"""One `run_local` at a time in a work dir (issue 46.7): two runs 5 s apart both gated, pushed
and printed each other's nodes. The second is now refused in one line naming the first, before
any work; a claim left by a killed run is taken over."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from tfx_dynamic_inputs.materialize import claims
from tfx_dynamic_inputs.pipeline import run_local, work_dir_claim

# A process that holds the claim on argv[1] until its stdin closes.
_HOLDER = (
    "import sys\n"
    "from tfx_dynamic_inputs.pipeline import work_dir_claim\n"
    "with work_dir_claim.claimed(sys.argv[1]) as claim:\n"
    "    print(claim.run_id, flush=True)\n"
    "    sys.stdin.read()\n"
)


def _holder(work_dir: str) -> tuple[subprocess.Popen, str]:
    """A second process holding the claim on `work_dir`, and its run id."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, work_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    run_id = holder.stdout.readline().strip()
    assert run_id, "the holder did not claim the work dir"
    return holder, run_id


def test_a_second_run_on_a_work_dir_in_use_is_refused_in_one_line_naming_the_holder(tmp_path):
    work_dir = str(tmp_path / "work")
    holder, run_id = _holder(work_dir)
    try:
        started = time.monotonic()
        # Before the claim this ran the whole speaker pipeline beside the holder (minutes).
        done = subprocess.run(
            [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", "speaker"]
            + ["--work_dir", work_dir, "--num_epochs", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        seconds = time.monotonic() - started
        assert done.returncode == 2, done.stderr[-2000:]
        [line] = done.stderr.splitlines()
        assert line.startswith(f"error: --work_dir {work_dir} is in use by run {run_id} ")
        assert f"(pid {holder.pid} on " in line and claims.claim_path(work_dir) in line
        assert done.stdout == ""
        assert seconds < 30  # refused before TensorFlow and TFX load
        assert claims.load_claim(work_dir).run_id == run_id  # the holder's claim stays
        assert os.listdir(work_dir) == [os.path.basename(claims.claim_path(work_dir))]
    finally:
        holder.communicate(timeout=60)
    assert holder.returncode == 0
    assert claims.load_claim(work_dir) is None  # released when the holder ended


def test_a_claim_left_by_a_killed_run_is_taken_over_with_a_warning(tmp_path, caplog):
    work_dir = str(tmp_path / "work")
    holder, run_id = _holder(work_dir)
    holder.kill()  # SIGKILL: no cleanup runs, its claim stays
    holder.wait()  # reaped: a zombie's pid would still look alive
    holder.stdout.close()
    holder.stdin.close()
    assert claims.load_claim(work_dir).run_id == run_id
    with caplog.at_level(logging.WARNING), work_dir_claim.claimed(work_dir) as claim:
        assert claims.load_claim(work_dir) == claim
    assert f"taking over the stale claim of run {run_id} (pid {holder.pid} " in caplog.text
    assert claims.load_claim(work_dir) is None


def test_run_local_in_this_process_is_refused_and_releases_its_own_claim(tmp_path, capsys):
    work_dir = str(tmp_path / "work")
    with work_dir_claim.claimed(work_dir) as claim:
        with pytest.raises(SystemExit) as exited:
            run_local.main(["speaker", "--work_dir", work_dir])
        assert exited.value.code == 2
        [line] = capsys.readouterr().err.splitlines()
        assert f"is in use by run {claim.run_id} (pid {os.getpid()} on " in line
    # A run refused after claiming (here: a missing input) leaves no claim behind.
    with pytest.raises(SystemExit) as exited:
        run_local.main(
            ["speaker", "--work_dir", work_dir, "--manifest", str(tmp_path / "missing.csv")]
            + ["--audio_root", str(tmp_path)]
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("error: --manifest: no such file: ")
    assert claims.load_claim(work_dir) is None


def test_a_work_dir_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "file"
    path.write_text("")
    refused = pytest.raises(run_local.cli.ConfigError, match=f"^--work_dir {path}: File exists$")
    with refused, work_dir_claim.claimed(str(path)):
        pass
