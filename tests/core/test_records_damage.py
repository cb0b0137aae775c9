"""The reader without TensorFlow on damaged and changed runs: every refusal is one line naming
the file (a damaged record: its number, shard, offset and run; another run: both run ids), and
`on_damaged="skip"` reads a damaged record as None and lists it."""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest

from tests.core.records_runs import SAMPLE_RATE, write_audio_run
from tests.inputs.runs import write_record_set
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records import (
    AudioDecoder,
    DamagedRecordError,
    RunRecords,
    RunRecordSource,
)


def _offsets(run: str, record_set: str = "train") -> np.ndarray:
    return np.load(os.path.join(layout.index_dir(run, record_set), layout.OFFSETS_FILE))


def _shard(run: str, index: int, record_set: str = "train") -> str:
    return layout.load_shards(run, record_set).shard_paths[index]


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize(
    "where, reason",
    [
        (lambda offset, length: offset + 12 + length, "payload CRC mismatch"),
        (lambda offset, length: offset + 8, "length CRC mismatch"),
        (lambda offset, length: offset + 3, "frame length"),
    ],
    ids=["payload CRC", "length CRC", "length"],
)
def test_a_flipped_frame_byte_is_a_damaged_record_naming_shard_offset_and_run(
    tmp_path, where, reason
):
    run = str(tmp_path)
    records = write_audio_run(run, num_records=12)
    shard, offset, length = (int(v) for v in _offsets(run)[5])
    _flip(_shard(run, shard), where(offset, length))
    reader = RunRecords(run, "train")
    with pytest.raises(DamagedRecordError) as error:
        reader.read(5)
    message = _one_line(error)
    assert reason in message
    assert f"record 5 (shard {_shard(run, shard)}, offset {offset})" in message
    assert reader.run_id in message
    assert [reader.read(i) for i in range(12) if i != 5] == records[:5] + records[6:]
    skipping = RunRecords(run, "train", on_damaged="skip")
    assert skipping.read(5) is None
    assert [(d.index, d.offset) for d in skipping.damaged_records] == [(5, offset)]


def test_without_crc_checks_only_the_length_is_checked(tmp_path):
    run = str(tmp_path)
    records = write_audio_run(run, num_records=6)
    shard, offset, length = (int(v) for v in _offsets(run)[1])
    _flip(_shard(run, shard), offset + 12)  # the payload's first byte
    unchecked = RunRecords(run, "train", verify_crc=False)
    assert unchecked.read(1) != records[1]
    assert len(unchecked.read(1)) == len(records[1])


def test_a_truncated_shard_makes_its_last_records_damaged(tmp_path):
    run = str(tmp_path)
    records = write_audio_run(run, num_records=12)
    offsets = _offsets(run)
    last = int(offsets[-1, 0])
    path = _shard(run, last)
    cut = int(offsets[-2, 1]) + 20  # inside the second last record's frame
    os.truncate(path, cut)
    reader = RunRecords(run, "train", on_damaged="skip")
    in_last = np.flatnonzero(offsets[:, 0] == last)
    reads = [reader.read(i) for i in range(12)]
    assert reads[-2:] == [None, None]
    assert reads[: in_last[-2]] == records[: in_last[-2]]
    reasons = [d.reason for d in reader.damaged_records]
    assert all(reason.startswith("truncated shard") for reason in reasons), reasons
    with pytest.raises(DamagedRecordError, match=f"shard {path}, offset") as error:
        RunRecords(run, "train").read(11)
    assert f"holds {cut}" in _one_line(error)


@pytest.mark.parametrize("length", [40, 1 << 40])
def test_an_index_row_past_the_shard_end_reads_nothing_and_is_damaged(tmp_path, length):
    run = str(tmp_path)
    write_audio_run(run, num_records=8)
    path = os.path.join(layout.index_dir(run, "train"), layout.OFFSETS_FILE)
    offsets = _offsets(run)
    shard_bytes = os.path.getsize(_shard(run, int(offsets[3, 0])))
    offsets[3, 1:] = (shard_bytes - 30, length)
    np.save(path, offsets)
    with pytest.raises(DamagedRecordError) as error:
        RunRecords(run, "train").read(3)
    message = _one_line(error)
    assert f"offset {shard_bytes - 30}): truncated shard or damaged index" in message
    assert f"the frame needs {length + 16} bytes" in message


def test_an_index_row_naming_no_shard_is_refused_at_open(tmp_path):
    run = str(tmp_path)
    write_audio_run(run, num_records=8)
    path = os.path.join(layout.index_dir(run, "train"), layout.OFFSETS_FILE)
    offsets = _offsets(run)
    offsets[2, 0] = 7
    np.save(path, offsets)
    with pytest.raises(layout.IndexFileError) as error:
        RunRecords(run, "train")
    assert f"{path}: record 2 has shard 7 (the run has 3 shards)" in _one_line(error)


