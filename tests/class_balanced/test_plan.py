"""Properties of the class-balanced epoch plan over many seeds, class counts and sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan, batch_layout
from tfx_dynamic_inputs.inputs.class_report import class_report

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def row_splits_of(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@st.composite
def plan_cases(draw):
    """Class sizes (uniform, skewed or with a giant class, some small or empty) and parameters."""
    num_classes = draw(st.integers(1, 120))
    shape = draw(st.sampled_from(["uniform", "zipf", "giant"]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if shape == "uniform":
        sizes = rng.integers(0, 12, num_classes)
    elif shape == "zipf":
        sizes = np.minimum(rng.zipf(1.6, num_classes), 200) - rng.integers(0, 2, num_classes)
    else:
        sizes = rng.integers(1, 6, num_classes)
        sizes[rng.integers(num_classes)] = 150
    n_p = draw(st.integers(1, 6))
    policy = draw(st.sampled_from(["replace", "skip"]))
    report = class_report(row_splits_of(sizes), n_p, policy)
    usable = len(report.usable_classes)
    if usable == 0:
        sizes[0] = n_p
        usable = len(class_report(row_splits_of(sizes), n_p, policy).usable_classes)
    n_c = draw(st.integers(1, usable))
    return dict(
        sizes=sizes,
        n_c=n_c,
        n_p=n_p,
        policy=policy,
        mode=draw(st.sampled_from(["classes", "samples"])),
        num_workers=draw(st.sampled_from([1, 1, 2, 3])),
        seed=seed,
        epoch=draw(st.integers(0, 1000)),
    )


def make_plan(case, max_draws_per_record: int | None = None) -> ClassBalancedPlan:
    return ClassBalancedPlan(
        row_splits_of(case["sizes"]),
        n_classes_per_batch=case["n_c"],
        n_samples_per_class=case["n_p"],
        seed=case["seed"],
        epoch_mode=case["mode"],
        small_classes=case["policy"],
        num_workers=case["num_workers"],
        max_draws_per_record=max_draws_per_record,
    )


def plan_arrays(plan: ClassBalancedPlan, epoch: int) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in plan.plan(epoch).items()}


@SETTINGS
@given(plan_cases())
def test_batches_hold_n_c_distinct_classes_of_n_p_samples(case):
    plan = make_plan(case)
    n_c, n_p = case["n_c"], case["n_p"]
    out = plan_arrays(plan, case["epoch"])
    row_splits = row_splits_of(case["sizes"])
    assert out["position"].shape == (plan.num_batches, n_c * n_p)
    assert out["label"].shape == (plan.num_batches, n_c * n_p)
    assert out["seed"].shape == (plan.num_batches, 2)
    assert out["slice_start"].shape == (plan.num_batches,)
    assert plan.num_batches % case["num_workers"] == 0
    # Every position lies in the class its label names.
    owner = np.searchsorted(row_splits, out["position"], side="right") - 1
    np.testing.assert_array_equal(owner, out["label"])
    groups = out["label"].reshape(plan.num_batches, n_c, n_p)
    assert (groups == groups[:, :, :1]).all(), "a class group is not n_p consecutive samples"
    for batch in groups[:, :, 0]:
        assert len(set(batch.tolist())) == n_c, "classes repeat inside a batch"
    slots = batch_layout(n_c, n_p)
    np.testing.assert_array_equal(
        groups.reshape(plan.num_batches, -1)[:, slots * n_p], out["label"]
    )


@SETTINGS
@given(plan_cases())
def test_every_usable_class_every_epoch_and_no_skipped_class(case):
    plan = make_plan(case)
    report = plan.report
    out = plan_arrays(plan, case["epoch"])
    used = np.unique(out["label"])
    np.testing.assert_array_equal(used, report.usable_classes)
    assert not np.isin(report.skipped_classes, used).any()
    sizes = np.asarray(case["sizes"])
    n_p, n_c, workers = case["n_p"], case["n_c"], case["num_workers"]
    usable_sizes = sizes[report.usable_classes]
    # The unit is the global batch of n_c x workers classes where that many are usable.
    elastic = n_c * workers <= len(report.usable_classes)
    assert plan.elastic == elastic
    unit = n_c * workers if elastic else n_c
    if case["mode"] == "classes":
        expected = math.ceil(len(report.usable_classes) / unit)
    else:
        chunks = np.maximum(1, -(-usable_sizes // n_p))
        expected = sum(math.ceil(int((chunks > r).sum()) / unit) for r in range(chunks.max()))
        # Every record of every usable class appears.
        row_splits = row_splits_of(sizes)
        records = np.concatenate(
            [np.arange(row_splits[c], row_splits[c + 1]) for c in report.usable_classes]
        )
        assert np.isin(records, out["position"]).all()
    if elastic:
        assert plan.num_batches == expected * workers
    else:
        assert plan.num_batches == expected + (-expected % workers)


@SETTINGS
@given(plan_cases())
def test_an_elastic_global_batch_holds_distinct_classes_and_splits_over_any_replica_count(case):
    """The stream of global batches (n_c x R classes) is the same whatever R holds it: cut into
    R batches of n_c classes, or R' batches of n_c x R / R' classes."""
    plan = make_plan(case)
    replicas = case["num_workers"]
    if not plan.elastic:
        return
    out = plan_arrays(plan, case["epoch"])
    units = {
        key: out[key].reshape(plan.num_batches // replicas, -1) for key in ("position", "label")
    }
    n_p = case["n_p"]
    for labels in units["label"]:
        classes = labels.reshape(-1, n_p)[:, 0]
        assert len(set(classes.tolist())) == len(classes) == case["n_c"] * replicas
    seeds = out["seed"].reshape(-1, replicas, 2)
    assert (seeds == seeds[:, :1]).all(), "the batches of one global batch share its seed"
    np.testing.assert_array_equal(
        out["slice_start"], np.arange(plan.num_batches) % replicas * case["n_c"] * n_p
    )
    global_classes = case["n_c"] * replicas
    for other in [r for r in range(1, global_classes + 1) if global_classes % r == 0]:
        regrouped = make_plan({**case, "n_c": global_classes // other, "num_workers": other})
        assert regrouped.elastic and regrouped.stream == plan.stream
        again = plan_arrays(regrouped, case["epoch"])
        for key, value in units.items():
            np.testing.assert_array_equal(again[key].reshape(value.shape), value)
        np.testing.assert_array_equal(again["seed"][::other], out["seed"][::replicas])


@SETTINGS
@given(plan_cases())
def test_within_class_draws_follow_one_permutation(case):
    """A class drawn d times uses each record floor(d/m) or ceil(d/m) times: no replacement
    until the class is exhausted; a small class's group holds all its records."""
    plan = make_plan(case)
    out = plan_arrays(plan, case["epoch"])
    sizes = np.asarray(case["sizes"])
    row_splits = row_splits_of(sizes)
    n_p = case["n_p"]
    for c in plan.report.usable_classes:
        drawn = out["position"][out["label"] == c]
        uses = np.bincount(drawn - row_splits[c], minlength=sizes[c])
        assert uses.sum() == len(drawn)
        low, high = len(drawn) // sizes[c], -(-len(drawn) // sizes[c])
        assert uses.min() >= low and uses.max() <= high, (c, uses)
    groups = out["position"].reshape(-1, n_p)
    group_class = out["label"].reshape(-1, n_p)[:, 0]
    for positions, c in zip(groups, group_class, strict=True):
        expected_distinct = min(n_p, sizes[c])
        assert len(set(positions.tolist())) == expected_distinct


