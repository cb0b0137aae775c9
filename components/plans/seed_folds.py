"""The stateless seeds of a plan's random streams, `(seed, epoch, salt)`, in NumPy.

A plan's streams are named by folding words into a stateless seed: `[seed, 0]`, then the salt,
then the epoch. A fold is TensorFlow's `tf.random.experimental.stateless_fold_in` with its default
algorithm on CPU, which is what the TensorFlow plans run (`inputs.epoch_plan.epoch_seed`):
`[stateless_random_uniform_full_int(seed, int64), word]`, the int64 drawn by Philox4x32-10 from
the key and counter that `StatelessRandomGetKeyCounter` scrambles out of the seed (one Philox
block of the seed's four 32-bit halves under a fixed key). This module computes the same words
bit for bit in NumPy (tests/inputs/test_numpy_plans.py compares them over generated seeds), so
the NumPy plans keep every stream the TensorFlow plans draw: no plan changes.

The mixed plan's two scalar draws an epoch, `tf.random.stateless_uniform` of a float64 and of an
int64 below a bound, take the same Philox block: `stateless_uniform` and `stateless_uniform_int`.
The salts, which separate the streams of one `(seed, epoch)`, are stated here once, for both.
"""

from __future__ import annotations

import functools

import numpy as np

# Salts separate the random streams drawn for different purposes within one (seed, epoch).
SALT_ORDER = 0
SALT_CHOICE = 1
SALT_TIE_BREAK = 2
SALT_GROUP_START = 3

# Philox4x32-10 (Salmon et al., 2011) as TensorFlow's `random::PhiloxRandom` runs it.
_ROUNDS = 10
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
# The key `StatelessRandomGetKeyCounter` scrambles a seed under (tensorflow/core/kernels/
# stateless_random_ops_v2: GenerateKey).
_SEED_KEY = (0x3EC8F720, 0x02461E29)
_LOW_32 = np.uint64(0xFFFFFFFF)
_THIRTY_TWO = np.uint64(32)


def _philox(counter: list[np.ndarray], key: list[np.ndarray]) -> list[np.ndarray]:
    """One Philox4x32-10 block: four uint32 words (as uint64 arrays) of each counter and key."""
    key = list(key)
    for round_number in range(_ROUNDS):
        product_0 = np.uint64(_MULTIPLIERS[0]) * counter[0]
        product_1 = np.uint64(_MULTIPLIERS[1]) * counter[2]
        counter = [
            (product_1 >> _THIRTY_TWO) ^ counter[1] ^ key[0],
            product_1 & _LOW_32,
            (product_0 >> _THIRTY_TWO) ^ counter[3] ^ key[1],
            product_0 & _LOW_32,
        ]
        if round_number < _ROUNDS - 1:
            key = [
                (word + np.uint64(step)) & _LOW_32
                for word, step in zip(key, _KEY_STEPS, strict=True)
            ]
    return counter


def _halves(words: np.ndarray) -> list[np.ndarray]:
    """The low and high 32 bits of each int64 word, as uint64 arrays."""
    unsigned = words.astype(np.int64).view(np.uint64)
    return [unsigned & _LOW_32, unsigned >> _THIRTY_TWO]


def _first_bits(seed: np.ndarray) -> np.ndarray:
    """uint64 [n]: the first 64 bits TensorFlow's stateless ops draw from each seed (int64 [n, 2]):
    the first Philox block under the key and counter `StatelessRandomGetKeyCounter` scrambles
    out of the seed, its words 0 and 1 as one uint64 (low word first), as its int64 and float64
    distributions take them."""
    words = np.asarray(seed, np.int64).reshape(-1, 2)
    counter = _halves(words[:, 0]) + _halves(words[:, 1])
    key = [np.full(len(words), word, np.uint64) for word in _SEED_KEY]
    scrambled = _philox(counter, key)
    zero = np.zeros(len(words), np.uint64)
    drawn = _philox([zero, zero, scrambled[2], scrambled[3]], scrambled[:2])
    return drawn[0] | (drawn[1] << _THIRTY_TWO)


def fold_in(seed: np.ndarray, word: int | np.ndarray) -> np.ndarray:
    """`tf.random.experimental.stateless_fold_in(seed, word)` (int64 words), bit for bit.

    Args:
      seed: int64 [2] (or [n, 2]), stateless seeds.
      word: an int64 (or int64 [n]) to fold into each seed.

    Returns:
      int64 [2] (or [n, 2]): the drawn word, then `word`.

    Example:

        fold_in(np.array([7, 0], np.int64), 3)  # the stream of salt 3 of seed 7
    """
    seed = np.asarray(seed, np.int64)
    first = _first_bits(seed).view(np.int64)
    folded = np.stack([first, np.broadcast_to(np.asarray(word, np.int64), first.shape)], axis=1)
    return folded.reshape(seed.shape)


def stateless_uniform(seed: np.ndarray) -> float:
    """`tf.random.stateless_uniform([], seed, dtype=tf.float64)`, bit for bit: the low 52 bits of
    the first draw as a float64's mantissa in [1, 2), minus 1.

    Args:
      seed: int64 [2], a stateless seed.

    Returns:
      A float in [0, 1).
    """
    bits = _first_bits(seed)[0]
    mantissa = ((bits & _LOW_32) & np.uint64(0xFFFFF)) << _THIRTY_TWO | bits >> _THIRTY_TWO
    return float((np.uint64(1023 << 52) | mantissa).view(np.float64) - 1.0)


def stateless_uniform_int(seed: np.ndarray, maxval: int) -> int:
    """`tf.random.stateless_uniform([], seed, maxval=maxval, dtype=tf.int64)`, bit for bit: the
    first draw's 64 bits modulo `maxval`.

    Args:
      seed: int64 [2], a stateless seed.
      maxval: the exclusive bound (>= 1).

    Returns:
      An int in [0, maxval).
    """
    return int(_first_bits(seed)[0] % np.uint64(maxval))


def epoch_seed(seed: int, epoch: int | np.ndarray, salt: int = 0) -> np.ndarray:
    """The stateless seed of the random stream `(seed, epoch, salt)`, as
    `inputs.epoch_plan.epoch_seed` computes it.

    Args:
      seed: the sampler seed (int64).
      epoch: an int64 (or int64 [n], one stream per epoch).
      salt: the purpose of the stream (`SALT_*`, or a plan's own).

    Returns:
      int64 [2] (or [n, 2]).

    Example:

        epoch_seed(0, 3, SALT_ORDER)  # epoch 3's order of the records
    """
    epoch = np.asarray(epoch, np.int64)
    if epoch.ndim == 0:
        return np.array(_scalar_epoch_seed(int(seed), int(epoch), int(salt)), np.int64)
    salted = fold_in(np.array([seed, 0], np.int64), salt)
    return fold_in(np.broadcast_to(salted, (*epoch.shape, 2)), epoch)


@functools.lru_cache(maxsize=4096)
def _scalar_epoch_seed(seed: int, epoch: int, salt: int) -> tuple[int, int]:
    """`epoch_seed` of one stream, kept: a plan call folds each of its streams again (two Philox
    blocks in NumPy each, ~0.3 ms; half of planning one batch alone at 100k records)."""
    salted = fold_in(np.array([seed, 0], np.int64), salt)
    folded = fold_in(salted, epoch)
    return int(folded[0]), int(folded[1])
