"""End-to-end runs of the pairs job on generated images, against a reference model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    MaterializeError,
    PairsConfig,
    ShardingConfig,
    rejects,
    run_pairs,
)
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli


def expected_run(x_files, y_files, pairs):
    """Reference model: which x and y become records, and each x's valid y record numbers."""
    y_ids = sorted(y_files, key=str.encode)
    y_number = {y: i for i, y in enumerate(y_ids)}
    valid = {x: sorted({y_number[y] for y in ys if y in y_number}) for x, ys in pairs.items()}
    x_ids = sorted((x for x in x_files if valid.get(x)), key=str.encode)
    return x_ids, y_ids, [valid[x] for x in x_ids]


def random_inputs(tmp_path, seed: int):
    rng = np.random.default_rng(seed)
    n_x, n_y = int(rng.integers(5, 40)), int(rng.integers(3, 30))
    x_names = [f"d{int(rng.integers(3))}/x{i:03d}.{'png' if i % 3 else 'jpg'}" for i in range(n_x)]
    y_names = [f"y{i:03d}.png" for i in range(n_y)]
    x_files = generate.write_images(str(tmp_path / "x"), x_names, rng)
    y_files = generate.write_images(str(tmp_path / "y"), y_names, rng)
    pairs = {}
    for x in x_names:
        if rng.random() < 0.15:
            continue  # an x the pair list does not name
        degree = int(rng.integers(1, 6))
        ys = list(rng.choice(y_names + ["ghost.png"], degree))  # duplicates and unknown y
        pairs[x] = [str(y) for y in ys]
    return x_files, y_files, pairs


def check_run(output_dir, x_files, y_files, pairs):
    x_ids, y_ids, rows = expected_run(x_files, y_files, pairs)
    for record_set, ids, files in (("x", x_ids, x_files), ("y", y_ids, y_files)):
        assert readback.ids(output_dir, record_set) == ids
        by_index = readback.records_by_index(output_dir, record_set)
        assert by_index == readback.records_sequential(output_dir, record_set)
        parsed = [readback.parse(record) for record in by_index]
        assert [p[layout.ID_KEY].decode() for p in parsed] == ids
        assert [p[layout.IMAGE_KEY] for p in parsed] == [files[i] for i in ids]
        readback.assert_matches_schema(by_index, readback.load_schema("image_record.pbtxt"))
    row_splits, values = readback.csr(layout.pairs_index_dir(output_dir))
    assert row_splits.dtype == values.dtype == np.int64
    assert [
        values[a:b].tolist() for a, b in zip(row_splits[:-1], row_splits[1:], strict=True)
    ] == rows
    return x_ids, y_ids, rows


def _config(tmp_path, output: str, **overrides) -> PairsConfig:
    fields = {
        "x_dir": str(tmp_path / "x"),
        "y_dir": str(tmp_path / "y"),
        "pairs": str(tmp_path / "pairs.jsonl"),
        "output_dir": str(tmp_path / output),
    }
    return PairsConfig(**{**fields, **overrides})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_inputs_match_the_reference_model(tmp_path, seed):
    x_files, y_files, pairs = random_inputs(tmp_path, seed)
    pairs_path = str(tmp_path / ("pairs.csv" if seed % 2 else "pairs.jsonl"))
    if seed % 2:
        generate.write_pairs_csv(pairs_path, pairs, header=seed == 1)
    else:
        generate.write_pairs_jsonl(pairs_path, pairs)
    output_dir = str(tmp_path / "out")
    max_shard_bytes = int(np.random.default_rng(seed).integers(800, 4000))
    summary = run_pairs(
        _config(
            tmp_path,
            "out",
            pairs=pairs_path,
            sharding=ShardingConfig(max_shard_bytes=max_shard_bytes),
            max_reject_fraction=1.0,
            files_per_batch=7,
        )
    )
    x_ids, y_ids, rows = check_run(output_dir, x_files, y_files, pairs)
    assert readback.spill_entries(output_dir) == []
    assert summary["ok"] and summary["record_sets"]["x"]["num_records"] == len(x_ids)
    assert summary["pairs"]["num_pairs"] == sum(map(len, rows))
    assert summary["rejects"]["by_reason"].get(rejects.NO_VALID_PAIRS, 0) == len(x_files) - len(
        x_ids
    )
    unknown_y = sum(y == "ghost.png" for ys in pairs.values() for y in ys)
    assert summary["rejects"]["by_reason"].get(rejects.PAIR_UNKNOWN_Y, 0) == unknown_y


