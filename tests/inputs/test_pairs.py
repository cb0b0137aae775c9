"""Dynamic pairs: validity, coverage, uniformity, least-sampled guarantee, slices, resume."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from tests.inputs import runs
from tfx_dynamic_inputs.inputs import (
    DynamicPairsSampler,
    ImageSpec,
    PairingState,
    StoreOptions,
    ValidPairs,
    dynamic_pairs,
    open_pairs_run,
    open_run,
)
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner
from tfx_dynamic_inputs.inputs.valid_pairs import EMPTY_VALID_LIST, X_OUT_OF_RANGE, Y_OUT_OF_RANGE

# Also run in the full install: the library on its lowest TensorFlow (2.16, the TFX stack's).
pytestmark = pytest.mark.full

FEW = settings(max_examples=12, deadline=None)
# Tests that build datasets per example: fewer examples, and no shrinking (slow on 2 cores).
FEW_DATASETS = settings(
    max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate]
)


@st.composite
def pair_graphs(draw, max_x=40, max_y=15, max_degree=5):
    num_x = draw(st.integers(1, max_x))
    num_y = draw(st.integers(1, max_y))
    rows = [
        draw(
            st.lists(
                st.integers(0, num_y - 1),
                min_size=1,
                max_size=min(max_degree, num_y),
                unique=True,
            )
        )
        for _ in range(num_x)
    ]
    return rows, num_y


def _planner(rows, num_y, **kwargs) -> PairPlanner:
    kwargs.setdefault("strategy", "uniform")
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("batch_size", 4)
    return PairPlanner(ValidPairs.build(rows, num_y=num_y), **kwargs)


def _epoch_pairs(planner: PairPlanner, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    plan = planner.plan(epoch)
    return plan["x_index"].numpy().ravel(), plan["y_index"].numpy().ravel()


@FEW
@given(
    graph=pair_graphs(),
    strategy=st.sampled_from(["uniform", "least_sampled"]),
    batch_size=st.integers(1, 9),
    num_workers=st.integers(1, 3),
    seed=st.integers(0, 2**31),
)
def test_every_pair_valid_and_every_x_planned_each_epoch(
    graph, strategy, batch_size, num_workers, seed
):
    rows, num_y = graph
    planner = _planner(
        rows, num_y, strategy=strategy, batch_size=batch_size, num_workers=num_workers, seed=seed
    )
    total = planner.num_batches * batch_size
    assert planner.num_batches % num_workers == 0
    assert len(rows) <= total < len(rows) + batch_size * num_workers
    for epoch in range(3):
        xs, ys = _epoch_pairs(planner, epoch)
        assert all(y in rows[x] for x, y in zip(xs.tolist(), ys.tolist(), strict=True))
        # Each x once, and the wrap-around tail repeats the first x of the order with its y.
        assert sorted(xs[: len(rows)].tolist()) == list(range(len(rows)))
        tail = np.arange(len(rows), total) % len(rows)
        assert xs[len(rows) :].tolist() == xs[tail].tolist()
        assert ys[len(rows) :].tolist() == ys[tail].tolist()


@FEW
@given(
    graph=pair_graphs(),
    batch_size=st.integers(1, 9),
    remainder=st.sampled_from(["wrap", "drop"]),
    epoch=st.integers(0, 2**40),
    data=st.data(),
)
def test_any_batch_of_x_is_computed_from_its_number_alone(
    graph, batch_size, remainder, epoch, data
):
    """`epoch_order` of one batch's positions is that batch of the whole plan's x."""
    rows, num_y = graph
    assume(remainder == "wrap" or len(rows) >= batch_size)
    planner = _planner(rows, num_y, batch_size=batch_size, remainder=remainder)
    batch = data.draw(st.integers(0, planner.num_batches - 1))
    positions = tf.range(batch * batch_size, (batch + 1) * batch_size, dtype=tf.int64)
    alone = planner.valid_pairs.planned_x[planner.epoch_order(epoch, positions).numpy()]
    assert alone.tolist() == planner.plan(epoch)["x_index"].numpy()[batch].tolist()


@FEW
@given(
    graph=pair_graphs(),
    strategy=st.sampled_from(["uniform", "least_sampled"]),
    batch_size=st.integers(1, 9),
    remainder=st.sampled_from(["wrap", "drop"]),
    unplanned=st.sets(st.integers(0, 39), max_size=10),
    epoch=st.integers(0, 2**40),
    data=st.data(),
)
def test_any_batch_is_planned_alone_as_in_the_whole_epoch(
    graph, strategy, batch_size, remainder, unplanned, epoch, data
):
    """`plan_batches` of any batch numbers is those rows of `plan`, x and y, for both strategies,
    both remainders and with x left out of the plan (an empty valid list)."""
    rows, num_y = graph
    rows = [[] if x in unplanned else row for x, row in enumerate(rows)]
    assume(any(rows))
    valid = ValidPairs.build(rows, num_y=num_y, on_invalid="skip")
    assume(remainder == "wrap" or len(valid.planned_x) >= batch_size)
    planner = PairPlanner(
        valid, strategy=strategy, seed=7, batch_size=batch_size, remainder=remainder
    )
    numbers = data.draw(st.lists(st.integers(0, planner.num_batches - 1), min_size=1, max_size=4))
    whole, alone = planner.plan(epoch), planner.plan_batches(epoch, numbers)
    for key in ("x_index", "y_index"):
        assert alone[key].numpy().tolist() == whole[key].numpy()[numbers].tolist(), key


def test_plan_batches_refuses_a_batch_number_out_of_range():
    planner = _planner([[0], [1], [0, 1]], 2, batch_size=2)
    assert planner.num_batches == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, 2\)"):
        planner.plan_batches(0, [2])


@pytest.mark.parametrize("seed", [0, 1])
def test_each_x_draws_uniformly_and_afresh_every_epoch(seed):
    """Over epochs, each x's uniform choice is uniform over its row, and a choice does not
    predict the next epoch's (the draw is keyed by the x and the epoch)."""
    degree, epochs = 3, 900
    rows = [list(range(degree)), [2, 0, 1, 3], [1, 0, 3]]
    planner = _planner(rows, 4, seed=seed, batch_size=3)
    plan = tf.function(planner.plan)
    chosen = np.empty((epochs, len(rows)), np.int64)
    for epoch in range(epochs):
        planned = plan(tf.constant(epoch, tf.int64))
        xs, ys = planned["x_index"].numpy().ravel(), planned["y_index"].numpy().ravel()
        chosen[epoch, xs] = ys
    for x, row in enumerate(rows):
        counts = np.bincount(chosen[:, x], minlength=4)[row]
        assert stats.chisquare(counts).pvalue > 1e-3, (x, counts)
    # Consecutive epochs of x 0: the 9 (this, next) pairs of choices are equally frequent.
    transitions = np.bincount(chosen[:-1, 0] * degree + chosen[1:, 0], minlength=degree**2)
    assert stats.chisquare(transitions).pvalue > 1e-3, transitions


