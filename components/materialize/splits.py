"""Train/eval assignment of utterances when the manifest has no split field.

Both modes are seeded, order-independent functions of the ids, so a re-run (or a run on any
runner) assigns every utterance the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

TRAIN = "train"
EVAL = "eval"


def seeded_rank_key(seed: int, key: str) -> bytes:
    """A stable pseudo-random sort key (Python's `hash` is salted per process).

    Args:
        seed: the split seed.
        key: a speaker or record id.

    Returns:
        16 bytes (blake2b of seed and key), to sort by.
    """
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=16).digest()


def held_out_speakers(speakers: Iterable[str], fraction: float, seed: int) -> frozenset[str]:
    """round(fraction * S) speakers chosen by seeded rank; at least one when `fraction` > 0
    and there are 2+ speakers, never all of them.

    Args:
        speakers: speaker names (repeats are fine).
        fraction: the fraction to hold out, in [0, 1).
        seed: the split seed.

    Returns:
        The held-out (eval) speakers.

    Example:
        held_out_speakers(["a", "b", "c", "d"], 0.25, seed=0)  # one of them
    """
    unique = sorted(set(speakers), key=lambda speaker: seeded_rank_key(seed, speaker))
    if fraction <= 0 or len(unique) < 2:
        return frozenset()
    count = min(max(int(round(fraction * len(unique))), 1), len(unique) - 1)
    return frozenset(unique[:count])


def held_out_utterances(ids: Iterable[str], fraction: float, seed: int) -> frozenset[str]:
    """For one speaker's utterance ids: round(fraction * n) by seeded rank, keeping at least
    one in train (speakers with one utterance stay in train).

    Args:
        ids: one speaker's utterance ids.
        fraction: the fraction to hold out, in [0, 1).
        seed: the split seed.

    Returns:
        The held-out (eval) ids.
    """
    ranked = sorted(set(ids), key=lambda record_id: seeded_rank_key(seed, record_id))
    if fraction <= 0 or len(ranked) < 2:
        return frozenset()
    count = min(int(round(fraction * len(ranked))), len(ranked) - 1)
    return frozenset(ranked[:count])
