"""class_balanced over records of any kind: a parse function or a feature spec from a schema."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.paths import REPO_ROOT
from tfx_dynamic_inputs.inputs import RecordStore, class_balanced
from tfx_dynamic_inputs.inputs.parsing import feature_spec_from_schema

SCHEMA = os.path.join(REPO_ROOT, "components", "schemas", "image_record.pbtxt")


def embedding_example(index: int, label: int, dim: int = 4) -> bytes:
    feature = {
        "embedding": tf.train.Feature(float_list=tf.train.FloatList(value=[float(index)] * dim)),
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"rec{index}".encode()])),
        "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


SPEC = {
    "embedding": tf.io.FixedLenFeature([4], tf.float32),
    "text": tf.io.FixedLenFeature([], tf.string),
    "class": tf.io.FixedLenFeature([], tf.int64),
}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 7), min_size=2, max_size=8),
    n_p=st.integers(1, 3),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_feature_spec_batches_keep_the_exact_composition(sizes, n_p, seed, data):
    n_c = data.draw(st.integers(1, len(sizes)))
    labels = np.repeat(np.arange(len(sizes)), sizes)
    store = RecordStore.from_serialized(
        [embedding_example(i, int(c)) for i, c in enumerate(labels)]
    )
    dataset = class_balanced(
        store,
        labels,
        n_classes_per_batch=n_c,
        n_samples_per_class=n_p,
        seed=seed,
        feature_spec=SPEC,
    )
    assert dataset.element_spec["embedding"] == tf.TensorSpec([n_c * n_p, 4], tf.float32)
    seen = set()
    for batch in dataset.as_numpy_iterator():
        np.testing.assert_array_equal(batch["embedding"][:, 0], batch["index"])
        np.testing.assert_array_equal(batch["class"], batch["label"])
        assert [t.decode() for t in batch["text"]] == [f"rec{i}" for i in batch["index"]]
        groups = batch["label"].reshape(n_c, n_p)
        assert len(set(groups[:, 0])) == n_c and (groups == groups[:, :1]).all()
        seen |= set(batch["label"].tolist())
    assert seen == set(range(len(sizes)))


def test_parse_fn_returning_a_tensor_goes_under_features():
    labels = np.array([0, 0, 1, 1, 2, 2])
    store = RecordStore.from_serialized([embedding_example(i, c) for i, c in enumerate(labels)])

    def parse(records):
        return tf.io.parse_example(records, SPEC)["embedding"]

    dataset = class_balanced(
        store, labels, n_classes_per_batch=3, n_samples_per_class=2, parse_fn=parse
    )
    for batch in dataset.as_numpy_iterator():
        np.testing.assert_array_equal(batch["features"][:, 0], batch["index"])


@pytest.mark.parametrize(
    "parsers, message",
    [
        (dict(parse_fn=tf.identity, feature_spec=SPEC), "parse_fn or feature_spec, not both"),
        (dict(parse_fn=lambda r: {"label": tf.strings.length(r)}), "keys \\['label'\\], which"),
    ],
)
def test_parsers_are_checked(parsers, message):
    store = RecordStore.from_serialized([embedding_example(i, i % 2) for i in range(4)])
    with pytest.raises(ValueError, match=message):
        class_balanced(
            store, np.arange(4) % 2, n_classes_per_batch=2, n_samples_per_class=1, **parsers
        )


@pytest.mark.full
def test_feature_spec_from_the_image_schema_parses_materialized_records():
    pytest.importorskip("tensorflow_metadata", reason="schemas need the [tfx] extra")
    spec = feature_spec_from_schema(SCHEMA)
    assert {"id", "image", "image_format", "height", "width", "channels"} <= set(spec)
    from tests.inputs import runs

    records = [
        runs.image_example(f"img{i}", np.full([2, 2, 1], i, np.uint8), label=i % 3)
        for i in range(9)
    ]
    store = RecordStore.from_serialized(records)
    dataset = class_balanced(
        store, np.arange(9) % 3, n_classes_per_batch=3, n_samples_per_class=2, feature_spec=spec
    )
    # The schema gives value counts, not shapes: TFX's spec makes these features sparse.
    for batch in dataset:
        ids = tf.sparse.to_dense(batch["id"])[:, 0].numpy()
        assert [i.decode() for i in ids] == [f"img{i}" for i in batch["index"].numpy()]