@FEW
@given(graph=pair_graphs(), strategy=st.sampled_from(["uniform", "least_sampled"]))
def test_same_seed_same_plans_other_seed_other_plans(graph, strategy):
    rows, num_y = graph
    a = _planner(rows, num_y, strategy=strategy, seed=1)
    b = _planner(rows, num_y, strategy=strategy, seed=1)
    for epoch in range(3):
        assert [p.tolist() for p in _epoch_pairs(a, epoch)] == [
            p.tolist() for p in _epoch_pairs(b, epoch)
        ]


def test_orders_change_between_epochs_and_seeds():
    rows = [[0, 1, 2]] * 50
    planner = _planner(rows, 3, seed=1)
    first, second = _epoch_pairs(planner, 0), _epoch_pairs(planner, 1)
    assert first[0].tolist() != second[0].tolist()
    assert first[1].tolist() != second[1].tolist()
    other = _epoch_pairs(_planner(rows, 3, seed=2), 0)
    assert other[0].tolist() != first[0].tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_uniform_choice_passes_chi_square(seed):
    # 3000 x share the same 5 valid y: one epoch draws 3000 samples from the valid list.
    degree, num_x = 5, 3000
    planner = _planner([list(range(degree))] * num_x, degree, seed=seed, batch_size=100)
    counts = np.zeros(degree)
    for epoch in range(2):
        _, ys = _epoch_pairs(planner, epoch)
        counts += np.bincount(ys[:num_x], minlength=degree)
    assert stats.chisquare(counts).pvalue > 1e-3
    # A row of a different degree draws only from its own list, uniformly too.
    rows = [[7, 9]] * 2000 + [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]] * 10
    planner = _planner(rows, 10, seed=seed, batch_size=100)
    xs, ys = _epoch_pairs(planner, 0)
    two = ys[:2010][xs[:2010] < 2000]
    assert set(two.tolist()) == {7, 9}
    assert stats.chisquare(np.bincount(two, minlength=10)[[7, 9]]).pvalue > 1e-3


