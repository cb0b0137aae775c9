"""A batch read by the reader without TensorFlow (`RunRecords.read_many`,
`RunRecordSource.__getitems__`) is its records read one by one in the order given: for any
record numbers (repeats, any order, out of range, not integers), over runs with damaged frames,
a shard cut short and payloads that are no Example, under "fail" and "skip", the same records,
the same damaged records listed and the same first error, word for word; and a run changed
between two batches is refused as reading one by one refuses it, naming the file or both runs."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.inputs.runs import write_record_set
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records import (
    DamagedRecordError,
    ExampleDecoder,
    FixedFeature,
    RunRecords,
    RunRecordSource,
    example_pb2,
)

_DECODER = ExampleDecoder.of({"v": FixedFeature("int64", (1,), None)})


def _example(value: int) -> bytes:
    example = example_pb2.Example()
    example.features.feature["v"].int64_list.value.append(value)
    return example.SerializeToString()


# Examples the decoder reads, and bytes it mostly refuses (a damaged record for the source).
_PAYLOADS = st.lists(
    st.integers(-3, 3).map(_example) | st.binary(max_size=40), min_size=2, max_size=14
)


def _offsets(run: str) -> np.ndarray:
    return np.load(os.path.join(layout.index_dir(run, "s"), layout.OFFSETS_FILE))


def _rewrite_in_place(path: str) -> None:
    """The same bytes written again, its modification time moved: the file changed under us."""
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(data)
    os.utime(path, ns=(0, 1))


def _damage(run: str, num_records: int, data: st.DataObject) -> None:
    """Flips a byte of the frame of at most one record a shard (each shard keeps a sampled CRC
    as the run wrote it: damaged, not another run's), and may cut the last shard short."""
    offsets = _offsets(run)
    paths = layout.load_shards(run, "s").shard_paths
    flipped = data.draw(
        st.lists(st.integers(0, num_records - 1), min_size=1, max_size=3), label="flipped"
    )
    for index in {int(offsets[i, 0]): i for i in flipped}.values():
        shard, offset, length = (int(v) for v in offsets[index])
        position = offset + data.draw(st.integers(0, length + 15), label="byte of the frame")
        with open(paths[shard], "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ data.draw(st.integers(1, 255), label="xor")]))
    last = int(offsets[-1, 0])
    if last not in {int(offsets[i, 0]) for i in flipped} and data.draw(st.booleans(), "cut"):
        frame_bytes = int(offsets[-1, 2]) + 16
        cut = data.draw(st.integers(1, frame_bytes), label="bytes cut")
        os.truncate(paths[last], os.path.getsize(paths[last]) - cut)


def _indices(num_records: int, data: st.DataObject) -> list | np.ndarray:
    """Record numbers, repeats and any order; sometimes one that `read` refuses; sometimes an
    array."""
    indices = data.draw(st.lists(st.integers(0, num_records - 1), max_size=16), label="indices")
    if data.draw(st.booleans(), label="one refused"):
        refused = data.draw(
            st.sampled_from([-1, num_records, num_records + 7, True, 1.0, "0"]), label="refused"
        )
        indices.insert(data.draw(st.integers(0, len(indices)), label="at"), refused)
    if data.draw(st.booleans(), label="as an array") and all(type(i) is int for i in indices):
        return np.array(indices, np.int64)
    return indices


def _outcome(read) -> tuple:
    """What a read gives: ("served", records) or (error type, its one-line message)."""
    try:
        records = read()
    except (TypeError, IndexError, DamagedRecordError, layout.RunCommitError) as error:
        assert "\n" not in str(error)
        return type(error).__name__, str(error)
    return "served", [
        {k: v.tolist() for k, v in r.items()} if isinstance(r, dict) else r for r in records
    ]


@settings(max_examples=60, deadline=None)
@given(payloads=_PAYLOADS, data=st.data())
def test_a_batch_reads_as_its_records_read_one_by_one(payloads, data):
    num_shards = data.draw(st.integers(1, len(payloads) // 2), label="shards")
    on_damaged = data.draw(st.sampled_from(["fail", "skip"]), label="on_damaged")
    verify_crc = data.draw(st.booleans(), label="verify_crc")
    with tempfile.TemporaryDirectory() as run:
        write_record_set(run, "s", payloads, num_shards=num_shards)
        _damage(run, len(payloads), data)
        indices = _indices(len(payloads), data)
        options = {"verify_crc": verify_crc, "on_damaged": on_damaged}
        one, batch = RunRecords(run, "s", **options), RunRecords(run, "s", **options)
        expected = _outcome(lambda: [one.read(i) for i in indices])
        assert _outcome(lambda: batch.read_many(indices)) == expected
        assert batch.damaged_records == one.damaged_records
        # Decoded: a payload that is no Example is damaged in its place in the order.
        one = RunRecordSource(run, "s", decode=_DECODER, **options)
        batch = RunRecordSource(run, "s", decode=_DECODER, **options)
        expected = _outcome(lambda: [one[i] for i in indices])
        assert _outcome(lambda: batch.__getitems__(indices)) == expected
        assert batch.records.damaged_records == one.records.damaged_records


def _damage_row_unseen(path: str, row: int) -> None:
    """Row `row` of the offset index names no shard, written in place with the file's size and
    modification time kept: only reading the row tells."""
    before = os.stat(path)
    rows = np.load(path, mmap_mode="r+")
    rows[row, 0] = 99
    rows.flush()
    del rows
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@settings(max_examples=40, deadline=None)
@given(payloads=st.lists(st.binary(max_size=60), min_size=4, max_size=12), data=st.data())
def test_a_run_changed_between_batches_is_refused_as_one_by_one(payloads, data):
    numbers = st.lists(st.integers(0, len(payloads) - 1), max_size=12)
    with tempfile.TemporaryDirectory() as run:
        shards = write_record_set(run, "s", payloads, num_shards=2)
        index = os.path.join(layout.index_dir(run, "s"), layout.OFFSETS_FILE)
        shard_of = _offsets(run)[:, 0].tolist()
        batch, one = RunRecords(run, "s"), RunRecords(run, "s")
        first = data.draw(numbers, label="first batch")
        assert batch.read_many(first) == [payloads[i] for i in first]
        change = data.draw(st.sampled_from(["shard 0", "shard 1", "index", "row", "run"]))
        if change == "run":  # the job's --overwrite: a new run id, other records
            os.remove(os.path.join(run, layout.SUMMARY_FILE))
            write_record_set(run, "s", [p + b"!" for p in payloads], num_shards=2)
            new_run = layout.load_json(os.path.join(run, layout.SUMMARY_FILE))[layout.RUN_ID_KEY]
        elif change == "row":
            row = data.draw(st.integers(0, len(payloads) - 1), label="row")
            _damage_row_unseen(index, row)
        else:
            changed = shards[int(change[-1])] if change.startswith("shard") else index
            _rewrite_in_place(changed)
        second = data.draw(numbers, label="second batch")
        got = _outcome(lambda: batch.read_many(second))
        assert got == _outcome(lambda: [one.read(i) for i in second])
        served = ("served", [payloads[i] for i in second])
        if change == "run":  # refused naming both runs, or the files it holds still served
            assert got == served or got[0] == "RunCommitError" and new_run in got[1], got
            assert got == served or batch.run_id in got[1]
            return
        touched = {"index"} | {f"shard {shard_of[i]}" for i in second} if second else set()
        if change == "row":
            refused = row in second
            message = f"{index}: row {row} changed since the run {batch.run_id} was opened"
        else:
            refused = change in touched
            message = f"{changed} was written in place since the run {batch.run_id} was opened"
        if refused:
            assert got[0] == "RunCommitError" and got[1].startswith(message), got
        else:
            assert got == served


def test_a_batch_of_near_records_is_a_few_reads(tmp_path, monkeypatch):
    run = str(tmp_path)
    payloads = [bytes([i]) * 300 for i in range(200)]
    write_record_set(run, "s", payloads, num_shards=2)
    reader = RunRecords(run, "s")
    reads = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *args: reads.append(args[1:]) or pread(*args))
    numbers = list(range(30, 90))[::-1]
    assert reader.read_many(numbers) == [payloads[i] for i in numbers]
    assert len(reads) == 2, reads  # the rows in one pread, the frames (in file order) in one


@pytest.mark.parametrize(
    "indices, message",
    [
        (5, "indices must be a sequence of record numbers, got int 5"),
        ("01", "indices must be a sequence of record numbers, got str '01'"),
        (np.zeros((2, 2), np.int64), r"indices must be a 1-D array of record numbers"),
        ([0, 1.0], "a record number must be an integer, got 1.0"),
    ],
)
def test_a_batch_that_is_no_record_numbers_is_one_line(tmp_path, indices, message):
    write_record_set(str(tmp_path), "s", [b"a", b"b", b"c"], num_shards=1)
    reader = RunRecords(str(tmp_path), "s")
    with pytest.raises(TypeError, match=message) as error:
        reader.read_many(indices)
    assert "\n" not in str(error.value)
    assert reader.read_many([]) == []
