"""The CycleGAN pipeline: image domains + valid-pair list -> CycleGAN trained on dynamic pairs.

MaterializePairs -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> PairsTrainer
-> ModelGate (held-out cycle loss vs the latest blessed model) -> Pusher
"""

from __future__ import annotations

import functools

from tfx.orchestration.pipeline import Pipeline

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize_component import MaterializePairs
from tfx_dynamic_inputs.pipeline import common, image_shape
from tfx_dynamic_inputs.pipeline.config import CycleGanConfig, RunConfig
from tfx_dynamic_inputs.trainer_component import PairsInputOptions, PairsTrainer


def create_pipeline(config: CycleGanConfig, run: RunConfig) -> Pipeline:
    """The TFX pipeline of `config`, writing under `run.pipeline_root`.

    Args:
      config: the image domains, their pairs, the model and gate settings; an `image_size` or
        `channels` left None is inferred from the images (`image_shape.resolve`).
      run: where the run writes (pipeline root, ML Metadata) and its Beam arguments.

    Returns:
      MaterializePairs (raw pixels of `config.image_size`) then `common.training_pipeline`,
      its trainer node `PairsTrainer`.

    Example:
      create_pipeline(
          run_local.cyclegan_config("/tmp/digits"), RunConfig(pipeline_root="/tmp/root"))
    """
    if config.image_size is None or config.channels is None:
        config, _ = image_shape.resolve(config)
    materialize = MaterializePairs(
        x_dir=config.x_dir,
        y_dir=config.y_dir,
        pairs=config.pairs,
        x_groups=config.x_groups,
        y_groups=config.y_groups,
        groups_from_subfolder=config.groups_from_subfolder or None,
        image_storage="raw",
        raw_height=config.image_size,
        raw_width=config.image_size,
        raw_channels=config.channels,
        **common.materialize_parameters(config, run),
    )
    image = {"height": config.image_size, "width": config.image_size, "channels": config.channels}
    return common.training_pipeline(
        config,
        run,
        materialize,
        keys.PAIR_INDEX_KEY,
        functools.partial(
            PairsTrainer,
            batch_size=config.batch_size,
            input_options=PairsInputOptions(
                image=image, strategy=config.pairing_strategy, held_out=config.held_out
            ),
            custom_config={
                **config.custom_config,
                "image_size": config.image_size,
                "channels": config.channels,
            },
        ),
    )
