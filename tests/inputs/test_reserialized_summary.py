"""A run's `summary.json` is read as JSON by both disk readers (issue 46, wrong error).

The native reader (`ReadRecordsByIndex`, checking the run at every epoch) scanned the file for
the one indentation `layout.commit_run` writes, so a summary re-serialized with the same content
(compact, sorted, another indent) was refused as "now commits no run: the folder was
overwritten", while the Python reader opened it. Both now read any layout `json.dumps` writes,
and both still refuse a summary that commits another run, none, or a failed one.
"""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs import RecordStore

RECORDS = [bytes([i]) * (3 * i) for i in range(7)]
READERS = ("python", "native")

# Run ids as a job could write them (printable), with what JSON escapes: quotes, backslashes,
# slashes, accents, and characters past U+FFFF (a surrogate pair under ensure_ascii).
RUN_IDS = st.text(
    alphabet=st.sampled_from(list('ab09-_:. "\\/é\u00a0\u4e2d\U0001f600')),
    min_size=1,
    max_size=16,
).filter(str.isprintable)
LAYOUTS = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, 0, 1, 2, 4, "\t", " \t"]),
        "separators": st.sampled_from([(",", ":"), (", ", ": "), (",", ": "), (" ,\n", "\r:\t")]),
        "sort_keys": st.booleans(),
        "ensure_ascii": st.booleans(),
    }
)
# Whitespace JSON allows around the object.
MARGINS = st.sampled_from(["", " ", "\n", "\r\n\t "])


def _write(path: str, summary: dict, key_order: list[str], form: dict, margin: str) -> None:
    ordered = {key: summary[key] for key in key_order}
    with open(path, "w", encoding="utf-8") as f:
        f.write(margin + json.dumps(ordered, **form) + margin)


def _dataset(store: RecordStore) -> tf.data.Dataset:
    """One batch of every record: the native op's kernel, and its run check, is made again
    each time the dataset is iterated."""
    return tf.data.Dataset.from_tensors(tf.range(len(RECORDS), dtype=tf.int64)).map(store.read)


@pytest.mark.skipif(native.op_library() is None, reason="the native library is not built here")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    run_id=RUN_IDS,
    other_id=RUN_IDS,
    form=LAYOUTS,
    margin=MARGINS,
    order=st.randoms(use_true_random=False),
    decoy=st.booleans(),
    breach=st.sampled_from(["another run", "no run", "failed"]),
)
def test_both_readers_open_any_layout_of_the_summary_and_refuse_another_run(
    tmp_path_factory, run_id, other_id, form, margin, order, decoy, breach
):
    output_dir = str(tmp_path_factory.mktemp("run"))
    layout.commit_run(output_dir, run_id)
    runs.write_record_set(output_dir, "x", RECORDS, num_shards=2)
    summary_path = os.path.join(output_dir, layout.SUMMARY_FILE)
    summary = layout.load_json(summary_path)
    summary["extra"] = {"nested": [1.5, None, True, {"run_id": "not the top level"}], "n": -2e-3}
    key_order = sorted(summary)
    order.shuffle(key_order)
    _write(summary_path, summary, key_order, form, margin)
    if decoy:  # a duplicate key before the real one: JSON readers keep the last, as Python does
        with open(summary_path, encoding="utf-8") as f:
            text = f.read()
        with open(summary_path, "w", encoding="utf-8") as f:
            f.write(text.replace("{", '{"run_id": "decoy", "ok": false,', 1))

    stores = {
        reader: RecordStore.open(output_dir, "x", backend="disk", reader=reader)
        for reader in READERS
    }
    for reader, store in stores.items():
        assert store.run_id == run_id
        assert [batch.numpy().tolist() for batch in _dataset(store)] == [RECORDS], reader

    # The summary now commits something else, in the same layout.
    if breach == "another run":
        if other_id == run_id:
            other_id += "-b"
        summary["run_id"] = other_id
    elif breach == "no run":
        del summary["run_id"]
        key_order.remove("run_id")
    else:
        summary["ok"] = False
    native_store = stores["native"]
    fresh_python = RecordStore.open(output_dir, "x", backend="disk", reader="python")
    _write(summary_path, summary, key_order, form, margin)
    with pytest.raises(tf.errors.FailedPreconditionError) as refused:
        list(_dataset(native_store))
    message = str(refused.value)
    assert f"opened on run {run_id} but {summary_path}" in message
    expected = {
        "another run": f"now commits run {other_id}:",
        "no run": "now commits no run:",
        "failed": "now says the run failed:",
    }[breach]
    assert expected in message
    with pytest.raises((layout.RunCommitError, layout.IndexFileError)):
        fresh_python.read(tf.range(len(RECORDS), dtype=tf.int64))


@pytest.mark.skipif(native.op_library() is None, reason="the native library is not built here")
@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "is not a UTF-8 JSON object"),
        ('{"ok": true, "run_id": "RUN"', "is not a UTF-8 JSON object"),  # cut short
        ('{"ok": true, "run_id": "RUN"} {}', "is not a UTF-8 JSON object"),  # extra data
        ('["RUN"]', "is not a UTF-8 JSON object"),
        ('{"ok": true, "run_id": "RUN\x01"}', "is not a UTF-8 JSON object"),  # raw control
        ('{"ok": true, "run_id": 7}', "now commits no run"),
        ('{"ok": "true", "run_id": "RUN"}', "now says the run failed"),
        ('{"ok": true, "run_id": "RUN", "run_id": "NEXT"}', "now commits run NEXT"),
    ],
)
def test_a_summary_the_python_reader_refuses_is_refused_by_the_native_reader(
    tmp_path, text, problem
):
    output_dir = str(tmp_path / "run")
    layout.commit_run(output_dir, "RUN")
    runs.write_record_set(output_dir, "x", RECORDS, num_shards=2)
    store = RecordStore.open(output_dir, "x", backend="disk", reader="native")
    assert [batch.numpy().tolist() for batch in _dataset(store)] == [RECORDS]
    with open(os.path.join(output_dir, layout.SUMMARY_FILE), "w", encoding="utf-8") as f:
        f.write(text)
    with pytest.raises(tf.errors.FailedPreconditionError, match=problem):
        list(_dataset(store))
    with pytest.raises((layout.RunCommitError, layout.IndexFileError)):
        RecordStore.open(output_dir, "x", backend="disk", reader="python")
