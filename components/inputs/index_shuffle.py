"""Keyed bijective permutations computed elementwise: any position of any permutation in O(1).

`permuted_positions(positions, size, seed)` is where each of `positions` goes in the random
permutation of `[0, size)` that `seed` picks, one element at a time, so a batch of an epoch's order
costs O(batch) time and memory and nothing of size N is ever built. `size` and the key may differ
per element (`tweak`), so one call also draws an independent permutation for every row of a ragged
index, such as each x's own order of its valid partners.

Up to `RANK_MAX_SIZE` records a position's place is the rank of its keyed hash among those of
the whole `[0, size)`, ties by position. Above, the permutation is a Feistel network over the
`bits`-bit numbers, `2**bits` the next power of two at or above `size`, with cycle walking: a
number at or past `size` is permuted again until it falls inside, which keeps the map a
bijection of `[0, size)` and costs at most a factor 2 of domain. A number is split into its high
`bits - bits // 2` and low `bits // 2` bits, and the rounds take turns xoring one part with a
keyed hash of the other (an unbalanced Feistel network: each round is its own inverse, so the
whole is a bijection for any split, odd `bits` included). The hash is SplitMix64's finalizer
over the part, the round number and a 64-bit key drawn from the stateless seed
(`epoch_plan.epoch_seed`, itself a hash of the sampler seed, epoch and salt) and the tweak.

It runs as the native `PermutePositions` op (`tfx_dynamic_inputs.native`, C++ over the intra-op
threads) where the native library is built, and else as the same computation in TensorFlow ops,
bit for bit equal (tests/inputs/test_index_shuffle.py) and about 6 times slower (bench/). The
keyed draws (`keyed_uniform`, `keyed_offsets`, `keyed_seeds`) hash with the native
`ElementKeys` op alike, for a smaller graph rather than speed.

Why not TensorFlow's own `tf.random.experimental.index_shuffle` (the same construction, as a C++
op): in TF 2.16 and 2.21 it is not a bijection when `size - 1` is an even power of two from 2**16
on (65,537, 262,145, 1,048,577 and 4,194,305 records each give duplicate positions), and its key
keeps only the low 32 bits of each seed word, so seeds differing in their high bits give the
same permutation.
"""

from __future__ import annotations

from types import ModuleType

import tensorflow as tf

from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.plans import keyed_hash
from tfx_dynamic_inputs.plans.keyed_hash import RANK_MAX_SIZE, ROUNDS, SMALL_BITS, SMALL_ROUNDS

# The hash's constants and the round counts are stated once, with the NumPy plans' executor.
_GOLDEN = keyed_hash.GOLDEN
_MIX_1 = keyed_hash.MIX_1
_MIX_2 = keyed_hash.MIX_2


def _u64(value: int | tf.Tensor) -> tf.Tensor:
    if isinstance(value, int):
        return tf.constant(value, tf.uint64)
    return tf.bitcast(tf.cast(value, tf.int64), tf.uint64)


def _shift_right(value: tf.Tensor, bits: int) -> tf.Tensor:
    return tf.bitwise.right_shift(value, tf.constant(bits, tf.uint64))


def _mix(value: tf.Tensor) -> tf.Tensor:
    """SplitMix64's finalizer: a bijective avalanche of a uint64."""
    value = tf.bitwise.bitwise_xor(value, _shift_right(value, 30)) * _u64(_MIX_1)
    value = tf.bitwise.bitwise_xor(value, _shift_right(value, 27)) * _u64(_MIX_2)
    return tf.bitwise.bitwise_xor(value, _shift_right(value, 31))


def _element_key(seed: tf.Tensor, tweak: tf.Tensor) -> tf.Tensor:
    """uint64 key of each element's permutation (the shape of `tweak`, int64 [] or [n]); the
    native op derives the same in C++."""
    seed = _u64(seed)
    base = _mix(tf.bitwise.bitwise_xor(_mix(seed[0] + _u64(_GOLDEN)), seed[1]))
    return _mix(tf.bitwise.bitwise_xor(base, _mix(_u64(tweak) + _u64(_GOLDEN))))


