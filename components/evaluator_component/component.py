"""The model gate: the standard Evaluator's blessing role, on the held-out metric the trainer
recorded.

Takes the trainer's `model` and, optionally, the latest blessed model (`baseline_model`, from
`tfx.dsl.Resolver` with `LatestBlessedModelStrategy`), reads the held-out `metric` the trainer
recorded on each (the trainers, `PairsTrainer` and `ClassBalancedTrainer`, set every metric
their `run_fn` returns as a float custom property of their `Model`: the speaker EER on
held-out speakers, the CycleGAN held-out cycle loss), and writes a standard `ModelBlessing`
(`blessing`) that the standard `Pusher` and the resolver read: the `blessed` (1/0),
`current_model`, `current_model_id`, `baseline_model`, `baseline_model_id` and
`blessing_message` custom properties and the `BLESSED` / `NOT_BLESSED` marker file, as the
standard Evaluator writes them, plus the metric values and an evaluation record
(`evaluation.json`). See `decision` for the rule.

The metrics are compared as ML Metadata holds them: its sqlite store keeps 6 significant digits
of a double, so a tolerance below that resolution means "not worse at that resolution".
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.evaluator_component import decision, executor


class ModelGateSpec(types.ComponentSpec):
    """`ModelGate`'s spec: the rule's parameters, the model and baseline, the blessing."""

    PARAMETERS = {
        keys.METRIC_KEY: ExecutionParameter(type=str),
        keys.DIRECTION_KEY: ExecutionParameter(type=str),
        keys.THRESHOLD_KEY: ExecutionParameter(type=float, optional=True),
        keys.TOLERANCE_KEY: ExecutionParameter(type=float),
    }
    INPUTS = {
        keys.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
        keys.BASELINE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        keys.BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
    }


class ModelGate(base_component.BaseComponent):
    """Blesses the trainer's model when its held-out metric passes the rule (see `decision`).

    Args:
      model: the trainer's `Model`.
      metric: the held-out metric the trainer recorded on its model (a float custom property).
      baseline_model: the latest blessed model (a `LatestBlessedModelStrategy` resolver's), or
        None.
      direction: `lower_is_better` or `higher_is_better`.
      threshold: the value the metric must not be worse than (None: any).
      tolerance: how much worse than the baseline's the metric may be.

    Raises:
      ValueError: a bad rule (direction, threshold, tolerance), when the pipeline is built.

    Example:

        gate = ModelGate(
            model=trainer.outputs["model"],
            baseline_model=resolver.outputs["model"],
            metric="eer",
            threshold=0.3,
        )
    """

    SPEC_CLASS = ModelGateSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        *,
        metric: str,
        baseline_model: types.BaseChannel | None = None,
        direction: str = keys.LOWER_IS_BETTER,
        threshold: float | None = None,
        tolerance: float = 0.0,
    ):
        # Checked here too, so a bad setting fails when the pipeline is built, not at run time.
        rule = decision.Rule(
            metric=metric,
            direction=direction,
            threshold=None if threshold is None else float(threshold),
            tolerance=float(tolerance),
        )
        super().__init__(
            spec=ModelGateSpec(
                model=model,
                baseline_model=baseline_model,
                metric=rule.metric,
                direction=rule.direction,
                threshold=rule.threshold,
                tolerance=rule.tolerance,
                blessing=types.Channel(type=standard_artifacts.ModelBlessing),
            )
        )
