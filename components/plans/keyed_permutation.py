"""Keyed bijective permutations computed elementwise, in NumPy: any position of any permutation
in O(1), equal bit for bit to `inputs.index_shuffle.permuted_positions` (its native op and its
TensorFlow ops alike).

Up to `RANK_MAX_SIZE` records a position's place is the rank of its keyed hash among those of
the whole `[0, size)`, ties by position. Above, the permutation is an unbalanced Feistel network
over the `bits`-bit numbers (`2**bits` the next power of two at or above `size`) with cycle
walking: a number at or past `size` is permuted again until it falls inside. A number is split
into its high `bits - bits // 2` and low `bits // 2` bits, and the rounds take turns xoring one
part with the keyed hash (`keyed_hash.mix`) of the other and the round key: `ROUNDS` rounds, or
`SMALL_ROUNDS` where `bits <= SMALL_BITS`. `inputs.index_shuffle`'s docstring says why this
construction and not TensorFlow's `index_shuffle`.
"""

from __future__ import annotations

import numpy as np

from tfx_dynamic_inputs.plans.keyed_hash import (
    GOLDEN,
    RANK_MAX_SIZE,
    ROUNDS,
    SMALL_BITS,
    SMALL_ROUNDS,
    as_uint64,
    element_keys,
    mix,
)

_ONE = np.uint64(1)


def _bit_width(largest: np.ndarray) -> np.ndarray:
    """uint64: the bits of each `largest` (uint64; 0 for 0)."""
    if largest.max(initial=0) < 1 << 52:
        # Exact in float64 below 2**53: the exponent is the width.
        return np.frexp(largest.astype(np.float64))[1].astype(np.uint64)
    width = np.zeros(largest.shape, np.uint64)
    rest = largest.copy()
    for step in (32, 16, 8, 4, 2, 1):  # binary search of the highest set bit
        shifted = rest >> np.uint64(step)
        wide = shifted > 0
        width[wide] += np.uint64(step)
        rest[wide] = shifted[wide]
    return width + (rest > 0).astype(np.uint64)


def _feistel(values: np.ndarray, keys: np.ndarray, bits: np.ndarray, rounds: int) -> np.ndarray:
    """One pass of the network over uint64 `values` (< 2**bits) with each element's key."""
    low_bits = bits >> _ONE
    low_mask = (_ONE << low_bits) - _ONE
    high_mask = (_ONE << (bits - low_bits)) - _ONE
    high = values >> low_bits
    low = values & low_mask
    for round_number in range(rounds):
        round_key = keys + np.uint64((round_number + 1) * GOLDEN % (1 << 64))
        if round_number % 2 == 0:
            high ^= mix(low ^ round_key) & high_mask
        else:
            low ^= mix(high ^ round_key) & low_mask
    return (high << low_bits) | low


def _walked(values: np.ndarray, keys: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """The network then cycle walking, for elements above `RANK_MAX_SIZE`: each pass permutes
    only the elements still at or past their limit."""
    bits = _bit_width(limits - _ONE)
    rounds = np.where(bits <= SMALL_BITS, SMALL_ROUNDS, ROUNDS)
    walked = values.copy()
    pending = np.arange(len(values))
    if np.all(rounds == rounds[0]):
        # One first pass over all (the usual case: one size), without gathering them.
        walked = _feistel(walked, keys, bits, int(rounds[0]))
        pending = np.flatnonzero(walked >= limits)
    while len(pending):
        for count in (ROUNDS, SMALL_ROUNDS):
            part = pending[rounds[pending] == count]
            if len(part):
                walked[part] = _feistel(walked[part], keys[part], bits[part], count)
        pending = pending[walked[pending] >= limits[pending]]
    return walked


def _ranked(values: np.ndarray, keys: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """The rank of each position's keyed hash among those of `[0, limit)`, ties by position
    (limits up to `RANK_MAX_SIZE`)."""
    own = mix(keys + (values + _ONE) * np.uint64(GOLDEN))
    rank = np.zeros(values.shape, np.uint64)
    for other in range(int(limits.max(initial=0))):
        theirs = mix(keys + np.uint64((other + 1) * GOLDEN % (1 << 64)))
        before = (theirs < own) | ((theirs == own) & (np.uint64(other) < values))
        rank += (before & (np.uint64(other) < limits)).astype(np.uint64)
    return rank


def permuted_positions(
    positions: np.ndarray,
    size: int | np.ndarray,
    seed: np.ndarray,
    tweak: int | np.ndarray = 0,
) -> np.ndarray:
    """Where each of `positions` lands in the keyed random permutation of `[0, size)`.

    For a fixed key (`seed`, and the element's `tweak`) and `size` the map is a bijection of
    `[0, size)`; each element costs O(1) (two passes of the network on average).

    Args:
      positions: int64 [n], each in `[0, size)`.
      size: int64, one for all or [n] (each element's own permutation size, >= 1).
      seed: int64 [2], a stateless seed (`seed_folds.epoch_seed`).
      tweak: int64, one for all or [n]: a further key word per element (e.g. the record number
        of the x whose partners are ordered); 0 for one permutation.

    Returns:
      int64 [n].

    Raises:
      ValueError: a position outside `[0, size)`, naming it.

    Example:

        order = permuted_positions(np.arange(5), 5, epoch_seed(0, 3))
        sorted(order.tolist()) == [0, 1, 2, 3, 4]  # epoch 3's order of 5 records
    """
    positions = np.asarray(positions, np.int64).reshape(-1)
    sizes = np.broadcast_to(np.asarray(size, np.int64), positions.shape)
    outside = np.flatnonzero((positions < 0) | (positions >= sizes))
    if len(outside):
        at = outside[0]
        raise ValueError(
            f"permuted_positions: position {positions[at]} at {at} is outside [0, {sizes[at]})"
        )
    tweak = np.asarray(tweak, np.int64)
    # One tweak for all (an epoch's order) is one key, hashed once.
    keys = np.broadcast_to(element_keys(seed, tweak), positions.shape)
    values = as_uint64(positions)
    limits = as_uint64(sizes)
    permuted = np.empty(positions.shape, np.uint64)
    small = limits <= RANK_MAX_SIZE
    if small.any():
        permuted[small] = _ranked(values[small], keys[small], limits[small])
    large = ~small
    if large.any():
        permuted[large] = _walked(values[large], keys[large], limits[large])
    return permuted.view(np.int64)
