"""The standard pipeline's ExampleGen by input format: TFRecord, CSV or Parquet files.

    "tfrecord"  ImportExampleGen: TFRecord files of `tf.train.Example`
    "csv"       CsvExampleGen: CSV files with a header line; each column one feature of one
                value, its type inferred (int64, float, bytes), an empty cell a feature of none
    "parquet"   FileBasedExampleGen with `ParquetExecutor`: Parquet files; each column one
                feature (a list column a feature of several values), a null a feature of none

Each reads every file under `input_base` and splits the examples into `train` and `eval`, 2:1 by
hash. The node's id is its class name (`node_id`), so a pipeline's node ids follow its format.

`ParquetExecutor` is TFX's Parquet executor
(`tfx.components.example_gen.custom_executors.parquet_executor`) less its zero bug: TFX's
`dict_to_example` writes a value that is false (an int64 label 0, a float 0.0, an empty string)
as a feature of no values, which would make every example of class 0 a `missing_label` reject.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.components.example_gen.csv_example_gen.component import CsvExampleGen
from tfx.components.example_gen.import_example_gen.component import ImportExampleGen
from tfx.dsl.components.base import base_node, executor_spec
from tfx.types import standard_component_specs

from tfx_dynamic_inputs.inputs.arguments import choice

TFRECORD = "tfrecord"
CSV = "csv"
PARQUET = "parquet"
INPUT_FORMATS = (TFRECORD, CSV, PARQUET)
# The node id of each format's ExampleGen: TFX names a node by its class.
NODE_IDS = {
    TFRECORD: ImportExampleGen.__name__,
    CSV: CsvExampleGen.__name__,
    PARQUET: FileBasedExampleGen.__name__,
}


def check_input_format(input_format: str) -> str:
    """`input_format` when it is one of `INPUT_FORMATS`.

    Args:
      input_format: the format name.

    Returns:
      `input_format`.

    Raises:
      ValueError: another value, naming the formats and the closest one ("did you mean").
    """
    return choice("input_format", input_format, INPUT_FORMATS)


def node_id(input_format: str) -> str:
    """The id of `input_format`'s ExampleGen node in a pipeline.

    Args:
      input_format: one of `INPUT_FORMATS`.

    Returns:
      Its class name, e.g. "CsvExampleGen".

    Raises:
      ValueError: `input_format` is not one of `INPUT_FORMATS`.
    """
    return NODE_IDS[check_input_format(input_format)]


def example_gen(input_format: str, input_base: str) -> base_node.BaseNode:
    """The ExampleGen that reads the `input_format` files under `input_base`.

    Args:
      input_format: one of `INPUT_FORMATS`.
      input_base: the folder of input files.

    Returns:
      The component; its `examples` output holds the `train` and `eval` splits.

    Raises:
      ValueError: `input_format` is not one of `INPUT_FORMATS`.

    Example:

        example_gen("csv", "data/").id  # "CsvExampleGen"
    """
    input_format = check_input_format(input_format)
    if input_format == CSV:
        return CsvExampleGen(input_base=input_base)
    if input_format == PARQUET:
        return FileBasedExampleGen(
            input_base=input_base,
            custom_executor_spec=executor_spec.BeamExecutorSpec(ParquetExecutor),
        )
    return ImportExampleGen(input_base=input_base)


def row_to_example(row: Mapping[str, Any]) -> tf.train.Example:
    """One Parquet row as a `tf.train.Example`: each column a feature of its values.

    Args:
      row: column -> a value, a list of values or None (a null: a feature of no values).

    Returns:
      The example: ints (and bools) as int64, floats as float, str (UTF-8) and bytes as bytes.

    Raises:
      TypeError: a value of another type, naming its column.
    """
    feature = {}
    for column, value in row.items():
        values = value.tolist() if isinstance(value, np.ndarray) else value
        if values is None:
            values = []
        elif not isinstance(values, list):
            values = [values]
        values = [v.item() if isinstance(v, np.generic) else v for v in values if v is not None]
        feature[column] = _feature(column, values)
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _feature(column: str, values: list[Any]) -> tf.train.Feature:
    """The feature of `column`'s non-null `values`, typed by the first."""
    if not values:
        return tf.train.Feature()
    if isinstance(values[0], int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if isinstance(values[0], float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    if isinstance(values[0], (str, bytes)):
        encoded = [v.encode() if isinstance(v, str) else v for v in values]
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=encoded))
    raise TypeError(
        f"Parquet column {column!r}: {type(values[0]).__name__} values are not supported"
    )


@beam.ptransform_fn
def _parquet_to_example(
    pipeline: beam.Pipeline, exec_properties: dict[str, Any], split_pattern: str
) -> beam.PCollection:
    """The examples of the Parquet files `split_pattern` matches under `input_base`."""
    pattern = os.path.join(exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
    return (
        pipeline
        | "ReadFromParquet" >> beam.io.ReadFromParquet(pattern)
        | "ToTFExample" >> beam.Map(row_to_example)
    )


class ParquetExecutor(BaseExampleGenExecutor):
    """TFX's Parquet ExampleGen executor (`parquet_executor.Executor`), converting rows with
    `row_to_example`."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802 (TFX's name)
        """Returns the PTransform that reads one split's Parquet files as examples."""
        return _parquet_to_example
