"""Damaged index files of a run: each fails with one clear error naming the file, record, shard or
offset at fault, never a crash, a huge allocation or an unnamed low-level error.

One case per damage kind; `test_index_fuzz.py` throws arbitrary bytes and values at the same
readers.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs import ValidPairs
from tfx_dynamic_inputs.inputs.labelled_sources import labelled_records
from tfx_dynamic_inputs.inputs.record_store import DamagedRecordError, RecordStore

NUM_RECORDS = 12
DISK_READERS = ["native", "mapped", "python"]
# The record whose row of the offset index the tests damage, and a length of 64 GiB.
DAMAGED = 5
HUGE_LENGTH = 2**36


def _records() -> list[bytes]:
    return [f"record-{i:02d}".encode() * (i + 1) for i in range(NUM_RECORDS)]


def _run(tmp_path) -> tuple[str, list[str]]:
    output_dir = str(tmp_path / "run")
    paths = runs.write_record_set(output_dir, "x", _records(), num_shards=3)
    return output_dir, paths


def _index_file(output_dir: str, name: str, record_set: str = "x") -> str:
    return os.path.join(layout.index_dir(output_dir, record_set), name)


def _set_row(output_dir: str, index: int, column: int, value: int) -> tuple[int, int]:
    """Sets one cell of the offset index; returns the (shard, offset) of that record after."""
    path = _index_file(output_dir, layout.OFFSETS_FILE)
    offsets = np.load(path)
    offsets[index, column] = value
    np.save(path, offsets)
    return int(offsets[index, 0]), int(offsets[index, 1])


def _open(output_dir: str, reader: str, **kwargs) -> RecordStore:
    if reader in ("native", "mapped") and native.op_library() is None:
        pytest.skip("the native op is not built (python -m tfx_dynamic_inputs.native)")
    return RecordStore.open(output_dir, "x", backend="disk", reader=reader, **kwargs)


# ------------------------------------------------------------------ frames outside their shard


@pytest.mark.parametrize("reader", DISK_READERS)
@pytest.mark.parametrize(
    "column, value, needs",
    [
        (2, HUGE_LENGTH, HUGE_LENGTH + layout.FRAME_OVERHEAD_BYTES),  # a length of 64 GiB
        (1, 10**9, None),  # an offset past the end of the shard
        (1, 2**63 - 1, None),  # offset + length would wrap around in int64
    ],
)
def test_frame_outside_its_shard_is_a_named_damaged_record_on_disk(
    tmp_path, reader, column, value, needs
):
    output_dir, paths = _run(tmp_path)
    shard, offset = _set_row(output_dir, DAMAGED, column, value)
    store = _open(output_dir, reader)
    records = _records()
    # Its neighbours read; nothing was allocated or read for it.
    assert store.read([DAMAGED - 1, DAMAGED + 1]).numpy().tolist() == [
        records[DAMAGED - 1],
        records[DAMAGED + 1],
    ]
    size = os.path.getsize(paths[shard])
    frame_bytes = needs or r"\d+"
    expected = (
        rf"record {DAMAGED} \(shard {paths[shard]}, offset {offset}\): truncated shard or damaged "
        rf"index: the frame needs {frame_bytes} bytes at offset {offset}, the shard holds {size}"
    )
    with pytest.raises(DamagedRecordError, match=expected):
        store.read([0, DAMAGED])
    dataset = tf.data.Dataset.from_tensors(tf.constant([DAMAGED], tf.int64)).map(store.read)
    with pytest.raises(tf.errors.OpError, match=expected):
        list(dataset)
    skipping = _open(output_dir, reader, on_damaged="skip")
    got, ok = skipping.read_checked([DAMAGED, 0])
    assert got.numpy().tolist() == [b"", records[0]]
    assert ok.numpy().tolist() == [False, True]
    [damaged] = skipping.damaged_records
    assert (damaged.index, damaged.shard, damaged.offset) == (DAMAGED, paths[shard], offset)


def test_frame_outside_its_shard_fails_the_memory_backend_at_open(tmp_path):
    output_dir, paths = _run(tmp_path)
    shard, offset = _set_row(output_dir, DAMAGED, 2, HUGE_LENGTH)
    with pytest.raises(
        DamagedRecordError,
        match=rf"record {DAMAGED} \(shard {paths[shard]}, offset {offset}\): truncated shard",
    ):
        RecordStore.open(output_dir, "x", backend="memory")
    store = RecordStore.open(output_dir, "x", backend="memory", on_damaged="skip")
    assert [d.index for d in store.damaged_records] == [DAMAGED]


def test_native_op_checks_bounds_before_allocating(tmp_path):
    """The op itself, without the checks of RecordStore.open: a 64 GiB length is a damaged frame,
    and a row naming no shard fails naming the record and the index file."""
    op_module = native.op_library()
    if op_module is None:
        pytest.skip("the native op is not built (python -m tfx_dynamic_inputs.native)")
    output_dir, paths = _run(tmp_path)
    offsets_path = _index_file(output_dir, layout.OFFSETS_FILE)
    offsets = np.load(offsets_path)
    offsets[3, 2] = HUGE_LENGTH
    offsets[4, 1] = 2**63 - 1
    offsets[6, 0] = 7
    np.save(offsets_path, offsets)
    mapped = np.load(offsets_path, mmap_mode="r")

    def read(indices):
        return op_module.read_records_by_index(
            indices,
            shard_paths=paths,
            offsets_path=offsets_path,
            offsets_header_bytes=int(mapped.offset),
            num_records=NUM_RECORDS,
        )

    records, ok = read(tf.constant([2, 3, 4, 5], tf.int64))
    assert ok.numpy().tolist() == [True, False, False, True]
    assert records.numpy().tolist() == [_records()[2], b"", b"", _records()[5]]
    with pytest.raises(
        tf.errors.DataLossError,
        match=rf"offset index {offsets_path}: record 6 has shard 7 \(of 3\)",
    ):
        read(tf.constant([6], tf.int64))


@pytest.mark.parametrize(
    "column, value, message",
    [
        (0, 3, r"record 5 has shard 3 \(the run has 3 shards\)"),
        (0, -1, "record 5 has shard -1"),
        (1, -8, r"record 5 has shard 1 \(the run has 3 shards\), offset -8"),
        (2, -1, r"record 5 has shard 1 \(the run has 3 shards\), offset \d+, length -1"),
    ],
)
def test_impossible_rows_fail_at_open_naming_the_record(tmp_path, column, value, message):
    output_dir, _ = _run(tmp_path)
    _set_row(output_dir, DAMAGED, column, value)
    offsets_path = _index_file(output_dir, layout.OFFSETS_FILE)
    for backend in ("memory", "disk"):
        with pytest.raises(layout.IndexFileError, match=rf"{offsets_path}: {message}"):
            RecordStore.open(output_dir, "x", backend=backend)


# ------------------------------------------------------------------ .npy files


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npz_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("arr_0.npy", _npy_bytes(np.zeros(3, np.int64)))
    return buffer.getvalue()


GOOD_OFFSETS = _npy_bytes(np.zeros([NUM_RECORDS, 3], np.int64))
BAD_NPY_FILES = {
    "empty": (b"", "not a .npy file"),
    "text": (b"shard,offset,length\n", "not a .npy file"),
    "pickle": (pickle.dumps(np.zeros(3)), "not a .npy file"),
    "npz": (_npz_bytes(), "not a .npy file"),
    "truncated header": (GOOD_OFFSETS[:40], "not a readable .npy array"),
    "truncated data": (GOOD_OFFSETS[:-5], "not a readable .npy array"),
    "garbage header": (
        GOOD_OFFSETS[:10] + b"{'descr': <i8, 'shape': ((((" + GOOD_OFFSETS[39:],
        "not a readable .npy array",
    ),
    "object array": (_npy_bytes(np.array([None, 1], dtype=object)), "not a readable .npy array"),
}


@pytest.mark.parametrize("damage", sorted(BAD_NPY_FILES))
def test_unreadable_offsets_file_is_named(tmp_path, damage):
    output_dir, _ = _run(tmp_path)
    data, message = BAD_NPY_FILES[damage]
    path = _index_file(output_dir, layout.OFFSETS_FILE)
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(layout.IndexFileError, match=rf"{path}: {message}"):
        RecordStore.open(output_dir, "x", backend="disk")


def test_a_header_claiming_more_rows_than_the_file_holds_allocates_nothing(tmp_path):
    path = str(tmp_path / "offsets.npy")
    header = np.lib.format.header_data_from_array_1_0(np.zeros([1, 3], np.int64))
    header["shape"] = (2**40, 3)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(bytes(48))
    for mmap in (True, False):
        with pytest.raises(layout.IndexFileError, match=f"{path}: not a readable .npy array"):
            layout.load_npy(path, mmap=mmap)


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros([NUM_RECORDS, 3], np.float64), "expected <i8, got <f8"),
        (np.zeros([NUM_RECORDS, 3], np.int32), "expected <i8, got <i4"),
        (np.zeros([NUM_RECORDS, 3], ">i8"), "expected <i8, got >i8"),
        (np.zeros([NUM_RECORDS, 2], np.int64), r"expected shape \[N, 3\], got \[12, 2\]"),
        (np.zeros([NUM_RECORDS * 3], np.int64), r"expected shape \[N, 3\], got \[36\]"),
    ],
)
def test_offsets_of_the_wrong_type_or_shape_are_named(tmp_path, array, message):
    output_dir, _ = _run(tmp_path)
    path = _index_file(output_dir, layout.OFFSETS_FILE)
    np.save(path, array)
    with pytest.raises(layout.IndexFileError, match=rf"{path}: {message}"):
        RecordStore.open(output_dir, "x")


def test_row_count_must_match_shards_json(tmp_path):
    output_dir, _ = _run(tmp_path)
    path = _index_file(output_dir, layout.OFFSETS_FILE)
    np.save(path, np.load(path)[:-1])
    with pytest.raises(layout.IndexFileError, match=rf"{path}: 11 rows but .* num_records=12"):
        RecordStore.open(output_dir, "x")


# ------------------------------------------------------------------ shards.json


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not valid JSON"),
        (b'{"shards": [', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),
        (b"[]", "expected a JSON object, got list"),
        (b"{}", '"shards" must be a list of paths, got None'),
        (b'{"shards": "examples", "num_records": 12}', '"shards" must be a list'),
        (b'{"shards": [], "num_records": "12"}', '"num_records" must be an integer >= 0'),
        (b'{"shards": [], "num_records": 12.0}', '"num_records" must be an integer >= 0'),
        (b'{"shards": [], "num_records": true}', '"num_records" must be an integer >= 0'),
        (b'{"shards": [], "num_records": -1}', '"num_records" must be an integer >= 0'),
        (b'{"shards": [3], "num_records": 12}', "a shard path must be a non-empty string, got 3"),
        (b'{"shards": [""], "num_records": 12}', "a shard path must be a non-empty string"),
        (b'{"shards": ["a\\u0000b"], "num_records": 12}', "shard path .* holds unprintable"),
        (b'{"shards": ["\\ud800"], "num_records": 12}', "shard path .* holds unprintable"),
    ],
)
def test_malformed_shards_json_is_named(tmp_path, content, message):
    output_dir, _ = _run(tmp_path)
    path = _index_file(output_dir, layout.SHARDS_FILE)
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(layout.IndexFileError, match=rf"{path}: {message}"):
        RecordStore.open(output_dir, "x")


def _set_shards(output_dir: str, shards: list) -> str:
    path = _index_file(output_dir, layout.SHARDS_FILE)
    manifest = layout.load_json(path)
    manifest["shards"] = shards
    with open(path, "w") as f:
        json.dump(manifest, f)
    return path


@pytest.mark.parametrize(
    "shard, message",
    [
        ("/etc/passwd", "is absolute"),
        ("../../etc/passwd", "outside the run directory"),
        ("examples/../../../etc/passwd", "outside the run directory"),
        ("..", "outside the run directory"),
        (".", "outside the run directory"),
        ("file:///etc/passwd", "is absolute"),
        ("gs://bucket/examples/Split-x/data.tfrecord", "is absolute"),
        ("../other-run/examples/Split-y/data-00000-of-00003.tfrecord", "not in the Split-x folder"),
        # A Split-x folder, but not of an artifact of the same component execution (issue 20.8).
        ("../elsewhere/Split-x/x.tfrecord", "not in the Split-x folder of an artifact"),
        ("../../examples/Split-x/x.tfrecord", "not in the Split-x folder of an artifact"),
    ],
)
def test_shard_paths_are_confined_to_the_run(tmp_path, shard, message):
    output_dir, paths = _run(tmp_path)
    relative = [os.path.relpath(p, output_dir) for p in paths]
    shards_path = _set_shards(output_dir, [relative[0], shard, relative[2]])
    with pytest.raises(
        layout.IndexFileError, match=rf"{shards_path}: shard path '{shard}'.*{message}"
    ):
        RecordStore.open(output_dir, "x")


def test_shards_of_the_materialize_component_live_beside_the_run(tmp_path):
    """The materialize component moves the shards to its Examples artifact, of the same
    execution: the offset index artifact (the run directory, `<component>/offset_index/<id>`)
    points at `../../examples/<id>/Split-x/...`."""
    component = tmp_path / "MaterializePairs"
    output_dir = str(component / "offset_index" / "7")
    paths = runs.write_record_set(output_dir, "x", _records(), num_shards=3)
    examples = component / "examples" / "7" / "Split-x"
    examples.mkdir(parents=True)
    moved = []
    for path in paths:
        target = str(examples / os.path.basename(path))
        os.rename(path, target)
        moved.append(os.path.relpath(target, output_dir))
    assert moved[0].startswith("../../examples/7/Split-x/")
    _set_shards(output_dir, moved)
    store = RecordStore.open(output_dir, "x", backend="disk")
    assert store.read([0, 11]).numpy().tolist() == [_records()[0], _records()[11]]


def test_missing_or_directory_shards_are_named(tmp_path):
    output_dir, paths = _run(tmp_path)
    os.remove(paths[1])
    shards_path = _index_file(output_dir, layout.SHARDS_FILE)
    with pytest.raises(FileNotFoundError, match=rf"{shards_path}: shard 1 not found: {paths[1]}"):
        RecordStore.open(output_dir, "x")
    _set_shards(output_dir, ["examples/Split-x", "examples", "index"])
    with pytest.raises(layout.IndexFileError, match=rf"{shards_path}: shard 0 is a directory"):
        RecordStore.open(output_dir, "x")


# ------------------------------------------------------------------ the pair index


def _pairs_run(tmp_path) -> str:
    output_dir, _ = _run(tmp_path)
    runs.write_record_set(output_dir, "y", [b"y"] * 4, num_shards=1)
    runs.write_pairs(output_dir, [[i % 4] for i in range(NUM_RECORDS)])
    return output_dir


@pytest.mark.parametrize("name", [layout.ROW_SPLITS_FILE, layout.VALUES_FILE])
@pytest.mark.parametrize("damage", ["truncated data", "text", "object array"])
def test_unreadable_pair_index_files_are_named(tmp_path, name, damage):
    output_dir = _pairs_run(tmp_path)
    path = os.path.join(layout.pairs_index_dir(output_dir), name)
    data, message = BAD_NPY_FILES[damage]
    if damage == "truncated data":
        with open(path, "rb") as f:
            data = f.read()[:-5]
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(layout.IndexFileError, match=rf"{path}: {message}"):
        ValidPairs.load(output_dir, num_x=NUM_RECORDS, num_y=4)


def _ints(*values) -> np.ndarray:
    return np.array(values, np.int64)


@pytest.mark.parametrize(
    "row_splits, values, message",
    [
        (_ints(1, 2), _ints(0, 1), "row_splits.npy: row_splits must start at 0 and end at the"),
        (_ints(0, 1), _ints(0, 1), "row_splits.npy: row_splits must start at 0 and end at the"),
        (_ints(), _ints(), "row_splits.npy: row_splits must start at 0 .* got 0 splits"),
        (_ints(0, 2, 1, 2), _ints(0, 1), r"row_splits.npy: row_splits decrease at row 1 \(2 -> 1"),
        (_ints(0, 1)[None], _ints(0), r"row_splits.npy: expected shape \[N\], got \[1, 2\]"),
        (np.array([0.0, 1.0]), _ints(0), "row_splits.npy: expected an integer dtype, got <f8"),
        (_ints(0, 1), np.array([b"a"]), r"values.npy: expected an integer dtype, got \|S1"),
    ],
)
def test_malformed_pair_csr_is_named(tmp_path, row_splits, values, message):
    output_dir = _pairs_run(tmp_path)
    directory = layout.pairs_index_dir(output_dir)
    np.save(os.path.join(directory, layout.ROW_SPLITS_FILE), row_splits)
    np.save(os.path.join(directory, layout.VALUES_FILE), values)
    with pytest.raises(layout.IndexFileError, match=rf"{directory}/{message}"):
        ValidPairs.load(output_dir, num_x=NUM_RECORDS, num_y=4)


def test_pair_index_values_out_of_range_name_the_index_and_the_x(tmp_path):
    output_dir = _pairs_run(tmp_path)
    directory = layout.pairs_index_dir(output_dir)
    with pytest.raises(
        layout.IndexFileError,
        match=rf"pair index {directory}: valid_pairs: y index 3 out of range for x 3 \(num_y = 3\)",
    ):
        ValidPairs.load(output_dir, num_x=NUM_RECORDS, num_y=3)


# ------------------------------------------------------------------ the class index


def _labelled_run(tmp_path) -> tuple[str, str]:
    output_dir = str(tmp_path / "audio")
    write_audio_run(output_dir, [3, 2, 4], min_samples=20, max_samples=40)
    return output_dir, layout.class_records_dir(output_dir, "train")


def _labelled_index_file(tmp_path, name: str) -> tuple[str, str]:
    """A labelled run and the path of its index file `name` of the train record set."""
    output_dir, _ = _labelled_run(tmp_path)
    return output_dir, _index_file(output_dir, name, "train")


@pytest.mark.parametrize(
    "row_splits, values, message",
    [
        ([0, 3, 5, 8], list(range(8)), ": the class index covers 8 records"),
        ([0, 3, 5, 9], [*range(8), 9], r"/values.npy: entry 8 is record 9, outside \[0, 9\)"),
        ([0, 3, 5, 9], [*range(8), -1], r"/values.npy: entry 8 is record -1, outside \[0, 9\)"),
        ([0, 3, 5, 9], [*range(8), 2], "/values.npy: record 2 is listed 2 times"),
        ([0, 3, 5], list(range(9)), "/row_splits.npy: row_splits must start at 0 and end at"),
    ],
)
def test_malformed_class_index_is_named(tmp_path, row_splits, values, message):
    output_dir, directory = _labelled_run(tmp_path)
    np.save(os.path.join(directory, layout.ROW_SPLITS_FILE), np.array(row_splits, np.int64))
    np.save(os.path.join(directory, layout.VALUES_FILE), np.array(values, np.int64))
    with pytest.raises(layout.IndexFileError, match=rf"{directory}{message}"):
        labelled_records(output_dir)


def test_class_names_that_are_not_text_are_named(tmp_path):
    output_dir, path = _labelled_index_file(tmp_path, layout.CLASSES_FILE)
    with open(path, "wb") as f:
        f.write(b"spk0\n\xff\xfe\nspk2\n")
    with pytest.raises(layout.IndexFileError, match=rf"{path}: not UTF-8 text"):
        labelled_records(output_dir)
    with open(path, "w") as f:
        f.write("spk0\nspk1\n")
    with pytest.raises(layout.IndexFileError, match=rf"{path} lists 2 classes .* has 3"):
        labelled_records(output_dir)


def test_class_ids_file_is_checked_by_its_loader(tmp_path):
    _, path = _labelled_index_file(tmp_path, layout.CLASS_IDS_FILE)
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(layout.IndexFileError, match=rf"{path}: not a readable .npy array"):
        layout.load_npy(path)
    np.save(path, np.zeros([9, 1], np.int64))
    with pytest.raises(layout.IndexFileError, match=rf"{path}: expected shape \[N\]"):
        layout.load_npy(path, shape=(None,), dtype=layout.INTEGER)
