"""The native reader when a file it maps is cut short under it: a shard under
`reader="mapped"` reads as damaged records, an offset index under either reader fails the read
with one line, and the process lives on. Core only: the guard is the op's own C++, the same on every
TensorFlow, and the check starts a TensorFlow process of its own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tfx_dynamic_inputs import native

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(native.op_library() is None, reason="the native library is not built here")
def test_a_shard_or_index_cut_short_under_the_native_reader_is_damage_not_a_crash(tmp_path):
    """A read past the end of a mapped file raises SIGBUS. The mapped reader's kernel maps a
    shard, the shard is cut short in the middle of record 10, and the same kernel reads every
    record again: the records before the cut read as written, the rest (most on pages the cut
    removed) as damaged, and the process lives on; the store then fails naming the shard's two
    sizes. Emptying the offset index in place then fails the next read of that kernel, and of a
    `pread` kernel made before, naming the index. A SIGBUS outside the reader's copies still
    reaches the handler installed before it (faulthandler's), which ends the process."""
    worker = subprocess.run(
        [sys.executable, "-m", "tests.inputs.truncated_mapping_worker", str(tmp_path), "10"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [line for line in worker.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the worker died before its result (exit {worker.returncode}): {worker.stderr}"
    result = json.loads(lines[0])
    assert result["ok_before"] == [True] * 40
    assert result["ok_after"] == [i < 10 for i in range(40)]
    assert result["intact_after"]
    assert result["pages_past_the_cut"] >= 20  # the guard, not only the frame checks, was needed
    assert re.fullmatch(
        r"shard \S+data-00000-of-00001\.tfrecord holds \d+ bytes, \d+ when the store was opened on"
        r" run \w+: it was replaced since; open the run again",
        result["store_error"],
    )
    for reader in ("mapped", "pread"):
        assert re.search(
            r"offset index \S+offsets\.npy was cut short under this reader \(a page of its rows is"
            r" gone\): the run was overwritten in place; open it again",
            result["index_emptied_error"][reader] or "",
        ), (reader, result["index_emptied_error"])
    assert worker.returncode == -signal.SIGBUS, worker.stderr[-2000:]
    assert "Fatal Python error: Bus error" in worker.stderr
