"""The standard-TFX composition: re-sampled class-balanced training on ExampleGen's Examples.

    ExampleGen -> StatisticsGen -> SchemaGen -> Transform -> IndexExamples
        -> ClassBalancedTrainer (over Transform's transformed_examples)
        -> ModelGate -> Pusher (as the demo pipelines end: `common.gate_and_push`)

ExampleGen reads `input_base` in the config's `input_format` (`example_gen.INPUT_FORMATS`):
TFRecord files of `tf.train.Example` (ImportExampleGen, the default), CSV files with a header
(CsvExampleGen) or Parquet files (FileBasedExampleGen); the node's id is its class name
(`example_gen.node_id`).

Transform's GZIP-compressed `transformed_examples` cannot be read by record number; IndexExamples
writes them as indexed shards with a class index from `label_feature`, and ClassBalancedTrainer
draws exact `n_classes_per_batch x n_samples_per_class` batches of them every epoch, parsed with
Transform's `transformed_feature_spec()`, and hands `run_fn` the `tf_transform_output` and the
schema (for a serving signature over raw Examples). ModelGate blesses the model by a held-out
metric `run_fn` returns, against the latest blessed model; Pusher pushes a blessed one.

`standard_components(config, run)` returns the components by role (`StandardComponents`), so a
pipeline can wire more to them (say a standard Evaluator on `trainer.outputs["model"]`);
`create_pipeline(config, run, extra_components)` assembles the components and any others into
one TFX pipeline with `run`'s root, cache, sqlite ML Metadata and Beam arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tfx.components.schema_gen.component import SchemaGen
from tfx.components.statistics_gen.component import StatisticsGen
from tfx.components.transform.component import Transform
from tfx.dsl.components.base import base_node
from tfx.orchestration.pipeline import Pipeline
from tfx.types import standard_component_specs

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.evaluator_component import ModelGate
from tfx_dynamic_inputs.evaluator_component.decision import Rule
from tfx_dynamic_inputs.index_component import IndexExamples
from tfx_dynamic_inputs.inputs.arguments import choice, int_argument
from tfx_dynamic_inputs.inputs.class_plan import EPOCH_MODES
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.pipeline import common, config_checks, example_gen
from tfx_dynamic_inputs.pipeline.config import RunConfig
from tfx_dynamic_inputs.trainer_component import ClassBalancedInputOptions, ClassBalancedTrainer
from tfx_dynamic_inputs.trainer_component.input_options import TRANSFORMED_SPEC


@dataclasses.dataclass(frozen=True)
class StandardConfig:
    """One standard pipeline.

    `input_base`: a folder of input files in `input_format`, one of `example_gen.INPUT_FORMATS`:
    "tfrecord" (TFRecord files of `tf.train.Example`), "csv" (CSV files with a header line, a
    column per feature) or "parquet" (Parquet files); ExampleGen splits them into `train` and
    `eval`, 2:1 by hash (another format is a ValueError here, naming the formats).
    `preprocessing_fn`: the importable path of Transform's `preprocessing_fn`
    (`package.module.function`), whose outputs keep `label_feature` (an int64 class id or a bytes
    class name per example). `trainer_module`: the importable module of the trainer's `run_fn`.
    Records without a usable label are IndexExamples' rejects, at most `max_reject_fraction` of
    them (None: its default, 0.1).

    The gate, as the demo configs': `blessing_metric` is a held-out metric `run_fn` returns
    (which way is better: `blessing_direction`), within `blessing_threshold` (None: any) and at
    most `blessing_tolerance` worse than the latest blessed model's; Pusher pushes to
    `serving_dir` (None: `<pipeline root>/serving/<pipeline name>`).

    Every field is checked when the config is built, with the bound of the component or library
    that takes it (`config_checks`, `inputs.arguments`, ModelGate's `Rule`): TypeError or
    ValueError, one line naming `StandardConfig.<field>`.
    """

    input_base: str
    preprocessing_fn: str
    trainer_module: str
    label_feature: str
    n_classes_per_batch: int
    n_samples_per_class: int
    blessing_metric: str
    pipeline_name: str = "standard-class-balanced"
    num_epochs: int = 5
    seed: int = 0
    epoch_mode: str = "samples"
    train_split: str = "train"
    eval_split: str | None = "eval"
    num_shards: int | None = None
    max_reject_fraction: float | None = None
    custom_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    blessing_direction: str = keys.LOWER_IS_BETTER
    blessing_threshold: float | None = None
    blessing_tolerance: float = 0.0
    serving_dir: str | None = None
    input_format: str = example_gen.TFRECORD

    def __post_init__(self):
        # TFX is loaded with this module: the library's own checks are called where they exist.
        config_checks.check_types(self)
        for name in ("input_base", "label_feature", "train_split", "eval_split"):
            config_checks.not_empty(f"StandardConfig.{name}", getattr(self, name))
        config_checks.check_module("StandardConfig.preprocessing_fn", self.preprocessing_fn)
        config_checks.check_module("StandardConfig.trainer_module", self.trainer_module)
        config_checks.check_pipeline_name("StandardConfig.pipeline_name", self.pipeline_name)
        config_checks.integer("StandardConfig.seed", self.seed, *config_checks.SEED_RANGE)
        config_checks.integer("StandardConfig.num_epochs", self.num_epochs, 1)
        try:
            int_argument("n_classes_per_batch", self.n_classes_per_batch, 1)
            int_argument("n_samples_per_class", self.n_samples_per_class, 1)
            choice("epoch_mode", self.epoch_mode, EPOCH_MODES)
            example_gen.check_input_format(self.input_format)
        except ValueError as error:  # each message starts with the field's name
            raise ValueError(f"StandardConfig.{error}") from None
        if self.max_reject_fraction is not None:
            config_checks.reject_fraction(
                "StandardConfig.max_reject_fraction", self.max_reject_fraction
            )
        if self.num_shards is not None:
            try:
                ShardingConfig(num_shards=self.num_shards).validate()
            except MaterializeError as error:
                raise ValueError(f"StandardConfig.num_shards: {error}") from None
        config_checks.not_empty("StandardConfig.blessing_metric", self.blessing_metric)
        try:
            Rule(
                self.blessing_metric,
                self.blessing_direction,
                self.blessing_threshold,
                self.blessing_tolerance,
            )
        except ValueError as error:  # "direction ...", "threshold ...", "tolerance ..."
            raise ValueError(f"StandardConfig.blessing_{error}") from None
        config_checks.not_empty("StandardConfig.serving_dir", self.serving_dir)
        if self.eval_split == self.train_split:
            raise ValueError(
                f"StandardConfig.eval_split is train_split ({self.train_split!r}): the gate's "
                "metric would be measured on the training data"
            )


class StandardComponents(NamedTuple):
    """The components of the standard pipeline, in pipeline order."""

    example_gen: base_node.BaseNode
    statistics_gen: base_node.BaseNode
    schema_gen: base_node.BaseNode
    transform: base_node.BaseNode
    index_examples: IndexExamples
    trainer: ClassBalancedTrainer
    baseline_resolver: base_node.BaseNode
    model_gate: ModelGate
    pusher: base_node.BaseNode


def standard_components(config: StandardConfig, run: RunConfig) -> StandardComponents:
    """The components of `config`'s pipeline, wired to each other.

    Args:
      config: the pipeline's settings.
      run: the run's settings (where Pusher pushes when `config.serving_dir` is None).

    Returns:
      The components by role; the trainer is a `ClassBalancedTrainer` over Transform's
      `transformed_examples`, parsed with its `transformed_feature_spec()`.

    Raises:
      ValueError: a bad trainer or gate setting in `config`, named.

    Example:

        components = standard_components(config, run)
        evaluator = tfx.components.Evaluator(model=components.trainer.outputs["model"], ...)
    """
    reader = example_gen.example_gen(config.input_format, config.input_base)
    examples = reader.outputs[standard_component_specs.EXAMPLES_KEY]
    statistics_gen = StatisticsGen(examples=examples)
    schema_gen = SchemaGen(
        statistics=statistics_gen.outputs[standard_component_specs.STATISTICS_KEY]
    )
    schema = schema_gen.outputs[standard_component_specs.SCHEMA_KEY]
    transform = Transform(
        examples=examples, schema=schema, preprocessing_fn=config.preprocessing_fn
    )
    index_examples = IndexExamples(
        examples=transform.outputs[standard_component_specs.TRANSFORMED_EXAMPLES_KEY],
        label_feature=config.label_feature,
        num_shards=config.num_shards,
        max_reject_fraction=config.max_reject_fraction,
    )
    trainer = ClassBalancedTrainer(
        examples=index_examples.outputs[keys.INDEXED_EXAMPLES_KEY],
        offset_index=index_examples.outputs[keys.OFFSET_INDEX_KEY],
        class_index=index_examples.outputs[keys.CLASS_INDEX_KEY],
        transform_graph=transform.outputs[standard_component_specs.TRANSFORM_GRAPH_KEY],
        schema=schema,
        module_path=config.trainer_module,
        num_epochs=config.num_epochs,
        seed=config.seed,
        n_classes_per_batch=config.n_classes_per_batch,
        n_samples_per_class=config.n_samples_per_class,
        train_split=config.train_split,
        eval_split=config.eval_split,
        input_options=ClassBalancedInputOptions(
            feature_spec=TRANSFORMED_SPEC, epoch_mode=config.epoch_mode
        ),
        custom_config=dict(config.custom_config),
    )
    return StandardComponents(
        reader,
        statistics_gen,
        schema_gen,
        transform,
        index_examples,
        trainer,
        *common.gate_and_push(
            trainer.outputs[keys.MODEL_KEY], **common.gate_arguments(config, run)
        ),
    )


def create_pipeline(
    config: StandardConfig,
    run: RunConfig,
    extra_components: Sequence[base_node.BaseNode] = (),
    components: StandardComponents | None = None,
) -> Pipeline:
    """The TFX pipeline `config.pipeline_name`: `components`, then `extra_components`.

    Args:
      config: the pipeline's settings.
      run: the run's settings.
      extra_components: more nodes, after the standard ones.
      components: the standard components (default `standard_components(config, run)`; pass
        them when `extra_components` are wired to them).

    Returns:
      The TFX pipeline.

    Example:

        create_pipeline(StandardConfig(...), RunConfig(pipeline_root="/tmp/root"))
    """
    components = components if components is not None else standard_components(config, run)
    return common.assemble(config.pipeline_name, run, [*components, *extra_components])