def bad_inputs(tmp_path):
    """Good images plus one of every kind of bad input the pairs job handles."""
    rng = np.random.default_rng(7)
    x_dir, y_dir, outside = tmp_path / "x", tmp_path / "y", tmp_path / "outside"
    x_files = generate.write_images(str(x_dir), [f"x{i}.png" for i in range(12)], rng)
    y_files = generate.write_images(str(y_dir), [f"y{i}.png" for i in range(6)], rng)
    generate.write_images(str(outside), ["secret.png", "dir/inner.png"], rng)
    png = generate.image_bytes(rng)
    generate.write_file(str(x_dir), "bad/corrupt.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    generate.write_file(str(x_dir), "bad/truncated.png", png[: len(png) // 2])
    generate.write_file(str(x_dir), "bad/notes.txt", b"not an image")
    generate.write_file(str(y_dir), "bad/empty.jpg", b"")
    os.symlink(outside / "secret.png", x_dir / "link_out.png")
    os.symlink(outside / "dir", x_dir / "dir_out")
    os.symlink(x_dir / "nowhere.png", x_dir / "dangling.png")
    os.symlink(x_dir / "bad", x_dir / "alias_of_bad")  # inside the root: listed once, as bad/
    pairs = {f"x{i}.png": [f"y{i % 6}.png", f"y{(i + 1) % 6}.png"] for i in range(10)}
    pairs["x0.png"] += ["y0.png", "ghost.png", "bad/empty.jpg"]  # duplicate, unknown, rejected y
    pairs["x1.png"] = ["ghost.png"]  # x whose valid list becomes empty
    pairs["x2.png"] = []  # listed without any y
    pairs["bad/corrupt.png"] = ["y1.png"]  # rejected x
    pairs["nobody.png"] = ["y1.png"]  # unknown x
    pairs["ghost.png"] = []  # unknown x, listed without any y
    pairs["x3.png"] += ["../y/y1.png"]  # unsafe y, the line's other entries survive
    pairs_path = tmp_path / "pairs.jsonl"
    generate.write_pairs_jsonl(str(pairs_path), pairs)
    with open(pairs_path, "a") as f:
        f.write('{"x": "/etc/passwd", "y": ["y1.png"]}\n{not json\n')
    good_pairs = {x: ys for x, ys in pairs.items() if x in x_files}
    return x_files, y_files, good_pairs, str(pairs_path)


def test_every_bad_input_is_a_counted_reject_and_nothing_good_is_lost(tmp_path):
    x_files, y_files, pairs, pairs_path = bad_inputs(tmp_path)
    output_dir = str(tmp_path / "out")
    summary = run_pairs(_config(tmp_path, "out", pairs=pairs_path, max_reject_fraction=0.5))
    x_ids, _, rows = check_run(output_dir, x_files, y_files, pairs)
    assert "x1.png" not in x_ids and "x2.png" not in x_ids and "x10.png" not in x_ids
    lines = [
        json.loads(line)
        for line in readback.read_lines(os.path.join(output_dir, layout.REJECTS_FILE))
    ]
    found = {(r["reason"], r.get("id") or r["source"].split(": ", 1)[-1]) for r in lines}
    x_dir = str(tmp_path / "x")
    assert found == {
        (rejects.CORRUPT_IMAGE, "bad/corrupt.png"),
        (rejects.CORRUPT_IMAGE, "bad/truncated.png"),
        (rejects.UNSUPPORTED_FORMAT, "bad/notes.txt"),
        (rejects.CORRUPT_IMAGE, "bad/empty.jpg"),
        (rejects.SYMLINK_ESCAPES_ROOT, "link_out.png"),
        (rejects.SYMLINK_ESCAPES_ROOT, "dir_out"),
        (rejects.MISSING_FILE, "dangling.png"),
        (rejects.NO_VALID_PAIRS, "x1.png"),
        (rejects.NO_VALID_PAIRS, "x2.png"),
        (rejects.NO_VALID_PAIRS, "x10.png"),
        (rejects.NO_VALID_PAIRS, "x11.png"),
        (rejects.PAIR_UNKNOWN_Y, "x=x0.png y=ghost.png"),
        (rejects.PAIR_UNKNOWN_Y, "x=x1.png y=ghost.png"),
        (rejects.PAIR_REJECTED_Y, "x=x0.png y=bad/empty.jpg"),
        (rejects.PAIR_REJECTED_X, "x=bad/corrupt.png y=y1.png"),
        (rejects.PAIR_UNKNOWN_X, "x=nobody.png y=y1.png"),
        (rejects.PAIR_UNKNOWN_X, "x=ghost.png y=(none)"),
        (rejects.UNSAFE_PAIR_PATH, "x=x3.png y=../y/y1.png"),
        (rejects.UNSAFE_PAIR_PATH, '{"x": "/etc/passwd", "y": ["y1.png"]}'),
        (rejects.MALFORMED_PAIR_ENTRY, "{not json"),
    }
    assert all(r["source"].startswith((x_dir, str(tmp_path / "y"), pairs_path)) for r in lines)
    assert summary["rejects"]["total"] == len(lines)
    assert summary["rejects"]["records"] == 11  # 7 bad files + 4 x without valid pairs
    num_lines = len(readback.read_lines(pairs_path))
    assert summary["input_counts"] == {"x": 18, "y": 7, "pair_lines": num_lines}
    assert summary["pairs"]["duplicate_entries"] == 1


def test_failed_runs_raise_one_clear_error(tmp_path):
    rng = np.random.default_rng(8)
    generate.write_images(str(tmp_path / "x"), ["a.png", "b.png", "c.png"], rng)
    generate.write_images(str(tmp_path / "y"), ["a.png"], rng)
    generate.write_file(str(tmp_path / "x"), "d.png", b"junk")
    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), {"a.png": ["a.png"], "b.png": ["zz"]})
    with pytest.raises(MaterializeError, match=r"3 of 5 inputs rejected \(60.0%\)") as caught:
        run_pairs(_config(tmp_path, "over", max_reject_fraction=0.5))
    assert "\n" not in str(caught.value)
    summary = layout.load_json(str(tmp_path / "over" / layout.SUMMARY_FILE))
    assert not summary["ok"] and summary["rejects"]["records"] == 3
    assert not os.path.exists(tmp_path / "over" / layout.EXAMPLES_DIR)
    assert len(readback.read_lines(tmp_path / "over" / layout.REJECTS_FILE)) == 4

    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), {"a.png": ["zz"]})
    with pytest.raises(MaterializeError, match="nothing left in record set 'x'"):
        run_pairs(_config(tmp_path, "empty", max_reject_fraction=1.0))

    with pytest.raises(MaterializeError, match="is not empty"):
        run_pairs(_config(tmp_path, "empty", max_reject_fraction=1.0))
    with pytest.raises(MaterializeError, match="--x_dir: not a directory"):
        run_pairs(_config(tmp_path, "never", x_dir=str(tmp_path / "missing")))


