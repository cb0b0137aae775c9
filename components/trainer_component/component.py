"""The trainer component: the standard Trainer's role, on inputs re-sampled every epoch.

Takes the materialize component's `Examples` and index artifacts, builds dynamic-pair
(`input_kind="dynamic_pairs"`, needs `pair_index`) or class-balanced
(`input_kind="class_balanced"`, needs `class_index`) inputs, and calls the user module's
`run_fn(fn_args)` like the standard Trainer (see `FnArgs` for what it gets). `run_fn` returns
its final metrics, which land in `<model_run>/metrics.json` and as custom properties of both
outputs. Given ExampleValidator's `anomalies`, the component refuses to train on splits with
anomalies.

`input_options` (a `PairsInputOptions` / `ClassBalancedInputOptions`, or their fields as a dict:
pairing `strategy`, `image` size, `features` for audio, `backend`, ...) go to the samplers and
are checked when the component is built; `custom_config` (a JSON object) goes to `run_fn`.

Like the standard Trainer it takes Transform's `transform_graph` and a `schema`, and hands
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
from collections.abc import Mapping
from typing import Any

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from components import artifacts
from components import component_keys as keys
from components.trainer_component import executor, training_inputs
from components.trainer_component import input_options as trainer_input_options


class ResampledTrainerSpec(types.ComponentSpec):
    PARAMETERS = {
        keys.INPUT_KIND_KEY: ExecutionParameter(type=str),
        keys.MODULE_PATH_KEY: ExecutionParameter(type=str, optional=True),
        keys.MODULE_FILE_KEY: ExecutionParameter(type=str, optional=True),
        keys.NUM_EPOCHS_KEY: ExecutionParameter(type=int),
        keys.SEED_KEY: ExecutionParameter(type=int, optional=True),
        keys.BATCH_SIZE_KEY: ExecutionParameter(type=int, optional=True),
        keys.N_CLASSES_PER_BATCH_KEY: ExecutionParameter(type=int, optional=True),
        keys.N_SAMPLES_PER_CLASS_KEY: ExecutionParameter(type=int, optional=True),
        keys.TRAIN_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
        keys.EVAL_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
        keys.INPUT_OPTIONS_KEY: ExecutionParameter(type=str, optional=True),
        keys.CUSTOM_CONFIG_KEY: ExecutionParameter(type=str, optional=True),
        keys.CHECKPOINT_EVERY_STEPS_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        keys.OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
        keys.PAIR_INDEX_KEY: ChannelParameter(type=artifacts.PairIndex, optional=True),
        keys.CLASS_INDEX_KEY: ChannelParameter(type=artifacts.ClassIndex, optional=True),
        keys.ANOMALIES_KEY: ChannelParameter(
            type=standard_artifacts.ExampleAnomalies, optional=True
        ),
        keys.TRANSFORM_GRAPH_KEY: ChannelParameter(
            type=standard_artifacts.TransformGraph, optional=True
        ),
        keys.SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
    }
    OUTPUTS = {
        keys.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        keys.MODEL_RUN_KEY: ChannelParameter(type=standard_artifacts.ModelRun),
    }


class ResampledTrainer(base_component.BaseComponent):
    """Trains a user module's `run_fn` on dynamic-pair or class-balanced inputs."""

    SPEC_CLASS = ResampledTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        offset_index: types.BaseChannel,
        *,
        input_kind: str,
        num_epochs: int,
        module_path: str | None = None,
        module_file: str | None = None,
        pair_index: types.BaseChannel | None = None,
        class_index: types.BaseChannel | None = None,
        anomalies: types.BaseChannel | None = None,
        transform_graph: types.BaseChannel | None = None,
        schema: types.BaseChannel | None = None,
        seed: int | None = None,
        batch_size: int | None = None,
        n_classes_per_batch: int | None = None,
        n_samples_per_class: int | None = None,
        train_split: str | None = None,
        eval_split: str | None = None,
        input_options: trainer_input_options.InputOptions | Mapping[str, Any] | None = None,
        custom_config: Mapping[str, Any] | None = None,
        checkpoint_every_steps: int | None = None,
    ):
        if input_kind not in keys.INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {keys.INPUT_KINDS}, got {input_kind!r}")
        if bool(module_path) == bool(module_file):
            raise ValueError("give exactly one of module_path and module_file")
        if input_kind == keys.DYNAMIC_PAIRS and (pair_index is None or batch_size is None):
            raise ValueError("input_kind='dynamic_pairs' needs pair_index and batch_size")
        if input_kind == keys.CLASS_BALANCED and (
            class_index is None or n_classes_per_batch is None or n_samples_per_class is None
        ):
            raise ValueError(
                "input_kind='class_balanced' needs class_index, n_classes_per_batch and "
                "n_samples_per_class"
            )
        if checkpoint_every_steps is not None and checkpoint_every_steps < 0:
            raise ValueError(
                f"checkpoint_every_steps must be >= 0 (0: at epoch ends only), got "
                f"{checkpoint_every_steps}"
            )
        # Typed and checked here, in the pipeline file: a misspelt option names itself now.
        options = trainer_input_options.input_options(input_kind, input_options)
        spec_source = getattr(options, training_inputs.FEATURE_SPEC_OPTION, None)
        applies = getattr(options, training_inputs.APPLY_TRANSFORM_OPTION, False)
        if (applies or spec_source == training_inputs.TRANSFORMED_SPEC) and transform_graph is None:
            raise ValueError(
                "input_options apply_transform / feature_spec='transformed' need transform_graph"
            )
        if spec_source == training_inputs.SCHEMA_SPEC and schema is None:
            raise ValueError("input_options feature_spec='schema' needs schema")
        super().__init__(
            spec=ResampledTrainerSpec(
                examples=examples,
                offset_index=offset_index,
                pair_index=pair_index,
                class_index=class_index,
                anomalies=anomalies,
                transform_graph=transform_graph,
                schema=schema,
                input_kind=input_kind,
                module_path=module_path,
                module_file=module_file,
                num_epochs=num_epochs,
                seed=seed,
                batch_size=batch_size,
                n_classes_per_batch=n_classes_per_batch,
                n_samples_per_class=n_samples_per_class,
                train_split=train_split,
                eval_split=eval_split,
                input_options=trainer_input_options.to_json(options),
                custom_config=json.dumps(dict(custom_config), sort_keys=True)
                if custom_config
                else None,
                checkpoint_every_steps=checkpoint_every_steps,
                model=types.Channel(type=standard_artifacts.Model),
                model_run=types.Channel(type=standard_artifacts.ModelRun),
            )
        )
