"""The trainer components: the standard Trainer's role, on inputs re-sampled every epoch.

Two thin components on one executor base (`executor.TrainerExecutor`), as TFX's own are built:

- `PairsTrainer`: dynamic pairs, from the materialize (or `IndexExamples`) component's
  `Examples`, `offset_index` and `pair_index`, in batches of `batch_size`;
- `ClassBalancedTrainer`: class-balanced batches of `n_classes_per_batch x
  n_samples_per_class`, from the `Examples`, `offset_index` and `class_index`.

Each calls the user module's `run_fn(fn_args)` like the standard Trainer (see `FnArgs` for
what it gets). `run_fn` returns its final metrics, which land in `<model_run>/metrics.json` and
as custom properties of both outputs. Given ExampleValidator's `anomalies`, the component refuses
to train on splits with anomalies.

`input_options` (a `PairsInputOptions` / `ClassBalancedInputOptions`, or their fields as a dict:
pairing `strategy`, `image` size, `features` for audio, `backend`, ...) go to the samplers and
are checked when the component is built; `custom_config` (a JSON object) goes to `run_fn`.

Like the standard Trainer they take Transform's `transform_graph` and a `schema`, and hand
`run_fn` the `tf_transform_output` and `schema_path`. Class-balanced inputs of records that are
not audio (`IndexExamples` over tabular, embedding or transformed Examples) are parsed with a
feature spec instead of the audio front end: input option `feature_spec` `"schema"` (the schema's
spec) or `"transformed"` (the records are Transform's `transformed_examples`), or
`apply_transform: true` (raw records parsed with Transform's raw spec, then its transform layer
in the input pipeline).

Preemption: the trainer checkpoints the model, its optimizers and the sampler state (with the
pair coverage) to `<model_run>/checkpoints/` at each epoch's end and, with
`checkpoint_every_steps=N`, every N trained batches within an epoch (None or 0, the default:
at epoch ends only, as Keras' `BackupAndRestore` does). A retried execution (a preempted
Kubeflow pod, a re-run node) gets the same output folders and resumes from the latest
checkpoint: at the epoch and batch it had reached, on exactly the batches an uninterrupted run
would have trained on next; the batches trained after that checkpoint are trained again.
`run_fn` gets `fn_args.initial_epoch` and `fn_args.trained_history` and must pass the first to
`fit` and build its model before `fit` (see `FnArgs`). The resumed epoch's logged means (loss,
`pair_coverage_epoch`) cover the batches it trained after the resume. The checkpoints stay in
the ModelRun artifact when training ends: an execution that dies after `run_fn` resumes at the
end and only exports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.channel import union as union_channels
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_dynamic_inputs import artifacts
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.trainer_component import executor
from tfx_dynamic_inputs.trainer_component import input_options as trainer_input_options
from tfx_dynamic_inputs.trainer_component.distribution import checked_distribution

# The parameters and channels both trainers take, declared once.
_COMMON_PARAMETERS = {
    keys.MODULE_PATH_KEY: ExecutionParameter(type=str, optional=True),
    keys.MODULE_FILE_KEY: ExecutionParameter(type=str, optional=True),
    keys.NUM_EPOCHS_KEY: ExecutionParameter(type=int),
    keys.SEED_KEY: ExecutionParameter(type=int, optional=True),
    keys.TRAIN_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
    keys.EVAL_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
    keys.INPUT_OPTIONS_KEY: ExecutionParameter(type=str, optional=True),
    keys.CUSTOM_CONFIG_KEY: ExecutionParameter(type=str, optional=True),
    keys.CHECKPOINT_EVERY_STEPS_KEY: ExecutionParameter(type=int, optional=True),
    keys.DISTRIBUTION_KEY: ExecutionParameter(type=str, optional=True),
}
_COMMON_INPUTS = {
    keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
    keys.OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
    keys.ANOMALIES_KEY: ChannelParameter(type=standard_artifacts.ExampleAnomalies, optional=True),
    keys.TRANSFORM_GRAPH_KEY: ChannelParameter(
        type=standard_artifacts.TransformGraph, optional=True
    ),
    keys.SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
}
_OUTPUTS = {
    keys.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
    keys.MODEL_RUN_KEY: ChannelParameter(type=standard_artifacts.ModelRun),
}


class PairsTrainerSpec(types.ComponentSpec):
    """`PairsTrainer`'s spec: the common trainer parameters, `batch_size`, and `pair_index`."""

    PARAMETERS = {**_COMMON_PARAMETERS, keys.BATCH_SIZE_KEY: ExecutionParameter(type=int)}
    INPUTS = {**_COMMON_INPUTS, keys.PAIR_INDEX_KEY: ChannelParameter(type=artifacts.PairIndex)}
    OUTPUTS = _OUTPUTS