def test_a_summary_naming_another_run_is_refused_naming_both(tmp_path):
    run = str(tmp_path)
    write_audio_run(run, num_records=5)
    ours = layout.load_json(os.path.join(run, layout.SUMMARY_FILE))[layout.RUN_ID_KEY]
    layout.commit_run(run, "0" * 32)
    with pytest.raises(layout.RunCommitError) as error:
        RunRecords(run, "train")
    message = _one_line(error)
    assert ours in message and "0" * 32 in message


def test_a_run_overwritten_between_reads_is_never_served(tmp_path):
    run = str(tmp_path)
    first = write_audio_run(run, num_records=9, seed=1)
    source = RunRecordSource(run, "train", decode="bytes")
    copy = pickle.dumps(source)  # as a Grain worker gets it
    assert source[0] == first[0]
    first_id = source.records.run_id
    os.remove(os.path.join(run, layout.SUMMARY_FILE))  # the job's --overwrite, a new run id
    second = write_audio_run(run, num_records=9, seed=2)
    second_id = layout.load_json(os.path.join(run, layout.SUMMARY_FILE))[layout.RUN_ID_KEY]
    assert second_id != first_id and second != first
    for index in range(9):  # the files it holds are its run's, or the read fails
        try:
            assert source[index] == first[index]
        except layout.RunCommitError as error:
            assert first_id in str(error) and second_id in str(error)
    for check in (source.records.check_run, lambda: pickle.loads(copy)[0]):
        with pytest.raises(layout.RunCommitError) as error:
            check()
        message = _one_line(error)
        assert first_id in message and second_id in message


def test_a_shard_written_in_place_is_refused_naming_it(tmp_path):
    run = str(tmp_path)
    records = write_audio_run(run, num_records=6)
    reader = RunRecords(run, "train")
    assert reader.read(0) == records[0]
    path = _shard(run, 0)
    with open(path, "r+b") as f:  # the same bytes written again: the file changed under us
        data = f.read()
        f.seek(0)
        f.write(data)
    os.utime(path, ns=(0, 1))
    with pytest.raises(layout.RunCommitError) as error:
        reader.read(0)
    assert f"{path} was written in place since the run {reader.run_id}" in _one_line(error)


def test_a_payload_that_is_no_example_is_a_damaged_record(tmp_path):
    run = str(tmp_path)
    records = write_audio_run(run, num_records=4)
    write_record_set(run, "train", [*records[:2], b"\xff\xff\xff", records[3]], num_shards=2)
    decode = AudioDecoder(SAMPLE_RATE)
    with pytest.raises(DamagedRecordError) as error:
        RunRecordSource(run, "train", decode=decode)[2]
    assert "record 2 (shard " in _one_line(error)
    assert "not a tf.train.Example" in str(error.value)
    skipping = RunRecordSource(run, "train", decode=decode, on_damaged="skip")
    assert skipping[2] is None
    assert skipping[3]["id"] == b"utt0003"
    assert [d.index for d in skipping.records.damaged_records] == [2]


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"record_set": "../x"}, ValueError, "record_set must name a record set"),
        ({"record_set": "eval"}, FileNotFoundError, "record set 'eval' not found"),
        ({"on_damaged": "ignore"}, ValueError, "on_damaged must be one of"),
        ({"verify_crc": 1}, TypeError, "verify_crc must be a bool"),
        ({"decode": "wav"}, ValueError, "decode must be one of"),
        ({"run_dir": "gs://bucket/run"}, ValueError, "is remote"),
        ({"run_dir": "/nonexistent/run"}, FileNotFoundError, "is not a committed run"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, arguments, error, message):
    write_audio_run(str(tmp_path), num_records=3)
    given = {"run_dir": str(tmp_path), "record_set": "train", **arguments}
    with pytest.raises(error, match=message) as raised:
        RunRecordSource(**given)
    _one_line(raised)


@pytest.mark.parametrize(
    "index, error", [(3, IndexError), (-1, IndexError), (True, TypeError), (1.0, TypeError)]
)
def test_bad_record_numbers_are_one_line(tmp_path, index, error):
    write_audio_run(str(tmp_path), num_records=3)
    source = RunRecordSource(str(tmp_path), "train")
    with pytest.raises(error) as raised:
        source[index]
    _one_line(raised)
    assert source[np.int64(2)] is not None


def test_a_frame_length_field_is_never_trusted_beyond_the_index(tmp_path):
    # A length field claiming 2**60 bytes: the read is bounded by the index's length.
    run = str(tmp_path)
    write_audio_run(run, num_records=3)
    shard, offset, _ = (int(v) for v in _offsets(run)[1])
    with open(_shard(run, shard), "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<Q", 1 << 60))
    with pytest.raises(DamagedRecordError, match=r"frame length 1152921504606846976 does not"):
        RunRecords(run, "train").read(1)
