"""The NumPy plans (`tfx_dynamic_inputs.plans`) give the TensorFlow plans' record numbers bit for
bit: seed folds, keyed draws and permutations (against the native op and the TensorFlow ops),
the pair plan, the class-balanced plan and the mixed plan, over generated sizes, seeds, epochs,
batches and worker counts; a worker's batches are those epoch_dataset plans, elastic plans
stream the same global batches on any replica count, and the package runs without importing
TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.inputs import ValidPairs, epoch_plan, index_shuffle
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan as TensorFlowClassPlan
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs
from tfx_dynamic_inputs.inputs.mix_plan import MixedClassPlan as TensorFlowMixPlan
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner
from tfx_dynamic_inputs.plans import (
    class_plan,
    keyed_hash,
    keyed_permutation,
    mix_plan,
    pair_plan,
    seed_folds,
    worker_slices,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
SEEDS = st.one_of(st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)]), INT64)
# Around every special case: the rank sizes (<= 16), the small-round sizes (17-64), powers of two.
SIZES = st.one_of(
    st.sampled_from([1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 65537]),
    st.integers(1, 5000),
    st.integers(1, 2**62),
)
IMPLEMENTATIONS = [
    "tensorflow",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(native.op_library() is None, reason="no native library here"),
    ),
]


def test_the_package_imports_and_plans_without_tensorflow():
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs.plans import keyed_permutation, seed_folds\n"
        "seed = seed_folds.epoch_seed(3, 1, seed_folds.SALT_ORDER)\n"
        "assert sorted(keyed_permutation.permuted_positions(range(100), 100, seed)) == "
        "list(range(100))\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


@settings(max_examples=40, deadline=None)
@given(seed=st.tuples(INT64, INT64), word=INT64)
def test_a_fold_is_tensorflows_stateless_fold_in(seed, word):
    expected = tf.random.experimental.stateless_fold_in(
        tf.constant(seed, tf.int64), tf.constant(word, tf.int64)
    )
    assert np.array_equal(seed_folds.fold_in(np.array(seed, np.int64), word), expected.numpy())


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, epochs=st.lists(st.integers(-1, 2**40), min_size=1, max_size=4))
def test_epoch_seeds_are_the_tensorflow_plans(seed, epochs):
    for salt in (seed_folds.SALT_ORDER, seed_folds.SALT_GROUP_START, 14):
        folded = seed_folds.epoch_seed(seed, np.array(epochs), salt)
        for epoch, row in zip(epochs, folded, strict=True):
            assert np.array_equal(row, epoch_plan.epoch_seed(seed, epoch, salt).numpy())
            in_graph = epoch_plan.epoch_seed(seed, tf.constant(epoch, tf.int64), salt)
            assert np.array_equal(row, in_graph.numpy())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=25, deadline=None)
@given(seed=st.tuples(SEEDS, SEEDS), keys=st.lists(INT64, max_size=50), salt=st.integers(0, 20))
def test_keyed_draws_are_the_tensorflow_plans(implementation, seed, keys, salt):
    seed, keys = np.array(seed, np.int64), np.array(keys, np.int64)
    bits = index_shuffle._keyed_bits(tf.constant(seed), tf.constant(keys), salt, implementation)
    assert np.array_equal(keyed_hash.keyed_bits(seed, keys, salt), bits.numpy())
    sizes = np.abs(keys) % 1000 + 1
    offsets = index_shuffle.keyed_offsets(tf.constant(sizes), tf.constant(seed), tf.constant(keys))
    assert np.array_equal(keyed_hash.keyed_offsets(sizes, seed, keys), offsets.numpy())
    seeds = index_shuffle.keyed_seeds(tf.constant(seed), tf.constant(keys, tf.int64))
    assert np.array_equal(keyed_hash.keyed_seeds(seed, keys).reshape(-1, 2), seeds.numpy())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=30, deadline=None)
@given(size=SIZES, seed=st.tuples(SEEDS, SEEDS), tweak=INT64, data=st.data())
def test_one_permutation_is_the_tensorflow_plans(implementation, size, seed, tweak, data):
    """An epoch's order (one size, one tweak): all of it where small, else generated positions;
    and the fused gather, which the pair plan runs."""
    seed = np.array(seed, np.int64)
    if size <= 300:
        positions = np.arange(size, dtype=np.int64)
    else:
        positions = np.array(
            data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=300)), np.int64
        )
    expected = index_shuffle.permuted_positions(
        tf.constant(positions),
        size,
        tf.constant(seed),
        tf.constant(tweak, tf.int64),
        implementation,
    )
    permuted = keyed_permutation.permuted_positions(positions, size, seed, tweak)
    assert np.array_equal(permuted, expected.numpy())
    if size <= 300:
        assert sorted(permuted) == list(range(size))
        table = np.arange(size, dtype=np.int64) * 3 + 1
        fused, gathered = index_shuffle.gather_permuted(
            tf.constant(table), tf.constant(positions), size, tf.constant(seed), implementation
        )
        assert np.array_equal(keyed_permutation.permuted_positions(positions, size, seed), fused)
        assert np.array_equal(table[fused.numpy()], gathered.numpy())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(st.tuples(SIZES, INT64, st.floats(0, 1, exclude_max=True)), max_size=80),
    seed=st.tuples(SEEDS, SEEDS),
)
def test_permutations_of_their_own_size_and_tweak_are_the_tensorflow_plans(
    implementation, rows, seed
):
    """Each element its own size and key (each x's order of its partners, each class's order of
    its records), the rank sizes, the small-round sizes and the large ones mixed in one call."""
    sizes = np.array([size for size, _, _ in rows], np.int64)
    tweaks = np.array([tweak for _, tweak, _ in rows], np.int64)
    positions = np.array([min(int(size * place), size - 1) for size, _, place in rows], np.int64)
    seed = np.array(seed, np.int64)
    expected = index_shuffle.permuted_positions(
        tf.constant(positions),
        tf.constant(sizes),
        tf.constant(seed),
        tf.constant(tweaks),
        implementation,
    )
    permuted = keyed_permutation.permuted_positions(positions, sizes, seed, tweaks)
    assert np.array_equal(permuted, expected.numpy())


def test_a_position_outside_the_permutation_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"position 5 at 1 is outside \[0, 5\)"):
        keyed_permutation.permuted_positions([0, 5], 5, np.zeros(2, np.int64))


@st.composite
def valid_pairs(draw) -> ValidPairs | GroupPairs:
    """An edge list with empty rows (x left out of the plan), or groups with x and y without
    one."""
    num_y = draw(st.integers(1, 40))
    if draw(st.booleans()):
        row = st.lists(st.integers(0, num_y - 1), max_size=12)
        rows = draw(st.lists(row, min_size=1, max_size=60))
        assume(any(rows))
        return ValidPairs.build(rows, num_y=num_y, on_invalid="skip")
    num_groups = draw(st.integers(1, 6))
    group = st.integers(-1, num_groups - 1)
    y_groups = draw(st.lists(group, min_size=num_y, max_size=num_y))
    x_groups = draw(st.lists(group, min_size=1, max_size=60))
    assume(set(x_groups) & set(y_groups) - {-1})
    return GroupPairs.build(x_groups, y_groups, on_invalid="skip")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pairs=valid_pairs(),
    strategy=st.sampled_from(pair_plan.STRATEGIES),
    seed=SEEDS,
    batch_size=st.integers(1, 9),
    workers=st.tuples(st.integers(1, 3), st.integers(1, 2)),
    remainder=st.sampled_from(pair_plan.REMAINDERS),
    epochs=st.lists(st.one_of(st.integers(0, 30), st.integers(0, 2**40)), min_size=1, max_size=3),
    data=st.data(),
)
def test_the_pair_plan_is_the_tensorflow_plans(
    pairs, strategy, seed, batch_size, workers, remainder, epochs, data
):
    options = dict(
        strategy=strategy,
        seed=seed,
        batch_size=batch_size,
        num_workers=workers[0],
        replicas_per_worker=workers[1],
        remainder=remainder,
    )
    try:
        planner = PairPlanner(pairs, **options)
    except ValueError:  # "drop" leaves no batch: the NumPy plan says so too
        with pytest.raises(ValueError, match="leaves no batch"):
            pair_plan.PairPlan(pairs, **options)
        return
    plan = pair_plan.PairPlan(pairs, **options)
    assert plan.num_batches == planner.num_batches
    for epoch in epochs:
        expected = planner.plan(epoch)
        planned = plan.plan(epoch)
        for key in ("x_index", "y_index"):
            assert np.array_equal(planned[key], expected[key].numpy()), key
        numbers = data.draw(st.lists(st.integers(0, plan.num_batches - 1), max_size=5))
        rows = plan.plan_batches(epoch, numbers)
        expected_rows = planner.plan_batches(epoch, numbers)
        for key in ("x_index", "y_index"):
            assert np.array_equal(rows[key], expected_rows[key].numpy()), key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.one_of(st.integers(0, 4), st.integers(0, 70)), min_size=3, max_size=40),
    n_c=st.integers(1, 5),
    n_p=st.integers(1, 5),
    seed=SEEDS,
    epoch_mode=st.sampled_from(["classes", "samples"]),
    small_classes=st.sampled_from(["replace", "skip"]),
    workers=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    cap=st.one_of(st.none(), st.integers(1, 4), st.integers(4, 30)),
    epochs=st.lists(st.one_of(st.integers(0, 5), st.integers(0, 2**40)), min_size=1, max_size=2),
    data=st.data(),
)
def test_the_class_balanced_plan_is_the_tensorflow_plans(
    sizes, n_c, n_p, seed, epoch_mode, small_classes, workers, cap, epochs, data
):
    """Both epoch modes, small classes, elastic and per-replica units, the draw cap (and its
    refusals, in the same words), whole epochs and batches alone."""
    options = dict(
        n_classes_per_batch=n_c,
        n_samples_per_class=n_p,
        seed=seed,
        epoch_mode=epoch_mode,
        small_classes=small_classes,
        num_workers=workers[0],
        replicas_per_worker=workers[1],
        max_draws_per_record=cap,
    )
    row_splits = np.concatenate([[0], np.cumsum(sizes)])
    try:
        expected_plan = TensorFlowClassPlan(row_splits, **options)
    except ValueError as error:
        with pytest.raises(ValueError) as refused:
            class_plan.ClassBalancedPlan(row_splits, **options)
        assert str(refused.value) == str(error)
        event("refused")
        return
    event("planned, elastic" if expected_plan.elastic else "planned, per replica")
    plan = class_plan.ClassBalancedPlan(row_splits, **options)
    assert (plan.num_batches, plan.elastic) == (expected_plan.num_batches, expected_plan.elastic)
    for epoch in epochs:
        try:
            expected = {key: value.numpy() for key, value in expected_plan.plan(epoch).items()}
        except tf.errors.InvalidArgumentError:  # a later epoch the cap cannot complete
            with pytest.raises(ValueError, match="leaves a batch without enough classes"):
                plan.plan(epoch)
            continue
        planned = plan.plan(epoch)
        assert planned.keys() == expected.keys()
        for key, value in expected.items():
            assert np.array_equal(planned[key], value), key
        numbers = data.draw(st.lists(st.integers(0, plan.num_batches - 1), max_size=4))
        rows = plan.plan_batches(epoch, numbers)
        for key, value in expected.items():
            assert np.array_equal(rows[key], value[numbers]), key


@settings(max_examples=20, deadline=None)
@given(
    workers=st.integers(1, 4),
    steps=st.integers(1, 70),
    data=st.data(),
)
def test_a_workers_batches_are_those_epoch_dataset_plans(workers, steps, data):
    """`worker_batch_numbers` against the batch numbers `epoch_plan.epoch_dataset` hands its
    batch plan function, from a resume step (blocks of `PLAN_BLOCK_BATCHES` included)."""
    worker = data.draw(st.integers(0, workers - 1))
    initial_step = data.draw(st.integers(0, steps - 1))
    num_batches = steps * workers
    dataset = epoch_plan.epoch_dataset(
        batch_plan_fn=lambda epoch, numbers: {"number": numbers},
        num_batches=num_batches,
        state=EpochState(initial_epoch=1),
        num_workers=workers,
        worker_index=worker,
        initial_step=initial_step,
    )
    expected = [int(row["number"]) for row in dataset]
    numbers = worker_slices.worker_batch_numbers(num_batches, workers, worker, initial_step)
    assert numbers.tolist() == expected


@settings(max_examples=20, deadline=None)
@given(
    global_classes=st.sampled_from([(1, 4), (2, 2), (4, 1), (2, 4), (8, 1), (4, 2)]),
    epoch_mode=st.sampled_from(["classes", "samples"]),
    seed=SEEDS,
    epoch=st.integers(0, 2**40),
    data=st.data(),
)
def test_an_elastic_class_plan_streams_the_same_global_batches_on_any_replica_count(
    global_classes, epoch_mode, seed, epoch, data
):
    """The same `n_c x R` cut over other replica counts (workers x replicas per worker): each
    step's global batch (its batches side by side) is the same, as an elastic resume needs."""
    n_c, replicas = global_classes
    sizes = data.draw(st.lists(st.integers(1, 30), min_size=n_c * replicas * 2, max_size=40))
    row_splits = np.concatenate([[0], np.cumsum(sizes)])
    options = dict(n_samples_per_class=2, seed=seed, epoch_mode=epoch_mode)
    streams = []
    for split in {(replicas, 1), (1, replicas), (n_c * replicas, 1)}:
        per_batch = n_c * replicas // split[0] // split[1]
        plan = class_plan.ClassBalancedPlan(
            row_splits,
            n_classes_per_batch=per_batch,
            num_workers=split[0],
            replicas_per_worker=split[1],
            **options,
        )
        assert plan.elastic
        position = plan.plan(epoch)["position"]
        streams.append(position.reshape(-1, n_c * replicas * 2))
    assert all(np.array_equal(stream, streams[0]) for stream in streams)


