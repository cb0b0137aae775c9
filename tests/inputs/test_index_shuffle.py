"""The keyed elementwise permutation (`index_shuffle`): a bijection at every size, an independent
permutation per key and per row, and as random as a true permutation by the usual measures."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.inputs import index_shuffle
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_seed
from tfx_dynamic_inputs.inputs.index_shuffle import gather_permuted, permuted_positions

SIZES = [1, 2, 3, 5, 7, 31, 64, 65, 97, 1000, 4099, 65537]


def _traced() -> tf.types.experimental.PolymorphicFunction:
    """The permutation of `[0, size)` as one traced graph (`ROUNDS` as it is now)."""
    return tf.function(
        lambda size, seed: permuted_positions(tf.range(size), size, seed),
        input_signature=[tf.TensorSpec([], tf.int64), tf.TensorSpec([2], tf.int64)],
    )


_TRACED = _traced()


def _permutation(size: int, seed: int, epoch: int = 0, traced=_TRACED) -> np.ndarray:
    return traced(tf.constant(size, tf.int64), epoch_seed(seed, epoch)).numpy()


@pytest.mark.parametrize("implementation", ["tensorflow", "auto"])
@pytest.mark.parametrize("size", SIZES)
def test_a_bijection_of_every_size_including_1_2_and_primes(size, implementation):
    order = permuted_positions(
        tf.range(size, dtype=tf.int64), size, epoch_seed(size, 0), implementation=implementation
    )
    assert sorted(order.numpy()) == list(range(size))


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 3000),
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**40),
)
def test_a_bijection_for_any_seed_and_epoch(size, seed, epoch):
    assert np.array_equal(np.sort(_permutation(size, seed, epoch)), np.arange(size))


@settings(max_examples=25, deadline=None)
@given(
    degrees=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    seed=st.integers(0, 2**62),
)
def test_each_row_of_a_ragged_call_is_its_own_bijection(degrees, seed):
    degrees = np.array(degrees)
    rows = np.repeat(np.arange(len(degrees)), degrees)
    positions = np.concatenate([np.arange(d) for d in degrees])
    out = permuted_positions(positions, degrees[rows], epoch_seed(seed, 1), tweak=rows).numpy()
    for row, degree in enumerate(degrees):
        assert sorted(out[rows == row]) == list(range(degree))
    # The same rows with the same keys, one at a time: the op is elementwise.
    single = [
        permuted_positions([p], [d], epoch_seed(seed, 1), tweak=[r]).numpy()[0]
        for p, d, r in zip(positions[:10], degrees[rows][:10], rows[:10], strict=True)
    ]
    assert single == out[:10].tolist()


def test_every_ordering_of_a_small_row_is_about_equally_likely():
    """3,000 rows of 4 (one call, a tweak per row) x 4 seeds: the 24 orderings, chi-square."""
    rows = np.repeat(np.arange(3000), 4)
    counts = collections.Counter()
    for seed in range(4):
        out = permuted_positions(np.tile(np.arange(4), 3000), 4, epoch_seed(seed, 11), rows)
        counts.update(map(tuple, out.numpy().reshape(3000, 4)))
    assert set(counts) == set(itertools.permutations(range(4)))
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


@pytest.mark.parametrize("size", [2, 3, 5, 6, 9, 12, 17, 33, 64, 65, 100, 1000])
def test_where_two_positions_land_is_uniform_over_keys_at_small_sizes(size):
    """Over 100,000 keys (a tweak each): where position 0 lands, and how far position 1 lands
    from it (chi-square). Small sizes are where a Feistel network with cycle walking is weakest
    (6 rounds fail this at 5 records with p ~ 1e-200)."""
    keys = 100_000
    out = permuted_positions(
        np.tile([0, 1], keys), size, epoch_seed(5, 3), np.repeat(np.arange(keys), 2)
    ).numpy()
    first, second = out[0::2], out[1::2]
    assert stats.chisquare(np.bincount(first, minlength=size)).pvalue > 1e-4
    if size > 2:
        gaps = np.bincount((second - first) % size, minlength=size)[1:]
        assert stats.chisquare(gaps).pvalue > 1e-4


def test_the_key_tells_permutations_apart_in_every_word():
    base = _permutation(500, seed=7)
    assert not np.array_equal(base, _permutation(500, seed=7 + (1 << 40)))  # high bits only
    assert not np.array_equal(base, _permutation(500, seed=8))
    assert not np.array_equal(base, _permutation(500, seed=7, epoch=1))
    rows = permuted_positions(
        np.tile(np.arange(50), 2), 50, epoch_seed(7, 0), tweak=np.repeat([3, 3 + (1 << 33)], 50)
    ).numpy()
    assert not np.array_equal(rows[:50], rows[50:])


def _quality_failures(permutations: np.ndarray) -> list[str]:
    """The measures on which `permutations` (one per seed, [seeds, size]) fail bounds that a true
    random permutation meets with a wide margin."""
    seeds, size = permutations.shape
    failures = []
    # A random permutation moves an element by (size^2 - 1) / (3 size) on average.
    displacement = np.abs(permutations - np.arange(size)).mean()
    if abs(displacement - (size**2 - 1) / (3 * size)) > 0.01 * size:
        failures.append(f"mean displacement {displacement:.1f}")
    # Neighbouring positions correlate as two draws without replacement do, -1 / (size - 1),
    # give or take 1 / sqrt(size * seeds).
    correlation = np.corrcoef(permutations[:, :-1].ravel(), permutations[:, 1:].ravel())[0, 1]
    if abs(correlation + 1 / (size - 1)) > 4 / np.sqrt(size * seeds):
        failures.append(f"neighbour correlation {correlation:.4f}")
    # Neighbours land in order as often as not.
    in_order = (permutations[:, 1:] > permutations[:, :-1]).mean()
    if abs(in_order - 0.5) > 4 / np.sqrt(seeds * (size - 1)):
        failures.append(f"neighbours in order {in_order:.4f}")
    # Where each position lands over the seeds: uniform over `size` places (chi-square); with
    # `size` tests, a p-value under 1e-3 / size would flag a true permutation once in 1,000 runs.
    p_values = [
        stats.chisquare(np.bincount(column, minlength=size)).pvalue for column in permutations.T
    ]
    if min(p_values) < 1e-3 / size:
        failures.append(f"landing places: min p {min(p_values):.2g}")
    return failures


def test_shuffle_quality_matches_a_true_permutation(monkeypatch):
    """Over 2,000 seeds of a 100-record permutation, against NumPy's permutation (the reference);
    the same measures catch a network of too few rounds."""
    size, seeds = 100, 2000
    ours = np.stack([_permutation(size, seed) for seed in range(seeds)])
    rng = np.random.default_rng(0)
    true = np.stack([rng.permutation(size) for _ in range(seeds)])
    assert _quality_failures(true) == []
    assert _quality_failures(ours) == []
    monkeypatch.setattr(index_shuffle, "ROUNDS", 2)
    two_rounds = _traced()
    weak = np.stack([_permutation(size, seed, traced=two_rounds) for seed in range(seeds)])
    assert _quality_failures(weak), "2 rounds should be visibly non-random"


NATIVE = native.op_library() is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="the native library is not built here")


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.one_of(st.integers(1, 70), st.integers(1, 2**62)), min_size=1, max_size=50),
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**40),
    data=st.data(),
)
def test_the_native_op_and_the_tensorflow_ops_give_the_same_positions(sizes, seed, epoch, data):
    positions = [data.draw(st.integers(0, size - 1)) for size in sizes]
    tweak = data.draw(
        st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(sizes), max_size=len(sizes))
    )
    results = {
        implementation: permuted_positions(
            positions, sizes, epoch_seed(seed, epoch), tweak, implementation=implementation
        ).numpy()
        for implementation in ("native", "tensorflow")
    }
    assert np.array_equal(results["native"], results["tensorflow"])


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    size=st.one_of(st.integers(17, 5000), st.integers(17, 2**62)),
    count=st.integers(0, 700),
    seed=st.integers(-(2**63), 2**63 - 1),
    tweak=st.integers(-(2**63), 2**63 - 1),
    data=st.data(),
)
def test_one_shared_size_takes_the_blocked_path_and_gives_the_same_positions(
    size, count, seed, tweak, data
):
    """A scalar size and tweak (an epoch's order) run the native op's block-by-block passes,
    more than one block (256) and a partial one; the values are the element-by-element ones."""
    positions = data.draw(st.lists(st.integers(0, size - 1), min_size=count, max_size=count))
    results = {
        implementation: permuted_positions(
            tf.constant(positions, tf.int64),
            size,
            epoch_seed(seed, 0),
            tweak,
            implementation=implementation,
        ).numpy()
        for implementation in ("native", "tensorflow")
    }
    assert np.array_equal(results["native"], results["tensorflow"])
    if size <= 5000:
        whole = permuted_positions(tf.range(size, dtype=tf.int64), size, epoch_seed(seed, 0))
        assert sorted(whole.numpy().tolist()) == list(range(size))


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    keys=st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300),
    ),
    seed=st.integers(-(2**63), 2**63 - 1),
    epoch=st.integers(0, 2**40),
    salt=st.integers(0, 7),
)
def test_the_native_op_and_the_tensorflow_ops_give_the_same_keyed_draws(keys, seed, epoch, salt):
    """The keyed bits under `keyed_uniform`, `keyed_offsets` and `keyed_seeds` (the native
    `ElementKeys` op where built): the same uint64 values and shape, for a scalar key, none,
    and many."""
    results = {
        implementation: index_shuffle._keyed_bits(
            epoch_seed(seed, epoch), keys, salt, implementation=implementation
        )
        for implementation in ("native", "tensorflow")
    }
    assert results["native"].dtype == results["tensorflow"].dtype == tf.uint64
    assert results["native"].shape == results["tensorflow"].shape == np.shape(keys)
    assert np.array_equal(results["native"].numpy(), results["tensorflow"].numpy())


@settings(max_examples=25, deadline=None)
@given(
    size=st.integers(1, 3000),
    extra=st.integers(0, 5),
    count=st.integers(0, 600),
    seed=st.integers(-(2**63), 2**63 - 1),
    data=st.data(),
)
def test_gather_permuted_is_the_permutation_then_the_gather(size, extra, count, seed, data):
    """The fused op (native where built, sizes above the rank sizes) against the two steps in
    TensorFlow ops, on a random table at least as long as the permutation."""
    table = data.draw(
        st.lists(st.integers(-(2**63), 2**63 - 1), min_size=size + extra, max_size=size + extra)
    )
    positions = data.draw(st.lists(st.integers(0, size - 1), min_size=count, max_size=count))
    positions = tf.constant(positions, tf.int64)
    order, values = gather_permuted(
        tf.constant(table, tf.int64), positions, size, epoch_seed(seed, 1)
    )
    expected = permuted_positions(positions, size, epoch_seed(seed, 1), implementation="tensorflow")
    assert order.numpy().tolist() == expected.numpy().tolist()
    assert values.numpy().tolist() == [table[i] for i in expected.numpy().tolist()]


@pytest.mark.parametrize(
    "implementation", ["tensorflow", pytest.param("native", marks=needs_native)]
)
def test_a_position_outside_the_permutation_is_an_error(implementation):
    for positions, size in (([0, 5], 5), ([-1], 5), ([0], 0)):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match=r"outside \[0, size|outside \[0, "
        ):
            permuted_positions(positions, size, epoch_seed(0, 0), implementation=implementation)
    with pytest.raises(ValueError, match="implementation must be one of"):
        permuted_positions([0], 1, epoch_seed(0, 0), implementation="cuda")


def test_a_batch_costs_its_own_size_at_a_billion_records():
    """Any batch of a 10^9-record epoch, without anything of that size."""
    size = 10**9
    batch = tf.range(size - 256, size, dtype=tf.int64)
    out = permuted_positions(batch, size, epoch_seed(0, 5)).numpy()
    assert len(set(out.tolist())) == 256 and out.min() >= 0 and out.max() < size
