"""Valid pairs for the Grain dynamic pairs, checked without TensorFlow: an edge list over the x
(`EdgeList`, what `inputs.valid_pairs.ValidPairs.build` keeps) or the group of each record
(`GroupList`, what `inputs.group_pairs.GroupPairs.from_groups` builds), both refusing what
tf.data's refuse with `on_invalid="fail"`; `plans.pair_plan.PairPlan` takes either.
"""

from __future__ import annotations

import dataclasses

import numpy as np

_NONE = np.zeros(0, np.int64)


@dataclasses.dataclass(frozen=True)
class EdgeList:
    """Valid pairs as a CSR over the x (`plans.pair_plan.EdgePairs`), checked.

    Attributes:
      row_splits: int64 [num_x + 1]; values: int64 [num_pairs], the y of each x in order.
      planned_x: int64 [num_x], every x (each has at least one y).
    """

    row_splits: np.ndarray
    values: np.ndarray
    planned_x: np.ndarray

    @classmethod
    def build(cls, valid_pairs: object, num_x: int, num_y: int) -> EdgeList:
        """The CSR of `valid_pairs`, each y checked against `num_y` and the rows against `num_x`.

        Args:
          valid_pairs: a list of lists of y record numbers (one list per x), or CSR arrays
            `(row_splits, values)`.
          num_x, num_y: the records of each side.

        Returns:
          The `EdgeList`.

        Raises:
          ValueError: rows not `num_x`, a y outside `[0, num_y)`, an empty list (as tf.data's
            `on_invalid="fail"`), bad CSR arrays or no x, naming the first bad x.
        """
        if isinstance(valid_pairs, tuple) and len(valid_pairs) == 2:
            row_splits, values = (np.asarray(part) for part in valid_pairs)
        else:
            # An empty row is no values of any kind: int64, so the others' kind decides.
            rows = [np.asarray(row).reshape(-1) if len(row) else _NONE for row in valid_pairs]
            row_splits = np.concatenate([[0], np.cumsum([len(row) for row in rows])])
            values = np.concatenate(rows) if rows else _NONE
        if (
            row_splits.ndim != 1
            or len(row_splits) < 1
            or row_splits[0] != 0
            or np.any(np.diff(row_splits) < 0)
            or row_splits[-1] != len(values)
            or (len(values) and values.dtype.kind not in "iu")
        ):
            raise ValueError("valid_pairs: CSR row_splits must rise from 0 to len(values) (ints)")
        if len(row_splits) - 1 != num_x:
            raise ValueError(f"valid_pairs has {len(row_splits) - 1} rows, x has {num_x} records")
        values = values.astype(np.int64)
        bad = np.flatnonzero((values < 0) | (values >= num_y))
        if len(bad):
            x = int(np.searchsorted(row_splits, bad[0], side="right") - 1)
            raise ValueError(f"valid_pairs: x {x} names y {values[bad[0]]}, outside [0, {num_y})")
        empty = np.flatnonzero(np.diff(row_splits) == 0)
        if len(empty):
            raise ValueError(
                f"valid_pairs: x {empty[0]} has an empty valid list ({len(empty)} x in all)"
            )
        planned_x = np.arange(num_x, dtype=np.int64)
        if not num_x:
            raise ValueError("valid_pairs: no x has a valid pair; nothing to plan")
        return cls(row_splits.astype(np.int64), values, planned_x)


@dataclasses.dataclass(frozen=True)
class GroupList:
    """Valid pairs by group (`plans.pair_plan.GroupedPairs`): each x pairs with any y of its
    group.

    Attributes:
      x_group: int64 [num_x], each x's group (-1: none, left out of the plan).
      group_row_splits: int64 [num_groups + 1]; group_values: int64 [num_grouped_y], the y of
        each group, ascending.
      planned_x: int64 [num_planned], the x in a group.
    """

    x_group: np.ndarray
    group_row_splits: np.ndarray
    group_values: np.ndarray
    planned_x: np.ndarray

    @classmethod
    def build(cls, x_groups: np.ndarray, y_groups: np.ndarray) -> GroupList:
        """The groups of a run's pair index (int64, -1 for none).

        Args:
          x_groups, y_groups: int [num_x], int [num_y], each record's group id or -1.

        Returns:
          The `GroupList`.

        Raises:
          ValueError: an x whose group has no y (naming it), or no x in a group.
        """
        x_ids, y_ids = np.asarray(x_groups, np.int64), np.asarray(y_groups, np.int64)
        num_groups = int(max(x_ids.max(initial=-1), y_ids.max(initial=-1))) + 1
        grouped_y = np.flatnonzero(y_ids >= 0)
        order = np.argsort(y_ids[grouped_y], kind="stable")
        sizes = np.bincount(y_ids[grouped_y], minlength=num_groups).astype(np.int64)
        has_group = x_ids >= 0
        without_y = has_group & (sizes[np.where(has_group, x_ids, 0)] == 0)
        if without_y.any():
            first = int(np.flatnonzero(without_y)[0])
            raise ValueError(
                f"x {first} is in group {int(x_ids[first])}, which has no y; "
                f"{int(without_y.sum())} x affected"
            )
        if not has_group.any():
            raise ValueError("group pairs: no x has a group with y; nothing to plan")
        return cls(
            x_group=x_ids,
            group_row_splits=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            group_values=grouped_y[order].astype(np.int64),
            planned_x=np.flatnonzero(has_group).astype(np.int64),
        )
