"""`open_run` on what is not a whole, committed run of this version: a `summary.json` file given
for its folder, a run of an older layout, a folder missing the newer files, a damaged commit.
Each is refused in one line naming the file (`layout.IndexFileError`, or its subclass
`layout.RunCommitError`); a damaged `summary.json` never opens a run that its parts contradict.

One real run is written per module; the tests that damage it rewrite its `summary.json` in place
and put it back (copying the run per example would cost more than opening it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.run import open_run

CLASS_SIZES = [3, 4]
NUM_X, NUM_Y = 5, 4


def write_run(directory: str) -> dict:
    """A run with an audio record set and its class index, x and y image record sets and their
    pair index, committed by a summary as the jobs write it; returns the summary."""
    write_audio_run(directory, CLASS_SIZES)
    rng = np.random.default_rng(0)
    for record_set, count in (("x", NUM_X), ("y", NUM_Y)):
        images = runs.random_images(rng, count)
        runs.write_record_set(
            directory,
            record_set,
            [runs.image_example(f"{record_set}{i}", p) for i, p in enumerate(images)],
            num_shards=2,
        )
    runs.write_pairs(directory, [[0], [1, 2], [], [3], [0]])
    run_id = runs.run_id_of(directory)
    summary = {
        "job": "audio",
        "inputs": {"manifest": "données/manifest.csv"},
        "config": {"sample_rate": 16000, "num_shards": 3, "max_reject_fraction": 0.1},
        "ok": True,
        "error": None,
        "record_sets": {
            "train": {"num_records": sum(CLASS_SIZES), "num_shards": 3, "num_classes": 2},
            "x": {"num_records": NUM_X, "num_shards": 2},
            "y": {"num_records": NUM_Y, "num_shards": 2},
        },
        "rejects": {"total": 1, "records": 1, "by_reason": {"too_short": 1}},
        "reject_fraction": 0.125,
    }
    return layout.commit_run(directory, run_id, summary)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[str, dict]:
    directory = str(tmp_path_factory.mktemp("run") / "run")
    return directory, write_run(directory)


@contextlib.contextmanager
def summary_text(directory: str, text: str | bytes) -> Iterator[str]:
    """`directory`'s summary.json holds `text` inside the block; its path is given."""
    path = os.path.join(directory, layout.SUMMARY_FILE)
    with open(path, "rb") as f:
        pristine = f.read()
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    try:
        yield path
    finally:
        with open(path, "wb") as f:
            f.write(pristine)


def refusal(directory: str, named: str) -> str:
    """open_run's one-line refusal of the run at `directory`, checked to name `named`."""
    with pytest.raises(layout.IndexFileError) as refused:
        open_run(directory)
    message = str(refused.value)
    assert "\n" not in message and named in message, message
    return message


def assert_consistent(opened, directory: str, summary: dict) -> None:
    """What an opened run reports agrees with the parts written."""
    assert opened.uri == directory and opened.run_id == summary["run_id"]
    written = summary["record_sets"]
    for record_set in opened.record_sets:
        assert opened.num_records(record_set) == written[record_set]["num_records"]
    assert isinstance(opened.config, dict) and isinstance(opened.rejects, dict)
    assert opened.kind is None or isinstance(opened.kind, str)
    assert opened.sample_rate is None or opened.sample_rate > 0
    assert opened.raw_image_shape is None or len(opened.raw_image_shape) == 3
    repr(opened)


def test_the_written_run_opens(run):
    directory, summary = run
    opened = open_run(directory)
    assert_consistent(opened, directory, summary)
    assert opened.record_sets == ("train", "x", "y") and opened.sample_rate == 16000


def test_a_summary_file_for_its_folder_is_one_line_naming_the_folder(run):
    directory, _ = run
    path = os.path.join(directory, layout.SUMMARY_FILE)
    with pytest.raises(ValueError, match="is a file, not a run") as refused:
        open_run(path)
    message = str(refused.value)
    assert "\n" not in message and path in message and f"holding it: {directory})" in message


def test_a_run_of_the_layout_before_run_ids_is_named_as_such(run, tmp_path):
    """The layout before run ids (git show 1e17937^:components/layout.py): `summary.json` and
    `shards.json` name no run, and no index folder holds a `run.json`."""
    directory = str(tmp_path / "old")
    shutil.copytree(run[0], directory)
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if name == layout.RUN_FILE:
                os.remove(path)
            elif name in (layout.SUMMARY_FILE, layout.SHARDS_FILE):
                value = layout.load_json(path)
                del value[layout.RUN_ID_KEY]
                layout.save_json(path, value)
    message = refusal(directory, os.path.join(directory, layout.SUMMARY_FILE))
    assert "before runs had ids" in message and "materialize it again" in message