@FEW
@given(graph=pair_graphs(max_degree=6), seed=st.integers(0, 2**31))
def test_least_sampled_covers_every_pair_within_max_degree_epochs(graph, seed):
    rows, num_y = graph
    planner = _planner(rows, num_y, strategy="least_sampled", seed=seed)
    max_degree = max(len(r) for r in rows)
    counts = collections.Counter()
    for epoch in range(2 * max_degree + 1):
        # Each epoch's choice of each x (wrap repeats the start of the order: count it once).
        xs, ys = _epoch_pairs(planner, epoch)
        chosen = dict(zip(xs.tolist(), ys.tolist(), strict=True))
        assert sorted(chosen) == list(range(len(rows)))
        counts.update(chosen.items())
        if epoch == max_degree - 1:
            assert set(counts) == {(x, y) for x, row in enumerate(rows) for y in row}
        # Every pick was one of its x's least-planned pairs: within a row, counts differ by at
        # most one after every epoch.
        for x, row in enumerate(rows):
            row_counts = [counts[(x, y)] for y in row]
            assert max(row_counts) - min(row_counts) <= 1, (epoch, x, row_counts)
    assert sum(counts.values()) == (2 * max_degree + 1) * len(rows)


def test_least_sampled_breaks_ties_at_random():
    # Fresh counts tie everywhere: the first choice of a degree-4 row is uniform over seeds.
    firsts = [
        int(_epoch_pairs(_planner([[0, 1, 2, 3]], 4, strategy="least_sampled", seed=s), 0)[1][0])
        for s in range(200)
    ]
    assert stats.chisquare(np.bincount(firsts, minlength=4)).pvalue > 1e-3


@pytest.mark.parametrize("strategy", ["uniform", "least_sampled"])
def test_any_epoch_is_planned_alone_as_in_order(strategy):
    rows = [[0, 1, 2], [1], [0, 2], [2, 1, 0, 3]] * 5
    in_order = _planner(rows, 4, strategy=strategy, seed=4)
    expected = [_epoch_pairs(in_order, epoch) for epoch in range(9)]
    for epoch in (7, 2, 8, 0, 5):  # out of order, each on a fresh planner too
        for planner in (in_order, _planner(rows, 4, strategy=strategy, seed=4)):
            got = _epoch_pairs(planner, epoch)
            assert all(map(np.array_equal, got, expected[epoch])), epoch


def _pairs_of(dataset) -> list[tuple[list[int], list[int]]]:
    return [(b["x_index"].tolist(), b["y_index"].tolist()) for b in dataset.as_numpy_iterator()]


