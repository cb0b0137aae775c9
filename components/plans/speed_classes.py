"""Speed perturbation's derived classes: the class index a class-balanced plan sees with K speeds.

With `K` speed factors (`augment_options.SpeakerAugmentConfig.speed_factors`) a perturbed
speaker is a new class: class `c` at factor index `k` is class `k * C + c` (factor 1.0 first keeps
the original ids), and its records are class `c`'s. Both executors plan over the same derived
class index: `inputs.speaker_augment` (tf.data) and `grain.class_balanced` take it from here. A
derived class's CSR positions are its source class's shifted by `k * N`, so a sampler reads
derived position `p` as record `values[p % N]`, and the factor of a sample is `label // C`.
"""

from __future__ import annotations

import numpy as np


def derived_row_splits(row_splits: np.ndarray, num_speeds: int) -> np.ndarray:
    """The class CSR of the derived classes: class `k * C + c` holds class `c`'s records, at
    CSR positions shifted by `k * N` (the sampler reads position `p` as `p % N`).

    Args:
      row_splits: int64 [C + 1], the class index's row splits over N positions.
      num_speeds: K, the derived classes per class.

    Returns:
      int64 [K * C + 1].

    Example:

        derived_row_splits(np.array([0, 2, 5]), 2)  # [0, 2, 5, 7, 10]
    """
    row_splits = np.asarray(row_splits, np.int64)
    total = row_splits[-1]
    parts = [row_splits] + [row_splits[1:] + k * total for k in range(1, num_speeds)]
    return np.concatenate(parts)


def derived_class_names(classes: list[str] | None, factors: tuple[float, ...]) -> list | None:
    """Names of the derived classes: factor 1.0 keeps a class's name, others add ``@speed{f}``.

    Args:
      classes: the C class names, or None.
      factors: the speed factors (empty: the names unchanged).

    Returns:
      `K * C` names in derived-class order, or None.

    Example:

        derived_class_names(["a", "b"], (1.0, 0.9))  # ["a", "b", "a@speed0.9", "b@speed0.9"]
    """
    if classes is None or not factors:
        return classes
    return [name if f == 1.0 else f"{name}@speed{f:g}" for f in factors for name in classes]
