"""End-to-end runs of the pairs job pairing by group (`--x_groups` / `--y_groups` as CSV and as
JSON Lines, `--groups_from_subfolder`) on generated images, against a reference model: the
group index, `open_pairs_run`'s `GroupPairs`, the sampler over the run, and every reject."""

from __future__ import annotations

import collections
import json
import os
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import GroupPairs, ValidPairs, dynamic_pairs, open_pairs_run
from tfx_dynamic_inputs.materialize import PairsConfig, rejects, run_pairs
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli

CONFLICT = object()  # the model's group of an image listed with two different groups


class GroupRun(NamedTuple):
    """A finished run: its folder and summary, the ids of the images that decode, the model's
    group of each image (record_set -> id -> group name or `CONFLICT`; absent: none), and the
    groups files with their number of lines (header excepted)."""

    output_dir: str
    summary: dict
    decoded: dict[str, list[str]]
    groups: dict[str, dict]
    files: dict[str, tuple[str, int]]


def _utf8_key(record_id: str) -> bytes:
    return record_id.encode("utf-8")


def expected_records(
    groups: dict[str, dict], decoded: dict[str, list[str]]
) -> tuple[list[str], list[str]]:
    """Reference model: the y with one group, the x whose group has such a y (sorted by id)."""
    one = {
        rs: {i: g for i, g in groups[rs].items() if g is not CONFLICT and i in decoded[rs]}
        for rs in ("x", "y")
    }
    y_ids = sorted(one["y"], key=_utf8_key)
    y_groups = {one["y"][i] for i in y_ids}
    x_ids = sorted((i for i, g in one["x"].items() if g in y_groups), key=_utf8_key)
    return x_ids, y_ids


def expected_image_rejects(groups: dict[str, dict], decoded: dict[str, list[str]]) -> set:
    """(reason, id) of each decoded image the reference model leaves out."""
    x_ids, y_ids = expected_records(groups, decoded)
    kept = {"x": set(x_ids), "y": set(y_ids)}
    found = set()
    for rs in ("x", "y"):
        for record_id in decoded[rs]:
            if record_id in kept[rs]:
                continue
            group = groups[rs].get(record_id)
            reason = (
                rejects.MISSING_GROUP
                if group is None
                else rejects.CONFLICTING_GROUP
                if group is CONFLICT
                else rejects.NO_VALID_PAIRS
            )
            found.add((reason, record_id))
    return found