@FEW_DATASETS
@given(
    graph=pair_graphs(max_x=30),
    strategy=st.sampled_from(["uniform", "least_sampled"]),
    num_workers=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_worker_datasets_are_disjoint_slices_of_the_plan(graph, strategy, num_workers, seed):
    rows, num_y = graph
    x = np.arange(len(rows), dtype=np.int64)
    y = np.arange(num_y, dtype=np.int64)
    reference = _planner(
        rows, num_y, strategy=strategy, seed=seed, batch_size=3, num_workers=num_workers
    )
    per_worker = []
    for worker in range(num_workers):
        ds = dynamic_pairs(
            x,
            y,
            rows,
            batch_size=3,
            strategy=strategy,
            seed=seed,
            worker_index=worker,
            num_workers=num_workers,
        )
        per_worker.append([_pairs_of(ds) for _ in range(2)])
    for epoch in range(2):
        plan = reference.plan(epoch)
        global_batches = list(
            zip(plan["x_index"].numpy().tolist(), plan["y_index"].numpy().tolist(), strict=True)
        )
        got = [batch for worker in per_worker for batch in worker[epoch]]
        # Whole batches, each exactly once over the workers; their union is the global plan.
        assert sorted(got) == sorted(global_batches)
        for worker, batches in enumerate(per_worker):
            assert batches[epoch] == global_batches[worker::num_workers]


@pytest.mark.parametrize("strategy", ["uniform", "least_sampled"])
@pytest.mark.parametrize("epoch,step", [(0, 1), (1, 3), (2, 2)])
def test_resume_yields_exactly_the_remaining_elements(tmp_path, strategy, epoch, step):
    rng = np.random.default_rng(epoch)
    rows = [rng.choice(8, size=rng.integers(1, 5), replace=False).tolist() for _ in range(23)]
    x, y = np.arange(23), np.arange(8)
    valid = ValidPairs.build(rows, num_y=8)

    def make(state, initial_step=0):
        return dynamic_pairs(
            x,
            y,
            valid,
            batch_size=5,
            strategy=strategy,
            seed=3,
            state=state,
            initial_step=initial_step,
        )

    uninterrupted = make(PairingState(valid, strategy))
    reference = [_pairs_of(uninterrupted) for _ in range(epoch + 2)]

    state = PairingState(valid, strategy)
    interrupted = make(state)
    for _ in range(epoch):
        _pairs_of(interrupted)
    iterator = interrupted.as_numpy_iterator()
    consumed = [next(iterator) for _ in range(step)]
    path = tf.train.Checkpoint(sampler=state).write(str(tmp_path / "ckpt"))
    del iterator

    restored = PairingState(valid, strategy)
    tf.train.Checkpoint(sampler=restored).read(path).assert_consumed()
    resumed = make(restored, initial_step=step)
    rest = _pairs_of(resumed)
    head = [(b["x_index"].tolist(), b["y_index"].tolist()) for b in consumed]
    assert head + rest == reference[epoch]
    assert _pairs_of(resumed) == reference[epoch + 1]


def test_bad_valid_pairs_fail_with_a_clear_error():
    x, y = np.arange(4), np.arange(3)
    with pytest.raises(ValueError, match=r"y index 7 out of range for x 1 \(num_y = 3\)"):
        dynamic_pairs(x, y, [[0], [1, 7], [2], [0]], batch_size=2)
    with pytest.raises(ValueError, match=r"x 2 has an empty valid list"):
        dynamic_pairs(x, y, [[0], [1], [], [0]], batch_size=2)
    with pytest.raises(ValueError, match=r"x 3 has an empty valid list"):
        dynamic_pairs(x, y, [[0], [1], [2]], batch_size=2)  # fewer rows than x
    with pytest.raises(ValueError, match=r"beyond the x records \(num_x = 4\)"):
        dynamic_pairs(x, y, [[0], [1], [2], [0], [1]], batch_size=2)
    with pytest.raises(ValueError, match="row_splits must start at 0"):
        ValidPairs.build((np.array([1, 2]), np.array([0, 1])))
    with pytest.raises(ValueError, match="non-decreasing"):
        ValidPairs.build((np.array([0, 2, 1, 3]), np.array([0, 1, 2])))
    with pytest.raises(ValueError, match="values must be a 1-D integer array"):
        ValidPairs.build([[0], [1.5]])
    with pytest.raises(TypeError, match="valid_pairs must be"):
        ValidPairs.build({"x": [1]})
    with pytest.raises(ValueError, match="no x has a valid pair"):
        ValidPairs.build([[], []], on_invalid="skip")


def test_bad_valid_pairs_skipped_and_counted():
    rows = [[0], [1, 7], [], [2, 1], [0], [1]]  # x 1: y out of range; x 2: empty; x 5: beyond
    valid = ValidPairs.build(rows, num_x=5, num_y=3, on_invalid="skip")
    assert valid.skipped == {Y_OUT_OF_RANGE: 1, EMPTY_VALID_LIST: 1, X_OUT_OF_RANGE: 1}
    assert valid.skipped_x.tolist() == [1, 2]
    assert valid.planned_x.tolist() == [0, 3, 4]
    assert valid.num_x == 5
    ds = dynamic_pairs(np.arange(5), np.arange(3), valid, batch_size=3)
    [batch] = _pairs_of(ds)
    assert sorted(batch[0]) == [0, 3, 4]
    assert all(y in rows[x] for x, y in zip(*batch, strict=True))


def test_fit_repairs_every_epoch_with_known_cardinality():
    import keras

    rows = [[i % 7, (i * 3 + 1) % 7] for i in range(30)]
    x = np.eye(30, dtype=np.float32)[:, :7]
    y = np.eye(7, dtype=np.float32)
    state = PairingState(ValidPairs.build(rows, num_y=7))
    seen: list[list[tuple[int, int]]] = [[]]
    ds = dynamic_pairs(x, y, rows, batch_size=8, state=state)
    assert ds.cardinality().numpy() == 4

    def remember(batch):
        def record(xs, ys):
            seen[-1].extend(zip(xs.tolist(), ys.tolist(), strict=True))
            return np.int64(0)

        done = tf.numpy_function(record, [batch["x_index"], batch["y_index"]], tf.int64)
        with tf.control_dependencies([done]):
            return tf.identity(batch["x"]), tf.identity(batch["y"])

    class NextEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append([])

    inputs = keras.Input([7])
    model = keras.Model(inputs, keras.layers.Dense(7)(inputs))
    model.compile("sgd", "mse")
    model.fit(ds.map(remember), epochs=3, verbose=0, callbacks=[NextEpoch()])
    epochs = seen[:3]
    assert state.epoch.numpy() == 3
    for pairs in epochs:
        assert len(pairs) == 32 and {x for x, _ in pairs} == set(range(30))
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("pairs_run"))
    rng = np.random.default_rng(4)
    x_images = runs.random_images(rng, 21, shape=(6, 5, 3))
    y_images = runs.random_images(rng, 9, shape=(6, 5, 3))
    runs.write_record_set(
        output_dir, "x", [runs.image_example(f"x{i}", p) for i, p in enumerate(x_images)]
    )
    runs.write_record_set(
        output_dir,
        "y",
        [runs.image_example(f"y{i}", p) for i, p in enumerate(y_images)],
        num_shards=2,
    )
    rows = [rng.choice(9, size=rng.integers(1, 4), replace=False).tolist() for _ in range(21)]
    runs.write_pairs(output_dir, rows)
    return output_dir, x_images, y_images, rows


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_materialized_run_pairs_carry_the_right_images(image_run, backend):
    output_dir, x_images, y_images, rows = image_run
    image = ImageSpec(6, 5, 3, tf.float32)
    ds = dynamic_pairs(
        output_dir,
        batch_size=4,
        image=image,
        strategy="least_sampled",
        store_options=StoreOptions(backend=backend),
    )
    assert ds.element_spec == {
        "x": tf.TensorSpec([4, 6, 5, 3], tf.float32),
        "y": tf.TensorSpec([4, 6, 5, 3], tf.float32),
        "x_index": tf.TensorSpec([4], tf.int64),
        "y_index": tf.TensorSpec([4], tf.int64),
    }
    assert ds.cardinality().numpy() == 6
    for batch in ds.as_numpy_iterator():
        for i, (x, y) in enumerate(zip(batch["x_index"], batch["y_index"], strict=True)):
            assert y in rows[x]
            np.testing.assert_allclose(batch["x"][i], x_images[x] / 255.0, atol=1e-6)
            np.testing.assert_allclose(batch["y"][i], y_images[y] / 255.0, atol=1e-6)


