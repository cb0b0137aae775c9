"""The keyed hash every plan draws from, and the keyed draws made of it, in NumPy.

The hash is SplitMix64's finalizer (`mix`), a bijective avalanche of a uint64. An element's key is
the hash of a stateless seed's two words and the element's own word (`element_keys`): what the
native `ElementKeys` op and `inputs.index_shuffle`'s TensorFlow ops compute, and what keys each
element's permutation (`keyed_permutation`). Its constants and the permutation's round counts
are stated here once: `inputs.index_shuffle` takes them from this module (the native op as its
attributes, where it has them).

The keyed draws (`keyed_uniform`, `keyed_offsets`, `keyed_seeds`) are pure functions of
`(seed, salt, key)`, so an element draws the same in a whole epoch's plan and in any batch of it.
All arithmetic is uint64 that wraps, as in C++.
"""

from __future__ import annotations

import numpy as np

from tfx_dynamic_inputs.plans.seed_folds import fold_in

# Rounds of the permutation's network (`keyed_permutation`), more where its parts are a few bits
# wide. Measured over 400,000 keys (chi-square of where positions 0 and 1 land, and of their
# difference): from 33 records on, 6 rounds pass (with 3, 10% of the landing places of a
# 100-record permutation fail at p < 0.01); 5 to 12 records fail up to p = 1e-270 with 6 rounds
# and still fail with 16 (6 records, p = 2e-10); 24 pass at every size.
ROUNDS = 6
SMALL_ROUNDS = 24
SMALL_BITS = 6  # sizes up to 2**6 records take SMALL_ROUNDS
# Up to this size a position's place is the rank of its keyed hash among the size's (`size`
# hashes an element, against about 36 for 24 rounds and their cycle walking).
RANK_MAX_SIZE = 16
GOLDEN = 0x9E3779B97F4A7C15
MIX_1 = 0xBF58476D1CE4E5B9
MIX_2 = 0x94D049BB133111EB


def as_uint64(values: int | np.ndarray) -> np.ndarray:
    """int64 values (or a Python int) as uint64 with the same bits: their two's complement."""
    return np.asarray(values, np.int64).view(np.uint64)


def mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer of each uint64 (a bijection).

    Args:
      values: uint64 array.

    Returns:
      uint64, the shape of `values`.
    """
    values = (values ^ (values >> np.uint64(30))) * np.uint64(MIX_1)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(MIX_2)
    return values ^ (values >> np.uint64(31))


def seed_base(seed: np.ndarray) -> np.ndarray:
    """uint64 [1]: the hash of a stateless seed's two words, from which each element's key is
    derived (`element_keys`)."""
    words = as_uint64(np.asarray(seed, np.int64).reshape(2, 1))
    return mix(mix(words[0] + np.uint64(GOLDEN)) ^ words[1])


def element_keys(seed: np.ndarray, tweaks: int | np.ndarray) -> np.ndarray:
    """uint64 key of each element's permutation or draw, from the stateless seed and its word.

    Args:
      seed: int64 [2], a stateless seed.
      tweaks: int64, any shape: each element's word (0 where one permutation is drawn).

    Returns:
      uint64, the shape of `tweaks`.
    """
    tweaks = np.asarray(tweaks, np.int64)
    keys = mix(seed_base(seed) ^ mix(as_uint64(tweaks.reshape(-1)) + np.uint64(GOLDEN)))
    return keys.reshape(tweaks.shape)


def keyed_bits(seed: np.ndarray, keys: np.ndarray, salt: int) -> np.ndarray:
    """uint64, the shape of `keys`: 64 keyed bits of each key, a pure function of
    `(seed, salt, key)` (`inputs.index_shuffle._keyed_bits`).

    Args:
      seed: int64 [2], a stateless seed.
      keys: int64, any shape.
      salt: the purpose of the draw.

    Returns:
      uint64, the shape of `keys`.
    """
    return element_keys(fold_in(np.asarray(seed, np.int64), salt), keys)


def keyed_uniform(seed: np.ndarray, positions: np.ndarray, salt: int) -> np.ndarray:
    """A uniform draw in [0, 1) for each position, a pure function of (seed, salt, position).

    Args:
      seed: int64 [2], a stateless seed.
      positions: int64 [n].
      salt: the purpose of the draw; different salts are independent draws.

    Returns:
      float64 [n].

    Example:

        keyed_uniform(np.array([7, 0]), np.arange(3), salt=0)
    """
    # The top 53 bits: every float64 value they make is exact and below 1.
    return (keyed_bits(seed, positions, salt) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def keyed_offsets(sizes: int | np.ndarray, seed: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """A uniform random offset into each row, drawn for each key alone.

    Args:
      sizes: int64 [n] (or one size for all), the row sizes (all >= 1).
      seed: int64 [2], a stateless seed (`seed_folds.epoch_seed`).
      keys: int64 [n], what each draw is for; distinct keys draw independently.

    Returns:
      int64 [n]: entry `i` is uniform in `[0, sizes[i])`.

    Example:

        keyed_offsets(np.array([3, 1]), epoch_seed(0, 2), np.arange(2))
    """
    sizes = np.asarray(sizes, np.int64)
    uniform = keyed_uniform(seed, keys, salt=0)
    return np.minimum((uniform * sizes.astype(np.float64)).astype(np.int64), sizes - 1)


def keyed_seeds(seed: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """A stateless seed for each key, a pure function of `(seed, key)`.

    Args:
      seed: int64 [2], a stateless seed (`seed_folds.epoch_seed`).
      keys: int64 [n].

    Returns:
      int64 [n, 2], each row 128 keyed bits.

    Example:

        keyed_seeds(epoch_seed(0, 1), np.arange(4))  # four batches' seeds
    """
    words = [keyed_bits(seed, keys, salt=word).view(np.int64) for word in (0, 1)]
    return np.stack(words, axis=1)