def _bit_width(size: tf.Tensor) -> tf.Tensor:
    """uint64: the bits of the largest position, `size - 1` (0 for a size of 1)."""
    rest = size - 1
    width = tf.zeros_like(rest)
    for step in (32, 16, 8, 4, 2, 1):  # binary search of the highest set bit
        shifted = tf.bitwise.right_shift(rest, step)
        wide = shifted > 0
        width = tf.where(wide, width + step, width)
        rest = tf.where(wide, shifted, rest)
    return tf.cast(width + tf.cast(rest > 0, tf.int64), tf.uint64)


def _feistel(value: tf.Tensor, key: tf.Tensor, bits: tf.Tensor) -> tf.Tensor:
    """One pass of the network over uint64 `value` (< 2**bits) with each element's `key`:
    `ROUNDS` rounds, or `SMALL_ROUNDS` where `bits <= SMALL_BITS`."""
    low_bits = _shift_right(bits, 1)
    one = _u64(1)
    low_mask = tf.bitwise.left_shift(one, low_bits) - one
    high_mask = tf.bitwise.left_shift(one, bits - low_bits) - one
    high = tf.bitwise.right_shift(value, low_bits)
    low = tf.bitwise.bitwise_and(value, low_mask)
    small = bits <= _u64(SMALL_BITS)
    for round_number in range(max(ROUNDS, SMALL_ROUNDS)):
        round_key = key + _u64((round_number + 1) * _GOLDEN % (1 << 64))
        if round_number % 2 == 0:
            hashed = _mix(tf.bitwise.bitwise_xor(low, round_key))
            updated = tf.bitwise.bitwise_xor(high, tf.bitwise.bitwise_and(hashed, high_mask))
            high = _in_round(round_number, small, updated, high)
        else:
            hashed = _mix(tf.bitwise.bitwise_xor(high, round_key))
            updated = tf.bitwise.bitwise_xor(low, tf.bitwise.bitwise_and(hashed, low_mask))
            low = _in_round(round_number, small, updated, low)
    return tf.bitwise.bitwise_or(tf.bitwise.left_shift(high, low_bits), low)


def _in_round(round_number: int, small: tf.Tensor, updated: tf.Tensor, kept: tf.Tensor):
    """`updated` where the element's network has this round, else `kept`."""
    if round_number < min(ROUNDS, SMALL_ROUNDS):
        return updated
    return tf.where(small if round_number >= ROUNDS else ~small, updated, kept)


def keyed_uniform(seed: tf.Tensor, positions: tf.Tensor, salt: int) -> tf.Tensor:
    """A uniform draw in [0, 1) for each position, a pure function of (seed, salt, position).

    Unlike `tf.random.stateless_uniform` over a batch, a draw does not depend on the batch it
    is computed in: the same sample draws the same in a global batch and in any replica's slice
    of it (`audio_features`'s crops and masks).

    Args:
      seed: int64 [2], a stateless seed.
      positions: int64 [n], the positions (of the samples in their global batch).
      salt: the purpose of the draw; different salts are independent draws.

    Returns:
      float64 [n].

    Example:

        keyed_uniform(tf.constant([7, 0], tf.int64), tf.range(3, dtype=tf.int64), salt=0)
    """
    key = _keyed_bits(seed, positions, salt)
    # The top 53 bits: every float64 value they make is exact and below 1.
    return tf.cast(_shift_right(key, 11), tf.float64) * (2.0**-53)


def _keyed_bits(
    seed: tf.Tensor, keys: tf.Tensor, salt: int, implementation: str = "auto"
) -> tf.Tensor:
    """uint64, the shape of `keys`: 64 keyed bits of each key, a pure function of (seed, salt,
    key). The native `ElementKeys` op where built, one node where the TensorFlow ops are about
    40; `implementation` as in `permuted_positions` (the tests compare the two)."""
    salted = tf.random.experimental.stateless_fold_in(
        tf.cast(seed, tf.int64), tf.constant(salt, tf.int64)
    )
    keys = tf.convert_to_tensor(keys, tf.int64)
    op_module = _op_module(implementation)
    if op_module is not None:
        return op_module.element_keys(keys, salted)
    return _element_key(salted, keys)


