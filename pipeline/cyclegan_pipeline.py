"""The CycleGAN pipeline: image domains + valid-pair list -> CycleGAN trained on dynamic pairs.

MaterializePairs -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ResampledTrainer
"""

from __future__ import annotations

from tfx import v1 as tfx

from components.materialize_component import MaterializePairs
from components.trainer_component import ResampledTrainer
from pipeline.config import CycleGanConfig, RunConfig
from pipeline.fingerprint import input_fingerprint
from pipeline.validation import validation_components


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
        input_fingerprint=input_fingerprint(config.input_paths())
        if run.fingerprint_inputs
        else None,
    )
    statistics_gen, schema_gen, example_validator = validation_components(
        materialize.outputs["examples"], config.schema_file
    )
    trainer = ResampledTrainer(
        examples=materialize.outputs["examples"],
        offset_index=materialize.outputs["offset_index"],
        pair_index=materialize.outputs["pair_index"],
        anomalies=example_validator.outputs["anomalies"],
        input_kind="dynamic_pairs",
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
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=run.pipeline_root,
        components=[materialize, statistics_gen, schema_gen, example_validator, trainer],
        enable_cache=run.enable_cache,
        metadata_connection_config=(
            tfx.orchestration.metadata.sqlite_metadata_connection_config(run.metadata_path)
            if run.metadata_path
            else None
        ),
        beam_pipeline_args=list(run.beam_pipeline_args),
    )
