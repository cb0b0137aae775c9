"""TFX's standard Evaluator (TFMA) on the standard pipeline's trained model.

The trainer module exports its model with `models.transform_serving.export_transform_model`:
``serving_default`` takes serialized raw Examples, ``transform_features`` gives their
transformed features. The Evaluator reads ExampleGen's raw Examples of one split (`eval`, which
ExampleGen held out of training), and TFMA runs ``transform_features`` on them first
(`ModelSpec.preprocessing_function_names`) to find the label among the transformed features,
then ``serving_default`` for the predictions:

    components = standard_components(config, run)
    evaluator = standard_evaluator(components, EvaluatorConfig(label_key="label"))
    create_pipeline(config, run, [evaluator], components)

The metrics are written to the Evaluator's `evaluation` artifact (`tfma.load_metrics(uri)`).
TFMA reads an Example without a label value as class 0 (its metrics see the labels padded): the
standard pipeline's IndexExamples rejects such Examples from training, but ExampleGen's split
keeps them, so evaluate a split whose Examples are labelled for an accuracy of the labelled ones.
With no thresholds in the config the Evaluator validates nothing and writes no blessing:
ModelGate still decides what Pusher pushes.
"""

from __future__ import annotations

import dataclasses

import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_specs
from tfx.components.evaluator.component import Evaluator
from tfx.types import standard_component_specs

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.models.transform_serving import (
    SERVING_SIGNATURE,
    TRANSFORM_FEATURES_SIGNATURE,
)
from tfx_dynamic_inputs.pipeline.standard_pipeline import StandardComponents

EXAMPLE_COUNT = "ExampleCount"
SPARSE_CATEGORICAL_ACCURACY = "SparseCategoricalAccuracy"


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """What the Evaluator computes, and on which of ExampleGen's splits.

    `label_key`: the label among the transformed features (the standard pipeline's
    `label_feature` where `preprocessing_fn` passes it through). `prediction_key`: the
    serving signature's output the metrics read (None: its only one). `metrics`: TFMA metric
    or Keras metric class names (`tfma.MetricConfig.class_name`), checked when written as TFMA
    resolves them. `split`: ExampleGen's split to evaluate on (not empty).
    """

    label_key: str
    prediction_key: str | None = None
    metrics: tuple[str, ...] = (EXAMPLE_COUNT, SPARSE_CATEGORICAL_ACCURACY)
    split: str = "eval"

    def __post_init__(self):
        if not self.label_key:
            raise ValueError("label_key must name the transformed label feature")
        if not self.split:
            raise ValueError("split must name one of ExampleGen's splits")
        if not self.metrics:
            raise ValueError("metrics must name at least one metric")
        for name in self.metrics:
            try:
                # TFMA's own lookup (its metrics, then Keras'), as the Evaluator will do it.
                metric_specs.metric_instance(tfma.MetricConfig(class_name=name))
            except (ValueError, TypeError, AttributeError) as error:
                raise ValueError(f"metrics: {name!r} is not a TFMA or Keras metric") from error


def eval_config(config: EvaluatorConfig) -> tfma.EvalConfig:
    """The TFMA config of a model exported with `export_transform_model`.

    Args:
      config: what to compute.

    Returns:
      One model spec (raw Examples through ``transform_features`` for the label, then
      ``serving_default``), `config.metrics` over the whole split (one overall slice).

    Example:

        eval_config(EvaluatorConfig(label_key="label", prediction_key="probabilities"))
    """
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                label_key=config.label_key,
                prediction_key=config.prediction_key or "",
                signature_name=SERVING_SIGNATURE,
                preprocessing_function_names=[TRANSFORM_FEATURES_SIGNATURE],
            )
        ],
        metrics_specs=[
            tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name=m) for m in config.metrics])
        ],
        slicing_specs=[tfma.SlicingSpec()],
    )


def standard_evaluator(components: StandardComponents, config: EvaluatorConfig) -> Evaluator:
    """TFX's Evaluator on the trainer's model over ExampleGen's raw `config.split`.

    Args:
      components: the standard pipeline's components (`standard_components`).
      config: what to compute.

    Returns:
      The Evaluator (node id "Evaluator"), reading SchemaGen's schema to decode the Examples;
      pass it to `create_pipeline(config, run, [evaluator], components)`.

    Example:

        components = standard_components(config, run)
        evaluator = standard_evaluator(components, EvaluatorConfig(label_key="label"))
    """
    return Evaluator(
        examples=components.example_gen.outputs[standard_component_specs.EXAMPLES_KEY],
        model=components.trainer.outputs[keys.MODEL_KEY],
        schema=components.schema_gen.outputs[standard_component_specs.SCHEMA_KEY],
        example_splits=[config.split],
        eval_config=eval_config(config),
    )