class ClassBalancedTrainerSpec(types.ComponentSpec):
    """`ClassBalancedTrainer`'s spec: the common trainer parameters, the batch's classes and
    samples per class, and `class_index`."""

    PARAMETERS = {
        **_COMMON_PARAMETERS,
        keys.N_CLASSES_PER_BATCH_KEY: ExecutionParameter(type=int),
        keys.N_SAMPLES_PER_CLASS_KEY: ExecutionParameter(type=int),
    }
    INPUTS = {
        **_COMMON_INPUTS,
        keys.CLASS_INDEX_KEY: ChannelParameter(type=artifacts.ClassIndex),
        keys.MIXED_CLASS_INDEX_KEY: ChannelParameter(type=artifacts.ClassIndex, optional=True),
        # The speaker augmentation's noise clips and RIRs: MaterializeAudio runs' Examples.
        keys.NOISE_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
        keys.RIR_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = _OUTPUTS


class _TrainerComponent(base_component.BaseComponent):
    """What both trainers do when built: check the settings they share and the typed input
    options, then build the spec of `SPEC_CLASS` with new `model` and `model_run` channels.

    The arguments both trainers take beside their own (all optional, keyword only):
      module_path: the importable module of `run_fn` (or `module_file`; exactly one of them).
      module_file: the source file of `run_fn`.
      anomalies: ExampleValidator's output; training stops on anomalies in the splits it reads
        (pairs: `x` and `y`; class-balanced: the train and eval splits).
      transform_graph: Transform's output, handed to `run_fn` as `tf_transform_output` (and
        needed by the class-balanced `feature_spec="transformed"` and `apply_transform`).
      schema: a `Schema`, handed to `run_fn` as `schema_path` (needed by
        `feature_spec="schema"`).
      seed: the samplers' seed (default 0).
      train_split: the record set training reads (default: pairs `x`, class-balanced `train`).
      eval_split: the class-balanced record set of `fn_args.eval_dataset` (None: none).
      custom_config: a JSON object for `run_fn` (`fn_args.custom_config`).
      checkpoint_every_steps: a checkpoint every so many batches (None or 0: epoch ends only).
      distribution: ``"none"`` (one replica, the default) or ``"mirrored"`` (every GPU of the
        machine, or its logical CPUs): the batch geometry is the global batch's, split over the
        replicas, and a retry may run on another number of them (`distribution`).
    """

    _OPTIONS_CLASS: type[trainer_input_options.InputOptions]

    def __init__(
        self,
        kind_arguments: dict[str, Any],
        *,
        examples: types.BaseChannel,
        offset_index: types.BaseChannel,
        num_epochs: int,
        input_options: trainer_input_options.InputOptions | Mapping[str, Any] | None,
        module_path: str | None = None,
        module_file: str | None = None,
        anomalies: types.BaseChannel | None = None,
        transform_graph: types.BaseChannel | None = None,
        schema: types.BaseChannel | None = None,
        seed: int | None = None,
        train_split: str | None = None,
        eval_split: str | None = None,
        custom_config: Mapping[str, Any] | None = None,
        checkpoint_every_steps: int | None = None,
        distribution: str | None = None,
    ):
        if bool(module_path) == bool(module_file):
            raise ValueError("give exactly one of module_path and module_file")
        if checkpoint_every_steps is not None and checkpoint_every_steps < 0:
            raise ValueError(
                f"checkpoint_every_steps must be >= 0 (0: at epoch ends only), got "
                f"{checkpoint_every_steps}"
            )
        distribution = None if distribution is None else checked_distribution(distribution)
        # Typed and checked here, in the pipeline file: a misspelt option names itself now.
        options = trainer_input_options.input_options(self._OPTIONS_CLASS, input_options)
        given = {
            keys.TRANSFORM_GRAPH_KEY: transform_graph,
            keys.SCHEMA_KEY: schema,
            **{k: kind_arguments.get(k) for k in (keys.NOISE_EXAMPLES_KEY, keys.RIR_EXAMPLES_KEY)},
        }
        for channel, reason in options.needed_channels().items():
            if given[channel] is None:
                raise ValueError(f"input_options {reason}: the trainer needs its {channel} input")
        super().__init__(
            spec=self.SPEC_CLASS(
                **kind_arguments,
                examples=examples,
                offset_index=offset_index,
                anomalies=anomalies,
                transform_graph=transform_graph,
                schema=schema,
                module_path=module_path,
                module_file=module_file,
                num_epochs=num_epochs,
                seed=seed,
                train_split=train_split,
                eval_split=eval_split,
                input_options=trainer_input_options.to_json(options),
                custom_config=json.dumps(dict(custom_config), sort_keys=True)
                if custom_config
                else None,
                checkpoint_every_steps=checkpoint_every_steps,
                distribution=distribution,
                model=types.Channel(type=standard_artifacts.Model),
                model_run=types.Channel(type=standard_artifacts.ModelRun),
            )
        )


class PairsTrainer(_TrainerComponent):
    """Trains a user module's `run_fn` on dynamic pairs, re-paired every epoch.

    Args:
      examples: the `Examples` of record sets `x` and `y`.
      offset_index: their `OffsetIndex`.
      pair_index: the `PairIndex` (the valid `y` of each `x`, or their groups).
      batch_size: pairs per batch.
      num_epochs: epochs to train.
      input_options: `PairsInputOptions`, or its fields as a dict (`image` required).
      module_path, module_file, anomalies, transform_graph, schema, seed, train_split,
        eval_split, custom_config, checkpoint_every_steps, distribution: as both trainers take
        them (see `_TrainerComponent`; exactly one of `module_path` and `module_file`).
      noise_examples, rir_examples: the `examples` of MaterializeAudio runs of noise clips and
        of room impulse responses, for input option `augment`'s noise / reverb.

    Raises:
      ValueError: a bad setting or input option, named (a misspelt option with "did you mean").
      TypeError: a channel or parameter the spec requires is missing or None, or options of the
        other trainer.

    Example:

        trainer = PairsTrainer(
            materialize.outputs["examples"],
            materialize.outputs["offset_index"],
            materialize.outputs["pair_index"],
            batch_size=32,
            num_epochs=3,
            input_options=PairsInputOptions(image={"height": 16, "width": 16, "channels": 1}),
            module_path="tfx_dynamic_inputs.trainer_modules.cyclegan_trainer",
        )
    """

    SPEC_CLASS = PairsTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.PairsExecutor)
    _OPTIONS_CLASS = trainer_input_options.PairsInputOptions

    def __init__(
        self,
        examples: types.BaseChannel,
        offset_index: types.BaseChannel,
        pair_index: types.BaseChannel,
        *,
        batch_size: int,
        num_epochs: int,
        input_options: trainer_input_options.PairsInputOptions | Mapping[str, Any],
        module_path: str | None = None,
        module_file: str | None = None,
        anomalies: types.BaseChannel | None = None,
        transform_graph: types.BaseChannel | None = None,
        schema: types.BaseChannel | None = None,
        seed: int | None = None,
        train_split: str | None = None,
        eval_split: str | None = None,
        custom_config: Mapping[str, Any] | None = None,
        checkpoint_every_steps: int | None = None,
        distribution: str | None = None,
    ):
        super().__init__(
            {keys.PAIR_INDEX_KEY: pair_index, keys.BATCH_SIZE_KEY: batch_size},
            examples=examples,
            offset_index=offset_index,
            num_epochs=num_epochs,
            input_options=input_options,
            module_path=module_path,
            module_file=module_file,
            anomalies=anomalies,
            transform_graph=transform_graph,
            schema=schema,
            seed=seed,
            train_split=train_split,
            eval_split=eval_split,
            custom_config=custom_config,
            checkpoint_every_steps=checkpoint_every_steps,
            distribution=distribution,
        )


