"""The standard pipeline's ExampleGen by `StandardConfig.input_format`: the component each format
builds and its node id, a misspelt format refused where the config is written, and a real run of
the Parquet ExampleGen on LocalDagRunner (class 0 and null labels as they are). The CSV format's
whole pipeline runs in `test_standard_tfx_pipeline.py`, the TFRecord one's in the Kubeflow test.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.components.example_gen.csv_example_gen.component import CsvExampleGen
from tfx.components.example_gen.import_example_gen.component import ImportExampleGen
from tfx.types import standard_component_specs

from tests.pipeline import standard_data, standard_modules
from tfx_dynamic_inputs.pipeline import common, example_gen, run_local, standard_pipeline


@pytest.mark.parametrize(
    ("input_format", "component", "executor"),
    [
        ("tfrecord", ImportExampleGen, None),
        ("csv", CsvExampleGen, None),
        ("parquet", FileBasedExampleGen, example_gen.ParquetExecutor),
    ],
)
def test_each_input_format_builds_its_example_gen(tmp_path, input_format, component, executor):
    config = standard_data.config(str(tmp_path / "input"), input_format=input_format)
    run = run_local.run_config(str(tmp_path))
    built = standard_pipeline.standard_components(config, run)
    assert type(built.example_gen) is component
    assert built.example_gen.id == component.__name__ == example_gen.node_id(input_format)
    assert built.example_gen.exec_properties["input_base"] == config.input_base
    if executor is not None:
        assert built.example_gen.executor_spec.executor_class is executor
    # Everything downstream reads this ExampleGen's examples.
    examples = built.example_gen.outputs[standard_component_specs.EXAMPLES_KEY]
    assert built.statistics_gen.inputs[standard_component_specs.EXAMPLES_KEY] is examples
    assert built.transform.inputs[standard_component_specs.EXAMPLES_KEY] is examples
    node_ids = [node.id for node in standard_pipeline.create_pipeline(config, run).components]
    assert node_ids[0] == example_gen.node_id(input_format)


def test_the_default_input_format_is_tfrecord(tmp_path):
    config = standard_data.config(str(tmp_path))
    assert config.input_format == example_gen.TFRECORD


@pytest.mark.parametrize(("given", "hint"), [("cvs", "; did you mean 'csv'?"), ("json", "")])
def test_a_bad_input_format_is_one_value_error_naming_the_formats(tmp_path, given, hint):
    message = (
        f"StandardConfig.input_format must be one of tfrecord, csv, parquet; got {given!r}{hint}"
    )
    with pytest.raises(ValueError) as error:
        standard_data.config(str(tmp_path), input_format=given)
    assert str(error.value) == message


def test_parquet_rows_become_examples_with_zeros_nulls_and_lists_as_they_are():
    example = example_gen.row_to_example(
        {
            "label": 0,
            "missing": None,
            "score": 0.0,
            "vector": np.array([0.0, 1.5], np.float32),
            "name": "",
            "raw": b"\xff",
            "flag": True,
        }
    )
    feature = example.features.feature
    assert feature["label"].int64_list.value == [0]
    assert feature["missing"].WhichOneof("kind") is None
    assert feature["score"].float_list.value == [0.0]
    assert feature["vector"].float_list.value == [0.0, 1.5]
    assert feature["name"].bytes_list.value == [b""]
    assert feature["raw"].bytes_list.value == [b"\xff"]
    assert feature["flag"].int64_list.value == [1]
    with pytest.raises(TypeError, match="Parquet column 'when': dict values"):
        example_gen.row_to_example({"when": {"a": 1}})


@pytest.mark.slow
def test_the_parquet_example_gen_runs_and_keeps_every_label(tmp_path):
    input_base = str(tmp_path / "input")
    labels = standard_data.write_examples(input_base, example_gen.PARQUET)
    config = standard_data.config(input_base, input_format=example_gen.PARQUET)
    run = run_local.run_config(str(tmp_path), enable_cache=False)
    reader = standard_pipeline.standard_components(config, run).example_gen
    run_local.run(common.assemble(config.pipeline_name, run, [reader]))
    result = run_local.latest_run(run.metadata_path, config.pipeline_name)[reader.id]
    assert result.state == "COMPLETE"
    uri = result.uri(standard_component_specs.EXAMPLES_KEY)
    assert sorted(os.listdir(uri)) == ["Split-eval", "Split-train"]
    files = tf.io.gfile.glob(os.path.join(uri, "Split-*", "*"))
    examples = [
        tf.train.Example.FromString(record.numpy())
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]
    read = collections.Counter()
    for example in examples:
        feature = example.features.feature
        assert len(feature[standard_modules.VECTOR_KEY].float_list.value) == 4
        label = list(feature[standard_modules.LABEL_KEY].int64_list.value)
        read[label[0] if label else None] += 1
    # Class 0 kept its label (TFX's own Parquet executor drops a 0), and a null is no label.
    assert read == collections.Counter(labels)
    assert read[0] > 0 and read[None] > 0
