"""The model gate's rule and decision, apart from TFX: bless a model or not from its held-out
metric and, when there is one, the latest blessed model's.

A model is blessed when its metric is within the absolute `threshold` (if any) and, against a
baseline, at most `tolerance` worse than the baseline's (0: not worse). Which way is worse
follows `direction`. The first model of a pipeline has no baseline: only the threshold applies
(the standard Evaluator calls this "rubber stamping").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tfx_dynamic_inputs import component_keys as keys


@dataclasses.dataclass(frozen=True)
class Rule:
    """What the gate checks: `metric` (a metric the trainer recorded on the model), its
    `direction`, the absolute `threshold` (None: none) and the `tolerance` against the
    baseline."""

    metric: str
    direction: str = keys.LOWER_IS_BETTER
    threshold: float | None = None
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("the gate needs the name of the metric it compares")
        if self.direction not in keys.DIRECTIONS:
            raise ValueError(f"direction must be one of {keys.DIRECTIONS}, got {self.direction!r}")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be finite and >= 0, got {self.tolerance}")

    def regression(self, value: float, baseline: float) -> float:
        """How much worse `value` is than `baseline` (negative: better).

        Args:
            value: the model's metric.
            baseline: the baseline's metric.

        Returns:
            `value - baseline` when lower is better, else `baseline - value`.

        Example:
            Rule("eer").regression(0.12, 0.10)  # about 0.02: lower is better, so worse by 0.02
        """
        difference = value - baseline
        return difference if self.direction == keys.LOWER_IS_BETTER else -difference

    def beyond_threshold(self, value: float) -> bool:
        """Whether `value` fails the absolute threshold (never, without one).

        Args:
            value: the model's metric.

        Returns:
            True when it is above the threshold (lower is better) or below it (higher is better).
        """
        if self.threshold is None:
            return False
        if self.direction == keys.LOWER_IS_BETTER:
            return value > self.threshold
        return value < self.threshold


@dataclasses.dataclass(frozen=True)
class Scored:
    """A model artifact (`uri`, ML Metadata `id`) and its value of the rule's metric (None: it
    records none, as a baseline from before the metric was chosen)."""

    uri: str
    id: int
    value: float | None


@dataclasses.dataclass(frozen=True)
class Decision:
    """Blessed or not; `reason` says why in a few words, `message` in one line with the
    metric values (what the blessing's `blessing_message` property holds)."""

    blessed: bool
    reason: str
    message: str


def decide(rule: Rule, model: Scored, baseline: Scored | None) -> Decision:
    """Whether `rule` blesses `model` against `baseline` (None: no blessed model yet).

    A baseline without the metric cannot be compared: only the threshold applies (refusing
    would refuse every later model too, as the latest blessed model would never change).

    Args:
        rule: what the gate checks.
        model: the candidate and its metric.
        baseline: the latest blessed model and its metric, or None.

    Returns:
        The `Decision`.

    Raises:
        ValueError: when the model has no value of the metric, or either value is not finite.

    Example:
        decide(Rule("eer", threshold=0.3), Scored("/m/2", 2, 0.12), Scored("/m/1", 1, 0.15)).blessed
        # True: better by 0.03
    """
    for scored in (model, baseline):
        if scored is not None and scored.value is not None and not math.isfinite(scored.value):
            raise ValueError(f"{rule.metric} of the model at {scored.uri} is {scored.value}")
    if model.value is None:
        raise ValueError(f"the model at {model.uri} has no {rule.metric} to judge it by")
    within = (
        "no threshold"
        if rule.threshold is None
        else f"within the threshold {_number(rule.threshold)}"
    )
    if rule.beyond_threshold(model.value):
        side = "above" if rule.direction == keys.LOWER_IS_BETTER else "below"
        blessed, reason = False, f"{side} the threshold {_number(rule.threshold)}"
    elif baseline is None:
        blessed, reason = True, f"the first blessed model; {within}"
    elif baseline.value is None:
        blessed = True
        reason = f"the latest blessed model records no {rule.metric}, not compared; {within}"
    elif baseline.id == model.id:
        # The trainer was served from the cache: the latest blessed model is this one.
        blessed, reason = True, "the baseline is this same model (its trainer run was cached)"
    else:
        regression = rule.regression(model.value, baseline.value)
        blessed = regression <= rule.tolerance
        if regression < 0:
            reason = f"better by {_number(-regression)}"
        elif regression == 0:
            reason = "equal"
        else:
            how = "within" if blessed else "more than"
            reason = (
                f"worse by {_number(regression)}, {how} the tolerance {_number(rule.tolerance)}"
            )
    if baseline is None:
        values = f"{rule.metric} {_number(model.value)}, no baseline"
    elif baseline.value is None:
        values = f"{rule.metric} {_number(model.value)} vs a baseline without it"
    else:
        values = f"{rule.metric} {_number(model.value)} vs baseline {_number(baseline.value)}"
    verdict = "blessed" if blessed else "not blessed"
    return Decision(blessed, reason, f"{verdict} ({values}: {reason})")


def evaluation_record(
    rule: Rule, model: Scored, baseline: Scored | None, decision: Decision
) -> dict[str, Any]:
    """The JSON record the gate writes beside its blessing: rule, both models, decision.

    Args:
        rule: the gate's rule.
        model: the candidate.
        baseline: the baseline, or None.
        decision: the gate's decision.

    Returns:
        A JSON-ready dict.
    """
    return {
        "metric": rule.metric,
        "direction": rule.direction,
        "threshold": rule.threshold,
        "tolerance": rule.tolerance,
        "model": dataclasses.asdict(model),
        "baseline": None if baseline is None else dataclasses.asdict(baseline),
        "blessed": decision.blessed,
        "reason": decision.reason,
        "message": decision.message,
    }


def _number(value: float | None) -> str:
    return f"{value:.4g}"