def test_damaged_records_skip_their_pairs(tmp_path):
    output_dir = str(tmp_path)
    x_records = [runs.image_example(f"x{i}", np.full([2, 2, 3], i, np.uint8)) for i in range(12)]
    y_records = [runs.image_example(f"y{i}", np.full([2, 2, 3], i, np.uint8)) for i in range(3)]
    x_records[5] = b"not an example"
    runs.write_record_set(output_dir, "x", x_records, num_shards=2)
    runs.write_record_set(output_dir, "y", y_records, num_shards=1)
    runs.write_pairs(output_dir, [[i % 3] for i in range(12)])
    failing = dynamic_pairs(
        open_run(output_dir),
        batch_size=4,
        image=ImageSpec(2, 2, 3),
        check_examples=True,
        store_options=StoreOptions(backend="disk"),
    )
    with pytest.raises(tf.errors.OpError, match=r"record 5 \(shard .*data-00000-of-00002"):
        list(failing)
    x_store, _, _ = open_pairs_run(
        output_dir,
        store_options=StoreOptions(backend="disk", on_damaged="skip"),
        check_examples=True,
    )
    skipping = dynamic_pairs(
        x_store,
        open_pairs_run(output_dir)[1],
        [[i % 3] for i in range(12)],
        batch_size=4,
        image=ImageSpec(2, 2, 3),
    )
    assert skipping.element_spec["x_index"] == tf.TensorSpec([None], tf.int64)
    xs = [x for b in skipping.as_numpy_iterator() for x in b["x_index"].tolist()]
    assert sorted(xs) == [i for i in range(12) if i != 5]
    assert x_store.damaged_count.numpy() == 1