def test_rerun_is_byte_identical_including_through_the_cli(tmp_path):
    x_files, y_files, pairs = random_inputs(tmp_path, 3)
    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), pairs)
    sharding = ShardingConfig(max_shard_bytes=2500)
    run_pairs(_config(tmp_path, "first", sharding=sharding, max_reject_fraction=1.0))
    first = readback.run_files(str(tmp_path / "first"))
    assert sum(name.endswith(".tfrecord") for name in first) > 2

    # --overwrite replaces a run in place, leaving no stale shard of the larger input behind.
    generate.write_images(str(tmp_path / "x"), ["late.png"], np.random.default_rng(9))
    run_pairs(
        _config(tmp_path, "first", sharding=sharding, max_reject_fraction=1.0, overwrite=True)
    )
    os.remove(tmp_path / "x" / "late.png")
    # Another process (another hash seed: protobuf map order and set order differ) must agree
    # byte for byte; Beam flags pass through to the pipeline options.
    command = [
        sys.executable,
        "-m",
        "tfx_dynamic_inputs.materialize",
        "pairs",
        "--x_dir",
        str(tmp_path / "x"),
        "--y_dir",
        str(tmp_path / "y"),
        "--pairs",
        str(tmp_path / "pairs.jsonl"),
        "--output_dir",
        str(tmp_path / "first"),
        "--max_shard_bytes",
        "2500",
        "--max_reject_fraction",
        "1",
        "--overwrite",
        "--runner=DirectRunner",
        "--direct_num_workers=1",
    ]
    completed = subprocess.run(
        command,
        cwd=readback.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    last_line = completed.stdout.strip().splitlines()[-1]
    assert last_line.startswith("materialize pairs: x=") and "valid pairs" in last_line
    assert readback.run_files(str(tmp_path / "first")) == first


def test_two_worker_processes_write_the_same_run_as_one(tmp_path, monkeypatch):
    """The lean multi-process workers (`beam_worker`) with spill refs crossing processes: the
    workers, not the launcher's process, hold no payload in memory, so every payload crosses
    through spill files; in memory, and with worker threads, the launcher's process holds
    them."""
    _, _, pairs = random_inputs(tmp_path, 4)
    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), pairs)
    common = {"sharding": ShardingConfig(max_shard_bytes=2000), "max_reject_fraction": 1.0}
    holders = readback.record_holders(monkeypatch)
    run_pairs(_config(tmp_path, "one", files_per_batch=5, **common))
    run_pairs(
        _config(
            tmp_path,
            "two",
            files_per_batch=5,
            beam_pipeline_args=(
                "--direct_running_mode=multi_processing",
                "--direct_num_workers=2",
            ),
            **common,
        )
    )
    threads = ("--direct_running_mode=multi_threading", "--direct_num_workers=2")
    run_pairs(_config(tmp_path, "threads", files_per_batch=5, beam_pipeline_args=threads, **common))
    one = readback.run_files(str(tmp_path / "one"))
    assert sum(name.endswith(".tfrecord") for name in one) > 2
    assert readback.run_files(str(tmp_path / "two")) == one
    assert readback.run_files(str(tmp_path / "threads")) == one
    assert [holder.held_bytes > 0 for holder in holders] == [True, False, True]


