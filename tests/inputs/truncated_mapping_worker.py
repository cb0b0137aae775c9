"""A process that cuts a shard short under the mapped reader (run by
test_mapped_reader_truncation.py).

Writes a one-shard run to RUN_DIR and opens it with `reader="mapped"`; binds the native op to
the same shard with `map_shards=True`; reads every record with both; then cuts the shard in the
middle of record CUT_AT's frame and reads every record again, the op with the kernel that mapped
the shard: the records from CUT_AT on lie past the shard's new end, most of them on pages the
cut removed, which the mapping turns into SIGBUS. Then it empties the offset index in place and
reads again with that kernel and with a `pread` kernel made before: every kernel maps the index,
so a read of its rows is a SIGBUS too. Prints one JSON line: the op's ok flags before and after
the cut, the error the store raises after it, and each kernel's error after the index is emptied.
Then it reads past the end of a file it mapped itself with Python's `mmap`, outside the reader's
guard: that SIGBUS must reach the handler installed before the reader's (faulthandler's), which
ends the process.

    python -m tests.inputs.truncated_mapping_worker RUN_DIR CUT_AT
"""

from __future__ import annotations

import faulthandler
import json
import mmap
import os
import sys

import numpy as np
import tensorflow as tf

from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs.record_store import RecordStore

NUM_RECORDS = 40


def main(run_dir: str, cut_at: int) -> None:
    faulthandler.enable()  # the previous SIGBUS handler, as under pytest
    rng = np.random.default_rng(3)
    records = [rng.bytes(int(rng.integers(1000, 3000))) for _ in range(NUM_RECORDS)]
    [shard] = runs.write_record_set(run_dir, "x", records, num_shards=1)
    store = RecordStore.open(run_dir, "x", backend="disk", reader="mapped", on_damaged="skip")
    assert store.disk_reader == "mapped"
    offsets_path = os.path.join(layout.index_dir(run_dir, "x"), layout.OFFSETS_FILE)
    offsets = layout.load_npy(offsets_path, mmap=True, shape=(None, 3), dtype="<i8")
    header_bytes = int(offsets.offset)

    def read_every_record(map_shards: bool = True):
        got, ok = native.op_library().read_records_by_index(
            np.arange(NUM_RECORDS),
            shard_paths=[shard],
            offsets_path=offsets_path,
            offsets_header_bytes=header_bytes,
            num_records=NUM_RECORDS,
            map_shards=map_shards,
        )
        return got.numpy().tolist(), ok.numpy().tolist()

    def error_reading_every_record(map_shards: bool) -> str | None:
        try:
            read_every_record(map_shards)
        except tf.errors.DataLossError as error:
            return error.message
        return None

    got_before, ok_before = read_every_record()
    assert read_every_record(map_shards=False) == (records, [True] * NUM_RECORDS)
    assert got_before == records and store.read(np.arange(NUM_RECORDS)).numpy().tolist() == records
    os.truncate(shard, int(offsets[cut_at][1]) + 100)
    got_after, ok_after = read_every_record()
    try:
        store.read_checked(np.arange(NUM_RECORDS))
        store_error = None
    except layout.RunCommitError as error:
        store_error = str(error)
    pages_past_the_cut = sum(
        int(offsets[i][1]) // mmap.PAGESIZE > os.path.getsize(shard) // mmap.PAGESIZE
        for i in range(NUM_RECORDS)
    )
    del offsets  # the test's own mapping of the index, read no more
    os.truncate(offsets_path, 0)
    result = {
        "ok_before": ok_before,
        "ok_after": ok_after,
        "intact_after": got_after[:cut_at] == records[:cut_at],
        "pages_past_the_cut": pages_past_the_cut,
        "store_error": store_error,
        "index_emptied_error": {
            "mapped": error_reading_every_record(map_shards=True),
            "pread": error_reading_every_record(map_shards=False),
        },
    }
    print(json.dumps(result), flush=True)
    with open(shard, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        f.truncate(0)
        mapped[mmap.PAGESIZE * 2]  # noqa: B018  (the read is the point: SIGBUS, unguarded)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