@settings(max_examples=30, deadline=None)
@given(seed=st.tuples(SEEDS, SEEDS), maxval=st.one_of(st.integers(1, 100), st.integers(1, 2**62)))
def test_the_mixes_scalar_draws_are_tensorflows_stateless_uniform(seed, maxval):
    seed = np.array(seed, np.int64)
    uniform = tf.random.stateless_uniform([], seed=tf.constant(seed), dtype=tf.float64)
    assert seed_folds.stateless_uniform(seed) == uniform.numpy()
    drawn = tf.random.stateless_uniform([], seed=tf.constant(seed), maxval=maxval, dtype=tf.int64)
    assert seed_folds.stateless_uniform_int(seed, maxval) == drawn.numpy()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(
        st.tuples(st.lists(st.integers(0, 12), min_size=1, max_size=25), st.floats(0.1, 5.0)),
        min_size=1,
        max_size=3,
    ),
    n_c=st.integers(1, 4),
    n_p=st.integers(1, 3),
    weighting=st.sampled_from(["classes", "batches"]),
    seed=SEEDS,
    small_classes=st.sampled_from(["replace", "skip"]),
    workers=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    epochs=st.lists(st.one_of(st.integers(0, 5), st.integers(0, 2**40)), min_size=1, max_size=2),
    data=st.data(),
)
def test_the_mixed_plan_is_the_tensorflow_plans(
    runs, n_c, n_p, weighting, seed, small_classes, workers, epochs, data
):
    """Both weightings over generated runs, shares, geometry and seeds (and the refusals, in
    the same words), whole epochs and batches alone."""
    row_splits = [np.concatenate([[0], np.cumsum(sizes)]) for sizes, _ in runs]
    options = dict(
        shares=[share for _, share in runs],
        run_names=[f"run{k}" for k in range(len(runs))],
        n_classes_per_batch=n_c,
        n_samples_per_class=n_p,
        weighting=weighting,
        seed=seed,
        small_classes=small_classes,
        num_workers=workers[0],
        replicas_per_worker=workers[1],
    )
    try:
        expected_plan = TensorFlowMixPlan(row_splits, **options)
    except ValueError as error:
        with pytest.raises(ValueError) as refused:
            mix_plan.MixedClassPlan(row_splits, **options)
        assert str(refused.value) == str(error)
        event("refused")
        return
    event("planned")
    plan = mix_plan.MixedClassPlan(row_splits, **options)
    assert plan.num_batches == expected_plan.num_batches
    for epoch in epochs:
        expected = {key: value.numpy() for key, value in expected_plan.plan(epoch).items()}
        planned = plan.plan(epoch)
        assert planned.keys() == expected.keys()
        for key, value in expected.items():
            assert np.array_equal(planned[key], value), key
        numbers = data.draw(st.lists(st.integers(0, plan.num_batches - 1), max_size=4))
        rows = plan.plan_batches(epoch, numbers)
        for key, value in expected.items():
            assert np.array_equal(rows[key], value[numbers]), key
