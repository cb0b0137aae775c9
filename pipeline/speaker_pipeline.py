"""The speaker pipeline: manifest + audio -> speaker embedding on class-balanced batches.

MaterializeAudio -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ResampledTrainer
"""

from __future__ import annotations

from tfx import v1 as tfx
from tfx.types import standard_component_specs

from components.component_keys import (
    CLASS_BALANCED,
    CLASS_INDEX_KEY,
    EXAMPLES_KEY,
    OFFSET_INDEX_KEY,
)
from components.materialize_component import MaterializeAudio
from components.trainer_component import ResampledTrainer
from pipeline import common
from pipeline.config import RunConfig, SpeakerConfig

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
        input_fingerprint=common.materialize_fingerprint(config, run),
    )
    statistics_gen, schema_gen, example_validator = common.validation_components(
        materialize.outputs[EXAMPLES_KEY], config.schema_file
    )
    trainer = ResampledTrainer(
        examples=materialize.outputs[EXAMPLES_KEY],
        offset_index=materialize.outputs[OFFSET_INDEX_KEY],
        class_index=materialize.outputs[CLASS_INDEX_KEY],
        anomalies=example_validator.outputs[standard_component_specs.ANOMALIES_KEY],
        input_kind=CLASS_BALANCED,
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
    return common.assemble_pipeline(
        config, run, [materialize, statistics_gen, schema_gen, example_validator, trainer]
    )
