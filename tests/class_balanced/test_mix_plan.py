"""Properties of the plan over several runs mixed by weight, over many runs, sizes and weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs.epoch_plan import epoch_seed
from tfx_dynamic_inputs.inputs.mix_plan import MixedClassPlan

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def row_splits_of(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@st.composite
def mix_cases(draw):
    """1-4 runs of 1-40 classes (some small or empty), weights, both weightings, replicas."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    num_runs = draw(st.integers(1, 4))
    sizes = [rng.integers(0, 9, draw(st.integers(1, 40))) for _ in range(num_runs)]
    for run_sizes in sizes:
        run_sizes[0] = max(run_sizes[0], 1)  # every run has a usable class
    return dict(
        sizes=sizes,
        weights=[draw(st.floats(0.05, 20.0)) for _ in range(num_runs)],
        n_c=draw(st.integers(1, 6)),
        n_p=draw(st.integers(1, 4)),
        replicas=draw(st.sampled_from([1, 1, 2, 3])),
        weighting=draw(st.sampled_from(["classes", "batches"])),
        policy=draw(st.sampled_from(["replace", "skip"])),
        seed=seed,
        epoch=draw(st.integers(0, 1000)),
    )


def make_plan(case, **overrides) -> MixedClassPlan:
    args = dict(
        shares=case["weights"],
        run_names=[f"run{k}" for k in range(len(case["sizes"]))],
        n_classes_per_batch=case["n_c"],
        n_samples_per_class=case["n_p"],
        weighting=case["weighting"],
        seed=case["seed"],
        small_classes=case["policy"],
        num_workers=case["replicas"],
    )
    args.update(overrides)
    return MixedClassPlan([row_splits_of(s) for s in case["sizes"]], **args)


def plan_or_refusal(case) -> MixedClassPlan:
    """The case's plan; a weighting the runs cannot hold is refused in one line (and skipped)."""
    try:
        return make_plan(case)
    except ValueError as refused:
        message = str(refused)
        assert "\n" not in message and "run 'run" in message
        assume(False)
        raise


@SETTINGS
@given(mix_cases())
def test_batches_hold_n_c_distinct_namespaced_classes_from_their_runs(case):
    plan = plan_or_refusal(case)
    planned = {k: v.numpy() for k, v in plan.plan(case["epoch"]).items()}
    n_c, n_p, g = case["n_c"], case["n_p"], plan.classes_per_unit
    assert planned["label"].shape == (plan.num_batches, n_c * n_p)
    offsets = plan.class_offsets
    all_splits = row_splits_of(np.concatenate(case["sizes"]))
    for label, run, position in zip(
        planned["label"], planned["run"], planned["position"], strict=True
    ):
        classes = label.reshape(n_c, n_p)
        assert (classes == classes[:, :1]).all(), "a class's samples are not consecutive"
        assert len(set(classes[:, 0])) == n_c
        # Namespaced: each class lies in its run's range of global ids.
        assert (offsets[run] <= label).all() and (label < offsets[run + 1]).all()
        # Each position is one of its class's records.
        assert (all_splits[label] <= position).all() and (position < all_splits[label + 1]).all()
    # A global batch (one step of all replicas) holds n_c x R distinct classes.
    units = planned["label"].reshape(plan.num_units, -1)[:, ::n_p]
    assert all(len(set(unit)) == g for unit in units)


@SETTINGS
@given(mix_cases())
def test_every_usable_class_of_every_run_is_in_every_epoch(case):
    plan = plan_or_refusal(case)
    for epoch in (case["epoch"], case["epoch"] + 1):
        seen = set(plan.plan(epoch)["label"].numpy().ravel().tolist())
        for report, offset in zip(plan.reports, plan.class_offsets[:-1], strict=True):
            assert set((report.usable_classes + offset).tolist()) <= seen
            assert not set((report.skipped_classes + offset).tolist()) & seen


