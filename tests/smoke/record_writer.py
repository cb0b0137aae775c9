"""A one-component TFX pipeline for the stack smoke tests: a Beam job writing a TFRecord file.

The executor lives in an importable module (not `__main__`) because both LocalDagRunner and the
Kubeflow V2 container entrypoint import it by its class path.
"""

from __future__ import annotations

import os

import apache_beam as beam
import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_beam_component, base_beam_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_dynamic_inputs import execution

SPLIT = "train"
NUM_RECORDS_KEY = "num_records"
EXAMPLES_KEY = "examples"


def _to_example(value: int) -> bytes:
    feature = {"value": tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class RecordWriterExecutor(execution.LoggedExecutor, base_beam_executor.BaseBeamExecutor):
    """Writes `num_records` examples (`value` = 0..n-1) to `Split-train` of an Examples artifact."""

    def execute(self, run: execution.Execution) -> None:
        examples = run.output(EXAMPLES_KEY)
        examples.split_names = artifact_utils.encode_split_names([SPLIT])
        prefix = os.path.join(artifact_utils.get_split_uri([examples], SPLIT), "data")
        with self._make_beam_pipeline() as pipeline:
            _ = (
                pipeline
                | "Values" >> beam.Create(range(int(run.properties[NUM_RECORDS_KEY])))
                | "ToExample" >> beam.Map(_to_example)
                | "Write"
                >> beam.io.WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=1)
            )


class RecordWriterSpec(types.ComponentSpec):
    PARAMETERS = {NUM_RECORDS_KEY: ExecutionParameter(type=int)}
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}


class RecordWriter(base_beam_component.BaseBeamComponent):
    """Beam-backed component: `num_records` -> Examples with one TFRecord shard."""

    SPEC_CLASS = RecordWriterSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(RecordWriterExecutor)

    def __init__(self, num_records: int):
        super().__init__(
            spec=RecordWriterSpec(
                num_records=num_records,
                examples=types.Channel(type=standard_artifacts.Examples),
            )
        )