def _write_lines(path: str, lines: list[bytes]) -> str:
    with open(path, "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    return path


def _found_rejects(output_dir: str) -> list[tuple[str, str]]:
    """(reason, what) of each reject: the id of an image, the text after its path of a line."""
    lines = readback.read_lines(os.path.join(output_dir, layout.REJECTS_FILE))
    found = []
    for line in lines:
        reject = json.loads(line)
        found.append((reject["reason"], reject.get("id") or reject["source"].split(": ", 1)[-1]))
    return found


# ---------------------------------------------------------------------------------- the runs


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory) -> GroupRun:
    """CSV groups files (with a header) of crafted and random images, through the CLI."""
    root = tmp_path_factory.mktemp("csv")
    rng = np.random.default_rng(0)
    x_groups = {f"x{i:02d}.png": "cat" for i in range(4)}
    x_groups |= {f"x{i:02d}.png": "dog" for i in range(4, 7)}
    x_groups |= {"x07.png": "eel", "x08.png": "eel"}  # eel has no y
    x_groups |= {f"r/x{i:02d}.png": str(rng.choice(["cat", "dog", "eel"])) for i in range(15)}
    y_groups = {"y0.png": "cat", "y1.png": "cat", "y2.png": "dog", "y3.png": "dog"}
    y_groups |= {"y4.png": "dog", "y5.png": "fox"}  # fox has no x: its y is still a record
    y_groups |= {f"r/y{i:02d}.png": str(rng.choice(["cat", "dog", "fox"])) for i in range(8)}
    x_lines = ["id,group"] + [f"{i},{g}" for i, g in x_groups.items()]
    x_lines += ["x10.png,cat", "x10.png,dog"]  # conflicting
    x_lines += ["x11.png,dog", "x11.png,dog"]  # listed twice alike: kept once
    x_lines += ["bad/corrupt.png,cat"]  # a rejected image: its own reject only
    x_lines += ["ghost.png,cat", "a,b,c", "../y/y0.png,cat", "x01.png, "]
    y_lines = ["id,group"] + [f"{i},{g}" for i, g in y_groups.items()]
    y_lines += ["y7.png,cat", "y7.png,fox", "nobody.png,dog"]  # y6 is not listed
    x_files = [*x_groups, "x09.png", "x10.png", "x11.png"]
    y_files = [*y_groups, "y6.png", "y7.png"]
    generate.write_images(str(root / "x"), x_files, rng)
    generate.write_images(str(root / "y"), y_files, rng)
    generate.write_file(str(root / "x"), "bad/corrupt.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    x_path = _write_lines(
        str(root / "x_groups.csv"), [line.encode() for line in x_lines] + [b"x\xff.png,cat"]
    )
    y_path = _write_lines(str(root / "y_groups.csv"), [line.encode() for line in y_lines])
    output_dir = str(root / "out")
    status = materialize_cli.main(
        [
            "pairs",
            *("--x_dir", str(root / "x"), "--y_dir", str(root / "y")),
            *("--x_groups", x_path, "--y_groups", y_path),
            *("--output_dir", output_dir, "--max_reject_fraction", "1", "--num_shards", "2"),
        ]
    )
    assert status == 0
    model = {
        "x": {**x_groups, "x10.png": CONFLICT, "x11.png": "dog"},
        "y": {**y_groups, "y7.png": CONFLICT},
    }
    files = {"x": (x_path, len(x_lines)), "y": (y_path, len(y_lines) - 1)}
    return GroupRun(output_dir, _summary(output_dir), {"x": x_files, "y": y_files}, model, files)


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory) -> GroupRun:
    """JSON Lines groups files: integer and string group names, bad lines of every kind."""
    root = tmp_path_factory.mktemp("jsonl")
    rng = np.random.default_rng(1)
    x_groups = {f"a{i}.png": int(rng.integers(3)) for i in range(12)}
    y_groups = {f"b{i}.png": str(int(rng.integers(3))) for i in range(7)}
    x_lines = [json.dumps({"id": i, "group": g}) for i, g in x_groups.items()]
    x_lines += [
        "{not json",
        json.dumps({"id": "a20.png"}),
        json.dumps({"id": "a21.png", "group": True}),
        json.dumps({"id": 5, "group": "1"}),
        '{"id": "a22.png", "group": "\\ud800"}',
        json.dumps({"id": "/etc/passwd", "group": "1"}),
    ]
    y_lines = [json.dumps({"id": i, "group": g}) for i, g in y_groups.items()]
    generate.write_images(str(root / "x"), [*x_groups, "a20.png", "a21.png", "a22.png"], rng)
    generate.write_images(str(root / "y"), list(y_groups), rng)
    x_path = _write_lines(str(root / "x_groups.jsonl"), [line.encode() for line in x_lines])
    y_path = _write_lines(
        str(root / "y_groups.txt"), [line.encode() for line in y_lines] + [b'{"id": "\xfe"}']
    )
    output_dir = str(root / "out")
    run_pairs(
        PairsConfig(
            x_dir=str(root / "x"),
            y_dir=str(root / "y"),
            x_groups=x_path,
            y_groups=y_path,
            groups_format="jsonl",
            output_dir=output_dir,
            max_reject_fraction=1.0,
        )
    )
    model = {"x": {i: str(g) for i, g in x_groups.items()}, "y": y_groups}
    decoded = {"x": [*x_groups, "a20.png", "a21.png", "a22.png"], "y": list(y_groups)}
    files = {"x": (x_path, len(x_lines)), "y": (y_path, len(y_lines) + 1)}
    return GroupRun(output_dir, _summary(output_dir), decoded, model, files)


