"""RecordStore: by-index reads over real TFRecord shards, both backends, damaged records."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs.record_store import DamagedRecordError, RecordStore
from tfx_dynamic_inputs.layout import masked_crc32c

# Also run in the full install: the library on its lowest TensorFlow (2.16, the TFX stack's).
pytestmark = pytest.mark.full

# The memory backend, and the disk backend with each of its readers.
STORES = ["memory", "disk-native", "disk-mapped", "disk-python"]
DISK_STORES = ["disk-native", "disk-mapped", "disk-python"]


def _open(output_dir: str, kind: str, **kwargs) -> RecordStore:
    backend, _, reader = kind.partition("-")
    store = RecordStore.open(output_dir, "x", backend=backend, reader=reader or "auto", **kwargs)
    assert store.backend == backend
    assert store.disk_reader == (reader or None)
    return store


def _records(rng: np.random.Generator, n: int) -> list[bytes]:
    # Varying lengths, including empty payloads, so offsets are not a simple stride.
    return [rng.bytes(int(rng.integers(0, 200))) for _ in range(n)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("run"))
    records = _records(np.random.default_rng(0), 257)
    runs.write_record_set(output_dir, "x", records, num_shards=4)
    return output_dir, records


def test_masked_crc_matches_tfrecord_writer(tmp_path):
    payload = b"hello, shard"
    path = str(tmp_path / "one.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(payload)
    with open(path, "rb") as f:
        frame = f.read()
    assert int.from_bytes(frame[8:12], "little") == masked_crc32c(frame[:8])
    assert int.from_bytes(frame[-4:], "little") == masked_crc32c(payload)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reads_match_written_records(run_dir, kind, seed):
    output_dir, records = run_dir
    store = _open(output_dir, kind)
    assert store.num_records == len(records)
    assert store.record_set == "x"
    indices = np.random.default_rng(seed).integers(0, len(records), size=64)
    got = store.read(tf.constant(indices, tf.int64)).numpy().tolist()
    assert got == [records[i] for i in indices]


@pytest.mark.parametrize("kind", STORES)
def test_reads_inside_dataset_map(run_dir, kind):
    output_dir, records = run_dir
    store = _open(output_dir, kind)
    order = np.random.default_rng(3).permutation(len(records))
    ds = (
        tf.data.Dataset.from_tensor_slices(order.astype(np.int64))
        .batch(32)
        .map(store.read, num_parallel_calls=tf.data.AUTOTUNE)
    )
    assert ds.element_spec == tf.TensorSpec([None], tf.string)
    got = [r for batch in ds.as_numpy_iterator() for r in batch.tolist()]
    assert got == [records[i] for i in order]


def test_auto_backend_follows_memory_budget(run_dir):
    output_dir, records = run_dir
    shard_bytes = sum(len(r) + layout.FRAME_OVERHEAD_BYTES for r in records)
    assert RecordStore.open(output_dir, "x", memory_budget_bytes=shard_bytes).backend == "memory"
    small = RecordStore.open(output_dir, "x", memory_budget_bytes=shard_bytes - 1)
    assert small.backend == "disk"


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("bad_index", [-1, 257, 10**9])
def test_out_of_range_index_names_index_and_size(run_dir, kind, bad_index):
    output_dir, _ = run_dir
    store = _open(output_dir, kind)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"{bad_index}.*num_records = 257"):
        store.read(tf.constant([0, bad_index, 3], tf.int64))
    ds = tf.data.Dataset.from_tensors(tf.constant([bad_index], tf.int64)).map(store.read)
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"{bad_index}.*num_records = 257"):
        list(ds)


def test_from_serialized_reads_by_index():
    records = [b"a", b"", b"ccc"]
    store = RecordStore.from_serialized(records)
    assert store.backend == "memory" and store.num_records == 3
    assert store.read([2, 0, 2]).numpy().tolist() == [b"ccc", b"a", b"ccc"]
    with pytest.raises(ValueError, match="vector"):
        RecordStore.from_serialized([[b"a"]])


def test_missing_record_set_is_a_clear_error(run_dir):
    output_dir, _ = run_dir
    with pytest.raises(FileNotFoundError, match="record set 'nope' not found"):
        RecordStore.open(output_dir, "nope")


def test_inconsistent_index_is_rejected(tmp_path):
    output_dir = str(tmp_path)
    runs.write_record_set(output_dir, "x", [b"a", b"b"], num_shards=1)
    offsets_path = os.path.join(layout.index_dir(output_dir, "x"), layout.OFFSETS_FILE)
    offsets = np.load(offsets_path)
    np.save(offsets_path, offsets[:1])
    with pytest.raises(ValueError, match="1 rows but .* num_records=2"):
        RecordStore.open(output_dir, "x")


# What a reader reports for each kind of damage `_damaged_run` makes.
_REASONS = {
    "payload": "payload CRC mismatch",
    "length CRC": "length CRC mismatch",
    "length field": r"frame length \d+ does not match the index \(\d+\)",
    "truncated": "truncated shard",
}


def _damaged_run(tmp_path, damage: str):
    """A 3-shard run with one damaged record; returns (dir, records, index, shard path, offset)."""
    output_dir = str(tmp_path)
    records = _records(np.random.default_rng(5), 30)
    records = [r or b"x" for r in records]
    paths = runs.write_record_set(output_dir, "x", records, num_shards=3)
    offsets = np.load(os.path.join(layout.index_dir(output_dir, "x"), layout.OFFSETS_FILE))
    index = len(records) - 1 if damage == "truncated" else 12
    shard, offset, length = (int(v) for v in offsets[index])
    with open(paths[shard], "r+b") as f:
        if damage == "truncated":  # the last shard ends in the middle of its last record
            f.truncate(offset + layout.FRAME_HEADER_BYTES + length // 2)
        else:
            position = {"payload": layout.FRAME_HEADER_BYTES, "length CRC": 8, "length field": 0}
            f.seek(offset + position[damage])
            first = f.read(1)
            f.seek(offset + position[damage])
            f.write(bytes([first[0] ^ 0x01]))
    return output_dir, records, index, paths[shard], offset


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("damage", sorted(_REASONS))
def test_damaged_record_fails_with_shard_and_offset(tmp_path, kind, damage):
    output_dir, _, index, shard, offset = _damaged_run(tmp_path, damage)
    expected = rf"record {index} \(shard {shard}, offset {offset}\): {_REASONS[damage]}"
    if kind == "memory":
        with pytest.raises(DamagedRecordError, match=expected):
            _open(output_dir, kind)
        return
    store = _open(output_dir, kind)
    assert store.read([index - 1]).shape == [1]  # undamaged neighbours still read
    with pytest.raises(DamagedRecordError, match=expected):
        store.read([0, index])
    ds = tf.data.Dataset.from_tensors(tf.constant([0, index], tf.int64)).map(store.read)
    with pytest.raises(tf.errors.OpError, match=expected):
        list(ds)


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("damage", sorted(_REASONS))
def test_damaged_record_skipped_and_counted(tmp_path, kind, damage):
    output_dir, records, index, shard, offset = _damaged_run(tmp_path, damage)
    store = _open(output_dir, kind, on_damaged="skip")
    batch = [index, 0, index, 1]
    got, ok = store.read_checked(batch)
    assert ok.numpy().tolist() == [False, True, False, True]
    assert got.numpy().tolist() == [b"", records[0], b"", records[1]]
    assert store.damaged_count.numpy() == 2
    ds = tf.data.Dataset.from_tensors(tf.constant([index], tf.int64)).map(store.read)
    assert [r.numpy().tolist() for r in ds] == [[b""]]
    assert store.damaged_count.numpy() == 3
    [damaged] = store.damaged_records
    assert (damaged.index, damaged.shard, damaged.offset) == (index, shard, offset)
    assert store.locate(index) == (shard, offset)


@pytest.mark.skipif(native.op_library() is None, reason="the native library is not built here")
@pytest.mark.parametrize("damage", sorted(_REASONS))
@pytest.mark.parametrize("verify_crc", [True, False])
def test_native_reads_of_adjacent_records_match_the_python_reader(tmp_path, damage, verify_crc):
    """The native reader reads frames that follow each other in a shard with one pread; batches
    of runs of adjacent records (across shard ends and the damaged record, with repeats, in any
    order) read and fail exactly as the Python reader's one read a record, and so does the mapped
    reader's copy of each record out of its mapped shard."""
    output_dir, records, _, _, _ = _damaged_run(tmp_path, damage)
    stores = {
        kind: _open(output_dir, kind, on_damaged="skip", verify_crc=verify_crc)
        for kind in DISK_STORES
    }
    rng = np.random.default_rng(len(damage) + verify_crc)
    for _ in range(25):
        starts = rng.integers(0, len(records), size=rng.integers(1, 5))
        batch = np.concatenate(
            [np.arange(a, min(a + rng.integers(1, 12), len(records))) for a in starts]
        )
        batch = rng.permutation(np.concatenate([batch, rng.choice(batch, rng.integers(0, 3))]))
        results = {
            kind: [t.numpy().tolist() for t in store.read_checked(batch)]
            for kind, store in stores.items()
        }
        assert results["disk-native"] == results["disk-python"]
        assert results["disk-mapped"] == results["disk-python"]
        got, ok = results["disk-native"]
        if not verify_crc and damage == "payload":
            continue  # without CRC checks the flipped payload byte is read as it is, by both
        assert [g for g, good in zip(got, ok, strict=True) if good] == [
            records[i] for i, good in zip(batch.tolist(), ok, strict=True) if good
        ]


