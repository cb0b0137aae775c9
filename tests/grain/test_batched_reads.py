"""A Grain batch of a run's records is one batched read of the source (`BatchReader` calls
`RunRecordSource.__getitems__`; Grain's `SourceMapDataset` calls it as `_getitems`), and reads
as the records read one by one: the same records stacked, damaged ones left out under "skip"."""

from __future__ import annotations

import os
import subprocess

import grain
import numpy as np
import pytest

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.grain import BatchReader
from tfx_dynamic_inputs.layout.filesystem import without_tensorflow
from tfx_dynamic_inputs.records import RunRecordSource

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DAMAGED = 5


# Written by the full install's interpreter: the layout's writers go through Beam or TensorFlow.
_WRITE_RUN = """
import sys
from tfx_dynamic_inputs import layout
run_id = layout.new_run_id()
payloads = [bytes([i]) * (20 + i) for i in range(40)]
shards = [payloads[:13], payloads[13:27], payloads[27:]]
layout.write_record_set(sys.argv[1], "x", shards, 3, [f"r{i}" for i in range(40)], run_id)
layout.commit_run(sys.argv[1], run_id)
"""


@pytest.fixture(scope="module")
def run(tf_python: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[bytes]]:
    """A run of 40 payloads over 3 shards, record 5's payload CRC failing."""
    folder = str(tmp_path_factory.mktemp("batched"))
    subprocess.run([tf_python, "-c", _WRITE_RUN, folder], check=True, cwd=_REPO)
    offsets = np.load(os.path.join(layout.index_dir(folder, "x"), layout.OFFSETS_FILE))
    shard, offset, _ = (int(v) for v in offsets[_DAMAGED])
    with without_tensorflow():
        path = layout.load_shards(folder, "x").shard_paths[shard]
    with open(path, "r+b") as f:
        f.seek(offset + 12)  # the payload's first byte
        f.write(b"\xff")
    return folder, [bytes([i]) * (20 + i) for i in range(40)]


class _OneByOne:
    """A source of the same records without a batched read."""

    def __init__(self, source: RunRecordSource):
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int):
        return self._source[index]


def test_a_batch_is_one_batched_read_equal_to_reading_one_by_one(run, monkeypatch):
    folder, payloads = run
    batched = []
    read_batch = RunRecordSource.__getitems__
    monkeypatch.setattr(
        RunRecordSource,
        "__getitems__",
        lambda source, indices: batched.append(list(indices)) or read_batch(source, indices),
    )
    source = RunRecordSource(folder, "x", decode="bytes", on_damaged="skip")
    numbers = np.random.default_rng(0).integers(0, len(payloads), 64)
    numbers[[3, 40]] = _DAMAGED
    records, kept = BatchReader(source, "x").read_checked(numbers)
    assert batched == [numbers.tolist()]
    assert kept.tolist() == [n != _DAMAGED for n in numbers]
    assert records.tolist() == [payloads[n] for n in numbers if n != _DAMAGED]
    one_by_one = RunRecordSource(folder, "x", decode="bytes", on_damaged="skip")
    theirs, their_kept = BatchReader(_OneByOne(one_by_one), "x").read_checked(numbers)
    assert theirs.tolist() == records.tolist() and their_kept.tolist() == kept.tolist()
    assert source.records.damaged_records == one_by_one.records.damaged_records


def test_grains_batched_read_of_a_source_is_ours(run, monkeypatch):
    folder, payloads = run
    batched = []
    read_batch = RunRecordSource._getitems
    monkeypatch.setattr(
        RunRecordSource,
        "_getitems",
        lambda source, indices: batched.append(list(indices)) or read_batch(source, indices),
    )
    source = RunRecordSource(folder, "x", decode="bytes", on_damaged="skip")
    keys = [7, 1, 30, 1, _DAMAGED]
    # What Grain's batch pushdown calls on its source dataset: the source's `_getitems`.
    got = grain.MapDataset.source(source).map(lambda record: record)._getitems(keys)
    assert batched == [keys]
    assert got == [None if k == _DAMAGED else payloads[k] for k in keys]


def test_a_source_returning_another_number_of_records_is_one_line():
    class Short(_OneByOne):
        def __getitems__(self, indices):
            return [b"x"] * (len(indices) - 1)

    with pytest.raises(ValueError, match=r"^y: the source's __getitems__ returned 2 records for 3"):
        BatchReader(Short(list(range(9))), "y").read_checked(np.array([1, 2, 3]))