@pytest.fixture(scope="module")
def subfolder_run(tmp_path_factory) -> GroupRun:
    """`--groups_from_subfolder`, through the CLI: the first folder of each id is its group."""
    root = tmp_path_factory.mktemp("subfolder")
    rng = np.random.default_rng(2)
    x_files = ["cat/1.png", "cat/deeper/2.png", "dog/3.png", "dog/4.jpg", "eel/5.png", "loose.png"]
    y_files = ["cat/a.png", "dog/b.png", "dog/c.png", "fox/d.png", "top.png"]
    generate.write_images(str(root / "x"), x_files, rng)
    generate.write_images(str(root / "y"), y_files, rng)
    output_dir = str(root / "out")
    status = materialize_cli.main(
        [
            "pairs",
            *("--x_dir", str(root / "x"), "--y_dir", str(root / "y"), "--groups_from_subfolder"),
            *("--output_dir", output_dir, "--max_reject_fraction", "1"),
        ]
    )
    assert status == 0
    model = {
        rs: {i: i.split("/")[0] for i in files if "/" in i}
        for rs, files in (("x", x_files), ("y", y_files))
    }
    return GroupRun(output_dir, _summary(output_dir), {"x": x_files, "y": y_files}, model, {})


def _summary(output_dir: str) -> dict:
    return layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))


RUNS = ("csv_run", "jsonl_run", "subfolder_run")


# --------------------------------------------------------------------------------- the index


@pytest.mark.parametrize("run_name", RUNS)
def test_the_run_holds_exactly_the_pairs_of_equal_groups(run_name, request):
    run: GroupRun = request.getfixturevalue(run_name)
    assert layout.has_group_index(run.output_dir)
    x_ids, y_ids = readback.ids(run.output_dir, "x"), readback.ids(run.output_dir, "y")
    group = {rs: run.groups[rs] for rs in ("x", "y")}
    brute_force = {
        (i, j)
        for i, x in enumerate(x_ids)
        for j, y in enumerate(y_ids)
        if group["x"][x] == group["y"][y]
    }
    x_store, y_store, pairs = open_pairs_run(run.output_dir)
    assert isinstance(pairs, GroupPairs)
    assert (pairs.num_x, pairs.num_y) == (x_store.num_records, y_store.num_records)
    row_splits, values = pairs.edges()
    listed = {
        (x, int(y)) for x in range(pairs.num_x) for y in values[row_splits[x] : row_splits[x + 1]]
    }
    assert listed == brute_force
    assert sorted(pairs.planned_x.tolist()) == list(range(len(x_ids)))  # every x has a y
    # The edge CSR beside the groups (a small pairing) lists the same pairs.
    edges = ValidPairs.load(run.output_dir)
    assert {
        (x, int(y))
        for x in range(len(x_ids))
        for y in edges.values[edges.row_splits[x] : edges.row_splits[x + 1]]
    } == brute_force
    names, x_groups, y_groups = layout.load_group_index(run.output_dir)
    assert names == sorted({group["x"][x] for x in x_ids} | {group["y"][y] for y in y_ids})
    assert [names[g] for g in x_groups] == [group["x"][x] for x in x_ids]
    assert [names[g] for g in y_groups] == [group["y"][y] for y in y_ids]
    stats = run.summary["pairs"]
    assert stats["by_group"] and stats["edges_written"]
    assert stats["num_pairs"] == len(brute_force) and stats["num_groups"] == len(names)
    degrees = collections.Counter(x for x, _ in brute_force)
    assert stats["degree"]["min"] == min(degrees.values())


