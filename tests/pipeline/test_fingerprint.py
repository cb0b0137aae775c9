"""Input fingerprints change exactly when the files below the inputs change."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.pipeline.fingerprint import input_fingerprint


def _write(root, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


names = st.lists(
    st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6})?\.(png|wav)", fullmatch=True),
    min_size=1,
    max_size=6,
    unique=True,
)


@settings(max_examples=15, deadline=None)
@given(names=names, data=st.data())
def test_any_added_removed_or_resized_file_changes_the_fingerprint(tmp_path_factory, names, data):
    root = tmp_path_factory.mktemp("inputs")
    files = {n: data.draw(st.binary(min_size=0, max_size=8)) for n in names}
    _write(root, files)
    before = input_fingerprint([str(root)])
    assert input_fingerprint([str(root)]) == before  # stable when nothing changed

    victim = data.draw(st.sampled_from(sorted(files)))
    change = data.draw(st.sampled_from(["add", "remove", "resize"]))
    if change == "add":
        (root / (victim + ".new")).write_bytes(b"")
    elif change == "remove":
        (root / victim).unlink()
    else:
        (root / victim).write_bytes(files[victim] + b"+")
    assert input_fingerprint([str(root)]) != before


def test_a_modified_time_changes_the_fingerprint(tmp_path):
    _write(tmp_path, {"a.png": b"same"})
    before = input_fingerprint([str(tmp_path)])
    stat = os.stat(tmp_path / "a.png")
    os.utime(tmp_path / "a.png", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert input_fingerprint([str(tmp_path)]) != before


def test_single_files_and_order_of_paths_count(tmp_path):
    _write(tmp_path, {"x/a.png": b"1", "pairs.jsonl": b"{}"})
    x, pairs = str(tmp_path / "x"), str(tmp_path / "pairs.jsonl")
    assert input_fingerprint([x, pairs]) != input_fingerprint([pairs, x])


def test_a_missing_input_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        input_fingerprint([str(tmp_path / "nowhere")])