@pytest.mark.skipif(native.op_library() is None, reason="the native library is not built here")
@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9000), min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_native_crc_checks_long_records_as_the_writer_framed_them(
    tmp_path_factory, lengths, seed, data
):
    """Payloads from 0 bytes to several of the op's 3-stream CRC blocks (768 bytes) pass the
    check as written, and one flipped byte anywhere in a payload fails it."""
    output_dir = str(tmp_path_factory.mktemp("crc"))
    rng = np.random.default_rng(seed)
    records = [rng.bytes(n) for n in lengths]
    paths = runs.write_record_set(output_dir, "x", records, num_shards=1)
    store = _open(output_dir, "disk-native", on_damaged="skip")
    got, ok = store.read_checked(np.arange(len(records)))
    assert ok.numpy().all() and got.numpy().tolist() == records
    flipped = data.draw(st.sampled_from([i for i, r in enumerate(records) if r] or [None]))
    if flipped is None:
        return
    at = data.draw(st.integers(0, len(records[flipped]) - 1))
    offset = int(store.locate(flipped)[1]) + layout.FRAME_HEADER_BYTES + at
    with open(paths[0], "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))
    store = _open(output_dir, "disk-native", on_damaged="skip")
    _, ok = store.read_checked(np.arange(len(records)))
    assert ok.numpy().tolist() == [i != flipped for i in range(len(records))]


@pytest.mark.parametrize("kind", DISK_STORES)
def test_crc_check_can_be_disabled(tmp_path, kind):
    output_dir, records, index, _, _ = _damaged_run(tmp_path, "payload")
    store = _open(output_dir, kind, verify_crc=False)
    got = store.read([index]).numpy()[0]
    assert got != records[index] and len(got) == len(records[index])


@pytest.mark.parametrize("kind", DISK_STORES)
@pytest.mark.parametrize("damage", ["truncated", "length field"])
def test_frame_checks_without_crc(tmp_path, kind, damage):
    output_dir, _, index, _, _ = _damaged_run(tmp_path, damage)
    store = _open(output_dir, kind, verify_crc=False)
    with pytest.raises(DamagedRecordError, match=_REASONS[damage]):
        store.read([index])


def test_bad_arguments_are_rejected(run_dir):
    output_dir, _ = run_dir
    with pytest.raises(ValueError, match="backend"):
        RecordStore.open(output_dir, "x", backend="ssd")
    with pytest.raises(ValueError, match="on_damaged"):
        RecordStore.open(output_dir, "x", on_damaged="ignore")


def test_native_reader_is_the_default_where_a_compiler_is(run_dir):
    # `make setup` builds it; without this check a broken build would silently fall back.
    if native.compiler() is None:
        pytest.skip("no C++ compiler on this machine: the disk backend reads in Python")
    assert native.op_library() is not None
    output_dir, _ = run_dir
    assert RecordStore.open(output_dir, "x", backend="disk").disk_reader == "native"


def test_payload_check_needs_the_python_reader(run_dir):
    output_dir, records = run_dir
    with pytest.raises(ValueError, match="payload_check runs in Python"):
        RecordStore.open(
            output_dir, "x", backend="disk", reader="native", payload_check=lambda _: None
        )
    store = RecordStore.open(output_dir, "x", backend="disk", payload_check=lambda _: None)
    assert store.disk_reader == "python"
    assert store.read([3]).numpy().tolist() == [records[3]]