@pytest.mark.parametrize("run_name", RUNS)
def test_records_are_the_images_with_a_group_and_an_x_only_with_a_y(run_name, request):
    run: GroupRun = request.getfixturevalue(run_name)
    x_ids, y_ids = expected_records(run.groups, run.decoded)
    assert readback.ids(run.output_dir, "x") == x_ids
    assert readback.ids(run.output_dir, "y") == y_ids
    for record_set, ids in (("x", x_ids), ("y", y_ids)):
        parsed = [readback.parse(r) for r in readback.records_by_index(run.output_dir, record_set)]
        assert [p[layout.ID_KEY].decode() for p in parsed] == ids
    assert run.summary["record_sets"]["x"]["num_records"] == len(x_ids)


@pytest.mark.parametrize("run_name", RUNS)
def test_the_sampler_over_the_run_draws_only_valid_pairs(run_name, request):
    run: GroupRun = request.getfixturevalue(run_name)
    x_store, y_store, pairs = open_pairs_run(run.output_dir)
    x_ids, y_ids = readback.ids(run.output_dir, "x"), readback.ids(run.output_dir, "y")
    for strategy in ("uniform", "least_sampled"):
        dataset = dynamic_pairs(x_store, y_store, pairs, batch_size=8, strategy=strategy, seed=4)
        for _ in range(2):  # each iteration is an epoch, re-paired
            seen_x = set()
            for batch in dataset:
                for x, y, x_record, y_record in zip(
                    batch["x_index"].numpy(),
                    batch["y_index"].numpy(),
                    batch["x"].numpy(),
                    batch["y"].numpy(),
                    strict=True,
                ):
                    x_id = tf.train.Example.FromString(x_record).features.feature["id"]
                    y_id = tf.train.Example.FromString(y_record).features.feature["id"]
                    assert x_id.bytes_list.value[0].decode() == x_ids[x]
                    assert y_id.bytes_list.value[0].decode() == y_ids[y]
                    assert run.groups["x"][x_ids[x]] == run.groups["y"][y_ids[y]]
                    seen_x.add(int(x))
            assert seen_x == set(range(len(x_ids)))


# ------------------------------------------------------------------------------------ rejects


def test_every_bad_csv_input_is_a_counted_reject(csv_run):
    found = _found_rejects(csv_run.output_dir)
    lines = {
        (rejects.GROUP_UNKNOWN_ID, "id=ghost.png group=cat"),
        (rejects.GROUP_UNKNOWN_ID, "id=nobody.png group=dog"),
        (rejects.MALFORMED_GROUP_ENTRY, "a,b,c"),
        (rejects.MALFORMED_GROUP_ENTRY, "x01.png,"),
        (rejects.UNSAFE_GROUP_PATH, "../y/y0.png,cat"),
        (rejects.GROUP_BAD_ENCODING, "x\\xff.png,cat"),
        (rejects.CORRUPT_IMAGE, "bad/corrupt.png"),
    }
    images = expected_image_rejects(csv_run.groups, csv_run.decoded)
    assert {
        (rejects.MISSING_GROUP, "x09.png"),
        (rejects.MISSING_GROUP, "y6.png"),
        (rejects.CONFLICTING_GROUP, "x10.png"),
        (rejects.CONFLICTING_GROUP, "y7.png"),
        (rejects.NO_VALID_PAIRS, "x07.png"),
        (rejects.NO_VALID_PAIRS, "x08.png"),
    } <= images
    assert set(found) == lines | images and len(found) == len(lines | images)
    summary = csv_run.summary
    assert summary["rejects"]["by_reason"] == dict(collections.Counter(r for r, _ in found))
    # Images (and the corrupt file) count towards the reject fraction, groups-file lines not.
    assert summary["rejects"]["records"] == len(images) + 1
    assert summary["input_counts"] == {
        "x": len(csv_run.decoded["x"]) + 1,  # and bad/corrupt.png
        "y": len(csv_run.decoded["y"]),
        "x_group_lines": csv_run.files["x"][1],
        "y_group_lines": csv_run.files["y"][1],
    }
    assert summary["config"]["groups_format"] == {"x": "csv", "y": "csv"}
    details = {
        json.loads(line)["id"]: json.loads(line)["detail"]
        for line in readback.read_lines(os.path.join(csv_run.output_dir, layout.REJECTS_FILE))
        if "id" in json.loads(line)
    }
    assert details["x10.png"] == "listed with groups 'cat', 'dog'"
    assert details["x07.png"] == "no y image has its group 'eel'"
    assert details["y6.png"] == f"not listed in {csv_run.files['y'][0]}"


