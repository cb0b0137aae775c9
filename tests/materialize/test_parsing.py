"""Ids, pair-list and manifest parsing, splits, verdicts: pure functions of the Beam jobs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.materialize import manifest, pair_list, paths, rejects, splits
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.verdict import decide


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("a.png", "a.png"),
        ("./a/b.png", "a/b.png"),
        ("a//b/../c.wav", "a/c.wav"),
        (" x.png", " x.png"),
    ],
)
def test_normalize_id_keeps_paths_inside_the_root(raw, expected):
    assert paths.normalize_id(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "../a.png",
        "a/../../b.png",
        "..",
        "/etc/passwd",
        "\\\\server\\x",
        "C:\\x.wav",
        "gs://b/a.png",
        "",
        "   ",
        ".",
        "a\nb.png",
        "a\0.png",
        "bad\udcff.png",
    ],
)
def test_normalize_id_rejects_unsafe_paths(raw):
    with pytest.raises(rejects.RejectedInput) as caught:
        paths.normalize_id(raw)
    assert caught.value.reason == rejects.UNSAFE_PATH


@pytest.mark.parametrize("suffix", ["", "/", "/.", "//"])
def test_listed_files_get_their_relative_ids(tmp_path, suffix):
    for name in ("a.png", "d/b.png", "d/e/c.png"):
        (tmp_path / "r" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "r" / name).write_bytes(b"")
    root = str(tmp_path / "r") + suffix
    ids = sorted(paths.relative_id(root, path) for path in paths.list_files(root))
    assert ids == ["a.png", "d/b.png", "d/e/c.png"]


@settings(max_examples=40, deadline=None)
@given(
    ids=st.sets(st.text(min_size=1, max_size=12).filter(lambda s: "\0" not in s), max_size=40),
    queries=st.lists(st.text(min_size=0, max_size=20).filter(lambda s: "\0" not in s), max_size=20),
)
def test_id_index_lookup_matches_sorted_positions(ids, queries):
    index = IdIndex.from_ids(ids)
    ordered = sorted(ids, key=lambda s: s.encode("utf-8"))
    assert index.id_list() == ordered
    position = {record_id: i for i, record_id in enumerate(ordered)}
    probe = queries + ordered[:5]
    np.testing.assert_array_equal(index.lookup(probe), [position.get(q, -1) for q in probe])


def test_id_index_refuses_duplicates():
    with pytest.raises(ValueError, match="duplicate record id 'b'"):
        IdIndex.from_ids(["b", "a", "b"])


def test_pair_entry_jsonl_keeps_safe_ids_and_reports_unsafe_ones():
    entry = pair_list.parse_entry(
        '{"x": "./a.png", "y": ["b.png", "../c.png", "d/e.png"]}', "jsonl"
    )
    assert entry.x_id == "a.png"
    assert entry.y_ids == ["b.png", "d/e.png"]
    assert [raw for raw, _ in entry.unsafe_y] == ["../c.png"]


@pytest.mark.parametrize(
    "line, pairs_format, reason",
    [
        ("not json", "jsonl", rejects.MALFORMED_PAIR_ENTRY),
        ('["a", "b"]', "jsonl", rejects.MALFORMED_PAIR_ENTRY),
        ('{"x": "a.png", "y": "b.png"}', "jsonl", rejects.MALFORMED_PAIR_ENTRY),
        ('{"y": ["b.png"]}', "jsonl", rejects.MALFORMED_PAIR_ENTRY),
        ('{"x": "/abs.png", "y": ["b.png"]}', "jsonl", rejects.UNSAFE_PAIR_PATH),
        ("a.png", "csv", rejects.MALFORMED_PAIR_ENTRY),
        ("a.png,b.png,c.png", "csv", rejects.MALFORMED_PAIR_ENTRY),
        ("../a.png,b.png", "csv", rejects.UNSAFE_PAIR_PATH),
        ("a\0.png,b.png", "csv", rejects.MALFORMED_PAIR_ENTRY),
    ],
)
def test_pair_entry_rejects(line, pairs_format, reason):
    with pytest.raises(rejects.RejectedInput) as caught:
        pair_list.parse_entry(line, pairs_format)
    assert caught.value.reason == reason


def test_pair_entry_csv_edge():
    assert pair_list.parse_entry('"a,1.png",b.png', "csv") == ("a,1.png", ["b.png"], [])


CSV = manifest.ManifestFormat("csv", ("path", "speaker", "split"))
JSONL = manifest.ManifestFormat("jsonl", ())


def test_manifest_rows_parse_in_both_formats():
    assert manifest.parse_row("a/b.wav, spk1 ,dev", CSV, "m.csv") == ("a/b.wav", "spk1", "dev")
    assert manifest.parse_row('{"path": "./a.wav", "speaker": 7}', JSONL, "m.jsonl") == (
        "a.wav",
        "7",
        "",
    )


@pytest.mark.parametrize(
    "line, manifest_format, reason",
    [
        ("a.wav,,train", CSV, rejects.MISSING_LABEL),
        ('{"path": "a.wav"}', JSONL, rejects.MISSING_LABEL),
        ('{"path": "a.wav", "speaker": null}', JSONL, rejects.MISSING_LABEL),
        ("a.wav,spk,../up", CSV, rejects.INVALID_SPLIT),
        ("a.wav,spk,", CSV, rejects.INVALID_SPLIT),
        ("a.wav,spk", CSV, rejects.MALFORMED_ROW),
        ("{broken", JSONL, rejects.MALFORMED_ROW),
        ('{"speaker": "s"}', JSONL, rejects.MALFORMED_ROW),
        ("/abs/a.wav,spk,train", CSV, rejects.UNSAFE_PATH),
        ('{"path": "../a.wav", "speaker": "s"}', JSONL, rejects.UNSAFE_PATH),
        ("a\0.wav,spk,train", CSV, rejects.MALFORMED_ROW),
    ],
)
def test_manifest_row_rejects(line, manifest_format, reason):
    with pytest.raises(rejects.RejectedInput) as caught:
        manifest.parse_row(line, manifest_format, "manifest")
    assert caught.value.reason == reason


def test_inspect_manifest(tmp_path):
    good = tmp_path / "m.csv"
    good.write_text("\ufeffpath,speaker,split\na.wav,s,train\n")
    assert manifest.inspect_manifest(str(good)).has_split
    lines = tmp_path / "m.jsonl"
    lines.write_text('\n{"path": "a.wav", "speaker": "s"}\n')
    assert manifest.inspect_manifest(str(lines)) == ("jsonl", ())
    bad = tmp_path / "bad.csv"
    bad.write_text("file,label\n")
    with pytest.raises(MaterializeError, match="lacks path, speaker"):
        manifest.inspect_manifest(str(bad))


@settings(max_examples=30, deadline=None)
@given(num_speakers=st.integers(0, 60), fraction=st.floats(0.0, 0.95), seed=st.integers(0, 99))
def test_held_out_speakers(num_speakers, fraction, seed):
    speakers = [f"spk{i}" for i in range(num_speakers)]
    held = splits.held_out_speakers(speakers + speakers[:3], fraction, seed)
    assert held <= set(speakers)
    assert held == splits.held_out_speakers(list(reversed(speakers)), fraction, seed)
    if fraction > 0 and num_speakers >= 2:
        expected = min(max(round(fraction * num_speakers), 1), num_speakers - 1)
        assert len(held) == expected
    else:
        assert not held


@settings(max_examples=30, deadline=None)
@given(num_ids=st.integers(0, 40), fraction=st.floats(0.0, 0.95), seed=st.integers(0, 99))
def test_held_out_utterances_keep_one_in_train(num_ids, fraction, seed):
    ids = [f"u{i}.wav" for i in range(num_ids)]
    held = splits.held_out_utterances(ids, fraction, seed)
    assert held <= set(ids)
    assert num_ids == 0 or len(held) < num_ids
    if num_ids >= 2:
        assert len(held) == min(round(fraction * num_ids), num_ids - 1)


def test_speaker_choice_depends_on_seed():
    speakers = [f"spk{i}" for i in range(50)]
    chosen = {splits.held_out_speakers(speakers, 0.2, seed) for seed in range(5)}
    assert len(chosen) > 1


def test_decide():
    ok = decide(
        num_inputs=10,
        reject_counts={rejects.CORRUPT_IMAGE: 1, rejects.PAIR_UNKNOWN_Y: 50},
        record_counts={"x": 5, "y": 4},
        required_record_sets=("x", "y"),
        max_reject_fraction=0.1,
    )
    assert ok.ok and ok.record_rejects == 1 and ok.reject_fraction == 0.1
    over = decide(
        num_inputs=10,
        reject_counts={rejects.CORRUPT_IMAGE: 2},
        record_counts={"x": 5, "y": 3},
        required_record_sets=("x", "y"),
        max_reject_fraction=0.1,
    )
    assert not over.ok and "2 of 10 inputs rejected (20.0%)" in over.error
    empty = decide(
        num_inputs=3,
        reject_counts={rejects.MISSING_FILE: 3},
        record_counts={"train": 0},
        required_record_sets=(),
        max_reject_fraction=1.0,
    )
    assert not empty.ok and empty.error.startswith("nothing left to materialize")
    missing_set = decide(
        num_inputs=3,
        reject_counts={},
        record_counts={"x": 3, "y": 0},
        required_record_sets=("x", "y"),
        max_reject_fraction=1.0,
    )
    assert not missing_set.ok and "'y'" in missing_set.error