class ClassBalancedTrainer(_TrainerComponent):
    """Trains a user module's `run_fn` on class-balanced batches, re-planned every epoch.

    Args:
      examples: the `Examples` (audio records, or any `tf.train.Example`s parsed with input
        option `feature_spec` / `apply_transform`).
      offset_index: their `OffsetIndex`.
      class_index: the `ClassIndex` (each record's class).
      n_classes_per_batch: classes in a batch.
      n_samples_per_class: records of each of them in a batch.
      num_epochs: epochs to train.
      input_options: `ClassBalancedInputOptions`, or its fields as a dict (None: the defaults).
      module_path, module_file, anomalies, transform_graph, schema, seed, train_split,
        eval_split, custom_config, checkpoint_every_steps, distribution: as both trainers take
        them (see `_TrainerComponent`; exactly one of `module_path` and `module_file`).
      mixed_class_index: the `ClassIndex` outputs of more runs (other MaterializeAudio
        executions: a channel, or a list of them, joined into one) mixed with this run by
        weight (input options `run_weights`, `mix_weighting`): classes namespaced by run, the
        model's class count theirs all (`tfx_dynamic_inputs.inputs.MixedClassBalancedSampler`);
        the eval split is this run's.

    Raises:
      ValueError: a bad setting or input option, named (a misspelt option with "did you
        mean"), or a feature spec without the channel it reads.
      TypeError: a channel or parameter the spec requires is missing or None, or options of the
        other trainer.

    Example:

        trainer = ClassBalancedTrainer(
            materialize.outputs["examples"],
            materialize.outputs["offset_index"],
            materialize.outputs["class_index"],
            n_classes_per_batch=8,
            n_samples_per_class=4,
            num_epochs=12,
            input_options=ClassBalancedInputOptions(epoch_mode="samples"),
            module_path="tfx_dynamic_inputs.trainer_modules.speaker_trainer",
            eval_split="eval",
        )
    """

    SPEC_CLASS = ClassBalancedTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.ClassBalancedExecutor)
    _OPTIONS_CLASS = trainer_input_options.ClassBalancedInputOptions

    def __init__(
        self,
        examples: types.BaseChannel,
        offset_index: types.BaseChannel,
        class_index: types.BaseChannel,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        num_epochs: int,
        input_options: trainer_input_options.ClassBalancedInputOptions
        | Mapping[str, Any]
        | None = None,
        module_path: str | None = None,
        module_file: str | None = None,
        anomalies: types.BaseChannel | None = None,
        transform_graph: types.BaseChannel | None = None,
        schema: types.BaseChannel | None = None,
        seed: int | None = None,
        train_split: str | None = None,
        eval_split: str | None = None,
        custom_config: Mapping[str, Any] | None = None,
        checkpoint_every_steps: int | None = None,
        distribution: str | None = None,
        mixed_class_index: types.BaseChannel | Sequence[types.BaseChannel] | None = None,
        noise_examples: types.BaseChannel | None = None,
        rir_examples: types.BaseChannel | None = None,
    ):
        if mixed_class_index is not None and not isinstance(mixed_class_index, types.BaseChannel):
            # Several MaterializeAudio outputs: one channel of all their ClassIndex artifacts.
            mixed_class_index = union_channels(list(mixed_class_index))
        super().__init__(
            {
                keys.CLASS_INDEX_KEY: class_index,
                keys.N_CLASSES_PER_BATCH_KEY: n_classes_per_batch,
                keys.N_SAMPLES_PER_CLASS_KEY: n_samples_per_class,
                keys.MIXED_CLASS_INDEX_KEY: mixed_class_index,
                keys.NOISE_EXAMPLES_KEY: noise_examples,
                keys.RIR_EXAMPLES_KEY: rir_examples,
            },
            examples=examples,
            offset_index=offset_index,
            num_epochs=num_epochs,
            input_options=input_options,
            module_path=module_path,
            module_file=module_file,
            anomalies=anomalies,
            transform_graph=transform_graph,
            schema=schema,
            seed=seed,
            train_split=train_split,
            eval_split=eval_split,
            custom_config=custom_config,
            checkpoint_every_steps=checkpoint_every_steps,
            distribution=distribution,
        )
