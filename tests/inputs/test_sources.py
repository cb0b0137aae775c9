"""record_store_from: arrays, datasets and ids + load function, in memory and spilled to disk."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import element_codec, record_store_from, tensor_parser
from tfx_dynamic_inputs.inputs.element_codec import ExampleEncoder, declared_components


def _read(store, indices):
    return store.parse_fn(store.read(tf.constant(indices, tf.int64)))


@pytest.mark.parametrize("budget", [1 << 30, 100])
def test_array_structure_round_trips(tmp_path, budget):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, size=(40, 3, 4, 2), dtype=np.uint8)
    labels = rng.integers(0, 10, size=40)
    weights = rng.random(40).astype(np.float32)
    flags = rng.random(40) > 0.5
    store = record_store_from(
        {"image": images, "label": labels, "extra": (weights, flags)},
        cache_dir=str(tmp_path / "cache"),
        memory_budget_bytes=budget,
        shard_bytes=500,
    )
    assert store.backend == ("memory" if budget > 1000 else "disk")
    assert store.num_records == 40
    indices = rng.integers(0, 40, size=17)
    got = _read(store, indices)
    np.testing.assert_array_equal(got["image"].numpy(), images[indices])
    np.testing.assert_array_equal(got["label"].numpy(), labels[indices])
    np.testing.assert_array_equal(got["extra"][0].numpy(), weights[indices])
    np.testing.assert_array_equal(got["extra"][1].numpy(), flags[indices])
    assert got["image"].dtype == tf.uint8 and got["extra"][1].dtype == tf.bool
    if store.backend == "disk":
        index_dir = layout.index_dir(str(tmp_path / "cache"), "records")
        shards = layout.load_json(os.path.join(index_dir, layout.SHARDS_FILE))["shards"]
        assert len(shards) > 1
        assert shards[0].endswith(layout.shard_name(0, len(shards)))


DTYPES = ["uint8", "int16", ">i4", "int64", "float16", "<f4", ">f8", "bool", "complex64"]


@st.composite
def array_sources(draw):
    """A structure of numeric arrays with a common first dimension: byte orders, bools, empty
    components, scalars, keys that sort differently as text and as UTF-8."""
    num_rows = draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def array():
        shape = (num_rows, *draw(st.lists(st.integers(0, 3), max_size=2)))
        dtype = np.dtype(draw(st.sampled_from(DTYPES)))
        return rng.integers(0, 256, size=(*shape, dtype.itemsize), dtype=np.uint8).view(dtype)[
            ..., 0
        ]

    kind = draw(st.sampled_from(["single", "dict", "nested"]))
    if kind == "single":
        return array()
    keys = draw(st.lists(st.sampled_from(["a", "B", "é", "z_1", "Z"]), min_size=1, unique=True))
    source = {key: array() for key in keys}
    if kind == "nested":
        source["t"] = (array(), {"inner": array()})
    return source


@settings(max_examples=60, deadline=None)
@given(source=array_sources(), rows_per_block=st.integers(1, 4))
def test_array_rows_encode_to_the_bytes_of_each_element(source, rows_per_block):
    """`encode_rows` (what `record_store_from` runs on numeric arrays) gives exactly the records
    that `encode` gives element by element, in blocks of any size."""
    components = declared_components(source)
    arrays = [np.asarray(leaf) for leaf in tf.nest.flatten(source)]
    one_by_one = ExampleEncoder(components)
    expected = [
        one_by_one.encode(tf.nest.pack_sequence_as(source, [a[i] for a in arrays]))
        for i in range(len(arrays[0]))
    ]
    rows = ExampleEncoder(components)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(element_codec, "ROWS_PER_BLOCK", rows_per_block)
        assert list(rows.encode_rows(arrays)) == expected
    assert rows.components() == one_by_one.components()


def test_dataset_with_variable_length_component_comes_back_ragged(tmp_path):
    def element(i):
        return {"audio": tf.cast(tf.range(i % 5) * i, tf.int16), "speaker": tf.strings.as_string(i)}

    ds = tf.data.Dataset.range(23).map(element)
    for budget in (1 << 30, 50):
        store = record_store_from(
            ds, memory_budget_bytes=budget, cache_dir=str(tmp_path / str(budget))
        )
        got = _read(store, [22, 0, 7, 4])
        assert isinstance(got["audio"], tf.RaggedTensor)
        expected = [[(j * i) for j in range(i % 5)] for i in (22, 0, 7, 4)]
        assert got["audio"].to_list() == expected
        assert got["speaker"].numpy().tolist() == [b"22", b"0", b"7", b"4"]


def test_ids_with_load_function_infers_shapes_over_all_elements():
    ids = ["a", "bbb", "cc", "dddd"]
    store = record_store_from(
        ids, load_fn=lambda i: (np.full([len(i), 2], len(i), np.float32), len(i))
    )
    audio, length = _read(store, [3, 1])
    assert audio.to_list() == [[[4.0, 4.0]] * 4, [[3.0, 3.0]] * 3]
    assert length.numpy().tolist() == [4, 3]


def test_bytes_with_trailing_nul_survive():
    store = record_store_from([b"a\x00", b"", b"\x00\x00"])
    assert _read(store, [0, 1, 2]).numpy().tolist() == [b"a\x00", b"", b"\x00\x00"]


def test_existing_cache_is_reused_without_reading_source(tmp_path):
    cache = str(tmp_path / "cache")
    values = np.arange(30, dtype=np.int32).reshape(10, 3)
    record_store_from(values, cache_dir=cache, memory_budget_bytes=0)

    def never_called(_):
        raise AssertionError("source read again")

    store = record_store_from(["x"], load_fn=never_called, cache_dir=cache)
    np.testing.assert_array_equal(_read(store, [9, 2]).numpy(), values[[9, 2]])


def test_temporary_cache_is_removed_with_the_store():
    store = record_store_from(np.zeros([5, 100], np.float32), memory_budget_bytes=0)
    shard = store.locate(0)[0]
    assert os.path.exists(shard)
    del store
    assert not os.path.exists(shard)


def test_custom_encode_and_parse():
    store = record_store_from(
        [1, 2, 3],
        encode_fn=lambda v: str(int(v)).encode(),
        parse_fn=lambda s: tf.strings.to_number(s, tf.int64),
    )
    assert _read(store, [2, 0]).numpy().tolist() == [3, 1]


def test_tensor_parser_from_element_spec():
    spec = {"a": tf.TensorSpec([2], tf.float32)}
    store = record_store_from({"a": np.ones([3, 2], np.float32)})
    parsed = tensor_parser(spec)(store.read([0, 1]))
    assert parsed["a"].shape == [2, 2]


def test_bad_sources_are_clear_errors():
    with pytest.raises(ValueError, match="common first dimension"):
        record_store_from({"a": np.zeros([3]), "b": np.zeros([4])})
    with pytest.raises(ValueError, match="no elements"):
        record_store_from(tf.data.Dataset.range(0))
    with pytest.raises(ValueError, match="infinite"):
        record_store_from(tf.data.Dataset.range(3).repeat())
    with pytest.raises(ValueError, match="changes|but elements so far"):
        record_store_from(
            ["a", "b"], load_fn=lambda i: np.zeros([2, 2]) if i == "a" else np.zeros([2])
        )
    with pytest.raises(ValueError, match="only the first dimension may vary"):
        record_store_from(["a", "bb"], load_fn=lambda i: np.zeros([2, len(i)], np.float32))
    with pytest.raises(ValueError, match="scalar strings"):
        record_store_from(tf.data.Dataset.from_tensors(tf.constant(["a", "b"])))
