"""The data-validation stage both pipelines share: statistics, imported schema, validation."""

from __future__ import annotations

from tfx import v1 as tfx


def validation_components(
    examples: tfx.dsl.Channel, schema_file: str
) -> tuple[
    tfx.components.StatisticsGen, tfx.components.ImportSchemaGen, tfx.components.ExampleValidator
]:
    """StatisticsGen over `examples`, ImportSchemaGen of `schema_file`, ExampleValidator."""
    statistics_gen = tfx.components.StatisticsGen(examples=examples)
    schema_gen = tfx.components.ImportSchemaGen(schema_file=schema_file)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"],
        schema=schema_gen.outputs["schema"],
    )
    return statistics_gen, schema_gen, example_validator
