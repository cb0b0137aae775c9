"""`max_draws_per_record`: a cap on any record's draws in an epoch, with the plan's guarantees
kept (n_c distinct classes x n_p a batch, every usable class and record every epoch)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings

from tests.class_balanced.test_plan import (
    SETTINGS,
    make_plan,
    plan_arrays,
    plan_cases,
    row_splits_of,
)
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan


def _draws(out: dict, num_positions: int) -> np.ndarray:
    return np.bincount(out["position"].ravel(), minlength=num_positions)


def _capped_plan(case) -> ClassBalancedPlan:
    """The case's plan under the least cap it accepts (a lower one is refused naming it)."""
    try:
        return make_plan(case, max_draws_per_record=1)
    except ValueError as refused:
        least = int(re.search(r"pass at least (\d+)", str(refused)).group(1))
    plan = make_plan(case, max_draws_per_record=least)
    if least > 1:
        with pytest.raises(ValueError, match=f"pass at least {least}"):
            make_plan(case, max_draws_per_record=least - 1)
    return plan


# Fewer examples than the plan's other properties: each builds several plans to find the cap.
@settings(SETTINGS, max_examples=12)
@given(plan_cases())
def test_capped_plans_keep_every_guarantee_and_the_cap(case):
    uncapped = make_plan(case)
    plan = _capped_plan(case)
    cap = plan.max_draws_per_record
    assert plan.num_batches == uncapped.num_batches
    out = plan_arrays(plan, 0)
    uncapped_draws = _draws(plan_arrays(uncapped, 0), int(row_splits_of(case["sizes"])[-1]))
    # The least cap accepted has one draw to spare over one that plans epoch 0; the random
    # fillers' epoch 0 is such a plan, so it is no higher than theirs plus one.
    assert cap <= max(1, uncapped_draws.max()) + 1
    n_c, n_p = case["n_c"], case["n_p"]
    row_splits = row_splits_of(case["sizes"])
    owner = np.searchsorted(row_splits, out["position"], side="right") - 1
    np.testing.assert_array_equal(owner, out["label"])
    groups = out["label"].reshape(plan.num_batches, n_c, n_p)
    assert (groups == groups[:, :, :1]).all()
    for unit in out["label"].reshape(plan.num_batches * n_c // plan.classes_per_unit, -1):
        classes = unit[::n_p]
        assert len(set(classes.tolist())) == len(classes), "classes repeat inside a batch"
    np.testing.assert_array_equal(np.unique(out["label"]), plan.report.usable_classes)
    draws = _draws(out, int(row_splits[-1]))
    assert draws.max() <= cap
    if case["mode"] == "samples":
        usable_records = np.concatenate(
            [np.arange(row_splits[c], row_splits[c + 1]) for c in plan.report.usable_classes]
        )
        assert (draws[usable_records] >= 1).all()
    again = plan_arrays(plan, 0)
    # The last batch and the first, planned alone, are the whole plan's rows.
    alone = plan.plan_batches(0, [plan.num_batches - 1, 0])
    for key in out:
        np.testing.assert_array_equal(out[key], again[key])
        np.testing.assert_array_equal(alone[key].numpy(), out[key][[-1, 0]])
    assert "max_draws_per_record" in plan.stream


def test_a_corpus_of_a_few_big_classes_and_many_small_ones():
    """What a new user met: in samples mode the small classes' records were drawn ~27 times an
    epoch; capped at 9 (the least this corpus allows), none is drawn more than 9 times."""
    sizes = np.array([700, 500, 400, 300] + [8] * 140 + [2] * 40)
    common = dict(n_classes_per_batch=16, n_samples_per_class=2, epoch_mode="samples", seed=1)
    uncapped = ClassBalancedPlan(row_splits_of(sizes), **common)
    capped = ClassBalancedPlan(row_splits_of(sizes), max_draws_per_record=9, **common)
    for epoch in range(3):
        loose = _draws(plan_arrays(uncapped, epoch), int(sizes.sum()))
        tight = _draws(plan_arrays(capped, epoch), int(sizes.sum()))
        assert loose.max() > 18 and tight.max() <= 9 and tight.min() >= 1
        assert tight.sum() == loose.sum()  # the same batches, other fillers


@pytest.mark.parametrize(
    "sizes, n_c",
    [([9, 2, 2, 2], 2), ([400, 2, 2, 2], 3), ([40, 30, 3, 3, 3, 3], 2)],
    ids=["coverage", "fillers", "members"],
)
def test_a_cap_too_low_names_the_least_accepted_one(sizes, n_c):
    args = dict(n_classes_per_batch=n_c, n_samples_per_class=2, epoch_mode="samples")
    with pytest.raises(ValueError, match="max_draws_per_record=1 is below") as refused:
        ClassBalancedPlan(row_splits_of(np.array(sizes)), max_draws_per_record=1, **args)
    message = str(refused.value)
    assert "\n" not in message
    least = int(re.search(r"pass at least (\d+)", message).group(1))
    plan = ClassBalancedPlan(row_splits_of(np.array(sizes)), max_draws_per_record=least, **args)
    assert _draws(plan_arrays(plan, 0), sum(sizes)).max() <= least
    if least > 2:
        with pytest.raises(ValueError, match=f"pass at least {least}"):
            ClassBalancedPlan(
                row_splits_of(np.array(sizes)), max_draws_per_record=least - 1, **args
            )


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="max_draws_per_record"):
        ClassBalancedPlan(
            row_splits_of([3, 3]),
            n_classes_per_batch=1,
            n_samples_per_class=2,
            max_draws_per_record=0,
        )