def test_cli_failure_prints_one_line_without_traceback(tmp_path, capsys):
    generate.write_file(str(tmp_path / "x"), "a.png", b"junk")
    generate.write_images(str(tmp_path / "y"), ["b.png"], np.random.default_rng(10))
    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), {"a.png": ["b.png"]})
    status = materialize_cli.main(
        [
            "pairs",
            *("--x_dir", str(tmp_path / "x"), "--y_dir", str(tmp_path / "y")),
            *("--pairs", str(tmp_path / "pairs.jsonl"), "--output_dir", str(tmp_path / "out")),
        ]
    )
    captured = capsys.readouterr()
    assert status == 1 and captured.out == ""
    assert captured.err == (
        "materialize pairs: error: nothing left in record set 'x' (rejects: corrupt_image=1, "
        f"pair_rejected_x=1); details in {tmp_path / 'out' / layout.REJECTS_FILE}\n"
    )


def test_raw_storage_stores_fixed_size_pixels(tmp_path):
    x_files, y_files, pairs = random_inputs(tmp_path, 4)
    generate.write_pairs_jsonl(str(tmp_path / "pairs.jsonl"), pairs)
    run_pairs(
        _config(
            tmp_path, "raw", image_storage="raw", raw_height=8, raw_width=6, max_reject_fraction=1.0
        )
    )
    records = readback.records_by_index(str(tmp_path / "raw"), "y")
    readback.assert_matches_schema(records, readback.load_schema("image_record.pbtxt"))
    for record in records:
        parsed = readback.parse(record)
        assert parsed[layout.IMAGE_FORMAT_KEY] == b"raw"
        assert len(parsed[layout.IMAGE_KEY]) == 8 * 6 * 3 == parsed["height"] * parsed["width"] * 3