def test_a_folder_missing_a_counted_record_sets_index_is_refused_naming_it(run, tmp_path):
    directory = str(tmp_path / "partial")
    shutil.copytree(run[0], directory)
    shutil.rmtree(layout.index_dir(directory, "y"))
    message = refusal(directory, os.path.join(layout.index_dir(directory, "y"), "shards.json"))
    assert "counts 4 records in 'y'" in message


def damaged(summary: dict) -> dict[str, str]:
    """Damaged summaries, by what is wrong with them."""
    text = json.dumps(summary, indent=2)
    return {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "not JSON": "ok: true\n",
        "a list": json.dumps([summary]),
        "no run id": json.dumps({k: v for k, v in summary.items() if k != "run_id"}),
        "a numeric run id": json.dumps({**summary, "run_id": 7}),
        "another run's id": json.dumps({**summary, "run_id": "0" * 32}),
        "a run id with a newline": json.dumps({**summary, "run_id": "a\nb"}),
        "ok a string": json.dumps({**summary, "ok": "true"}),
        "record_sets a list": json.dumps({**summary, "record_sets": ["train"]}),
        "a count a string": json.dumps({**summary, "record_sets": {"x": {"num_records": "5"}}}),
        "a count off by one": json.dumps({**summary, "record_sets": {"x": {"num_records": 6}}}),
        "a record set path": json.dumps({**summary, "record_sets": {"../x": {"num_records": 5}}}),
        "config a list": json.dumps({**summary, "config": [16000]}),
        "a sample rate string": json.dumps({**summary, "config": {"sample_rate": "16k"}}),
        "raw images without a size": json.dumps({**summary, "config": {"image_storage": "raw"}}),
        "job a number": json.dumps({**summary, "job": 3}),
    }


DAMAGES = sorted(damaged({"run_id": "", "record_sets": {}}))


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_summary_is_refused_in_one_line_naming_it(run, damage):
    directory, summary = run
    with summary_text(directory, damaged(summary)[damage]) as path:
        refusal(directory, path)


def test_a_failed_run_s_error_is_told_in_one_line(run):
    directory, summary = run
    text = json.dumps({**summary, "ok": False, "error": "disk full\n  while writing\tshards"})
    with summary_text(directory, text) as path:
        message = refusal(directory, path)
    assert "failed (disk full while writing shards)" in message


# ------------------------------------------------------------------ fuzz

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["run_id", "ok", "error", "job", "config", "record_sets", "rejects", "inputs"]


def mutated_run_id(run_id: str) -> st.SearchStrategy[object]:
    """Run ids near the real one: a character changed, cut, grown, or any text or value."""
    return st.one_of(
        st.builds(
            lambda i, c: run_id[:i] + c + run_id[i + 1 :], st.integers(0, 31), st.characters()
        ),
        st.builds(lambda i: run_id[:i], st.integers(0, 31)),
        st.builds(lambda extra: run_id + extra, st.text(min_size=1, max_size=4)),
        st.text(max_size=40),
        json_values,
    )


@st.composite
def damaged_summaries(draw, summary: dict) -> str | bytes:
    """The text of a damaged `summary.json`: the real one cut at any byte (indented or compact),
    any JSON value, a field (top-level, a record set's, the config's) set to any value, or the
    run id mutated."""
    kind = draw(st.sampled_from(["cut", "value", "field", "nested", "run id"]))
    if kind == "cut":
        text = json.dumps(summary, indent=draw(st.sampled_from([None, 2])), ensure_ascii=False)
        data = text.encode()
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "value":
        return json.dumps(draw(json_values))
    changed = json.loads(json.dumps(summary))
    if kind == "field":
        changed[draw(st.sampled_from(FIELDS))] = draw(json_values)
    elif kind == "nested":
        section = draw(st.sampled_from([changed["config"], *changed["record_sets"].values()]))
        key = draw(st.sampled_from(["num_records", "sample_rate", "image_storage", "raw_size"]))
        section[key] = draw(json_values | st.sampled_from(["raw", [2, 3, 1], 0, -1, True]))
    else:
        changed["run_id"] = draw(mutated_run_id(summary["run_id"]))
    return json.dumps(changed)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_a_damaged_commit_opens_a_consistent_run_or_is_one_line_naming_it(run, data):
    directory, summary = run
    text = data.draw(damaged_summaries(summary))
    with summary_text(directory, text) as path:
        try:
            opened = open_run(directory)
        except layout.IndexFileError as error:
            event(f"refused: {type(error).__name__}")
            message = str(error)
            assert "\n" not in message and path in message, message
        else:
            event("opened")
            assert_consistent(opened, directory, summary)
