"""What the pipeline factories share: the materialize parameters set alike and the rest of the
pipeline after the materialize component (`training_pipeline`); and, with the standard-TFX
pipeline too, the end of a pipeline from the trained model to the blessed model's push
(`gate_and_push`) and the assembly with a run's settings (`assemble`).

A factory builds its materialize component with `materialize_parameters(config, run)` and hands
it, with its trainer's own arguments, to `training_pipeline`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tfx.components.example_validator.component import ExampleValidator
from tfx.components.pusher.component import Pusher
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.components.statistics_gen.component import StatisticsGen
from tfx.dsl.components.base import base_component, base_node
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
    LatestBlessedModelStrategy,
)
from tfx.orchestration import metadata
from tfx.orchestration.pipeline import Pipeline
from tfx.proto.pusher_pb2 import PushDestination
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.channel import BaseChannel, Channel

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.evaluator_component import ModelGate
from tfx_dynamic_inputs.pipeline.config import SERVING_DIR, CycleGanConfig, RunConfig, SpeakerConfig
from tfx_dynamic_inputs.pipeline.fingerprint import input_fingerprint
from tfx_dynamic_inputs.trainer_component import ClassBalancedTrainer, PairsTrainer

# The node id of the latest-blessed-model resolver (Kubeflow names its two tasks after it).
BASELINE_RESOLVER_ID = "latest_blessed_model_resolver"


def materialize_parameters(
    config: CycleGanConfig | SpeakerConfig, run: RunConfig
) -> dict[str, Any]:
    """The materialize component's sharding and reject budget from `config`, and the
    fingerprint of its input files, or None where `run` does not fingerprint.

    Args:
      config: the pipeline's settings.
      run: the run's settings (`fingerprint_inputs`).

    Returns:
      The materialize component's `num_shards`, `max_reject_fraction` and `input_fingerprint`
      arguments, by name.

    Example:

        MaterializeAudio(manifest, root, **materialize_parameters(config, run))
    """
    return {
        keys.NUM_SHARDS_KEY: config.num_shards,
        keys.MAX_REJECT_FRACTION_KEY: config.max_reject_fraction,
        keys.INPUT_FINGERPRINT_KEY: (
            input_fingerprint(config.input_paths()) if run.fingerprint_inputs else None
        ),
    }


class GatedConfig(Protocol):
    """What the end of a pipeline (`gate_and_push`) reads of its config: `CycleGanConfig`,
    `SpeakerConfig`, `standard_pipeline.StandardConfig`."""

    @property
    def pipeline_name(self) -> str:
        """The pipeline's name (its ML Metadata context)."""
        ...

    @property
    def blessing_metric(self) -> str:
        """The trainer metric ModelGate compares."""
        ...

    @property
    def blessing_direction(self) -> str:
        """Whether a higher or a lower `blessing_metric` is better."""
        ...

    @property
    def blessing_threshold(self) -> float | None:
        """The value a model must reach to be blessed; None for no bound."""
        ...

    @property
    def blessing_tolerance(self) -> float:
        """How much worse than the latest blessed model's metric a candidate's may be."""
        ...

    @property
    def serving_dir(self) -> str | None:
        """Where Pusher pushes; None for `<pipeline root>/serving/<pipeline name>`."""
        ...


def gate_arguments(config: GatedConfig, run: RunConfig) -> dict[str, Any]:
    """`gate_and_push`'s rule and serving folder from a pipeline config and a run.

    Returns:
      `metric`, `direction`, `threshold`, `tolerance` and `serving_dir`, by name.
    """
    return {
        "metric": config.blessing_metric,
        "direction": config.blessing_direction,
        "threshold": config.blessing_threshold,
        "tolerance": config.blessing_tolerance,
        "serving_dir": serving_dir(config, run),
    }


def serving_dir(config: GatedConfig, run: RunConfig) -> str:
    """Where Pusher pushes the blessed models of `config`'s pipeline (one folder per version).

    Args:
      config: the pipeline's settings (`serving_dir`, `pipeline_name`).
      run: the run's settings (`pipeline_root`).

    Returns:
      `config.serving_dir`, else `<run.pipeline_root>/serving/<pipeline name>`.
    """
    return config.serving_dir or os.path.join(run.pipeline_root, SERVING_DIR, config.pipeline_name)


