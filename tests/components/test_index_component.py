"""IndexExamples' executor on Examples artifacts written here (GZIP and uncompressed TFRecord
files, several splits, int64 and bytes labels, pair lists and groups), its outputs read back with
the project's own readers: `RecordStore.open`, the class index, `ValidPairs.load`,
`open_pairs_run` (which reads a group index as `GroupPairs`) and the trainer's input builders."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import channel, standard_artifacts

from tests.components.conftest import make_artifact
from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.index_component import IndexExamples
from tfx_dynamic_inputs.index_component import executor as index_executor
from tfx_dynamic_inputs.inputs import GroupPairs, RecordStore, ValidPairs, open_pairs_run
from tfx_dynamic_inputs.inputs.class_balanced import record_parser
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.trainer_component import training_inputs
from tfx_dynamic_inputs.trainer_component.input_options import (
    SCHEMA_SPEC,
    ClassBalancedInputOptions,
    PairsInputOptions,
)

VECTOR = "vector"
LABEL = "label"
ID = "key"
GROUP = "speaker"
IMAGE_SIZE = 2


def _feature(value) -> tf.train.Feature:
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, bytes) for v in values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if all(isinstance(v, int) for v in values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _example(**features) -> bytes:
    """A serialized Example; `None` values leave the feature out, str values are UTF-8 bytes."""
    feature = {
        key: _feature(value.encode() if isinstance(value, str) else value)
        for key, value in features.items()
        if value is not None
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write(path: str, records: list[bytes], compression: str = "GZIP") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, compression) as writer:
        for record in records:
            writer.write(record)


def _examples(root: str, splits: dict[str, list[list[bytes]]]) -> standard_artifacts.Examples:
    """An Examples artifact as ExampleGen writes it: GZIP `Split-<name>/data_tfrecord-*.gz`."""
    for split, files in splits.items():
        for k, records in enumerate(files):
            name = f"data_tfrecord-{k:05d}-of-{len(files):05d}.gz"
            _write(os.path.join(root, f"Split-{split}", name), records)
    return make_artifact(standard_artifacts.Examples, root, list(splits))


def _index(root: str, source: standard_artifacts.Examples, **properties) -> dict:
    """Runs the executor into fresh outputs under `root` (the index outputs its parameters ask
    for, as the component declares them); returns the output artifacts by key."""
    keys_out = [keys.INDEXED_EXAMPLES_KEY, keys.OFFSET_INDEX_KEY]
    if properties.get(keys.LABEL_FEATURE_KEY):
        keys_out.append(keys.CLASS_INDEX_KEY)
    if properties.get(keys.PAIRS_KEY) or properties.get(keys.GROUP_FEATURE_KEY):
        keys_out.append(keys.PAIR_INDEX_KEY)
    spec_outputs = IndexExamples.SPEC_CLASS.OUTPUTS
    outputs = {
        key: [make_artifact(spec_outputs[key].type, os.path.join(root, key))] for key in keys_out
    }
    executor = index_executor.Executor(index_executor.Executor.Context(beam_pipeline_args=[]))
    executor.Do({keys.EXAMPLES_KEY: [source]}, outputs, properties)
    return {key: value[0] for key, value in outputs.items()}


def _summary(uri: str) -> dict:
    with open(os.path.join(uri, layout.SUMMARY_FILE)) as f:
        return json.load(f)


def _records(offset_index_uri: str, record_set: str) -> list[bytes]:
    store = RecordStore.open(offset_index_uri, record_set, backend="disk")
    return [bytes(r) for r in store.read(np.arange(store.num_records, dtype=np.int64)).numpy()]


def _ids(offset_index_uri: str, record_set: str) -> list[str]:
    return layout.load_lines(
        os.path.join(layout.index_dir(offset_index_uri, record_set), layout.IDS_FILE)
    )


def _class_ids(class_index_uri: str, record_set: str) -> np.ndarray:
    return np.asarray(training_inputs.class_ids(class_index_uri, record_set))


# --------------------------------------------------------------------------- int64 labels, GZIP


def _labelled(label, i: int) -> bytes:
    return _example(**{VECTOR: [float(i), float(i) / 2], LABEL: label})


# Records of `train` that are rejected, with their reasons, beside the good ones.
BAD_TRAIN_RECORDS = [
    (_labelled(None, 100), "missing_label"),
    (_labelled([1.5], 101), "bad_label"),  # a float
    (_labelled([1, 2], 102), "bad_label"),  # two values
    (_labelled(-1, 103), "bad_label"),  # not a class id
    (_labelled("two", 104), "bad_label"),  # bytes where the labels are int64
    (b"not an example", "unparsable_example"),
]


@pytest.fixture(scope="module")
def int_labels(tmp_path_factory):
    """Splits `train` (two GZIP files, with bad records) and `eval` (one file), labels 0..2."""
    root = tmp_path_factory.mktemp("int_labels")
    good = [[_labelled(i % 3, i) for i in range(k, k + 12)] for k in (0, 12)]
    train_files = [good[0][:5] + [r for r, _ in BAD_TRAIN_RECORDS] + good[0][5:], good[1]]
    eval_files = [[_labelled(i % 3, i) for i in range(50, 59)]]
    source = _examples(str(root / "examples"), {"train": train_files, "eval": eval_files})
    outputs = _index(
        str(root),
        source,
        **{
            keys.LABEL_FEATURE_KEY: LABEL,
            keys.NUM_SHARDS_KEY: 2,
            keys.MAX_REJECT_FRACTION_KEY: 0.5,
        },
    )
    return outputs, {"train": good[0] + good[1], "eval": eval_files[0]}


def test_gzip_splits_become_uncompressed_indexed_shards_in_file_order(int_labels):
    outputs, expected = int_labels
    offset_index = outputs[keys.OFFSET_INDEX_KEY].uri
    for split, records in expected.items():
        assert _records(offset_index, split) == records
    # Without an id_feature, a record's id is its file and position; record order is file order.
    assert _ids(offset_index, "train")[:6] == [
        *(f"data_tfrecord-00000-of-00002.gz:{p:012d}" for p in range(5)),
        f"data_tfrecord-00000-of-00002.gz:{5 + len(BAD_TRAIN_RECORDS):012d}",
    ]
    examples = outputs[keys.INDEXED_EXAMPLES_KEY]
    assert json.loads(examples.split_names) == ["eval", "train"]
    assert (
        examples_utils.get_payload_format(examples)
        == example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE
    )
    shard_files = sorted(tf.io.gfile.glob(os.path.join(examples.uri, "Split-train", "*")))
    assert len(shard_files) == 2  # num_shards
    # Uncompressed: plain TFRecordDataset reads them, with the records in order.
    read = [bytes(r) for r in tf.data.TFRecordDataset(shard_files).as_numpy_iterator()]
    assert read == expected["train"]
    summary = _summary(offset_index)
    assert summary["input_records"]["train"] == {"files": 2, "gzip": 2, "records": 30}
    assert summary["input_records"]["eval"] == {"files": 1, "gzip": 1, "records": 9}


def test_int64_labels_are_class_ids_shared_by_every_split(int_labels):
    outputs, expected = int_labels
    class_index = outputs[keys.CLASS_INDEX_KEY]
    for split, records in expected.items():
        labels = [tf.train.Example.FromString(r).features.feature[LABEL] for r in records]
        np.testing.assert_array_equal(
            _class_ids(class_index.uri, split), [f.int64_list.value[0] for f in labels]
        )
        directory = layout.class_records_dir(class_index.uri, split)
        layout.check_part(class_index.uri, directory)  # the index belongs to the committed run
        row_splits, values = layout.load_csr(directory)
        assert np.diff(row_splits).sum() == len(records) and len(row_splits) == 4
        classes = layout.load_lines(
            os.path.join(layout.index_dir(class_index.uri, split), layout.CLASSES_FILE)
        )
        assert classes == ["0", "1", "2"]
    assert class_index.get_string_custom_property(artifacts.LABEL_FEATURE_PROPERTY) == LABEL
    assert class_index.get_string_custom_property(artifacts.LABEL_KIND_PROPERTY) == "int64"
    assert class_index.get_json_value_custom_property(artifacts.NUM_CLASSES_PROPERTY) == {
        "eval": 3,
        "train": 3,
    }


def test_bad_records_are_counted_rejects(int_labels):
    outputs, _ = int_labels
    offset_index = outputs[keys.OFFSET_INDEX_KEY]
    expected = {}
    for _, reason in BAD_TRAIN_RECORDS:
        expected[reason] = expected.get(reason, 0) + 1
    summary = _summary(offset_index.uri)
    assert summary["ok"] and summary["rejects"]["by_reason"] == expected
    assert summary["reject_fraction"] == pytest.approx(len(BAD_TRAIN_RECORDS) / 39, abs=1e-5)
    assert offset_index.get_int_custom_property(artifacts.NUM_REJECTS_PROPERTY) == 6
    assert (
        offset_index.get_json_value_custom_property(artifacts.REJECTS_BY_REASON_PROPERTY)
        == expected
    )
    with open(os.path.join(offset_index.uri, layout.REJECTS_FILE)) as f:
        sources = sorted(json.loads(line)["source"] for line in f)
    first_file = os.path.join(
        os.path.dirname(offset_index.uri),
        "examples",
        "Split-train",
        "data_tfrecord-00000-of-00002.gz",
    )
    # Rejects found reading a file name it and the record's position; those found once every
    # record is read (a label of the minority kind) name the record set and the record's id.
    assert sources == sorted(
        f"{first_file}: record {5 + k}"
        if reason != "bad_label" or b"two" not in record
        else f"train: data_tfrecord-00000-of-00002.gz:{5 + k:012d}"
        for k, (record, reason) in enumerate(BAD_TRAIN_RECORDS)
    )


def test_class_balanced_batches_of_tabular_records(int_labels):
    outputs, _ = int_labels
    parse = record_parser(None, {VECTOR: tf.io.FixedLenFeature([2], tf.float32)})
    dataset = training_inputs.class_balanced_train_dataset(
        outputs[keys.OFFSET_INDEX_KEY].uri,
        outputs[keys.CLASS_INDEX_KEY].uri,
        "train",
        n_classes_per_batch=2,
        n_samples_per_class=3,
        seed=0,
        parser=parse,
    )
    class_ids = _class_ids(outputs[keys.CLASS_INDEX_KEY].uri, "train")
    for batch in dataset:
        groups = batch["label"].numpy().reshape(2, 3)
        assert (groups == groups[:, :1]).all() and groups[0, 0] != groups[1, 0]
        np.testing.assert_array_equal(class_ids[batch["index"].numpy()], batch["label"])
        # The vector is the record's own: (i, i / 2).
        vector = batch[VECTOR].numpy()
        np.testing.assert_allclose(vector[:, 1], vector[:, 0] / 2)


def test_schema_feature_spec_parses_records_without_their_label(int_labels, tmp_path):
    schema = tmp_path / "schema.pbtxt"
    schema.write_text(
        'feature { name: "vector" type: FLOAT presence { min_fraction: 1 } '
        "shape { dim { size: 2 } } }\n"
        'feature { name: "label" type: INT presence { min_fraction: 1 } '
        "shape { dim { size: 1 } } }\n"
    )
    parse = training_inputs.example_parser(
        ClassBalancedInputOptions(feature_spec=SCHEMA_SPEC),
        schema_path=str(schema),
        tf_transform_output=None,
        label_feature=LABEL,
    )
    outputs, expected = int_labels
    parsed = parse(tf.constant(expected["eval"][:4]))
    assert set(parsed) == {VECTOR}  # the batch's `label` is the class id
    np.testing.assert_allclose(parsed[VECTOR], [[i, i / 2] for i in range(50, 54)])


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"feature_spec": "schema"}, "needs the trainer's schema input"),
        ({"feature_spec": "transformed"}, "need the trainer's transform_graph input"),
        ({"apply_transform": True}, "need the trainer's transform_graph input"),
        ({"feature_spec": "raw"}, "must be one of"),
        ({"feature_spec": "schema", "features": {}}, "not both"),
        ({"feature_spec": "transformed", "apply_transform": True}, "drop apply_transform"),
    ],
)
def test_feature_spec_options_name_what_is_missing(options, error):
    with pytest.raises(ValueError, match=error):
        training_inputs.example_parser(
            ClassBalancedInputOptions(**options), schema_path=None, tf_transform_output=None
        )


# --------------------------------------------------------------------- names, ids, uncompressed


@pytest.fixture(scope="module")
def name_labels(tmp_path_factory):
    """One split, `train`, of an uncompressed `.tfrecord` file and a GZIP file without an
    extension; bytes labels, ids in `key` (out of order, one repeated)."""
    root = tmp_path_factory.mktemp("name_labels")
    animals = ["emu", "cat", "dog"]
    good = [
        _example(**{ID: f"k{i:02d}", LABEL: animals[i % 3], VECTOR: [float(i)]})
        for i in (9, 3, 7, 1, 5, 0, 8, 2, 6, 4)
    ]
    repeated = [_example(**{ID: "k11", LABEL: "cat"}), _example(**{ID: "k11", LABEL: "dog"})]
    bad = [
        _example(**{ID: "k12", LABEL: b"\xff\xfe"}),  # not UTF-8: bad_label
        _example(**{ID: "k13", LABEL: 4}),  # int64 where the labels are bytes: bad_label
        _example(**{LABEL: "cat"}),  # missing_id
    ]
    split_dir = root / "examples" / "Split-train"
    _write(str(split_dir / "part-0.tfrecord"), good[:5] + repeated, compression="")
    _write(str(split_dir / "part-1"), good[5:] + bad)
    source = make_artifact(standard_artifacts.Examples, str(root / "examples"), ["train"])
    outputs = _index(
        str(root),
        source,
        **{
            keys.LABEL_FEATURE_KEY: LABEL,
            keys.ID_FEATURE_KEY: ID,
            keys.MAX_REJECT_FRACTION_KEY: 0.4,
        },
    )
    return outputs, good


def test_records_are_numbered_by_id_and_bytes_labels_by_sorted_name(name_labels):
    outputs, good = name_labels
    offset_index = outputs[keys.OFFSET_INDEX_KEY].uri
    ids = _ids(offset_index, "train")
    assert ids == [f"k{i:02d}" for i in range(10)]
    by_id = {
        tf.train.Example.FromString(r).features.feature[ID].bytes_list.value[0]: r for r in good
    }
    assert _records(offset_index, "train") == [by_id[i.encode()] for i in ids]
    class_index = outputs[keys.CLASS_INDEX_KEY].uri
    assert layout.load_lines(
        os.path.join(layout.index_dir(class_index, "train"), layout.CLASSES_FILE)
    ) == ["cat", "dog", "emu"]
    animals = ["emu", "cat", "dog"]
    np.testing.assert_array_equal(
        _class_ids(class_index, "train"),
        [["cat", "dog", "emu"].index(animals[i % 3]) for i in range(10)],
    )
    assert _summary(offset_index)["input_records"]["train"] == {
        "files": 2,
        "gzip": 1,  # found by content: the file has no .gz extension
        "records": 15,
    }


def test_repeated_ids_and_bad_names_are_rejects(name_labels):
    outputs, _ = name_labels
    summary = _summary(outputs[keys.OFFSET_INDEX_KEY].uri)
    assert summary["rejects"]["by_reason"] == {"bad_label": 2, "duplicate_id": 2, "missing_id": 1}
    assert summary["labels"] == {
        "bytes_labels": 12,  # the good and the repeated (the rest were rejected on reading)
        "feature": LABEL,
        "int64_labels": 1,
        "kind": "bytes",
        "num_classes": 3,
    }


# --------------------------------------------------------------------------------- pair list


X_IDS = [f"x{i}" for i in range(6)]
Y_IDS = [f"y{i}" for i in range(4)]
PAIR_LIST = [
    {"x": "x0", "y": ["y0", "y1"]},
    {"x": "x1", "y": ["y2"]},
    {"x": "x2", "y": ["y9"]},  # unknown y: x2 is left without a pair
    {"x": "x3", "y": ["y3", "y0"]},
    {"x": "x5", "y": ["y1"]},
    {"x": "x9", "y": ["y0"]},  # unknown x
]  # x4 is not listed


@pytest.fixture(scope="module")
def pair_list_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair_list")
    source = _examples(
        str(root / "examples"),
        {
            "photos": [[_example(**{ID: i, VECTOR: [1.0]}) for i in X_IDS]],
            "paintings": [
                [_example(**{ID: i, VECTOR: [2.0]}) for i in Y_IDS] + [_example(**{VECTOR: [3.0]})]
            ],
        },
    )
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(entry) + "\n" for entry in PAIR_LIST))
    outputs = _index(
        str(root),
        source,
        **{
            keys.ID_FEATURE_KEY: ID,
            keys.X_SPLIT_KEY: "photos",
            keys.Y_SPLIT_KEY: "paintings",
            keys.PAIRS_KEY: str(pairs),
            keys.MAX_REJECT_FRACTION_KEY: 0.5,
        },
    )
    return outputs


def test_pair_list_over_ids_is_read_by_open_pairs_run(pair_list_run):
    offset_index = pair_list_run[keys.OFFSET_INDEX_KEY].uri
    x_store, y_store, valid = open_pairs_run(
        offset_index, pair_index_dir=pair_list_run[keys.PAIR_INDEX_KEY].uri
    )
    x_ids, y_ids = _ids(offset_index, "x"), _ids(offset_index, "y")
    assert (x_store.num_records, y_store.num_records) == (4, 4)
    found = {
        x_ids[x]: sorted(
            y_ids[y] for y in valid.values[valid.row_splits[x] : valid.row_splits[x + 1]]
        )
        for x in range(valid.num_x)
    }
    assert found == {"x0": ["y0", "y1"], "x1": ["y2"], "x3": ["y0", "y3"], "x5": ["y1"]}
    assert (
        pair_list_run[keys.PAIR_INDEX_KEY].get_int_custom_property(artifacts.NUM_PAIRS_PROPERTY)
        == 6
    )
    assert (
        pair_list_run[keys.PAIR_INDEX_KEY].get_int_custom_property(artifacts.BY_GROUP_PROPERTY) == 0
    )
    summary = _summary(offset_index)
    assert summary["rejects"]["by_reason"] == {
        "missing_id": 1,
        "no_valid_pairs": 2,  # x2, x4
        "pair_unknown_x": 1,
        "pair_unknown_y": 1,
    }
    assert summary["rejects"]["records"] == 3  # pair entries do not count
    assert json.loads(pair_list_run[keys.INDEXED_EXAMPLES_KEY].split_names) == ["x", "y"]


# ------------------------------------------------------------------------------------ groups


def _image(group, shade: int) -> bytes:
    return _example(
        **{
            GROUP: group,
            "image": bytes([shade]) * IMAGE_SIZE * IMAGE_SIZE,
            "image_format": "raw",
            "height": IMAGE_SIZE,
            "width": IMAGE_SIZE,
            "channels": 1,
        }
    )


X_GROUPS = ["ann", "ann", "bob", "cyd", "bob"]  # cyd has no y
Y_GROUPS = ["bob", "ann", None, "bob", "dan"]  # one y without a group


@pytest.fixture(scope="module")
def group_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    source = _examples(
        str(root / "examples"),
        {
            "left": [[_image(g, 10 * i) for i, g in enumerate(X_GROUPS)]],
            "right": [[_image(g, 100 + 10 * i) for i, g in enumerate(Y_GROUPS)]],
        },
    )
    return _index(
        str(root),
        source,
        **{
            keys.GROUP_FEATURE_KEY: GROUP,
            keys.X_SPLIT_KEY: "left",
            keys.Y_SPLIT_KEY: "right",
            keys.MAX_REJECT_FRACTION_KEY: 0.3,
        },
    )


def _shade(record: bytes) -> int:
    return tf.train.Example.FromString(record).features.feature["image"].bytes_list.value[0][0]


def test_group_pairs_are_stored_as_groups_and_as_edges(group_run):
    offset_index = group_run[keys.OFFSET_INDEX_KEY].uri
    pair_index = group_run[keys.PAIR_INDEX_KEY].uri
    x_shades = [_shade(r) for r in _records(offset_index, "x")]
    y_shades = [_shade(r) for r in _records(offset_index, "y")]
    assert x_shades == [0, 10, 20, 40]  # cyd's x (30) had no y
    assert y_shades == [100, 110, 130, 140]  # the y without a group (120) is a reject
    expected = {0: [110], 10: [110], 20: [100, 130], 40: [100, 130]}
    valid = ValidPairs.load(pair_index, num_x=4, num_y=4)
    edges = {
        x_shades[x]: [
            y_shades[y] for y in valid.values[valid.row_splits[x] : valid.row_splits[x + 1]]
        ]
        for x in range(4)
    }
    assert edges == expected
    assert layout.has_group_index(pair_index)
    groups = open_pairs_run(offset_index, pair_index_dir=pair_index)[2]
    assert isinstance(groups, GroupPairs) and (groups.num_x, groups.num_y) == (4, 4)
    row_splits, values = groups.edges()
    np.testing.assert_array_equal(row_splits, valid.row_splits)
    np.testing.assert_array_equal(values, valid.values)
    assert group_run[keys.PAIR_INDEX_KEY].get_int_custom_property(artifacts.BY_GROUP_PROPERTY) == 1
    summary = _summary(offset_index)
    assert summary["rejects"]["by_reason"] == {"missing_group": 1, "no_valid_pairs": 1}
    assert summary["pairs"]["num_pairs"] == 6 and summary["pairs"]["edges_written"]


def test_trainer_draws_dynamic_pairs_within_groups(group_run):
    dataset, coverage, _ = training_inputs.pairs_train_dataset(
        group_run[keys.OFFSET_INDEX_KEY].uri,
        group_run[keys.PAIR_INDEX_KEY].uri,
        batch_size=2,
        seed=0,
        options=PairsInputOptions(image={"height": IMAGE_SIZE, "width": IMAGE_SIZE, "channels": 1}),
    )
    groups = open_pairs_run(
        group_run[keys.OFFSET_INDEX_KEY].uri, pair_index_dir=group_run[keys.PAIR_INDEX_KEY].uri
    )[2]
    seen_x = []
    for batch in dataset:
        for x, y in zip(batch["x_index"].numpy(), batch["y_index"].numpy(), strict=True):
            assert y in groups.y_of(x)
        seen_x.extend(batch["x_index"].numpy().tolist())
    assert sorted(seen_x) == [0, 1, 2, 3]
    assert coverage.num_pairs == 6


# ----------------------------------------------------------------------------- failing inputs


def test_too_many_rejects_fail_the_run_and_write_no_shards(tmp_path):
    records = [_labelled(None if i % 2 else 1, i) for i in range(10)]
    source = _examples(str(tmp_path / "examples"), {"train": [records]})
    with pytest.raises(MaterializeError, match=r"5 of 10 records rejected .*missing_label=5"):
        _index(
            str(tmp_path),
            source,
            **{keys.LABEL_FEATURE_KEY: LABEL, keys.MAX_REJECT_FRACTION_KEY: 0.2},
        )
    offset_index = str(tmp_path / keys.OFFSET_INDEX_KEY)
    summary = _summary(offset_index)
    assert not summary["ok"] and summary["rejects"]["by_reason"] == {"missing_label": 5}
    assert not os.path.exists(os.path.join(offset_index, layout.EXAMPLES_DIR))
    with pytest.raises(layout.RunCommitError, match="failed"):
        layout.check_part(offset_index, os.path.join(offset_index, layout.INDEX_DIR))


def test_a_damaged_input_file_is_named(tmp_path):
    path = tmp_path / "examples" / "Split-train" / "data_tfrecord-00000-of-00001.gz"
    path.parent.mkdir(parents=True)
    frames = b"".join(layout.tfrecord_frame(_labelled(1, i)) for i in range(3))
    path.write_bytes(gzip.compress(frames[:-7]))  # the last record cut short
    source = make_artifact(standard_artifacts.Examples, str(tmp_path / "examples"), ["train"])
    with pytest.raises(Exception, match=r"data_tfrecord-00000-of-00001.gz: record 2: truncated"):
        _index(str(tmp_path), source, **{keys.LABEL_FEATURE_KEY: LABEL})


def test_inputs_it_cannot_index_are_refused(tmp_path):
    source = _examples(str(tmp_path / "examples"), {"train": [[_labelled(1, 0)]]})
    with pytest.raises(ValueError, match=r"split 'test' is not in the input Examples"):
        _index(
            str(tmp_path),
            source,
            **{keys.GROUP_FEATURE_KEY: GROUP, keys.X_SPLIT_KEY: "train", keys.Y_SPLIT_KEY: "test"},
        )
    examples_utils.set_payload_format(
        source, example_gen_pb2.PayloadFormat.FORMAT_TF_SEQUENCE_EXAMPLE
    )
    with pytest.raises(ValueError, match="reads tf.train.Example records"):
        _index(str(tmp_path), source, **{keys.LABEL_FEATURE_KEY: LABEL})


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "nothing to index"),
        ({"pairs": "p.jsonl", "x_split": "a", "y_split": "b"}, "set id_feature"),
        ({"group_feature": GROUP}, "needs x_split and y_split"),
        ({"label_feature": LABEL, "x_split": "a", "y_split": "b"}, "set pairs or group_feature"),
        (
            {"group_feature": GROUP, "pairs": "p.jsonl", "x_split": "a", "y_split": "b"},
            "not both",
        ),
    ],
)
def test_the_component_checks_its_configuration(arguments, error):
    examples = channel.Channel(type=standard_artifacts.Examples)
    with pytest.raises(ValueError, match=error):
        IndexExamples(examples, **arguments)


def test_the_component_declares_only_the_indexes_it_writes():
    examples = channel.Channel(type=standard_artifacts.Examples)
    labelled = IndexExamples(examples, label_feature=LABEL)
    assert set(labelled.outputs) == {
        keys.INDEXED_EXAMPLES_KEY,
        keys.OFFSET_INDEX_KEY,
        keys.CLASS_INDEX_KEY,
    }
    paired = IndexExamples(examples, group_feature=GROUP, x_split="a", y_split="b")
    assert keys.PAIR_INDEX_KEY in paired.outputs and keys.CLASS_INDEX_KEY not in paired.outputs
