"""The dynamic-pairs epoch plan in NumPy: which y each x takes, in which order and batch, the
record numbers of `inputs.pair_plan.PairPlanner` bit for bit.

The valid pairs are an edge list (a CSR over the x: `row_splits`, `values`) or groups (the group
of each x, a CSR of each group's y); `inputs.valid_pairs.ValidPairs` and
`inputs.group_pairs.GroupPairs` are both (or any object with their arrays: `EdgePairs`,
`GroupedPairs`). An epoch's order of the planned x is the keyed permutation of `(seed, epoch)`
cut into batches; each x's choice is drawn for that x alone:

* `uniform`: a uniformly random entry of its row (of its group), a keyed offset;
* `least_sampled`: step `e % d` of round `e // d` of a walk over its `d` partners in the round's
  keyed order; over groups, one step a epoch along the group's fixed random order
  (`group_walk_order`) from the x's keyed start.

`inputs.pair_plan`'s docstring says what each guarantees. Every part is elementwise, so any
batch of any epoch comes from its number alone (`PairPlan.plan_batches`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tfx_dynamic_inputs.plans.keyed_hash import keyed_offsets
from tfx_dynamic_inputs.plans.keyed_permutation import permuted_positions
from tfx_dynamic_inputs.plans.seed_folds import (
    SALT_CHOICE,
    SALT_GROUP_START,
    SALT_ORDER,
    SALT_TIE_BREAK,
    epoch_seed,
)
from tfx_dynamic_inputs.plans.worker_slices import round_batches

STRATEGIES = ("uniform", "least_sampled")
REMAINDERS = ("wrap", "drop")
_INT64 = (-(2**63), 2**63 - 1)


class EdgePairs(Protocol):
    """Valid pairs as a CSR over the x (`inputs.valid_pairs.ValidPairs`)."""

    row_splits: np.ndarray
    values: np.ndarray
    planned_x: np.ndarray


class GroupedPairs(Protocol):
    """Valid pairs as groups (`inputs.group_pairs.GroupPairs`)."""

    x_group: np.ndarray
    group_row_splits: np.ndarray
    group_values: np.ndarray
    planned_x: np.ndarray


def group_walk_order(group_values: np.ndarray, group_sizes: np.ndarray, seed: int) -> np.ndarray:
    """Each group's y in the fixed random order of `seed` that `least_sampled` x walk along.

    Args:
      group_values: int64 [num_grouped_y], the y of each group (a CSR's values).
      group_sizes: int64 [num_groups], y per group.
      seed: the plan's seed (int64).

    Returns:
      int64 [num_grouped_y]: `group_values` reordered within each group.
    """
    value_group = np.repeat(np.arange(len(group_sizes)), group_sizes)
    # NumPy takes non-negative seeds: a negative int64 seed as its two's complement.
    keys = np.random.default_rng(seed % (1 << 64)).random(len(group_values))
    return group_values[np.lexsort((keys, value_group))]


def _count(name: str, value: object, least: int) -> int:
    """`value` as an int of at least `least`, else one line naming it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not least <= value <= _INT64[1]:
        raise ValueError(f"{name} must be in [{least}, 2**63 - 1], got {value}")
    return int(value)


class PairPlan:
    """Epoch plans of dynamic pairs, as `inputs.pair_plan.PairPlanner` plans them.

    Args:
      valid_pairs: the valid pairs, an edge list (`EdgePairs`) or groups (`GroupedPairs`).
      strategy: ``"uniform"`` or ``"least_sampled"``.
      seed: the stateless seed (int64) of every epoch's plan.
      batch_size: pairs per global batch (>= 1).
      num_workers, replicas_per_worker: `num_batches` is a multiple of their product.
      remainder: ``"wrap"`` completes the last batch with the start of the epoch's order,
        ``"drop"`` leaves it out.

    Raises:
      ValueError: an unknown `strategy` or `remainder`, a count below 1, a seed out of int64,
        or ``"drop"`` leaving no batch.
      TypeError: `batch_size` or `seed` not an int.

    Attributes:
      num_batches: global batches per epoch.

    Example:

        plan = PairPlan(ValidPairs.build([[0, 1], [1], [0]]), strategy="uniform", seed=0,
                        batch_size=2)
        plan.plan_batches(0, [1])["y_index"]  # int64 [1, 2]
    """

    def __init__(
        self,
        valid_pairs: EdgePairs | GroupedPairs,
        *,
        strategy: str,
        seed: int,
        batch_size: int,
        num_workers: int = 1,
        replicas_per_worker: int = 1,
        remainder: str = "wrap",
    ):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if remainder not in REMAINDERS:
            raise ValueError(f"remainder must be one of {REMAINDERS}, got {remainder!r}")
        self.strategy = strategy
        self.seed = _count("seed", seed, _INT64[0])
        self.batch_size = _count("batch_size", batch_size, 1)
        self._planned_x = np.asarray(valid_pairs.planned_x, np.int64)
        self._num_planned = num_planned = len(self._planned_x)
        planned_batches = (
            -(-num_planned // self.batch_size)
            if remainder == "wrap"
            else num_planned // self.batch_size
        )
        self.num_batches = round_batches(
            planned_batches,
            num_workers=num_workers,
            replicas_per_worker=replicas_per_worker,
            down=remainder == "drop",
        )
        if not self.num_batches:
            raise ValueError(
                f"remainder='drop' leaves no batch: {num_planned} x, batch_size "
                f"{batch_size} x {num_workers} workers"
            )
        self._groups = hasattr(valid_pairs, "group_row_splits")
        if self._groups:
            self._init_groups(valid_pairs)
        else:
            self._row_splits = np.asarray(valid_pairs.row_splits, np.int64)
            self._values = np.asarray(valid_pairs.values, np.int64)
            self._num_x = len(self._row_splits) - 1

    def _init_groups(self, pairs: GroupedPairs) -> None:
        self._x_group = np.asarray(pairs.x_group, np.int64)
        splits = np.asarray(pairs.group_row_splits, np.int64)
        self._group_starts, self._group_sizes = splits[:-1], np.diff(splits)
        self._group_values = np.asarray(pairs.group_values, np.int64)
        if self.strategy == "least_sampled":
            self._group_values = group_walk_order(self._group_values, self._group_sizes, self.seed)
            sizes = self._group_sizes[self._x_group[self._planned_x]]
            start_seed = epoch_seed(self.seed, -1, SALT_GROUP_START)
            self._walk_starts = keyed_offsets(sizes, start_seed, self._planned_x)

    def plan(self, epoch: int) -> dict[str, np.ndarray]:
        """The global plan of one epoch, a pure function of `(seed, epoch)`.

        Args:
          epoch: the epoch (int64).

        Returns:
          ``x_index`` and ``y_index``: int64 [num_batches, batch_size], the record numbers of
          each pair.
        """
        return self.plan_batches(epoch, np.arange(self.num_batches, dtype=np.int64))

    def plan_batches(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone, in
        O(len(batch_numbers) x batch_size).

        Args:
          epoch: the epoch (int64).
          batch_numbers: int [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          ``x_index`` and ``y_index``: int64 [n, batch_size].

        Raises:
          ValueError: a batch number outside `[0, num_batches)`.
        """
        batch_numbers = np.asarray(batch_numbers, np.int64).reshape(-1)
        if np.any((batch_numbers < 0) | (batch_numbers >= self.num_batches)):
            raise ValueError(f"plan_batches: a batch number is outside [0, {self.num_batches})")
        columns = np.arange(self.batch_size, dtype=np.int64)
        positions = (batch_numbers[:, None] * self.batch_size + columns).reshape(-1)
        planned = self.epoch_order(epoch, positions)
        x_index = self._planned_x[planned]
        shape = (-1, self.batch_size)
        return {
            "x_index": x_index.reshape(shape),
            "y_index": self._choices(epoch, planned, x_index).reshape(shape),
        }

    def epoch_order(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Which planned x (its position in `planned_x`) each position of the epoch is: position
        `p` takes `perm(p mod num_planned)`, `perm` the keyed permutation of `(seed, epoch)`.

        Args:
          epoch: the epoch (int64).
          positions: int64 [n], positions in the epoch (`batch * batch_size + column`).

        Returns:
          int64 [n].
        """
        positions = np.asarray(positions, np.int64) % self._num_planned
        return permuted_positions(
            positions, self._num_planned, epoch_seed(self.seed, epoch, SALT_ORDER)
        )

    def _choices(self, epoch: int, planned: np.ndarray, x: np.ndarray) -> np.ndarray:
        """int64 [n]: the y each of the `planned` x (positions in `planned_x`, record numbers
        `x`) takes in `epoch`."""
        if self._groups:
            group = self._x_group[x]
            starts, sizes = self._group_starts[group], self._group_sizes[group]
            if self.strategy == "uniform":
                offsets = keyed_offsets(sizes, epoch_seed(self.seed, epoch, SALT_CHOICE), x)
            else:
                offsets = (self._walk_starts[planned] + epoch) % sizes
            return self._group_values[starts + offsets]
        starts = self._row_splits[x]
        degrees = self._row_splits[x + 1] - starts
        if self.strategy == "uniform":
            offsets = keyed_offsets(degrees, epoch_seed(self.seed, epoch, SALT_CHOICE), x)
        else:
            # Step `epoch % d` of round `epoch // d`, the order keyed by the x and the round
            # (unique per (x, round) while rounds * num_x stays in int64).
            tweak = x + epoch // degrees * self._num_x
            offsets = permuted_positions(
                epoch % degrees, degrees, epoch_seed(self.seed, -1, SALT_TIE_BREAK), tweak
            )
        return self._values[starts + offsets]