def gate_and_push(
    model: BaseChannel,
    *,
    metric: str,
    serving_dir: str,
    direction: str = keys.LOWER_IS_BETTER,
    threshold: float | None = None,
    tolerance: float = 0.0,
) -> list[base_node.BaseNode]:
    """The latest-blessed-model resolver, ModelGate and Pusher that end a pipeline training
    `model`.

    ModelGate blesses the model by the held-out `metric` the trainer recorded, against the latest
    blessed model of this pipeline (the resolver's, none on a first run); Pusher copies a blessed
    model to `serving_dir/<version>`. The rule's arguments and defaults are ModelGate's.

    Args:
      model: the trainer's `model` channel.
      metric: the trainer metric ModelGate compares (e.g. ``"val_cycle_loss"``).
      serving_dir: where Pusher pushes (`serving_dir(config, run)` for a pipeline config).
      direction: ``"lower_is_better"`` or ``"higher_is_better"``.
      threshold: the value a model must reach to be blessed; None for no bound.
      tolerance: how much worse than the latest blessed model's metric a candidate's may be.

    Returns:
      The resolver, ModelGate and Pusher, in that order.

    Raises:
      ValueError: a bad rule (ModelGate's checks: direction, a negative tolerance).

    Example:

        components = [
            ...,
            trainer,
            *gate_and_push(trainer.outputs["model"], metric="val_loss", serving_dir="serving"),
        ]
    """
    baseline = Resolver(
        strategy_class=LatestBlessedModelStrategy,
        model=Channel(type=standard_artifacts.Model),
        model_blessing=Channel(type=standard_artifacts.ModelBlessing),
    ).with_id(BASELINE_RESOLVER_ID)
    gate = ModelGate(
        model=model,
        baseline_model=baseline.outputs[keys.MODEL_KEY],
        metric=metric,
        direction=direction,
        threshold=threshold,
        tolerance=tolerance,
    )
    pusher = Pusher(
        model=model,
        model_blessing=gate.outputs[keys.BLESSING_KEY],
        push_destination=PushDestination(
            filesystem=PushDestination.Filesystem(base_directory=serving_dir)
        ),
    )
    return [baseline, gate, pusher]


def assemble(
    pipeline_name: str, run: RunConfig, components: Sequence[base_node.BaseNode]
) -> Pipeline:
    """`components` as the TFX pipeline `pipeline_name`, with `run`'s root, cache, sqlite ML
    Metadata (where `run.metadata_path` is set) and Beam arguments.

    Args:
      pipeline_name: the pipeline's name.
      run: the run's settings.
      components: the pipeline's nodes.

    Returns:
      The TFX pipeline.
    """
    return Pipeline(
        pipeline_name=pipeline_name,
        pipeline_root=run.pipeline_root,
        components=list(components),
        enable_cache=run.enable_cache,
        metadata_connection_config=(
            metadata.sqlite_metadata_connection_config(run.metadata_path)
            if run.metadata_path
            else None
        ),
        beam_pipeline_args=list(run.beam_pipeline_args),
    )


def training_pipeline(
    config: CycleGanConfig | SpeakerConfig,
    run: RunConfig,
    materialize: base_component.BaseComponent,
    index_key: str,
    trainer: Callable[..., PairsTrainer | ClassBalancedTrainer],
    upstream: Sequence[base_node.BaseNode] = (),
) -> Pipeline:
    """`materialize` -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> `trainer` ->
    `gate_and_push`, assembled as the pipeline `config.pipeline_name` (`assemble`).

    ExampleValidator checks `materialize`'s examples against `config.schema_file`. The trainer
    reads the examples, the offset index and the `index_key` output, refuses splits with
    anomalies, and runs `config.trainer_module` for `config.num_epochs` with `config.seed`.

    Args:
      config: the pipeline's settings.
      run: where the run writes, and its Beam arguments.
      materialize: the materialize component.
      index_key: `materialize`'s index output the trainer reads (pair or class index).
      trainer: `PairsTrainer` or `ClassBalancedTrainer` with its own arguments bound (batch
        geometry, input options, custom config); called here with the channels and the
        settings every trainer takes.
      upstream: more nodes the trainer reads, run before it (a mix's other MaterializeAudio
        components, the speaker augmentation's noise and RIR materializations).

    Returns:
      The TFX pipeline.

    Example:

        training_pipeline(
            config, run, materialize, keys.PAIR_INDEX_KEY,
            functools.partial(PairsTrainer, batch_size=32, input_options=options),
        )
    """
    examples = materialize.outputs[keys.EXAMPLES_KEY]
    statistics_gen = StatisticsGen(examples=examples)
    schema_gen = ImportSchemaGen(schema_file=config.schema_file)
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs[standard_component_specs.STATISTICS_KEY],
        schema=schema_gen.outputs[standard_component_specs.SCHEMA_KEY],
    )
    trained = trainer(
        examples,
        materialize.outputs[keys.OFFSET_INDEX_KEY],
        materialize.outputs[index_key],
        anomalies=example_validator.outputs[standard_component_specs.ANOMALIES_KEY],
        module_path=config.trainer_module,
        num_epochs=config.num_epochs,
        seed=config.seed,
        checkpoint_every_steps=config.checkpoint_every_steps,
    )
    return assemble(
        config.pipeline_name,
        run,
        [
            *upstream,
            materialize,
            *upstream,
            statistics_gen,
            schema_gen,
            example_validator,
            trained,
            *gate_and_push(trained.outputs[keys.MODEL_KEY], **gate_arguments(config, run)),
        ],
    )