@SETTINGS
@given(mix_cases())
def test_the_plan_is_a_pure_function_of_seed_and_epoch_and_splits_over_any_replica_count(case):
    plan = plan_or_refusal(case)
    again = make_plan(case)
    first, second = plan.plan(case["epoch"]), again.plan(case["epoch"])
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), second[key].numpy())
    # The same global batch on other replica counts: the same stream of global batches.
    g = plan.classes_per_unit
    for replicas in (r for r in (1, 2, 3, 6) if g % r == 0 and r != case["replicas"]):
        other = make_plan(case, n_classes_per_batch=g // replicas, num_workers=replicas)
        assert other.stream == plan.stream
        got = other.plan(case["epoch"])
        for key in ("position", "label", "run"):
            np.testing.assert_array_equal(
                got[key].numpy().reshape(plan.num_units, -1),
                first[key].numpy().reshape(plan.num_units, -1),
            )


# (sizes of each run, weights): equal and skewed weightings, runs of unequal class counts.
WEIGHTINGS = [
    ([12, 30, 8], [1.0, 1.0, 1.0]),
    ([12, 30, 8], [1.0, 3.0, 0.5]),
    ([40, 10], [1.0, 9.0]),
    ([20, 25, 15, 30], [2.0, 0.7, 1.3, 4.0]),
]


@pytest.mark.parametrize("weighting", ["classes", "batches"])
@pytest.mark.parametrize("class_counts, weights", WEIGHTINGS)
def test_each_runs_share_is_its_weight_within_a_binomial_bound(weighting, class_counts, weights):
    sizes = [np.full(count, 3) for count in class_counts]
    case = dict(
        sizes=sizes,
        weights=weights,
        n_c=4,
        n_p=2,
        replicas=2,
        weighting=weighting,
        policy="replace",
        seed=7,
    )
    plan = make_plan(case)
    shares = np.asarray(weights) / sum(weights)
    slots, units = [], []
    for epoch in range(60):
        run = plan.plan(epoch)["run"].numpy()[:, :: case["n_p"]].reshape(plan.num_units, -1)
        slots.append(run.ravel())
        units.append(run[:, 0])
        if weighting == "batches":  # a global batch is all from one run
            assert (run == run[:, :1]).all()
    # The share of class slots (classes) or of global batches (batches) of each run, against
    # independent draws at the weight's share: within 4 sigma of weight / sum.
    drawn = np.concatenate(slots if weighting == "classes" else units)
    observed = np.bincount(drawn, minlength=len(weights)) / len(drawn)
    sigma = np.sqrt(shares * (1 - shares) / len(drawn))
    assert (np.abs(observed - shares) <= 4 * sigma).all(), (observed, shares, sigma)
    # Per unit too: each global batch's expected share is the weight's (not one run per batch
    # position, or per epoch segment): the slots of the first and second half of each epoch.
    if weighting == "classes":
        halves = np.concatenate([s[: len(s) // 2] for s in slots])
        half_share = np.bincount(halves, minlength=len(weights)) / len(halves)
        assert (
            np.abs(half_share - shares) <= 4 * np.sqrt(shares * (1 - shares) / len(halves))
        ).all()


def test_an_epoch_is_set_by_the_run_with_the_most_classes_per_share_and_others_recur():
    # Run 0: 10 classes at share 1/2; run 1: 30 classes at 1/2 -> 30 classes need 15 units of
    # 4 slots (2 a unit), so run 0's 10 classes recur 3 times.
    case = dict(
        sizes=[np.full(10, 5), np.full(30, 5)],
        weights=[1.0, 1.0],
        n_c=4,
        n_p=1,
        replicas=1,
        weighting="classes",
        policy="replace",
        seed=1,
    )
    plan = make_plan(case)
    assert plan.num_units == 15
    counts = np.bincount(plan.plan(3)["label"].numpy().ravel(), minlength=40)
    assert (counts[10:] == 1).all() and (counts[:10] == 3).all()


@pytest.mark.parametrize(
    "weighting, weights, needle",
    [
        ("classes", [1.0, 20.0], "run 'big' has 3 usable classes but its weight asks for up to 4"),
        ("batches", [1.0, 1.0], "run 'big' has 3 usable classes but a global batch of 4"),
    ],
)
def test_a_weighting_the_runs_cannot_hold_is_refused_naming_the_run(weighting, weights, needle):
    with pytest.raises(ValueError, match=needle) as refused:
        MixedClassPlan(
            [row_splits_of([3] * 30), row_splits_of([3] * 3)],
            shares=weights,
            run_names=["small", "big"],
            n_classes_per_batch=4,
            n_samples_per_class=2,
            weighting=weighting,
        )
    assert "\n" not in str(refused.value)


def test_shares_must_be_positive_and_one_per_run():
    with pytest.raises(ValueError, match="shares must be > 0"):
        MixedClassPlan(
            [row_splits_of([3])],
            shares=[0.0],
            run_names=["a"],
            n_classes_per_batch=1,
            n_samples_per_class=1,
        )
    with pytest.raises(ValueError, match="one of each per run"):
        MixedClassPlan(
            [row_splits_of([3])],
            shares=[1.0, 1.0],
            run_names=["a"],
            n_classes_per_batch=1,
            n_samples_per_class=1,
        )
    assert math.isclose(
        sum(
            MixedClassPlan(
                [row_splits_of([3]), row_splits_of([2])],
                shares=[1, 3],
                run_names="ab",
                n_classes_per_batch=1,
                n_samples_per_class=1,
            ).shares
        ),
        1.0,
    )


@SETTINGS
@given(mix_cases(), st.data())
def test_any_batch_is_planned_alone_as_in_the_whole_epoch(case, data):
    """`plan_batches` gives the whole plan's rows, for any batch numbers in any order."""
    plan = plan_or_refusal(case)
    whole = {key: rows.numpy() for key, rows in plan.plan(case["epoch"]).items()}
    numbers = data.draw(
        st.lists(st.integers(0, plan.num_batches - 1), min_size=1, max_size=5), label="numbers"
    )
    alone = plan.plan_batches(case["epoch"], np.asarray(numbers, np.int64))
    for key, rows in whole.items():
        np.testing.assert_array_equal(alone[key].numpy(), rows[numbers], err_msg=key)


@SETTINGS
@given(mix_cases())
def test_each_units_slots_and_draws_so_far_are_the_epochs_running_sums(case):
    """The closed forms of a unit's slots per run and of the run's slots in the units before it
    agree with the epoch's quotas summed unit by unit."""
    plan = plan_or_refusal(case)
    stream = lambda salt: epoch_seed(plan.seed, case["epoch"], salt)
    units = tf.range(plan.num_units, dtype=tf.int64)
    counts, earlier = (t.numpy() for t in plan._unit_counts(units, stream))
    quotas = plan._quotas(stream).numpy()
    g = plan.classes_per_unit
    assert (counts.sum(axis=1) == g).all()
    if case["weighting"] == "classes":
        np.testing.assert_array_equal(counts.sum(axis=0), quotas)
        np.testing.assert_array_equal(earlier, np.cumsum(counts, axis=0) - counts)
        assert counts.max(axis=0).tolist() == [  # the extras go to distinct units
            q // plan.num_units + (q % plan.num_units > 0) for q in quotas
        ]
    else:
        np.testing.assert_array_equal(counts.sum(axis=0), quotas * g)
        for run in range(len(quotas)):  # a run's units draw g classes each, one after another
            mine = counts[:, run] == g
            assert sorted(earlier[mine, run]) == list(range(0, quotas[run] * g, g))


def test_plan_batches_refuses_a_batch_number_out_of_range():
    plan = MixedClassPlan(
        [row_splits_of([2] * 4), row_splits_of([2] * 3)],
        shares=[1, 1],
        run_names=["a", "b"],
        n_classes_per_batch=2,
        n_samples_per_class=2,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, "):
        plan.plan_batches(0, [plan.num_batches])
