"""`tfx_dynamic_inputs.layout` writers: TFRecord shards byte-identical to `tf.io.TFRecordWriter`'s,
written without TensorFlow."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs import layout

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

payload_lists = st.lists(
    st.one_of(st.just(b""), st.binary(max_size=64), st.binary(min_size=1000, max_size=5000)),
    max_size=12,
)


def _tf_shard(path: str, records: list[bytes]) -> bytes:
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        return f.read()


@settings(max_examples=25, deadline=None)
@given(records=payload_lists)
def test_shard_bytes_match_tf_writer(tmp_path_factory, records):
    directory = tmp_path_factory.mktemp("shard")
    ours = str(directory / "nested" / "data-00000-of-00001.tfrecord")
    written = layout.write_shard(ours, records)
    with open(ours, "rb") as f:
        data = f.read()
    assert data == _tf_shard(str(directory / "tf.tfrecord"), records)
    assert os.listdir(os.path.dirname(ours)) == [os.path.basename(ours)]  # no temporary left
    assert written.dtype == np.int64 and written.shape == (len(records), 2)
    for (offset, length), record in zip(written, records, strict=True):
        start = offset + layout.FRAME_HEADER_BYTES
        assert data[start : start + length] == record
    read_back = [r.numpy() for r in tf.data.TFRecordDataset(ours)]
    assert read_back == records


def test_write_shard_replaces_an_existing_shard(tmp_path):
    path = str(tmp_path / "data-00000-of-00001.tfrecord")
    layout.write_shard(path, [b"old" * 100, b"older"])
    layout.write_shard(path, [b"new"])
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == [b"new"]
    assert os.listdir(tmp_path) == ["data-00000-of-00001.tfrecord"]


def test_save_helpers_round_trip(tmp_path):
    root = str(tmp_path / "run")
    array = np.arange(12, dtype=np.int64).reshape(4, 3)
    layout.save_npy(os.path.join(root, "a", "b", "x.npy"), array)
    np.testing.assert_array_equal(layout.load_npy(os.path.join(root, "a", "b", "x.npy")), array)
    layout.save_json(os.path.join(root, "s.json"), {"b": [1, 2], "a": "é"})
    assert layout.load_json(os.path.join(root, "s.json")) == {"a": "é", "b": [1, 2]}
    layout.save_lines(os.path.join(root, "ids.txt"), ["x/1.png", "ü", ""])
    assert layout.load_lines(os.path.join(root, "ids.txt")) == ["x/1.png", "ü", ""]
    layout.save_lines(os.path.join(root, "ids.txt"), ["shorter"])  # overwrite truncates
    assert layout.load_lines(os.path.join(root, "ids.txt")) == ["shorter"]
    layout.save_csr(os.path.join(root, "csr"), np.array([0, 2, 3]), np.array([4, 5, 6]))
    row_splits, values = layout.load_csr(os.path.join(root, "csr"))
    assert row_splits.tolist() == [0, 2, 3] and values.tolist() == [4, 5, 6]


def test_writers_do_not_import_tensorflow(tmp_path):
    """What a Beam worker does with layout (shards, indexes, json) must not load TensorFlow."""
    script = textwrap.dedent(
        f"""
        import os, sys
        import numpy as np
        from tfx_dynamic_inputs import layout
        out = {str(tmp_path)!r}
        path = os.path.join(layout.examples_dir(out, "x"), layout.shard_name(0, 1))
        offsets = layout.write_shard(path, [b"a", b"", b"bc"])
        layout.save_record_set_index(
            out, "x", [path], np.concatenate([np.zeros([3, 1], np.int64), offsets], 1),
            ["a", "b", "c"],
        )
        layout.save_csr(layout.pairs_index_dir(out), np.array([0, 1]), np.array([0]))
        layout.save_json(os.path.join(out, layout.SUMMARY_FILE), {{"ok": True}})
        loaded = sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))
        print("TF_MODULES", loaded)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "TF_MODULES []" in result.stdout, result.stdout
    shard = os.path.join(layout.examples_dir(str(tmp_path), "x"), layout.shard_name(0, 1))
    assert [r.numpy() for r in tf.data.TFRecordDataset(shard)] == [b"a", b"", b"bc"]
    assert layout.load_lines(os.path.join(layout.index_dir(str(tmp_path), "x"), "ids.txt")) == [
        "a",
        "b",
        "c",
    ]


@pytest.mark.parametrize(
    "output_dir, relative, expected",
    [
        (
            "gs://bucket/root/offset_index/7",
            "../../examples/7/Split-x/a.tfrecord",
            "gs://bucket/root/examples/7/Split-x/a.tfrecord",
        ),
        ("s3://b/run", "examples/Split-y/a.tfrecord", "s3://b/run/examples/Split-y/a.tfrecord"),
        (
            "/tmp/root/offset_index/7",
            "../../examples/7/Split-x/a.tfrecord",
            "/tmp/root/examples/7/Split-x/a.tfrecord",
        ),
        ("run", "examples/Split-x/a.tfrecord", "run/examples/Split-x/a.tfrecord"),
    ],
)
def test_resolve_folds_parent_segments_and_keeps_uri_schemes(output_dir, relative, expected):
    assert layout.resolve(output_dir, relative) == expected


def test_write_record_set_reads_back_in_order_and_checks_the_shard_count(tmp_path):
    records = [f"record-{i}".encode() * (i % 5) for i in range(11)]
    ids = [f"id-{i:02d}" for i in range(11)]
    shards = [records[:4], records[4:4], records[4:]]
    paths = layout.write_record_set(str(tmp_path), "x", iter(shards), 3, ids)
    assert [os.path.basename(p) for p in paths] == [layout.shard_name(s, 3) for s in range(3)]
    read_back = [r.numpy() for r in tf.data.TFRecordDataset(paths)]
    assert read_back == records
    offsets = np.asarray(
        layout.load_npy(os.path.join(layout.index_dir(str(tmp_path), "x"), layout.OFFSETS_FILE))
    )
    assert offsets[:, 0].tolist() == [0] * 4 + [2] * 7
    assert (
        layout.load_lines(os.path.join(layout.index_dir(str(tmp_path), "x"), layout.IDS_FILE))
        == ids
    )
    with pytest.raises(ValueError, match="got 2 shards, expected 3"):
        layout.write_record_set(str(tmp_path / "short"), "x", iter(shards[:2]), 3, ids[:4])
