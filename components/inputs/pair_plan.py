"""The dynamic-pairs epoch plan: which y each x takes, in which order and batch.

The valid pairs are a CSR index over the x records (`ValidPairs`: `row_splits` int64
[num_x + 1], `values` int64 [num_pairs], the y record numbers of each x) or groups
(`GroupPairs`). An epoch's plan is computed in TF, vectorized over all x, from stateless
randomness seeded by `(seed, epoch)`:

* `uniform`: each x takes a uniformly random entry of its row (of its group), drawn from a keyed
  hash of the x and `(seed, epoch)` (`index_shuffle.keyed_uniform`);
* `least_sampled`: each x takes one of its least-planned pairs: an x with d valid partners walks
  them in a fresh random order every d epochs (epoch `e` is step `e % d` of round `e // d`, the
  order a keyed permutation of the row, `index_shuffle`, keyed by x and the round). So within a
  row the planned counts never differ by more than one, ties go at random, and if every x has at
  most D valid partners every valid pair has been planned after D epochs. The schedule is a pure
  function of `(seed, epoch)`: no counts to keep, any epoch can be planned alone (a resume, a
  tf.data service worker). Group pairs walk their group's fixed random order (`group_pairs`).

The x order of every epoch is a keyed permutation of `(seed, epoch)` (`index_shuffle`), cut into
batches (`worker_slices.round_batches`). Every part of the plan is elementwise, so any batch of
any epoch comes from its number alone in O(batch) time and memory
(`PairPlanner.plan_batches`, what the samplers' datasets run), equal to that row of the whole
epoch's plan (`PairPlanner.plan`, which chooses in x order, for sequential index reads). With
`R` replicas, batches `[s * R, (s + 1) * R)` are step `s`'s global batch, and the order does not
depend on `R`, so the stream of global batches is the same on any replica count that keeps
`batch_size x R` (`PairPlanner.stream`).
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.epoch_plan import (
    SALT_CHOICE,
    SALT_GROUP_START,
    SALT_ORDER,
    SALT_TIE_BREAK,
    checked_batch_numbers,
    epoch_seed,
)
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs
from tfx_dynamic_inputs.inputs.index_shuffle import (
    gather_permuted,
    keyed_offsets,
    permuted_positions,
)
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.inputs.worker_slices import round_batches

# The choices are the NumPy plan's (stated once; the pipeline config checks them without
# TensorFlow).
from tfx_dynamic_inputs.plans.pair_plan import REMAINDERS as REMAINDERS
from tfx_dynamic_inputs.plans.pair_plan import STRATEGIES as STRATEGIES
from tfx_dynamic_inputs.plans.pair_plan import group_walk_order


class PairingState(EpochState):
    """Checkpointable state of a dynamic-pairs dataset: the `epoch` (see `EpochState`); plans
    of both strategies are pure functions of `(seed, epoch)`, so nothing else is kept.

    Args:
      valid_pairs: the pairs the state is for (its pair and planned-x counts must match the
        planner's).
      strategy: ``"uniform"`` or ``"least_sampled"``.
      initial_epoch: the first epoch to plan (>= 0).
      name: the `tf.Module` name.

    Raises:
      ValueError: an unknown `strategy`, `initial_epoch` below 0, or created inside a
        `tf.distribute` strategy scope.

    Example:

        state = PairingState(ValidPairs.build([[0, 1], [1]]), "least_sampled")
        tf.train.Checkpoint(sampler=state)  # the epoch to resume at
    """

    def __init__(
        self,
        valid_pairs: ValidPairs | GroupPairs,
        strategy: str = "uniform",
        initial_epoch: int = 0,
        name: str | None = None,
    ):
        super().__init__(initial_epoch=initial_epoch, name=name)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        self.strategy = strategy
        self.num_pairs = valid_pairs.num_pairs
        self.num_planned = len(valid_pairs.planned_x)


class PairPlanner:
    """Computes epoch plans of dynamic pairs: which y each x takes, in which order and batch.

    Args:
      valid_pairs: the valid pairs, an edge list (`ValidPairs`) or groups (`GroupPairs`).
      strategy: ``"uniform"`` or ``"least_sampled"`` (see the module docstring).
      seed: the stateless seed (int64) of every epoch's plan.
      batch_size: pairs per global batch (>= 1).
      num_workers, replicas_per_worker: `num_batches` is a multiple of their product
        (`worker_slices.round_batches`).
      remainder: the last, partial batch: ``"wrap"`` completes it with the start of the
        epoch's order (rounding up), ``"drop"`` leaves it out (rounding down).
      state: the `PairingState` of the dataset (its epoch); None makes a new one.

    Raises:
      ValueError: an unknown `strategy` or `remainder`, `batch_size` below 1, a seed out of
        int64, ``"drop"`` leaving no batch, or a `state` made for another strategy or other
        pairs.
      TypeError: `batch_size` or `seed` not an int.

    Attributes:
      num_batches: global batches per epoch.
      state: the `PairingState`.

    Example:

        pairs = ValidPairs.build([[0, 1], [1], [0]])  # x 0 pairs with y 0 or 1, ...
        planner = PairPlanner(pairs, strategy="uniform", seed=0, batch_size=2)
        planner.plan(0)["y_index"]  # int64 [2, 2]
        planner.plan_batches(0, [1])["y_index"]  # int64 [1, 2], row 1 of the above
    """

    def __init__(
        self,
        valid_pairs: ValidPairs | GroupPairs,
        *,
        strategy: str,
        seed: int,
        batch_size: int,
        num_workers: int = 1,
        replicas_per_worker: int = 1,
        remainder: str = "wrap",
        state: PairingState | None = None,
    ):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if remainder not in REMAINDERS:
            raise ValueError(f"remainder must be one of {REMAINDERS}, got {remainder!r}")
        batch_size = int_argument("batch_size", batch_size, 1)
        self.valid_pairs = valid_pairs
        self.strategy = strategy
        self.seed = seed_argument(seed)
        self.batch_size = batch_size
        self.remainder = remainder
        self.num_replicas = int(num_workers) * int(replicas_per_worker)
        num_planned = len(valid_pairs.planned_x)
        if remainder == "wrap":
            planned_batches = -(-num_planned // self.batch_size)
        else:
            planned_batches = num_planned // self.batch_size
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
        if state is None:
            state = PairingState(valid_pairs, strategy)
        elif state.strategy != strategy or (
            state.num_pairs,
            state.num_planned,
        ) != (valid_pairs.num_pairs, num_planned):
            raise ValueError(
                f"state was made for strategy {state.strategy!r} with {state.num_planned} x and "
                f"{state.num_pairs} pairs, not {strategy!r} with {num_planned} x and "
                f"{valid_pairs.num_pairs} pairs"
            )
        self.state = state
        self._planned_x = index_variable(valid_pairs.planned_x, name="planned_x")
        self._all_x_planned = len(valid_pairs.planned_x) == valid_pairs.num_x
        if isinstance(valid_pairs, GroupPairs):
            self._init_groups(valid_pairs)
            return
        self._row_splits = index_variable(valid_pairs.row_splits, name="row_splits")
        self._values = index_variable(valid_pairs.values, name="values")

    @property
    def stream(self) -> str:
        """What fixes the stream of batches besides the pairs and seed, in words: the global
        batch. The epoch's order of pairs does not depend on how it is cut (the epoch holds
        `ceil` or `floor(planned x / global batch)` global batches), so the same stream splits
        over any replica count that keeps `batch_size x replicas` (an elastic resume)."""
        return (
            f"global batches of {self.batch_size * self.num_replicas} pairs "
            f"({self.strategy}, remainder {self.remainder})"
        )

    def plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of one epoch, a pure function of `(seed, epoch)`.

        Args:
          epoch: int64 scalar, a Python int or a tensor.

        Returns:
          ``x_index`` and ``y_index``: int64 [num_batches, batch_size], the record numbers of
          each pair.
        """
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        # Choices are made in x order, where every read of the index is sequential. The epoch's
        # order is then the keyed permutation of the planned x's positions, one position per
        # pair of the plan, and the pairs are gathered at it: half the time of shuffling the
        # stacked (x, y) rows at 10M x.
        order, y_index = gather_permuted(
            self._choices(epoch, None, self._planned_x),
            self._epoch_positions(),
            len(self.valid_pairs.planned_x),
            self._order_seed(epoch),
        )
        x_index = self._record_numbers(order)
        shape = [self.num_batches, self.batch_size]
        return {"x_index": tf.reshape(x_index, shape), "y_index": tf.reshape(y_index, shape)}

    def plan_batches(self, epoch, batch_numbers) -> dict[str, tf.Tensor]:
        """Rows `batch_numbers` of `plan(epoch)`, computed from their numbers alone.

        O(len(batch_numbers) x batch_size) time and memory: nothing of the epoch's size is
        built, so a batch (a resume, a tf.data service worker's share) costs the same at 10M x as
        at 1,000.

        Args:
          epoch: int64 scalar, a Python int or a tensor.
          batch_numbers: int64 [n], global batch numbers, each in `[0, num_batches)`.

        Returns:
          ``x_index`` and ``y_index``: int64 [n, batch_size], equal to
          `tf.gather(plan(epoch)[key], batch_numbers)`.

        Raises:
          tf.errors.InvalidArgumentError: when run, a batch number outside `[0, num_batches)`.

        Example:

            planner.plan_batches(3, [0, 5])["y_index"]  # batches 0 and 5 of epoch 3
        """
        epoch = tf.convert_to_tensor(epoch, tf.int64)
        batch_numbers = checked_batch_numbers(batch_numbers, self.num_batches)
        columns = tf.range(self.batch_size, dtype=tf.int64)
        positions = tf.reshape(batch_numbers[:, None] * self.batch_size + columns, [-1])
        planned = self.epoch_order(epoch, positions)
        x_index = self._record_numbers(planned)
        shape = [-1, self.batch_size]
        return {
            "x_index": tf.reshape(x_index, shape),
            "y_index": tf.reshape(self._choices(epoch, planned, x_index), shape),
        }

    def _record_numbers(self, planned: tf.Tensor) -> tf.Tensor:
        """The x record numbers of positions in `valid_pairs.planned_x` (themselves when every
        x is planned)."""
        return planned if self._all_x_planned else tf.gather(self._planned_x, planned)

    def epoch_order(self, epoch, positions=None) -> tf.Tensor:
        """Which planned x (its position in `valid_pairs.planned_x`) each pair of the epoch is.

        Position `p` of the epoch takes planned x `perm(p mod num_planned)`, `perm` the keyed
        permutation of `(seed, epoch)` (`index_shuffle`): each planned x once, and under
        ``remainder="wrap"`` the last batch completed with the start of the order again.

        Args:
          epoch: int64 scalar, a Python int or a tensor.
          positions: int64 [n], positions in the epoch (`batch * batch_size + column`), in
            `[0, num_batches * batch_size)`; None for all of them, in order.

        Returns:
          int64 [n] (or [num_batches * batch_size]): positions in `valid_pairs.planned_x`.

        Example:

            planner.epoch_order(3, tf.range(256, 512, dtype=tf.int64))  # batch 1 of epoch 3
        """
        return permuted_positions(
            self._epoch_positions(positions),
            len(self.valid_pairs.planned_x),
            self._order_seed(epoch),
        )

    def _epoch_positions(self, positions=None) -> tf.Tensor:
        """The positions in the permutation of the planned x of positions in the epoch."""
        if positions is None:
            positions = tf.range(self.num_batches * self.batch_size, dtype=tf.int64)
        positions = tf.convert_to_tensor(positions, tf.int64)
        num_planned = len(self.valid_pairs.planned_x)
        if self.num_batches * self.batch_size > num_planned:
            positions = tf.math.floormod(positions, num_planned)
        return positions

    def _order_seed(self, epoch) -> tf.Tensor:
        return epoch_seed(self.seed, epoch, SALT_ORDER)

    def _choices(self, epoch: tf.Tensor, planned: tf.Tensor | None, x: tf.Tensor) -> tf.Tensor:
        """int64 [n]: the y each of the `planned` x (positions in `valid_pairs.planned_x`; None:
        all of them, in order) takes in `epoch`; `x` are their record numbers. Each x's choice
        depends on that x alone."""
        if isinstance(self.valid_pairs, GroupPairs):
            return self._group_choices(epoch, planned, x)
        if planned is None and self._all_x_planned:
            starts = self._row_splits[:-1]
            degrees = self._row_splits[1:] - starts
        else:
            starts = tf.gather(self._row_splits, x)
            degrees = tf.gather(self._row_splits, x + 1) - starts
        if self.strategy == "uniform":
            offsets = keyed_offsets(degrees, epoch_seed(self.seed, epoch, SALT_CHOICE), x)
        else:
            offsets = self._least_sampled_offsets(epoch, degrees, x)
        return tf.gather(self._values, starts + offsets)

    def _init_groups(self, pairs: GroupPairs) -> None:
        x_group = pairs.x_group if self._all_x_planned else pairs.x_group[pairs.planned_x]
        self._planned_group = index_variable(x_group, tf.int64, name="planned_group")
        self._group_starts = index_variable(pairs.group_row_splits[:-1], name="group_starts")
        self._group_sizes = index_variable(pairs.group_sizes, name="group_sizes")
        group_values = pairs.group_values
        if self.strategy == "least_sampled":
            # Each group's y in a fixed random order (from the seed): the order x walks along.
            group_values = group_walk_order(group_values, pairs.group_sizes, self.seed)
            # Where each x starts its walk along its group's order: one draw, kept, so that no
            # epoch draws it again.
            sizes = tf.gather(self._group_sizes, self._planned_group)
            walk_starts = keyed_offsets(
                sizes, epoch_seed(self.seed, -1, SALT_GROUP_START), self._planned_x
            )
            self._walk_starts = index_variable(walk_starts, name="walk_starts")
        self._group_values = index_variable(group_values, name="group_values")

    def _group_choices(self, epoch: tf.Tensor, planned: tf.Tensor | None, x: tf.Tensor):
        """int64 [n]: the y each of the `planned` x (record numbers `x`) takes in `epoch`, drawn
        from its group."""
        group = self._planned_group if planned is None else tf.gather(self._planned_group, planned)
        starts = tf.gather(self._group_starts, group)
        sizes = tf.gather(self._group_sizes, group)
        if self.strategy == "uniform":
            offsets = keyed_offsets(sizes, epoch_seed(self.seed, epoch, SALT_CHOICE), x)
        else:
            walk_starts = (
                self._walk_starts if planned is None else tf.gather(self._walk_starts, planned)
            )
            offsets = tf.math.floormod(walk_starts + epoch, sizes)
        return tf.gather(self._group_values, starts + offsets)

    def _least_sampled_offsets(self, epoch: tf.Tensor, degrees: tf.Tensor, x: tf.Tensor):
        """int64 [n]: the offset in its row (of size `degrees`) of the pair each x (record
        numbers `x`) takes.

        Step `epoch % d` of round `epoch // d` of a walk over the row in the round's random order
        (the module docstring); the key of the order is the x and the round.
        """
        rounds = epoch // degrees
        # Unique per (x, round) while rounds * num_x stays in int64 (10M x: 9e11 rounds).
        tweak = x + rounds * self.valid_pairs.num_x
        return permuted_positions(
            tf.math.floormod(epoch, degrees),
            degrees,
            epoch_seed(self.seed, -1, SALT_TIE_BREAK),
            tweak,
        )
