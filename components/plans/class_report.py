"""Which classes of a CSR class index a class-balanced plan uses: usable, small and empty
(`ClassReport`), named in logs and errors, never dropped silently."""

from __future__ import annotations

import dataclasses

import numpy as np

from tfx_dynamic_inputs.plans.arguments import int_argument

SMALL_CLASS_POLICIES = ("replace", "skip")


@dataclasses.dataclass(frozen=True)
class ClassReport:
    """What a plan does with each class of the index (made by `class_report`).

    Args:
      num_classes: rows of the class index (C).
      n_samples_per_class: the `n_p` the report was made for.
      policy: the small-class policy, ``"replace"`` or ``"skip"``.
      usable_classes: int64 [U] class ids that the plans use, ascending.
      small_classes: int64 class ids with 0 < records < n_p.
      empty_classes: int64 class ids without records (never usable).
      class_sizes: int64 [C] records per class.

    Example:

        report = class_report([0, 5, 6, 6], n_samples_per_class=2)
        report.usable_classes, report.small_classes, report.empty_classes  # [0 1], [1], [2]
    """

    num_classes: int
    n_samples_per_class: int
    policy: str
    usable_classes: np.ndarray
    small_classes: np.ndarray
    empty_classes: np.ndarray
    class_sizes: np.ndarray

    @property
    def skipped_classes(self) -> np.ndarray:
        """Class ids left out of every plan: the empty ones, plus the small ones under "skip"."""
        if self.policy == "skip":
            return np.union1d(self.small_classes, self.empty_classes)
        return self.empty_classes

    @property
    def replaced_classes(self) -> np.ndarray:
        """Class ids whose records repeat inside a batch (small classes under "replace")."""
        return self.small_classes if self.policy == "replace" else self.small_classes[:0]

    def summary(self, max_listed: int = 10) -> str:
        """One line for logs and errors: usable, small and empty classes.

        Args:
          max_listed: the most class ids listed per kind (then "...").

        Returns:
          For example ``"2 of 3 classes usable; 1 classes without records skipped: [2]"``.
        """

        def listed(ids: np.ndarray) -> str:
            head = ", ".join(str(i) for i in ids[:max_listed])
            return f"[{head}{', ...' if len(ids) > max_listed else ''}]"

        parts = [f"{len(self.usable_classes)} of {self.num_classes} classes usable"]
        if len(self.small_classes):
            action = "skipped" if self.policy == "skip" else "filled with replacement"
            parts.append(
                f"{len(self.small_classes)} classes with fewer than {self.n_samples_per_class} "
                f"records {action}: {listed(self.small_classes)}"
            )
        if len(self.empty_classes):
            parts.append(
                f"{len(self.empty_classes)} classes without records skipped: "
                f"{listed(self.empty_classes)}"
            )
        return "; ".join(parts)


def class_report(
    row_splits, n_samples_per_class: int, small_classes: str = "replace"
) -> ClassReport:
    """Classifies the classes of a CSR class index into usable, small and empty.

    Args:
      row_splits: int [C + 1], non-decreasing from 0: class `c` holds the records at CSR
        positions `[row_splits[c], row_splits[c + 1])`.
      n_samples_per_class: `n_p`; a class with fewer (but some) records is small.
      small_classes: ``"replace"`` (small classes are usable) or ``"skip"``.

    Returns:
      The `ClassReport`.

    Raises:
      ValueError: an unknown `small_classes`, `n_samples_per_class` below 1, or `row_splits`
        not a non-decreasing vector starting at 0.
      TypeError: `n_samples_per_class` not an int.
    """
    if small_classes not in SMALL_CLASS_POLICIES:
        raise ValueError(
            f"small_classes must be one of {SMALL_CLASS_POLICIES}, got {small_classes!r}"
        )
    n_samples_per_class = int_argument("n_samples_per_class", n_samples_per_class, 1)
    row_splits = np.asarray(row_splits)
    if row_splits.ndim != 1 or len(row_splits) < 1 or row_splits[0] != 0:
        raise ValueError("row_splits must be a vector [C + 1] starting at 0")
    sizes = np.diff(row_splits.astype(np.int64))
    if np.any(sizes < 0):
        raise ValueError("row_splits must be non-decreasing")
    small = np.flatnonzero((sizes > 0) & (sizes < n_samples_per_class))
    empty = np.flatnonzero(sizes == 0)
    minimum = n_samples_per_class if small_classes == "skip" else 1
    return ClassReport(
        num_classes=len(sizes),
        n_samples_per_class=n_samples_per_class,
        policy=small_classes,
        usable_classes=np.flatnonzero(sizes >= minimum).astype(np.int64),
        small_classes=small.astype(np.int64),
        empty_classes=empty.astype(np.int64),
        class_sizes=sizes,
    )
