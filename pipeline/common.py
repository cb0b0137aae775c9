"""What both pipeline factories share: the input fingerprint, data validation, the Pipeline.

A factory builds its materialize component with `materialize_fingerprint(config, run)`, checks
the component's examples with `validation_components`, adds its trainer and hands the
components to `assemble_pipeline`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tfx import v1 as tfx
from tfx.dsl.components.base import base_node
from tfx.types import standard_component_specs

from pipeline.config import CycleGanConfig, RunConfig, SpeakerConfig
from pipeline.fingerprint import input_fingerprint


def materialize_fingerprint(config: CycleGanConfig | SpeakerConfig, run: RunConfig) -> str | None:
    """The fingerprint of `config`'s input files, or None where `run` does not fingerprint."""
    return input_fingerprint(config.input_paths()) if run.fingerprint_inputs else None


def validation_components(
    examples: tfx.dsl.Channel, schema_file: str
) -> tuple[
    tfx.components.StatisticsGen, tfx.components.ImportSchemaGen, tfx.components.ExampleValidator
]:
    """StatisticsGen over `examples`, ImportSchemaGen of `schema_file`, ExampleValidator."""
    statistics_gen = tfx.components.StatisticsGen(examples=examples)
    schema_gen = tfx.components.ImportSchemaGen(schema_file=schema_file)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs[standard_component_specs.STATISTICS_KEY],
        schema=schema_gen.outputs[standard_component_specs.SCHEMA_KEY],
    )
    return statistics_gen, schema_gen, example_validator


def assemble_pipeline(
    config: CycleGanConfig | SpeakerConfig,
    run: RunConfig,
    components: Sequence[base_node.BaseNode],
) -> tfx.dsl.Pipeline:
    """The TFX pipeline `config.pipeline_name` of `components`, with `run`'s root, cache,
    sqlite ML Metadata (where `run.metadata_path` is set) and Beam arguments."""
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=run.pipeline_root,
        components=list(components),
        enable_cache=run.enable_cache,
        metadata_connection_config=(
            tfx.orchestration.metadata.sqlite_metadata_connection_config(run.metadata_path)
            if run.metadata_path
            else None
        ),
        beam_pipeline_args=list(run.beam_pipeline_args),
    )
