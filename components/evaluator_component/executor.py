"""Executor of the model gate: both models' held-out metric in, a standard ModelBlessing out."""

from __future__ import annotations

import json
import os

from tfx import types
from tfx.components.evaluator import constants
from tfx.dsl.io import fileio

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs import execution
from tfx_dynamic_inputs.evaluator_component import decision

EVALUATION_FILE = "evaluation.json"
# Custom properties of the blessing beside the standard Evaluator's: the metric's name, the
# model's value and the baseline's (absent without a baseline, or one that records none).
METRIC_PROPERTY = "metric"
METRIC_VALUE_PROPERTY = "metric_value"
BASELINE_METRIC_VALUE_PROPERTY = "baseline_metric_value"


class Executor(execution.LoggedExecutor):
    """Reads the metric of `model` and `baseline_model`, decides, writes the blessing."""

    def execute(self, run: execution.Execution) -> None:
        """Scores the model (and the baseline), decides, and writes and marks the blessing.

        Args:
          run: the execution: `model`, at most one `baseline_model`, the rule's parameters.

        Raises:
          ValueError: more than one baseline, a model without the metric, or a bad rule.
        """
        threshold = run.properties.get(keys.THRESHOLD_KEY)
        rule = decision.Rule(
            metric=run.properties[keys.METRIC_KEY],
            direction=run.properties[keys.DIRECTION_KEY],
            threshold=None if threshold is None else float(threshold),
            tolerance=float(run.properties[keys.TOLERANCE_KEY]),
        )
        model = run.input(keys.MODEL_KEY)
        baselines = run.inputs.get(keys.BASELINE_MODEL_KEY) or []
        if len(baselines) > 1:
            raise ValueError(f"expected at most one baseline model, got {len(baselines)}")
        current = scored(model, rule.metric)
        baseline = scored(baselines[0], rule.metric, required=False) if baselines else None
        verdict = decision.decide(rule, current, baseline)

        blessing = run.output(keys.BLESSING_KEY)
        # The Kubeflow v2 entrypoint does not create output folders; LocalDagRunner does.
        fileio.makedirs(blessing.uri)
        with fileio.open(os.path.join(blessing.uri, EVALUATION_FILE), "w") as f:
            record = decision.evaluation_record(rule, current, baseline, verdict)
            f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        marker = constants.BLESSED_FILE_NAME if verdict.blessed else constants.NOT_BLESSED_FILE_NAME
        with fileio.open(os.path.join(blessing.uri, marker), "w") as f:
            f.write("")
        mark_blessing(blessing, rule.metric, current, baseline, verdict)


def scored(model: types.Artifact, metric: str, *, required: bool = True) -> decision.Scored:
    """`model` with its value of `metric`, a float custom property the trainer set.

    Args:
      model: a `Model` artifact.
      metric: the metric's name.
      required: whether a model without the metric is an error (else it is scored None).

    Returns:
      The model's URI, id and value.

    Raises:
      ValueError: `required` and the model records no `metric` (its properties named).
    """
    if model.has_custom_property(metric):
        return decision.Scored(model.uri, model.id, model.get_float_custom_property(metric))
    if required:
        recorded = sorted(model.mlmd_artifact.custom_properties)
        raise ValueError(
            f"the model at {model.uri} records no metric {metric!r} (its custom properties: "
            f"{', '.join(recorded) or 'none'}); the trainer module's run_fn must return it"
        )
    return decision.Scored(model.uri, model.id, None)


def mark_blessing(
    blessing: types.Artifact,
    metric: str,
    model: decision.Scored,
    baseline: decision.Scored | None,
    verdict: decision.Decision,
) -> None:
    """Sets the custom properties the standard Evaluator sets (which Pusher and
    LatestBlessedModelStrategy read), and the metric values.

    Args:
      blessing: the `ModelBlessing` to mark.
      metric: the metric's name.
      model: the scored model.
      baseline: the scored baseline, or None.
      verdict: the decision.
    """
    blessing.set_int_custom_property(
        constants.ARTIFACT_PROPERTY_BLESSED_KEY,
        constants.BLESSED_VALUE if verdict.blessed else constants.NOT_BLESSED_VALUE,
    )
    blessing.set_string_custom_property(
        constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, model.uri
    )
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, model.id)
    if baseline is not None:
        blessing.set_string_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baseline.uri
        )
        blessing.set_int_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline.id
        )
        if baseline.value is not None:
            blessing.set_float_custom_property(BASELINE_METRIC_VALUE_PROPERTY, baseline.value)
    blessing.set_string_custom_property(
        constants.ARTIFACT_PROPERTY_BLESSING_MESSAGE_KEY, verdict.message
    )
    blessing.set_string_custom_property(METRIC_PROPERTY, metric)
    blessing.set_float_custom_property(METRIC_VALUE_PROPERTY, model.value)
