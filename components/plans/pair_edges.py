"""Valid pairs as explicit edges, and several runs' valid pairs combined into one index.

`edge_csr` lists valid pairs one by one: an edge list's own CSR, or groups expanded (each x with
every y of its group, ascending), what `inputs.group_pairs.GroupPairs.edges` returns.
`combined_pairs` is the index of a mix of pairs runs (tf.data's `inputs.mixed_pairs`, Grain's
`grain.mixed_pairs`): the runs' x concatenated in run order (global x number = the run's x offset
+ its x number), their y likewise, and run `k`'s rows with its y moved by its y offset, so an x
only ever pairs with a y of its own run. Groups are expanded to edges there, so a mix plans every
run as an edge list (`pair_plan.PairPlan`).

Example:

    combined = combined_pairs([EdgeList.build([[0], [1]], 2, 2),
                               EdgeList.build([[0, 1]], 1, 3)], [2, 3])
    combined.row_splits, combined.values   # [0, 1, 2, 4], [0, 1, 2, 3]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.plans.pair_plan import EdgePairs, GroupedPairs


def edge_csr(
    pairs: EdgePairs | GroupedPairs, max_pairs: int = layout.MAX_GROUP_EDGES
) -> tuple[np.ndarray, np.ndarray]:
    """The explicit CSR over x of valid pairs: an edge list's, or groups' listed one by one.

    Args:
      pairs: an edge list (`row_splits`, `values`) or groups (`x_group`, `group_row_splits`,
        `group_values`, `planned_x`: only the planned x get their group's y).
      max_pairs: the most pairs groups may list.

    Returns:
      `(row_splits, values)`: int64 [num_x + 1] and int64 [num_pairs], the y of each x (empty
      for the x left out of the plan).

    Raises:
      ValueError: groups holding more than `max_pairs` valid pairs.
    """
    if not hasattr(pairs, "group_row_splits"):
        return np.asarray(pairs.row_splits, np.int64), np.asarray(pairs.values, np.int64)
    x_group = np.asarray(pairs.x_group, np.int64)
    group_row_splits = np.asarray(pairs.group_row_splits, np.int64)
    planned_x = np.asarray(pairs.planned_x, np.int64)
    sizes = np.zeros(len(x_group), np.int64)
    sizes[planned_x] = np.diff(group_row_splits)[x_group[planned_x]]
    num_pairs = int(sizes.sum())
    if num_pairs > max_pairs:
        raise ValueError(
            f"group pairs hold {num_pairs} valid pairs, more than {max_pairs} to list one by one"
        )
    row_splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    starts = group_row_splits[np.maximum(x_group, 0)]
    positions = np.repeat(starts - row_splits[:-1], sizes) + np.arange(num_pairs)
    return row_splits, np.asarray(pairs.group_values, np.int64)[positions]


@dataclasses.dataclass(frozen=True)
class CombinedPairs:
    """Several runs' valid pairs as one edge index over their concatenated x and y (an
    `EdgePairs`, which `pair_plan.PairPlan` plans).

    Attributes:
      row_splits: int64 [num_x + 1]; values: int64 [num_pairs], global y numbers.
      planned_x: int64 [num_planned], the x with a valid pair (global numbers).
      x_offsets, y_offsets: int64 [K + 1]: run `k`'s x (y) are global numbers
        `[offsets[k], offsets[k + 1])`.
    """

    row_splits: np.ndarray
    values: np.ndarray
    planned_x: np.ndarray
    x_offsets: np.ndarray
    y_offsets: np.ndarray

    @property
    def num_x(self) -> int:
        """The x of all runs (planned or not)."""
        return len(self.row_splits) - 1

    def run_of_x(self, x_index: np.ndarray) -> np.ndarray:
        """int64 [B]: the run of each global x number."""
        return np.searchsorted(self.x_offsets[1:], x_index, side="right").astype(np.int64)


def combined_pairs(
    valid_pairs: Sequence[EdgePairs | GroupedPairs], num_y: Sequence[int]
) -> CombinedPairs:
    """One valid-pair index over several runs' concatenated x and y (module docstring).

    Args:
      valid_pairs: each run's valid pairs, in run order (groups are listed as edges,
        `edge_csr`).
      num_y: each run's y count.

    Returns:
      The `CombinedPairs`.

    Raises:
      ValueError: not one y count per run, or groups too large to list (`edge_csr`).
    """
    if len(valid_pairs) != len(num_y) or not len(num_y):
        raise ValueError(
            f"{len(valid_pairs)} valid pairs and {len(num_y)} y counts: pass one of each per run"
        )
    y_offsets = np.concatenate([[0], np.cumsum(num_y)]).astype(np.int64)
    degrees, values = [], []
    for pairs, y_offset in zip(valid_pairs, y_offsets[:-1], strict=True):
        row_splits, run_values = edge_csr(pairs)
        degrees.append(np.diff(row_splits))
        values.append(run_values + y_offset)
    degree = np.concatenate(degrees)
    return CombinedPairs(
        row_splits=np.concatenate([[0], np.cumsum(degree)]).astype(np.int64),
        values=np.concatenate(values).astype(np.int64),
        planned_x=np.flatnonzero(degree > 0).astype(np.int64),
        x_offsets=np.concatenate([[0], np.cumsum([len(d) for d in degrees])]).astype(np.int64),
        y_offsets=y_offsets,
    )
