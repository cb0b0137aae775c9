"""Fuzz tests of the index readers: arbitrary bytes and values in `offsets.npy`, `shards.json`,
the pair index and the class index give either a consistent result or an error that names the
file or record at fault: never a crash, a huge allocation or an unnamed low-level error.

One small real run is written once per module; each example damages some of its index files in
place and puts them back afterwards (copying the run per example would cost more than the
readers do).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Iterator

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs import ClassBalancedPlan, ValidPairs
from tfx_dynamic_inputs.inputs.class_report import class_report
from tfx_dynamic_inputs.inputs.labelled_sources import labelled_records
from tfx_dynamic_inputs.inputs.record_store import DamagedRecordError, RecordStore
from tfx_dynamic_inputs.inputs.run import StoreOptions

CLASS_SIZES = [3, 2, 4]
NUM_X = sum(CLASS_SIZES)
NUM_Y = 5
# Values that break arithmetic: int64 limits, 2**36 (a 64 GiB record), around the shard sizes.
EDGE_VALUES = [-(2**63), -1, 0, 1, 15, 16, 17, 2**31, 2**32, 2**36, 2**62, 2**63 - 17, 2**63 - 1]


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> str:
    """A run with a labelled record set `x` (3 shards, class index), `y` and a pair index."""
    output_dir = str(tmp_path_factory.mktemp("fuzz") / "run")
    write_audio_run(output_dir, CLASS_SIZES, record_set="x", min_samples=4, max_samples=24)
    runs.write_record_set(output_dir, "y", [f"y{i}".encode() * i for i in range(NUM_Y)], 2)
    runs.write_pairs(output_dir, [[i % NUM_Y, (i + 2) % NUM_Y] for i in range(NUM_X)])
    return output_dir


@contextlib.contextmanager
def damaged(pristine: str, files: dict[str, bytes]) -> Iterator[str]:
    """The run with `files` (paths relative to it) overwritten, restored afterwards.

    Overwritten in place (same inodes): a native reader's kernel, cached by TensorFlow for its
    attributes (paths, header size, record count), maps the offset index shared, so it reads the
    rows of the example at hand, as a fresh kernel would.
    """
    originals = {relative: read_bytes(pristine, relative) for relative in files}
    try:
        for relative, data in files.items():
            write_bytes(pristine, relative, data)
        yield pristine
    finally:
        for relative, data in originals.items():
            write_bytes(pristine, relative, data)


def read_bytes(output_dir: str, relative: str) -> bytes:
    with open(os.path.join(output_dir, relative), "rb") as f:
        return f.read()


def write_bytes(output_dir: str, relative: str, data: bytes) -> None:
    with open(os.path.join(output_dir, relative), "wb") as f:
        f.write(data)


def assert_located(error: BaseException, pattern: str) -> None:
    """`error` is one of the located kinds and its message matches `pattern` (a file or record)."""
    # OSError: a shard that cannot be opened or stat-ed (FileNotFoundError among them).
    assert isinstance(error, (layout.IndexFileError, DamagedRecordError, OSError)), (
        f"{type(error).__name__}: {error}"
    )
    assert re.search(pattern, str(error)), f"{type(error).__name__} not located: {error}"


# ------------------------------------------------------------------ strategies


@st.composite
def mutated(draw, original: bytes) -> bytes:
    """`original` with a few bytes overwritten, inserted or cut off (header and data alike)."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "set", "insert", "cut"]))
        position = draw(st.integers(0, len(data)))
        if kind == "cut":
            del data[position:]
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[position : position + 8] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def file_bytes(original: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=300), mutated(original))


def int_cells(low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(low, high), st.sampled_from(EDGE_VALUES))


