"""Valid pairs given by groups: x may pair with any y of its group, with no edge list.

"x may pair with any y of the same class (speaker, domain)" needs sum_g n_x(g) * n_y(g) explicit
edges as a `ValidPairs` CSR: 10 classes of 100k images each is 10^11 edges. `GroupPairs` holds
the same relation in O(N_x + N_y): the group of each x, and the y record numbers of each group
(CSR over groups). The pair planner draws from it directly:

* `uniform`: each x takes a uniformly random y of its group, every epoch;
* `least_sampled`: a stateless per-x schedule replaces per-pair counts. Each group's y are put in
  a fixed random order once (from the seed); x starts at a random position of its group's order
  and walks one step per epoch, so within any `n_y(g)` consecutive epochs x meets every y of its
  group exactly once: every valid pair is planned within (largest y group) epochs, and no pair of
  an x is planned twice before all of that x's pairs have been. Nothing is counted, so resuming
  needs only the epoch.

Build one with `ValidPairs.from_groups(x_groups, y_groups)`.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.plans.pair_edges import edge_csr

_log = logging.getLogger(__name__)

# Reason an x is left out of the plan: its group has no y.
NO_Y_IN_GROUP = "no y in group"


@dataclasses.dataclass(frozen=True)
class GroupPairs:
    """x may pair with every y of its group (build it with `build`).

    Args:
      x_group: int64 [num_x], the group of each x (-1: the x has no group and is left out).
      group_row_splits: int64 [num_groups + 1], group_values: int64 [num_grouped_y]: CSR over
        groups, the y record numbers of each group, ascending.
      num_y: the number of y records (a y may belong to no group).
      groups: the group names (sorted) when groups were given as strings, else None.
      planned_x: int64 [num_planned], the x that take part in the plan.
      skipped: reason -> number of x left out of the plan.
      skipped_x: int64 [num_skipped], the x left out.

    Example:

        pairs = GroupPairs.build(["a", "a", "b"], ["b", "a", "a", "b"])
        pairs.y_of(0), pairs.num_pairs  # [1 2], 6
    """

    x_group: np.ndarray
    group_row_splits: np.ndarray
    group_values: np.ndarray
    num_y: int
    groups: list[str] | None
    planned_x: np.ndarray
    skipped: dict[str, int]
    skipped_x: np.ndarray

    @property
    def num_x(self) -> int:
        """The number of x records (grouped or not)."""
        return len(self.x_group)

    @property
    def num_groups(self) -> int:
        """The number of groups (of either side)."""
        return len(self.group_row_splits) - 1

    @property
    def group_sizes(self) -> np.ndarray:
        """int64 [num_groups]: y records per group."""
        return np.diff(self.group_row_splits)

    @property
    def num_pairs(self) -> int:
        """Valid (x, y) pairs: sum over groups of n_x(g) * n_y(g) (never materialized)."""
        x_counts = np.bincount(self.x_group[self.x_group >= 0], minlength=self.num_groups)
        return int(np.dot(x_counts.astype(np.int64), self.group_sizes))

    @property
    def max_degree(self) -> int:
        """The most y any planned x may pair with: the epochs `least_sampled` needs to cover."""
        return int(self.group_sizes[self.x_group[self.planned_x]].max())

    @classmethod
    def build(
        cls,
        x_groups,
        y_groups,
        *,
        num_x: int | None = None,
        num_y: int | None = None,
        on_invalid: str = "fail",
    ) -> GroupPairs:
        """Checks and normalizes per-record groups.

        Args:
          x_groups, y_groups: the group of each x / y record, [num_x] / [num_y]: non-negative
            integers or strings (names; a name the other side lacks is a group without partners).
            Integer -1 (or None / "" for names) means "no group": such an x is left out of the
            plan, such a y is never drawn.
          num_x, num_y: when given, must equal the lengths (the record stores' sizes).
          on_invalid: an x whose group has no y: "fail" raises ValueError naming the first such
            x, "skip" leaves it out of the plan and counts it (also logged).

        Returns:
          The `GroupPairs`; groups given as names are numbered in sorted order.

        Raises:
          ValueError: an unknown `on_invalid`; groups that are not vectors, or lengths other
            than `num_x` / `num_y`; an integer group below -1; under "fail", an x whose group
            has no y; no x with a group that has y.
          TypeError: one side names and the other integers, or groups of another dtype.
        """
        if on_invalid not in ("fail", "skip"):
            raise ValueError(f"on_invalid must be 'fail' or 'skip', got {on_invalid!r}")
        x_ids, y_ids, names = _group_ids(x_groups, y_groups)
        for side, ids, expected in (("x", x_ids, num_x), ("y", y_ids, num_y)):
            if expected is not None and len(ids) != expected:
                raise ValueError(
                    f"{side}_groups has {len(ids)} entries but there are {expected} {side} records"
                )
        num_groups = int(max(x_ids.max(initial=-1), y_ids.max(initial=-1))) + 1
        grouped_y = np.flatnonzero(y_ids >= 0)
        order = np.argsort(y_ids[grouped_y], kind="stable")
        group_values = grouped_y[order].astype(np.int64)
        sizes = np.bincount(y_ids[grouped_y], minlength=num_groups).astype(np.int64)
        group_row_splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

        has_group = x_ids >= 0
        without_y = has_group & (sizes[np.where(has_group, x_ids, 0)] == 0)
        if without_y.any():
            first = int(np.flatnonzero(without_y)[0])
            group = names[x_ids[first]] if names is not None else int(x_ids[first])
            if on_invalid == "fail":
                raise ValueError(
                    f"x {first} is in group {group!r}, which has no y; {int(without_y.sum())} x "
                    "affected. Pass on_invalid='skip' to leave them out."
                )
            _log.warning(
                "group pairs: %d x left out of the plan (%s: first x %d, group %r)",
                int(without_y.sum()),
                NO_Y_IN_GROUP,
                first,
                group,
            )
        planned = has_group & ~without_y
        if not planned.any():
            raise ValueError("group pairs: no x has a group with y; nothing to plan")
        skipped = {NO_Y_IN_GROUP: int(without_y.sum())} if without_y.any() else {}
        return cls(
            x_group=x_ids,
            group_row_splits=group_row_splits,
            group_values=group_values,
            num_y=len(y_ids),
            groups=names,
            planned_x=np.flatnonzero(planned).astype(np.int64),
            skipped=skipped,
            skipped_x=np.flatnonzero(~planned).astype(np.int64),
        )

    def edges(self, max_pairs: int = layout.MAX_GROUP_EDGES) -> tuple[np.ndarray, np.ndarray]:
        """The explicit CSR over x, for what needs pairs one by one (pair coverage, checks).

        Args:
          max_pairs: the most pairs to list.

        Returns:
          `(row_splits, values)`: int64 [num_x + 1] and int64 [num_pairs], the y of each x
          (empty for the x left out of the plan).

        Raises:
          ValueError: more than `max_pairs` valid pairs.
        """
        return edge_csr(self, max_pairs)

    def y_of(self, x: int) -> np.ndarray:
        """The y record numbers x may pair with (for checks and small inputs).

        Args:
          x: an x record number.

        Returns:
          int64 [n_y(group of x)], ascending; empty when x has no group.
        """
        group = int(self.x_group[x])
        if group < 0:
            return np.zeros(0, np.int64)
        return self.group_values[self.group_row_splits[group] : self.group_row_splits[group + 1]]


def _group_ids(x_groups, y_groups) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """int64 group ids of both sides (-1: no group), and the names when given as strings."""
    x, y = np.asarray(x_groups), np.asarray(y_groups)
    for side, array in (("x", x), ("y", y)):
        if array.ndim != 1:
            raise ValueError(f"{side}_groups must be a vector, got shape {array.shape}")
    texts = [a.dtype.kind in "SUO" for a in (x, y) if a.size]
    if any(texts):
        if not all(texts):
            raise TypeError("x_groups and y_groups must both be names or both be integers")
        x_names = np.array(["" if v is None else str(v) for v in x], dtype=object)
        y_names = np.array(["" if v is None else str(v) for v in y], dtype=object)
        names = sorted((set(x_names.tolist()) | set(y_names.tolist())) - {""})
        lookup = {name: i for i, name in enumerate(names)}
        lookup[""] = -1
        return (
            np.fromiter((lookup[v] for v in x_names), np.int64, len(x_names)),
            np.fromiter((lookup[v] for v in y_names), np.int64, len(y_names)),
            names,
        )
    ids = []
    for side, array in (("x", x), ("y", y)):
        if array.size and array.dtype.kind not in "iu":
            raise TypeError(f"{side}_groups must be integers or strings, got dtype {array.dtype}")
        array = array.astype(np.int64)
        if array.size and array.min() < -1:
            bad = int(np.flatnonzero(array < -1)[0])
            raise ValueError(f"{side}_groups[{bad}] = {array[bad]}: groups are >= 0 (-1: none)")
        ids.append(array)
    return ids[0], ids[1], None