@SETTINGS
@given(plan_cases())
def test_plan_is_a_pure_function_of_seed_and_epoch(case):
    plan = make_plan(case)
    first = plan_arrays(plan, case["epoch"])
    again = plan_arrays(make_plan(case), case["epoch"])
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.array_equal(first["seed"], plan_arrays(plan, case["epoch"] + 1)["seed"])


def test_epochs_and_seeds_differ():
    sizes = np.full(200, 10)
    plans = [
        ClassBalancedPlan(
            row_splits_of(sizes), n_classes_per_batch=8, n_samples_per_class=4, seed=s
        )
        for s in (0, 1)
    ]
    a, b = plans[0].plan(0)["position"].numpy(), plans[0].plan(1)["position"].numpy()
    c = plans[1].plan(0)["position"].numpy()
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    # Batches of one epoch mix classes from everywhere, not runs of neighbouring ids.
    assert np.mean(np.abs(np.diff(plans[0].plan(0)["label"].numpy()[:, ::4]))) > 20


@pytest.mark.parametrize("mode", ["classes", "samples"])
def test_thousands_of_classes(mode):
    rng = np.random.default_rng(7)
    sizes = np.minimum(rng.zipf(1.5, 3000), 300)
    plan = ClassBalancedPlan(
        row_splits_of(sizes),
        n_classes_per_batch=64,
        n_samples_per_class=2,
        seed=3,
        epoch_mode=mode,
        small_classes="skip",
        num_workers=4,
    )
    out = plan_arrays(plan, 5)
    np.testing.assert_array_equal(np.unique(out["label"]), plan.report.usable_classes)
    groups = out["label"].reshape(plan.num_batches, 64, 2)[:, :, 0]
    assert all(len(np.unique(g)) == 64 for g in groups)
    assert len(plan.report.small_classes) == int((sizes < 2).sum()) > 0


