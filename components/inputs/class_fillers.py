"""Which classes complete the short units of a class-balanced epoch plan (`class_plan`).

A unit (a global batch of `g` classes) is short when its round has fewer classes left than it
holds: the last group of each round, and the whole units added for the replicas. Its free slots
take other usable classes, distinct from its members and from each other, in one of two ways:

* `random_fillers` (no cap): the first classes not in the unit along `g` consecutive entries of
  the epoch's random class order, from a random offset per unit. Fast and uniform over classes,
  so a class with few records is drawn about as often as one with many: in
  ``epoch_mode="samples"`` over classes of very different sizes its records are drawn many times.
* `capped_fillers` (`max_draws_per_record`): unit after unit, the eligible classes with the most
  appearances left under the cap first (ties in the epoch's random order), where a class is
  eligible while one more appearance keeps every one of its records within the cap (its
  `max_appearances`). Within a class records are drawn along one permutation, so `a`
  appearances draw each of its `m` records `floor` or `ceil(a * n_p / m)` times. Most-left-first
  is the greedy that keeps the most classes eligible for the units still to fill, and it fills
  with the big classes, whose records are drawn least often by each appearance.

Both return the fillers of every short unit as rows `[S, g]`: entry `j` of a unit's row is the
filler of its slot `members + j` (-1 past its free slots), with its class and appearance number;
a filler's appearance number continues after its class's own chunks and its earlier fillers this
epoch (in unit order, then slot order). They are computed for all `S` short units at once, which
costs O(S x g) (O(S x usable classes) under the cap): nothing of the number of records.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfx_dynamic_inputs.plans import class_fillers as fillers

# The caps' arithmetic and the key's width are stated once, with the NumPy plans' executor.
ORDER_BITS = fillers.ORDER_BITS
max_appearances = fillers.max_appearances
least_feasible_cap = fillers.least_feasible_cap
least_planning_cap = fillers.least_planning_cap


@dataclasses.dataclass(frozen=True)
class ShortUnits:
    """The short units of a plan (epoch-independent), as int64 [S] variables.

    Attributes:
      unit: the unit of each, ascending.
      round: the round its members come from (0 for a unit added for the replicas).
      first_member: the round position (in the epoch's order of the round) of its first member.
      members: its members, `< classes_per_unit`; the rest of its slots are free.
      classes_per_unit: `g`.
    """

    unit: tf.Variable
    round: tf.Variable
    first_member: tf.Variable
    members: tf.Variable
    classes_per_unit: int


def random_fillers(
    member_classes: tf.Tensor, members: tf.Tensor, candidates: tf.Tensor, chunks: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Fillers from windows of the epoch's random class order (see the module docstring).

    Args:
      member_classes: int64 [S, g], each short unit's member classes, -1 past its members.
      members: int64 [S], each short unit's members.
      candidates: int64 [S, g], each short unit's window of `g` consecutive classes of the
        epoch's random class order, from its random offset: distinct classes.
      chunks: int64 [U], each usable class's own appearances (chunks) per epoch.

    Returns:
      `(class, appearance)`, each int64 [S, g]: entry `j` fills slot `members + j`, -1 past
      the unit's free slots.
    """
    g = member_classes.shape[1]
    sorted_members = tf.sort(member_classes, axis=1)
    found = tf.searchsorted(sorted_members, candidates, side="left")
    found_class = tf.gather(sorted_members, tf.minimum(found, g - 1), batch_dims=1)
    taken = tf.equal(found_class, candidates)
    rank = tf.cumsum(tf.cast(~taken, tf.int64), axis=1) - 1
    chosen = (~taken) & (rank < (g - members)[:, None])
    chosen_at = tf.where(chosen)
    # The chosen candidates of a unit, in window order, are its fillers 0, 1, ...
    row_and_rank = tf.stack([chosen_at[:, 0], tf.gather_nd(rank, chosen_at)], axis=1)
    fill_class = tf.gather_nd(candidates, chosen_at)
    appearance = tf.gather(chunks, fill_class) + _earlier_fillers(fill_class)
    shape = tf.shape(candidates, out_type=tf.int64)
    return _rows(row_and_rank, fill_class, shape), _rows(row_and_rank, appearance, shape)


def capped_fillers(
    member_classes: tf.Tensor,
    members: tf.Tensor,
    *,
    chunks: tf.Tensor,
    max_appearances: tf.Tensor,
    class_rank: tf.Tensor,
    max_draws_per_record: int,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Fillers with the most appearances left first, within `max_appearances` (see the module
    docstring).

    Args:
      member_classes: int64 [S, g], each short unit's member classes, -1 past its members.
      members: int64 [S], each short unit's members.
      chunks: int64 [U], each usable class's own appearances per epoch.
      max_appearances: int64 [U], the appearances that keep each class's records within the cap.
      class_rank: int64 [U], each class's place in the epoch's random order (the tie-break),
        below `2 ** ORDER_BITS`.
      max_draws_per_record: the cap, named in the error.

    Returns:
      `(class, appearance)`, each int64 [S, g]: entry `j` fills slot `members + j`, -1 past
      the unit's free slots.

    Raises:
      tf.errors.InvalidArgumentError: when run, a unit whose free slots outnumber the eligible
        classes (every other class at its cap or in the unit).
    """
    g = member_classes.shape[1]
    num_short = tf.shape(member_classes, out_type=tf.int64)[0]
    num_usable = tf.shape(chunks, out_type=tf.int64)[0]
    order = (1 << ORDER_BITS) - 1 - class_rank

    def fill(i, appearances, classes, numbers):
        unit_members = member_classes[i]
        present = tf.boolean_mask(unit_members, unit_members >= 0)
        in_unit = tf.scatter_nd(
            present[:, None], tf.ones_like(present), tf.reshape(num_usable, [1])
        )
        left = max_appearances - appearances
        key = tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, ORDER_BITS), order)
        eligible = tf.logical_and(tf.equal(in_unit, 0), left > 0)
        key = tf.where(eligible, key, -1)
        free = g - members[i]
        _, best = tf.math.top_k(key, k=g, sorted=True)
        best = tf.cast(best, tf.int64)
        taken = tf.range(g, dtype=tf.int64) < free
        enough = tf.debugging.Assert(
            tf.reduce_all(tf.logical_or(~taken, tf.gather(key, best) >= 0)),
            [
                f"max_draws_per_record={max_draws_per_record} leaves a batch without enough "
                "classes under the cap; raise max_draws_per_record"
            ],
        )
        with tf.control_dependencies([enough]):
            picked = tf.boolean_mask(best, taken)
        numbers = numbers.write(
            tf.cast(i, tf.int32), tf.where(taken, tf.gather(appearances, best), -1)
        )
        classes = classes.write(tf.cast(i, tf.int32), tf.where(taken, best, -1))
        appearances = tf.tensor_scatter_nd_add(appearances, picked[:, None], tf.ones_like(picked))
        return i + 1, appearances, classes, numbers

    rows = lambda: tf.TensorArray(tf.int64, size=tf.cast(num_short, tf.int32), element_shape=[g])
    _, _, classes, numbers = tf.while_loop(
        lambda i, *_: i < num_short,
        fill,
        [tf.constant(0, tf.int64), chunks, rows(), rows()],
    )
    return classes.stack(), numbers.stack()


def _earlier_fillers(fill_class: tf.Tensor) -> tf.Tensor:
    """int64 [F]: how many fillers before each one (in order) are of its class."""
    by_class = tf.cast(tf.argsort(fill_class, stable=True), tf.int64)
    sorted_class = tf.gather(fill_class, by_class)
    earlier = tf.range(tf.size(fill_class, out_type=tf.int64)) - tf.searchsorted(
        sorted_class, sorted_class, side="left", out_type=tf.int64
    )
    return tf.scatter_nd(by_class[:, None], earlier, tf.shape(fill_class, out_type=tf.int64))


def _rows(indices: tf.Tensor, values: tf.Tensor, shape: tf.Tensor) -> tf.Tensor:
    """int64 `shape`: `values` at `indices` ([F, 2]), -1 elsewhere."""
    return tf.tensor_scatter_nd_update(tf.fill(shape, tf.constant(-1, tf.int64)), indices, values)
