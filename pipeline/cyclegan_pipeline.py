"""The CycleGAN pipeline: image domains + valid-pair list -> CycleGAN trained on dynamic pairs.

MaterializePairs -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ResampledTrainer
"""

from __future__ import annotations

from tfx import v1 as tfx
from tfx.types import standard_component_specs

from components.component_keys import (
    DYNAMIC_PAIRS,
    EXAMPLES_KEY,
    OFFSET_INDEX_KEY,
    PAIR_INDEX_KEY,
)
from components.materialize_component import MaterializePairs
from components.trainer_component import ResampledTrainer
from pipeline import common
from pipeline.config import CycleGanConfig, RunConfig


def create_pipeline(config: CycleGanConfig, run: RunConfig) -> tfx.dsl.Pipeline:
    """The TFX pipeline of `config`, writing under `run.pipeline_root`."""
    materialize = MaterializePairs(
        x_dir=config.x_dir,
        y_dir=config.y_dir,
        pairs=config.pairs,
        image_storage="raw",
        raw_height=config.image_size,
        raw_width=config.image_size,
        raw_channels=config.channels,
        num_shards=config.num_shards,
        max_reject_fraction=config.max_reject_fraction,
        input_fingerprint=common.materialize_fingerprint(config, run),
    )
    statistics_gen, schema_gen, example_validator = common.validation_components(
        materialize.outputs[EXAMPLES_KEY], config.schema_file
    )
    trainer = ResampledTrainer(
        examples=materialize.outputs[EXAMPLES_KEY],
        offset_index=materialize.outputs[OFFSET_INDEX_KEY],
        pair_index=materialize.outputs[PAIR_INDEX_KEY],
        anomalies=example_validator.outputs[standard_component_specs.ANOMALIES_KEY],
        input_kind=DYNAMIC_PAIRS,
        module_path=config.trainer_module,
        num_epochs=config.num_epochs,
        batch_size=config.batch_size,
        seed=config.seed,
        input_options={
            "strategy": config.pairing_strategy,
            "image": {
                "height": config.image_size,
                "width": config.image_size,
                "channels": config.channels,
            },
        },
        custom_config={
            **config.custom_config,
            "image_size": config.image_size,
            "channels": config.channels,
        },
    )
    return common.assemble_pipeline(
        config, run, [materialize, statistics_gen, schema_gen, example_validator, trainer]
    )
