"""The payload check the samplers run before `tf.io.parse_example` (`parsing.example_problem`,
`ExampleGuard`) refuses exactly the records TensorFlow's parser refuses (issue 46): a record it
let through failed its whole batch with a graph error naming no record; one it refused while
TensorFlow reads it would be lost. Generated Examples and specs are compared with the parser's
own verdict, and a record the parser refuses is a damaged record (named, or skipped and counted).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.test_records_properties import _KINDS, _VALUES, _features, _tf_example
from tests.inputs import runs, skipping
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import DynamicPairsSampler, ImageSpec, StoreOptions
from tfx_dynamic_inputs.inputs.parsing import example_problem


def _tensorflow_refuses(payload: bytes, spec: dict) -> bool:
    """Whether `tf.io.parse_example` (a batch of one, as the samplers parse) and
    `tf.io.parse_single_example` refuse `payload`; they must agree."""
    verdicts = []
    for parse in (
        lambda: tf.io.parse_example([payload], spec),
        lambda: tf.io.parse_single_example(payload, spec),
    ):
        try:
            parse()
            verdicts.append(False)
        # Refused naming the raw bytes that it then cannot decode as UTF-8: refused too.
        except (tf.errors.InvalidArgumentError, UnicodeDecodeError):
            verdicts.append(True)
    assert verdicts[0] == verdicts[1], verdicts
    return verdicts[0]


@st.composite
def _example(draw) -> tuple[bytes, list[str]]:
    """A serialized Example of generated features, some of them a `Feature` of no kind, and the
    names it holds."""
    example = tf.train.Example.FromString(_tf_example(draw(_features())).SerializeToString())
    blank = draw(st.lists(st.text(min_size=1, max_size=8), max_size=2, unique=True))
    for name in blank:
        example.features.feature.get_or_create(name).Clear()  # a Feature of no kind
    return example.SerializeToString(), sorted(example.features.feature)


@st.composite
def _spec_entry(draw, names: list[str], example: tf.train.Example):
    """A spec entry for a feature the Example mostly holds: fixed with or without a default
    (any size, 0 included), variable, or a sequence; mostly of the feature's own kind."""
    name = draw(st.sampled_from(names) | st.just("absent") if names else st.just("absent"))
    stored = example.features.feature.get(name)
    found = None if stored is None else stored.WhichOneof("kind")
    count = 0 if found is None else len(getattr(stored, found).value)
    own = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}.get(found)
    kind = draw(
        st.sampled_from(sorted(_KINDS))
        if own is None
        else st.just(own) | st.sampled_from(sorted(_KINDS))
    )
    dtype = _KINDS[kind]
    form = draw(st.sampled_from(["fixed", "fixed", "varlen", "sequence"]))
    if form == "varlen":
        return name, tf.io.VarLenFeature(dtype)
    if form == "sequence":
        return name, tf.io.FixedLenSequenceFeature(
            [draw(st.integers(1, 3))], dtype, allow_missing=True
        )
    shape = draw(st.just([count]) | st.sampled_from([[], [0], [1], [2], [2, 2]]))
    size = int(np.prod(shape, dtype=np.int64))
    if not draw(st.booleans()):
        return name, tf.io.FixedLenFeature(shape, dtype)
    default = draw(st.lists(_VALUES[kind], min_size=size, max_size=size))
    return name, tf.io.FixedLenFeature(
        shape, dtype, default_value=default[0] if shape == [] else default
    )


@settings(max_examples=50, deadline=None)
@given(data=st.data(), example=_example())
def test_the_guard_refuses_exactly_what_tensorflows_parser_refuses(data, example):
    payload, names = example
    parsed = tf.train.Example.FromString(payload)
    entries = data.draw(st.lists(_spec_entry(names, parsed), min_size=1, max_size=3), label="spec")
    spec = dict(entries)
    problem = example_problem(payload, spec)
    assert (problem is not None) == _tensorflow_refuses(payload, spec), problem


def _int64(*values: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _payload(**features: tf.train.Feature) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


@pytest.mark.parametrize(
    ("payload", "spec", "problem"),
    [
        # An empty list is the record's values, not a missing feature: the default does not
        # stand in for it.
        (
            _payload(a=_int64()),
            {"a": tf.io.FixedLenFeature([], tf.int64, default_value=0)},
            "feature 'a' holds 0 values, not 1",
        ),
        # TensorFlow takes the (empty) default of a 0-value shape as no default.
        (
            _payload(),
            {"a": tf.io.FixedLenFeature([0], tf.int64, default_value=[])},
            "tf.train.Example lacks feature 'a'",
        ),
        # A Feature of no kind is a missing one, even where 0 values would do.
        (
            _payload(a=tf.train.Feature()),
            {"a": tf.io.FixedLenFeature([0], tf.int64)},
            "tf.train.Example lacks feature 'a'",
        ),
        (
            _payload(a=_int64(1, 2, 3)),
            {"a": tf.io.FixedLenSequenceFeature([2], tf.int64, allow_missing=True)},
            "feature 'a' holds 3 values, not a multiple of 2",
        ),
    ],
    ids=["empty list with a default", "0-value shape missing", "no kind", "sequence stride"],
)
def test_records_tensorflows_parser_refuses_are_refused_naming_why(payload, spec, problem):
    assert _tensorflow_refuses(payload, spec)
    assert example_problem(payload, spec) == problem


def _image_with_empty_height() -> bytes:
    example = tf.train.Example.FromString(runs.image_example("y1", np.ones([2, 2, 3], np.uint8)))
    example.features.feature[layout.HEIGHT_KEY].CopyFrom(_int64())
    assert example.features.feature[layout.HEIGHT_KEY].WhichOneof("kind") == "int64_list"
    return example.SerializeToString()


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_record_with_an_empty_list_where_a_default_stands_is_a_damaged_record(
    tmp_path, caplog, backend
):
    """`height` has a default in the image spec, but an empty list of it fails the parser: the
    record is named (fail) or left out and counted (skip), never a whole batch lost."""
    output_dir = str(tmp_path)
    skipping.write_pairs_run(output_dir, y_payloads={1: _image_with_empty_height()})
    options = dict(batch_size=4, image=ImageSpec(2, 2, 3), seed=2)
    failing = DynamicPairsSampler(
        output_dir, store_options=StoreOptions(backend=backend), **options
    )
    with pytest.raises(
        tf.errors.OpError, match=r"record 1 \(shard .*\): feature 'height' holds 0 values, not 1"
    ):
        for _ in range(3):
            list(failing.dataset().as_numpy_iterator())

    sampler = DynamicPairsSampler(
        output_dir, store_options=StoreOptions(backend=backend, on_damaged="skip"), **options
    )
    epochs = 3
    planned = skipping.times_planned(sampler.planner.plan, "y_index", 1, epochs)
    assert planned > 0
    for batch in skipping.batches_of_epochs(sampler.dataset(), epochs, caplog):
        assert 1 not in batch["y_index"]
        assert batch["y"].shape == (len(batch["y_index"]), 2, 2, 3)
    assert sampler.skipped_samples == planned
