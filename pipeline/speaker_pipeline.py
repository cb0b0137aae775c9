"""The speaker pipeline: manifest + audio -> speaker embedding on class-balanced batches.

MaterializeAudio -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ResampledTrainer
"""

from __future__ import annotations

from tfx import v1 as tfx

from components.materialize_component import MaterializeAudio
from components.trainer_component import ResampledTrainer
from pipeline.config import RunConfig, SpeakerConfig
from pipeline.fingerprint import input_fingerprint
from pipeline.validation import validation_components

TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"


def create_pipeline(config: SpeakerConfig, run: RunConfig) -> tfx.dsl.Pipeline:
    """The TFX pipeline of `config`, writing under `run.pipeline_root`."""
    materialize = MaterializeAudio(
        manifest=config.manifest,
        root=config.root,
        sample_rate=config.sample_rate,
        split_mode="speaker",
        eval_fraction=config.eval_fraction,
        split_seed=config.split_seed,
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
        class_index=materialize.outputs["class_index"],
        anomalies=example_validator.outputs["anomalies"],
        input_kind="class_balanced",
        module_path=config.trainer_module,
        num_epochs=config.num_epochs,
        n_classes_per_batch=config.n_classes_per_batch,
        n_samples_per_class=config.n_samples_per_class,
        seed=config.seed,
        train_split=TRAIN_SPLIT,
        eval_split=EVAL_SPLIT if config.eval_fraction > 0 else None,
        input_options={"epoch_mode": config.epoch_mode, "features": config.feature_options()},
        custom_config=dict(config.custom_config),
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