@pytest.mark.parametrize("strategy", ["uniform", "least_sampled"])
def test_the_datasets_plan_a_batch_at_a_time(monkeypatch, strategy):
    """`dataset()` and `epochs_dataset()` never build a whole epoch's plan: each batch is
    planned from its number, and is the row of the whole plan all the same."""
    rows = [[0, 1], [1], [2], [3, 0], [0], [2, 3], [1, 2]]
    sampler = DynamicPairsSampler(
        np.arange(7), np.arange(4), rows, batch_size=2, strategy=strategy, seed=3
    )
    expected = [sampler.planner.plan(epoch) for epoch in range(2)]

    def whole_epoch(epoch):
        raise AssertionError("the dataset planned a whole epoch")

    monkeypatch.setattr(sampler.planner, "plan", whole_epoch)
    dataset = sampler.dataset()
    for epoch in range(2):
        got = [batch["y_index"].tolist() for batch in dataset.as_numpy_iterator()]
        assert got == expected[epoch]["y_index"].numpy().tolist()
    ranged = sampler.epochs_dataset(start_epoch=0, num_epochs=2)
    got = [batch["y_index"].tolist() for batch in ranged.as_numpy_iterator()]
    assert got == [row for plan in expected for row in plan["y_index"].numpy().tolist()]


def test_datasets_as_inputs():
    x = tf.data.Dataset.range(6).map(lambda i: {"pixels": tf.fill([2], i)})
    y = tf.data.Dataset.range(4).map(lambda i: tf.strings.as_string(i))
    rows = [[0, 1], [1], [2], [3], [0], [2, 3]]
    ds = dynamic_pairs(x, y, rows, batch_size=3, strategy="least_sampled")
    assert ds.element_spec["x"] == {"pixels": tf.TensorSpec([3, 2], tf.int64)}
    assert ds.element_spec["y"] == tf.TensorSpec([3], tf.string)
    for batch in ds.as_numpy_iterator():
        assert batch["x"]["pixels"][:, 0].tolist() == batch["x_index"].tolist()
        assert batch["y"].tolist() == [str(i).encode() for i in batch["y_index"]]


def test_bad_arguments_are_rejected():
    x, y, rows = np.arange(4), np.arange(2), [[0], [1], [0], [1]]
    with pytest.raises(ValueError, match="strategy"):
        dynamic_pairs(x, y, rows, batch_size=2, strategy="greedy")
    with pytest.raises(ValueError, match="remainder"):
        dynamic_pairs(x, y, rows, batch_size=2, remainder="pad")
    with pytest.raises(ValueError, match="batch_size"):
        dynamic_pairs(x, y, rows, batch_size=0)
    with pytest.raises(ValueError, match="leaves no batch"):
        dynamic_pairs(x, y, rows, batch_size=5, remainder="drop")
    other = PairingState(ValidPairs.build([[0], [1]]), "uniform")
    with pytest.raises(ValueError, match="state was made for"):
        dynamic_pairs(x, y, rows, batch_size=2, state=other)


def test_batches_divide_evenly_over_workers_and_their_replicas():
    rows = [[0]] * 10
    for workers, replicas in [(1, 2), (2, 2), (3, 1)]:
        planner = _planner(rows, 1, batch_size=2, num_workers=workers, replicas_per_worker=replicas)
        assert planner.num_batches % (workers * replicas) == 0
        assert planner.num_batches * 2 >= 10


def test_building_under_a_strategy_scope_is_a_clear_error():
    with (
        tf.distribute.OneDeviceStrategy("/cpu:0").scope(),
        pytest.raises(ValueError, match="outside `strategy.scope"),
    ):
        dynamic_pairs(np.arange(2), np.arange(2), [[0], [1]], batch_size=2)