def test_small_class_policies_are_reported():
    sizes = np.array([5, 1, 0, 2, 6, 7, 3])
    replace = class_report(row_splits_of(sizes), 3, "replace")
    skip = class_report(row_splits_of(sizes), 3, "skip")
    np.testing.assert_array_equal(replace.small_classes, [1, 3])
    np.testing.assert_array_equal(replace.empty_classes, [2])
    np.testing.assert_array_equal(replace.usable_classes, [0, 1, 3, 4, 5, 6])
    np.testing.assert_array_equal(replace.replaced_classes, [1, 3])
    np.testing.assert_array_equal(replace.skipped_classes, [2])
    np.testing.assert_array_equal(skip.usable_classes, [0, 4, 5, 6])
    np.testing.assert_array_equal(skip.skipped_classes, [1, 2, 3])
    assert len(skip.replaced_classes) == 0
    assert "2 classes with fewer than 3 records skipped: [1, 3]" in skip.summary()
    assert "1 classes without records skipped: [2]" in replace.summary()


def test_too_many_classes_per_batch_names_both_numbers():
    sizes = np.array([4, 4, 1, 4])
    with pytest.raises(ValueError, match=r"n_classes_per_batch=4 .* usable classes, 3"):
        ClassBalancedPlan(
            row_splits_of(sizes),
            n_classes_per_batch=4,
            n_samples_per_class=2,
            small_classes="skip",
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(epoch_mode="utterances"), "epoch_mode"),
        (dict(small_classes="drop"), "small_classes"),
        (dict(n_samples_per_class=0), "n_samples_per_class"),
        (dict(n_classes_per_batch=0), "n_classes_per_batch"),
        (dict(num_workers=0), "num_workers"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(n_classes_per_batch=2, n_samples_per_class=2) | kwargs
    with pytest.raises(ValueError, match=message):
        ClassBalancedPlan(row_splits_of([3, 3, 3]), **args)


def test_bad_row_splits():
    with pytest.raises(ValueError, match="non-decreasing"):
        class_report(np.array([0, 3, 2]), 2)
    with pytest.raises(ValueError, match="starting at 0"):
        class_report(np.array([1, 3]), 2)


@SETTINGS
@given(plan_cases(), st.data())
def test_any_batch_is_planned_alone_as_in_the_whole_epoch(case, data):
    """`plan_batches` gives the rows of the whole plan, for any batch numbers in any order:
    nothing a batch draws depends on which other batches are planned with it."""
    plan = make_plan(case)
    whole = plan_arrays(plan, case["epoch"])
    numbers = data.draw(
        st.lists(st.integers(0, plan.num_batches - 1), min_size=1, max_size=5), label="numbers"
    )
    alone = plan.plan_batches(case["epoch"], np.asarray(numbers, np.int64))
    for key, rows in whole.items():
        np.testing.assert_array_equal(alone[key].numpy(), rows[numbers], err_msg=key)


def test_plan_batches_refuses_a_batch_number_out_of_range():
    plan = ClassBalancedPlan(row_splits_of([3] * 5), n_classes_per_batch=2, n_samples_per_class=2)
    assert plan.num_batches == 3
    for numbers in ([3], [0, -1]):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 3\)"):
            plan.plan_batches(0, numbers)


@pytest.mark.parametrize("mode", ["classes", "samples"])
def test_each_slot_draws_its_class_uniformly_and_afresh_every_epoch(mode):
    """Over epochs, the class in a batch's slot is uniform over the classes, and one epoch's
    does not predict the next's (the orders are keyed by the epoch)."""
    num_classes, epochs = 6, 720
    plan = ClassBalancedPlan(
        row_splits_of([4] * num_classes),
        n_classes_per_batch=2,
        n_samples_per_class=2,
        seed=11,
        epoch_mode=mode,
    )
    planned = tf.function(plan.plan_batches)
    first = np.array(
        [planned(tf.constant(e, tf.int64), [0])["label"].numpy()[0, 0] for e in range(epochs)]
    )
    assert stats.chisquare(np.bincount(first, minlength=num_classes)).pvalue > 1e-3
    transitions = np.bincount(first[:-1] * num_classes + first[1:], minlength=num_classes**2)
    assert stats.chisquare(transitions).pvalue > 1e-3, transitions


def test_plans_whose_short_units_outweigh_a_block_are_planned_whole():
    """A giant class in samples mode makes most units short, and a block planned alone would
    compute all their fillers: such plans (and capped ones) plan whole epochs instead."""
    row_splits = row_splits_of([400] + [2] * 10)

    def plan(mode: str, cap: int | None = None) -> ClassBalancedPlan:
        return ClassBalancedPlan(
            row_splits,
            n_classes_per_batch=2,
            n_samples_per_class=1,
            epoch_mode=mode,
            max_draws_per_record=cap,
        )

    assert plan("classes").plans_batches_alone
    assert not plan("samples").plans_batches_alone
    assert not plan("classes", cap=5).plans_batches_alone
    even = ClassBalancedPlan(
        row_splits_of([8] * 10), n_classes_per_batch=3, n_samples_per_class=2, epoch_mode="samples"
    )
    assert even.plans_batches_alone
