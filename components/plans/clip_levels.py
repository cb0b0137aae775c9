"""How loud a noise clip or a RIR is, in NumPy: the silence floor and the direct-path peak.

`inputs.augment_clips.ClipBank` (the graph augmentation) and `plans.clip_sets.ClipSet` (the
NumPy one) leave out the same clips by these functions, and cut RIRs at the same peak.
"""

from __future__ import annotations

import numpy as np

SILENCE_FLOOR_DB = -80.0
_FLOOR_POWER = 10.0 ** (SILENCE_FLOOR_DB / 10.0)
_FULL_SCALE = 32768.0
_CHUNK_SAMPLES = 1 << 20  # measured at a time: bounded temporaries whatever the clip's length


def is_silent(pcm: np.ndarray, *, per_sample: bool) -> bool:
    """Whether int16 PCM is below `SILENCE_FLOOR_DB`: its mean power (`per_sample`, noise) or its
    energy (a RIR), re full scale; an empty clip is silent.

    Args:
      pcm: int16 [N] samples.
      per_sample: compare the mean power (noise clips) rather than the energy (RIRs).

    Returns:
      True when the clip is below the floor.
    """
    if len(pcm) == 0:
        return True
    energy = 0
    for start in range(0, len(pcm), _CHUNK_SAMPLES):
        chunk = pcm[start : start + _CHUNK_SAMPLES].astype(np.int64)
        energy += int(np.dot(chunk, chunk))  # exact: int16 squares summed in integers
    power = energy / _FULL_SCALE**2 / (len(pcm) if per_sample else 1)
    return power < _FLOOR_POWER


def direct_path_peak(pcm: np.ndarray) -> int:
    """The first sample of largest magnitude of int16 [N] PCM (a RIR's direct path), in chunks."""
    best, where = -1, 0
    for start in range(0, len(pcm), _CHUNK_SAMPLES):
        magnitude = np.abs(pcm[start : start + _CHUNK_SAMPLES].astype(np.int32))
        i = int(np.argmax(magnitude))
        if magnitude[i] > best:
            best, where = int(magnitude[i]), start + i
    return where
