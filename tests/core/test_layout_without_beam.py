"""The layout's writers without Beam (the core install): the same bytes through `tf.io.gfile`."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import RecordStore
from tfx_dynamic_inputs.layout import filesystem

RECORDS = [bytes([i]) * (i * 7 % 23) for i in range(40)]


def _write_run(output_dir: str) -> list[str]:
    run_id = layout.new_run_id()
    shards = [RECORDS[:15], RECORDS[15:]]
    paths = layout.write_record_set(
        output_dir, "x", shards, 2, [str(i) for i in range(len(RECORDS))], run_id
    )
    layout.commit_run(output_dir, run_id)
    return paths


def _tree(root: str) -> dict[str, bytes]:
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".tfrecord") or name == "offsets.npy":
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files


def test_without_beam_the_layout_is_written_through_gfile_and_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystem, "has_beam", lambda: False)
    output_dir = str(tmp_path / "run")
    shard_paths = _write_run(output_dir)
    assert len(shard_paths) == 2 and all(os.path.getsize(p) > 0 for p in shard_paths)
    assert not [p for p in os.listdir(os.path.dirname(shard_paths[0])) if ".tmp-" in p]
    for backend in ("memory", "disk"):
        store = RecordStore.open(output_dir, "x", backend=backend, reader="python")
        read = store.read(np.arange(len(RECORDS))).numpy().tolist()
        assert read == RECORDS
    # A replaced file is replaced, as Beam's rename does.
    with filesystem.create(shard_paths[0] + ".new") as f:
        f.write(b"new")
    filesystem.replace(shard_paths[0] + ".new", shard_paths[0])
    assert filesystem.size(shard_paths[0]) == 3
    assert filesystem.read_at(shard_paths[0], [0, 2], 1) == b"nw"


@pytest.mark.full
@pytest.mark.skipif(not filesystem.has_beam(), reason="needs Beam to compare with")
def test_beam_and_gfile_writers_write_the_same_bytes(tmp_path, monkeypatch):
    _write_run(str(tmp_path / "beam"))
    monkeypatch.setattr(filesystem, "has_beam", lambda: False)
    _write_run(str(tmp_path / "gfile"))
    beam, gfile = _tree(str(tmp_path / "beam")), _tree(str(tmp_path / "gfile"))
    assert beam and beam == gfile


def test_an_empty_shard_is_written_through_gfile_too(tmp_path, monkeypatch):
    """A record set with fewer records than shards has empty shards; `tf.io.gfile` makes a file
    only at its first write (TF 2.21), so one closed unwritten would not exist to be renamed."""
    monkeypatch.setattr(filesystem, "has_beam", lambda: False)
    output_dir = str(tmp_path / "run")
    run_id = layout.new_run_id()
    paths = layout.write_record_set(output_dir, "x", [RECORDS[:1], []], 2, ["0"], run_id)
    layout.commit_run(output_dir, run_id)
    assert [os.path.getsize(p) for p in paths][1] == 0
    store = RecordStore.open(output_dir, "x", backend="disk", reader="python")
    assert store.read(np.array([0])).numpy().tolist() == RECORDS[:1]
