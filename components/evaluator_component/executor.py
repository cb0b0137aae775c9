"""Executor of the model gate: both models' held-out metric in, a standard ModelBlessing out."""

from __future__ import annotations

import json
import os
from typing import Any

from tfx import types
from tfx.components.evaluator import constants
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils

from components import component_keys as keys
from components.evaluator_component import decision

EVALUATION_FILE = "evaluation.json"
# Custom properties of the blessing beside the standard Evaluator's: the metric's name, the
# model's value and the baseline's (absent without a baseline, or one that records none).
METRIC_PROPERTY = "metric"
METRIC_VALUE_PROPERTY = "metric_value"
BASELINE_METRIC_VALUE_PROPERTY = "baseline_metric_value"


class Executor(base_executor.BaseExecutor):
    """Reads the metric of `model` and `baseline_model`, decides, writes the blessing."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        threshold = exec_properties.get(keys.THRESHOLD_KEY)
        rule = decision.Rule(
            metric=exec_properties[keys.METRIC_KEY],
            direction=exec_properties[keys.DIRECTION_KEY],
            threshold=None if threshold is None else float(threshold),
            tolerance=float(exec_properties[keys.TOLERANCE_KEY]),
        )
        model = artifact_utils.get_single_instance(input_dict[keys.MODEL_KEY])
        baselines = input_dict.get(keys.BASELINE_MODEL_KEY) or []
        if len(baselines) > 1:
            raise ValueError(f"expected at most one baseline model, got {len(baselines)}")
        current = scored(model, rule.metric)
        baseline = scored(baselines[0], rule.metric, required=False) if baselines else None
        verdict = decision.decide(rule, current, baseline)

        blessing = artifact_utils.get_single_instance(output_dict[keys.BLESSING_KEY])
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
    """`model` with its value of `metric`, a float custom property the trainer set; a model
    without it is an error where `required`, else scored None."""
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
    LatestBlessedModelStrategy read), and the metric values."""
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