def rarely(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """`rare` one time in ten, else `common`."""
    return st.integers(0, 9).flatmap(lambda k: rare if k == 0 else common)


def offset_cells(column: int) -> st.SearchStrategy[int]:
    """Cells of an offset index row, mostly ones that pass the checks at open (so that the
    readers see them): a valid shard, a non-negative offset or length."""
    if column == 0:
        return rarely(st.integers(0, 2), st.sampled_from([-1, 3, 2**62]))
    return rarely(st.one_of(st.integers(0, 400), st.sampled_from(EDGE_VALUES[2:])), st.just(-1))


# ------------------------------------------------------------------ offsets.npy

OFFSETS = os.path.join(layout.INDEX_DIR, "x", layout.OFFSETS_FILE)
OFFSETS_OR_RECORD = r"offsets\.npy|record \d+ \(shard [^,]+, offset -?\d+\)"


@pytest.fixture(scope="module")
def frames(pristine) -> dict[tuple[int, int, int], bytes]:
    """(shard, offset, length) -> payload of every real frame of `x`."""
    offsets = np.load(os.path.join(pristine, OFFSETS))
    store = RecordStore.open(pristine, "x", backend="memory")
    records = store.read(np.arange(NUM_X)).numpy().tolist()
    return {
        tuple(int(v) for v in row): record for row, record in zip(offsets, records, strict=True)
    }


def check_reads(store: RecordStore, offsets: np.ndarray, frames: dict) -> bool:
    """Every record reads (skip mode); a good one is the payload of the real frame its row names,
    a damaged one is listed with its own row's shard and offset. Returns whether any is."""
    got, ok = store.read_checked(np.arange(store.num_records))
    for index, (record, good) in enumerate(
        zip(got.numpy().tolist(), ok.numpy().tolist(), strict=True)
    ):
        row = tuple(int(v) for v in offsets[index])
        if good:
            assert frames.get(row) == record, (index, row)
        else:
            assert record == b""
    damaged = {d.index: d for d in store.damaged_records}
    assert sorted(damaged) == np.flatnonzero(~ok.numpy()).tolist()
    for index, entry in damaged.items():
        assert entry.offset == int(offsets[index, 1])
        assert entry.shard.endswith(layout.shard_name(int(offsets[index, 0]), 3))
    return bool(damaged)


@fuzz_settings(800)
@given(data=st.data())
def test_offsets_file_bytes(pristine, frames, data):
    content = data.draw(file_bytes(read_bytes(pristine, OFFSETS)), label="offsets.npy")
    with damaged(pristine, {OFFSETS: content}) as output_dir:
        try:
            store = RecordStore.open(
                output_dir, "x", backend="disk", reader="python", on_damaged="skip"
            )
        except Exception as error:  # the test: every error is located
            assert_located(error, OFFSETS_OR_RECORD)
            return
        check_reads(store, np.load(os.path.join(output_dir, OFFSETS)), frames)


@st.composite
def offset_rows(draw, pristine: str) -> np.ndarray:
    """[NUM_X, 3] rows: real frames, rows of other records, or arbitrary and edge values."""
    offsets = np.load(os.path.join(pristine, OFFSETS))
    rows = offsets.copy()
    for index in draw(st.lists(st.integers(0, NUM_X - 1), max_size=NUM_X)):
        kind = draw(st.sampled_from(["other record", "cell", "cell", "row"]))
        if kind == "other record":
            rows[index] = offsets[draw(st.integers(0, NUM_X - 1))]
        elif kind == "cell":
            column = draw(st.integers(0, 2))
            rows[index, column] = draw(offset_cells(column))
        else:
            rows[index] = [draw(offset_cells(column)) for column in range(3)]
    return rows


@pytest.mark.parametrize(
    "backend, reader", [("memory", "auto"), ("disk", "python"), ("disk", "native")]
)
@fuzz_settings(300)
@given(data=st.data())
def test_offset_values(pristine, frames, backend, reader, data):
    if reader == "native" and native.op_library() is None:
        pytest.skip("the native op is not built (python -m tfx_dynamic_inputs.native)")
    rows = data.draw(offset_rows(pristine), label="offsets")
    with damaged(pristine, {OFFSETS: npy_bytes(rows)}) as output_dir:
        options = dict(backend=backend, reader=reader)
        try:
            store = RecordStore.open(output_dir, "x", on_damaged="skip", **options)
        except Exception as error:  # the test: every error is located
            assert_located(error, OFFSETS_OR_RECORD)
            assert isinstance(error, layout.IndexFileError)
            return
        if check_reads(store, rows, frames):
            # The same damage fails a store that does not skip, naming a record.
            with pytest.raises((DamagedRecordError, tf.errors.OpError)) as failed:
                RecordStore.open(output_dir, "x", **options).read(np.arange(NUM_X))
            assert re.search(OFFSETS_OR_RECORD, str(failed.value)), failed.value


# ------------------------------------------------------------------ shards.json

SHARDS = os.path.join(layout.INDEX_DIR, "x", layout.SHARDS_FILE)
REAL_SHARDS = [f"examples/Split-x/{layout.shard_name(s, 3)}" for s in range(3)]
HOSTILE_PATHS = [
    "/etc/passwd",
    "../../etc/passwd",
    "../run/examples/Split-x/data-00000-of-00003.tfrecord",
    "../examples/Split-x/data-00000-of-00003.tfrecord",
    "examples/Split-x/../../..",
    "examples/Split-x",
    "index/x/offsets.npy",
    "summary.json",
    ".",
    "..",
    "gs://bucket/examples/Split-x/a.tfrecord",
    "C:\\shards\\a",
    "~/a",
    "a\x00b",
    "\ud800",
]
shard_paths = st.one_of(
    st.sampled_from(REAL_SHARDS + HOSTILE_PATHS),
    st.text(max_size=24),
    st.builds(lambda ups, name: "../" * ups + name, st.integers(0, 4), st.text(max_size=12)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=10,
)
# Mostly the real shards with one path changed, so that many manifests pass and are read.
shard_lists = st.one_of(
    st.tuples(st.integers(0, 2), shard_paths).map(
        lambda change: [change[1] if s == change[0] else p for s, p in enumerate(REAL_SHARDS)]
    ),
    st.permutations(REAL_SHARDS),
    st.lists(shard_paths, max_size=4),
)
manifests = st.fixed_dictionaries(
    {
        "shards": rarely(shard_lists, json_values),
        "num_records": rarely(st.just(NUM_X), st.one_of(int_cells(-1, 20), json_values)),
    },
    optional={"record_set": json_values},
)
manifest_files = manifests.map(lambda m: json.dumps(m).encode())
shards_files = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    manifest_files,
    manifest_files,
    manifest_files.flatmap(mutated),
)


@fuzz_settings(1000)
@given(content=shards_files)
def test_shards_json(pristine, content):
    with damaged(pristine, {SHARDS: content}) as output_dir:
        shards_path = os.path.join(output_dir, SHARDS)
        try:
            paths, _ = layout.load_shards(output_dir, "x")
        except Exception as error:  # the test: every error is located
            assert_located(error, re.escape(shards_path))
            return
        for path in paths:  # confined: inside the run, or a Split-x folder (the TFX layout)
            inside = os.path.commonpath([path, output_dir]) == output_dir
            assert inside or os.path.basename(os.path.dirname(path)) == "Split-x", path
        try:
            store = RecordStore.open(
                output_dir, "x", backend="disk", reader="python", on_damaged="skip"
            )
        except Exception as error:  # the test: every error is located
            assert_located(error, f"{re.escape(shards_path)}|{OFFSETS_OR_RECORD}")
            return
        got, _ = store.read_checked(np.arange(store.num_records))
        assert len(got.numpy()) == NUM_X


# ------------------------------------------------------------------ the pair index

PAIRS = os.path.join(layout.INDEX_DIR, layout.PAIRS_INDEX)
PAIR_FILES = [os.path.join(PAIRS, layout.ROW_SPLITS_FILE), os.path.join(PAIRS, layout.VALUES_FILE)]
INT_DTYPES = st.sampled_from([np.int64, np.int32, np.uint8, np.uint64, np.float64, np.bool_])


@st.composite
def csr_files(draw, pristine: str, files: list[str], num_rows: int, high: int) -> dict:
    """Replacement bytes for a CSR's two files: lists of lists (mostly sound CSR), arbitrary
    arrays, or damaged copies of the real files."""
    kind = draw(st.sampled_from(["lists", "lists", "arrays", "bytes"]))
    if kind == "bytes":
        return {
            path: draw(file_bytes(read_bytes(pristine, path)))
            for path in draw(st.sets(st.sampled_from(files), min_size=1))
        }
    if kind == "lists":
        rows = draw(
            st.lists(
                st.lists(
                    int_cells(-1, high) if draw(st.booleans()) else st.integers(0, high - 1),
                    max_size=4,
                ),
                min_size=num_rows - 1,
                max_size=num_rows + 1,
            )
        )
        row_splits = np.cumsum([0] + [len(r) for r in rows])
        values = np.array([v for r in rows for v in r], np.int64)
    else:
        row_splits = np.array(draw(st.lists(int_cells(-1, 12), max_size=12)))
        values = np.array(draw(st.lists(int_cells(-1, high), max_size=12)))
    dtypes = draw(st.tuples(INT_DTYPES, INT_DTYPES)) if draw(st.booleans()) else (None, None)
    arrays = [
        array if dtype is None else array.astype(dtype)
        for array, dtype in zip([row_splits, values], dtypes, strict=True)
    ]
    return {path: npy_bytes(array) for path, array in zip(files, arrays, strict=True)}


@fuzz_settings(800)
@given(data=st.data())
def test_pair_index(pristine, data):
    files = data.draw(csr_files(pristine, PAIR_FILES, NUM_X, NUM_Y), label="pair index")
    with damaged(pristine, files) as output_dir:
        try:
            valid = ValidPairs.load(output_dir, num_x=NUM_X, num_y=NUM_Y, on_invalid="skip")
        except Exception as error:  # the test: every error is located
            assert_located(error, re.escape(os.path.join(output_dir, PAIRS)))
            return
        assert len(valid.row_splits) == NUM_X + 1 and valid.row_splits[-1] == valid.num_pairs
        assert np.all(np.diff(valid.row_splits) >= 0)
        assert np.all((valid.values >= 0) & (valid.values < NUM_Y))
        assert np.all(np.diff(valid.row_splits)[valid.planned_x] > 0)


# ------------------------------------------------------------------ the class index

CLASS_DIR = os.path.join(layout.INDEX_DIR, "x", layout.CLASS_RECORDS_INDEX)
CLASS_FILES = [
    os.path.join(CLASS_DIR, layout.ROW_SPLITS_FILE),
    os.path.join(CLASS_DIR, layout.VALUES_FILE),
]
CLASSES = os.path.join(layout.INDEX_DIR, "x", layout.CLASSES_FILE)
CLASS_IDS = os.path.join(layout.INDEX_DIR, "x", layout.CLASS_IDS_FILE)


@st.composite
def class_indexes(draw, pristine: str) -> dict:
    """A sound class index of other classes (often), or a damaged one, and maybe classes.txt."""
    if draw(st.booleans()):
        class_ids = np.array(draw(st.lists(st.integers(0, 4), min_size=NUM_X, max_size=NUM_X)))
        num_classes = int(class_ids.max()) + 1
        row_splits, values = layout.class_records(class_ids, num_classes)
        files = {CLASS_FILES[0]: npy_bytes(row_splits), CLASS_FILES[1]: npy_bytes(values)}
        names = [f"class{c}" for c in range(num_classes)]
        files[CLASSES] = "".join(f"{n}\n" for n in names).encode()
    else:
        files = draw(csr_files(pristine, CLASS_FILES, len(CLASS_SIZES), NUM_X))
    if draw(st.integers(0, 4)) == 0:
        files[CLASSES] = draw(st.binary(max_size=40))
    return files


@fuzz_settings(600)
@given(data=st.data())
def test_class_index(pristine, data):
    files = data.draw(class_indexes(pristine), label="class index")
    with damaged(pristine, files) as output_dir:
        try:
            # Disk: the class index is checked at open, no record needs reading.
            labelled = labelled_records(output_dir, store_options=StoreOptions(backend="disk"))
        except Exception as error:  # the test: every error is located
            index_dir = layout.index_dir(output_dir, "x")
            assert_located(error, re.escape(index_dir))
            return
        row_splits, values = labelled.row_splits, labelled.values
        assert sorted(np.asarray(values).tolist()) == list(range(NUM_X))
        report = class_report(row_splits, n_samples_per_class=2)
        assert report.num_classes == len(row_splits) - 1
        if data.draw(st.integers(0, 9), label="plan") == 0:  # planning runs TF: a sample only
            plan = ClassBalancedPlan(row_splits, n_classes_per_batch=1, n_samples_per_class=2)
            epoch = plan.plan(0)
            position, label = epoch["position"].numpy(), epoch["label"].numpy()
            assert np.all(row_splits[label] <= position)
            assert np.all(position < row_splits[label + 1])


@fuzz_settings(300)
@given(data=st.data())
def test_class_ids_file(pristine, data):
    content = data.draw(file_bytes(read_bytes(pristine, CLASS_IDS)), label="class_ids.npy")
    with damaged(pristine, {CLASS_IDS: content}) as output_dir:
        path = os.path.join(output_dir, CLASS_IDS)
        try:
            class_ids = layout.load_npy(path, shape=(None,), dtype=layout.INTEGER)
        except Exception as error:  # the test: every error is located
            assert_located(error, re.escape(path))
            return
        assert class_ids.ndim == 1 and class_ids.dtype.kind in "iu"