def test_every_bad_jsonl_line_is_a_counted_reject(jsonl_run):
    found = _found_rejects(jsonl_run.output_dir)
    malformed = {
        "{not json",
        json.dumps({"id": "a20.png"}),
        json.dumps({"id": "a21.png", "group": True}),
        json.dumps({"id": 5, "group": "1"}),
        '{"id": "a22.png", "group": "\\ud800"}',
    }
    expected = {(rejects.MALFORMED_GROUP_ENTRY, line) for line in malformed}
    expected |= {
        (rejects.UNSAFE_GROUP_PATH, json.dumps({"id": "/etc/passwd", "group": "1"})),
        (rejects.GROUP_BAD_ENCODING, '{"id": "\\xfe"}'),
    }
    images = expected_image_rejects(jsonl_run.groups, jsonl_run.decoded)
    assert {(rejects.MISSING_GROUP, i) for i in ("a20.png", "a21.png", "a22.png")} <= images
    expected |= images
    assert set(found) == expected and len(found) == len(expected)
    assert jsonl_run.summary["rejects"]["by_reason"] == dict(
        collections.Counter(r for r, _ in found)
    )
    summary = jsonl_run.summary
    assert summary["config"]["groups_format"] == {"x": "jsonl", "y": "jsonl"}
    assert summary["input_counts"]["x_group_lines"] == jsonl_run.files["x"][1]
    assert summary["input_counts"]["y_group_lines"] == jsonl_run.files["y"][1]


def test_subfolders_name_the_groups_and_loose_files_are_rejects(subfolder_run):
    found = set(_found_rejects(subfolder_run.output_dir))
    assert found == {
        (rejects.MISSING_GROUP, "loose.png"),
        (rejects.MISSING_GROUP, "top.png"),
        (rejects.NO_VALID_PAIRS, "eel/5.png"),
    }
    assert found == expected_image_rejects(subfolder_run.groups, subfolder_run.decoded)
    # fox has no x: its y is a record all the same; cat/deeper/2.png is in cat.
    assert readback.ids(subfolder_run.output_dir, "y") == [
        "cat/a.png",
        "dog/b.png",
        "dog/c.png",
        "fox/d.png",
    ]
    assert "cat/deeper/2.png" in readback.ids(subfolder_run.output_dir, "x")
    summary = subfolder_run.summary
    assert summary["inputs"]["groups_from_subfolder"] is True
    assert summary["input_counts"] == {"x": 6, "y": 5}
    assert summary["rejects"]["records"] == 3


# ------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--pairs", "P", "--x_groups", "G", "--y_groups", "G"], "exactly one of them"),
        (["--pairs", "P", "--groups_from_subfolder"], "exactly one of them"),
        (["--x_groups", "G", "--groups_from_subfolder"], "exactly one of them"),
        ([], "exactly one of them"),
        (["--x_groups", "G"], "--x_groups and --y_groups go together: give both"),
    ],
)
def test_pairing_flags_are_exclusive_with_one_clear_line(tmp_path, capsys, flags, message):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    (tmp_path / "P").write_text("")
    (tmp_path / "G").write_text("")
    paths = [str(tmp_path / flag) if flag in ("P", "G") else flag for flag in flags]
    status = materialize_cli.main(
        [
            "pairs",
            *("--x_dir", str(tmp_path / "x"), "--y_dir", str(tmp_path / "y")),
            *("--output_dir", str(tmp_path / "out"), *paths),
        ]
    )
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.startswith("materialize pairs: error: ") and message in captured.err
    assert captured.err.count("\n") == 1
    assert not os.path.exists(tmp_path / "out")