def keyed_offsets(sizes: tf.Tensor, seed: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
    """A uniform random offset into each row, drawn for each key alone: a pure function of
    `(seed, key)`, so an element draws the same in a whole epoch's plan and in any batch of it.

    Args:
      sizes: int64 [n] (or a scalar for all), the row sizes (all >= 1).
      seed: int64 [2] stateless seed (`epoch_plan.epoch_seed`).
      keys: int64 [n], what each draw is for (the x record numbers, the short batches of a
        class-balanced plan); distinct keys draw independently.

    Returns:
      int64 [n]: entry `i` is uniform in `[0, sizes[i])`.

    Example:

        keyed_offsets(tf.constant([3, 1], tf.int64), epoch_seed(0, 2), tf.range(2, dtype=tf.int64))
    """
    uniform = keyed_uniform(seed, keys, salt=0)
    sizes = tf.convert_to_tensor(sizes, tf.int64)
    return tf.minimum(tf.cast(uniform * tf.cast(sizes, tf.float64), tf.int64), sizes - 1)


def keyed_seeds(seed: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
    """A stateless seed for each key, a pure function of `(seed, key)`: the seed of a global
    batch from its place in the epoch alone (`class_plan`).

    Args:
      seed: int64 [2], a stateless seed (`epoch_plan.epoch_seed`).
      keys: int64 [n].

    Returns:
      int64 [n, 2], each row 128 keyed bits.

    Example:

        keyed_seeds(epoch_seed(0, 1), tf.range(4, dtype=tf.int64))  # four batches' seeds
    """
    words = [tf.bitcast(_keyed_bits(seed, keys, salt=word), tf.int64) for word in (0, 1)]
    return tf.stack(words, axis=1)


IMPLEMENTATIONS = ("auto", "native", "tensorflow")


def _op_module(implementation: str) -> ModuleType | None:
    """The native op module that `implementation` (one of `IMPLEMENTATIONS`) runs on, or None
    for the TensorFlow ops: with "auto", where the native library is not built.

    Raises:
      ValueError: an unknown `implementation`, or "native" without the native library.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    op_module = None if implementation == "tensorflow" else native.op_library()
    if op_module is None and implementation == "native":
        raise ValueError(
            "implementation='native' needs the native library: python -m tfx_dynamic_inputs.native"
        )
    return op_module


def permuted_positions(
    positions: tf.Tensor,
    size: tf.Tensor,
    seed: tf.Tensor,
    tweak: tf.Tensor | None = None,
    implementation: str = "auto",
) -> tf.Tensor:
    """Where each of `positions` lands in the keyed random permutation of `[0, size)`.

    For a fixed key (`seed`, and the element's `tweak`) and `size` the map is a bijection of
    `[0, size)`; each element costs O(1) (two passes of the network on average).

    Args:
      positions: int64 [n], each in `[0, size)`.
      size: int64, a scalar or [n] (each element's own permutation size, >= 1).
      seed: int64 [2], a stateless seed (`epoch_plan.epoch_seed`).
      tweak: int64 [n], a further key word per element (e.g. the record number of the x whose
        partners are ordered), or None for one permutation.
      implementation: ``"native"``, the `PermutePositions` op (`tfx_dynamic_inputs.native`);
        ``"tensorflow"``, the same computation in TensorFlow ops (slower, no build needed);
        ``"auto"``, the op when the native library is built, else TensorFlow ops. Both give the
        same values.

    Returns:
      int64 [n].

    Raises:
      ValueError: an unknown `implementation`, or ``"native"`` without the native library.
      tf.errors.InvalidArgumentError: when run, a position outside `[0, size)`.

    Example:

        order = permuted_positions(tf.range(5, dtype=tf.int64), 5, epoch_seed(0, 3))
        sorted(order.numpy().tolist()) == [0, 1, 2, 3, 4]  # epoch 3's order of 5 records
    """
    op_module = _op_module(implementation)
    positions = tf.convert_to_tensor(positions, tf.int64)
    size = tf.convert_to_tensor(size, tf.int64)
    seed = tf.convert_to_tensor(seed, tf.int64)
    tweak = tf.zeros([], tf.int64) if tweak is None else tf.convert_to_tensor(tweak, tf.int64)
    if op_module is not None:
        # Sizes and tweaks as given (a scalar is not broadcast to n); the op derives the keys.
        return op_module.permute_positions(
            positions,
            size,
            tweak,
            seed,
            rounds=ROUNDS,
            small_rounds=SMALL_ROUNDS,
            small_bits=SMALL_BITS,
            rank_max_size=RANK_MAX_SIZE,
        )
    in_range = tf.debugging.Assert(
        tf.reduce_all((positions >= 0) & (positions < size)),
        ["permuted_positions: a position is outside [0, size)"],
    )
    shape = tf.shape(positions)
    key = tf.broadcast_to(_element_key(seed, tweak), shape)
    with tf.control_dependencies([in_range]):
        return _walked_positions(positions, tf.broadcast_to(size, shape), key)


def gather_permuted(
    table: tf.Tensor,
    positions: tf.Tensor,
    size: int,
    seed: tf.Tensor,
    implementation: str = "auto",
) -> tuple[tf.Tensor, tf.Tensor]:
    """`permuted_positions(positions, size, seed)` and `table` gathered at them, in one pass.

    The native `GatherPermuted` op computes a block of positions and issues its random loads
    together (an epoch's order and the values of its records, `pair_plan`); otherwise, and for
    sizes up to `RANK_MAX_SIZE`, the same as `permuted_positions` then `tf.gather`.

    Args:
      table: int64 [m], m >= `size`.
      positions: int64 [n], each in `[0, size)`.
      size: the permutation's size (one for all elements; the tweak is 0).
      seed: int64 [2], a stateless seed (`epoch_plan.epoch_seed`).
      implementation: as in `permuted_positions`.

    Returns:
      `(permuted, gathered)`: int64 [n] each, `gathered[i] = table[permuted[i]]`.

    Example:

        order, values = gather_permuted(tf.range(10, 20, dtype=tf.int64), tf.range(10,
            dtype=tf.int64), 10, epoch_seed(0, 0))  # values == order + 10
    """
    positions = tf.convert_to_tensor(positions, tf.int64)
    op_module = _op_module(implementation)
    if op_module is not None and size > RANK_MAX_SIZE:
        return op_module.gather_permuted(
            tf.convert_to_tensor(table, tf.int64),
            positions,
            tf.constant(size, tf.int64),
            tf.convert_to_tensor(seed, tf.int64),
            rounds=ROUNDS,
            small_rounds=SMALL_ROUNDS,
            small_bits=SMALL_BITS,
            rank_max_size=RANK_MAX_SIZE,
        )
    permuted = permuted_positions(positions, size, seed, implementation=implementation)
    return permuted, tf.gather(table, permuted)


def _ranked_positions(positions: tf.Tensor, size: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """uint64: the rank of each position's keyed hash among those of `[0, size)`, ties by
    position (meaningful where `size <= RANK_MAX_SIZE`)."""
    position = _u64(positions)

    def hashed(value: tf.Tensor) -> tf.Tensor:
        return _mix(key + (value + _u64(1)) * _u64(_GOLDEN))

    own = hashed(position)
    rank = tf.zeros_like(position)
    for other in range(RANK_MAX_SIZE):
        theirs = hashed(tf.fill(tf.shape(position), _u64(other)))
        before = (theirs < own) | ((theirs == own) & (_u64(other) < position))
        rank += tf.cast(before & (other < size), tf.uint64)
    return rank


def _walked_positions(positions: tf.Tensor, size: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """The TensorFlow-ops form: ranks of hashes up to `RANK_MAX_SIZE`, else one pass of the
    network, then cycle walking."""
    ranked = _ranked_positions(positions, size, key)
    bits = _bit_width(size)
    limit = _u64(size)
    walked = _feistel(_u64(positions), key, bits)
    # Cycle walking on the elements still outside their range only: about half of them at
    # worst after the first pass, and geometrically fewer after each further one.
    pending = tf.where(walked >= limit)[:, 0]

    def walk(values: tf.Tensor, pending: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        again = _feistel(
            tf.gather(values, pending), tf.gather(key, pending), tf.gather(bits, pending)
        )
        values = tf.tensor_scatter_nd_update(values, pending[:, None], again)
        return values, tf.boolean_mask(pending, again >= tf.gather(limit, pending))

    walked, _ = tf.while_loop(
        lambda values, pending: tf.size(pending) > 0,
        walk,
        [walked, pending],
        shape_invariants=[walked.shape, tf.TensorShape([None])],
    )
    return tf.bitcast(tf.where(size <= RANK_MAX_SIZE, ranked, walked), tf.int64)
