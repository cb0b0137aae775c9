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

Both return `(class, unit, slot, appearance)` of every filler, each int64 [F]; a filler's
appearance number continues after its class's own chunks and its earlier fillers this epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf

# The key of a class: its appearances left, then its place in the epoch's order (lower first).
ORDER_BITS = 20


@dataclasses.dataclass(frozen=True)
class ShortUnits:
    """The short units of a plan (epoch-independent), as int64 [S] variables.

    Attributes:
      unit: the unit of each.
      first_member: the position (in the epoch's item order) of its first member.
      members: its members, `< classes_per_unit`; the rest of its slots are free.
      classes_per_unit: `g`.
    """

    unit: tf.Variable
    first_member: tf.Variable
    members: tf.Variable
    classes_per_unit: int


def _member_classes(item_class: tf.Tensor, short: ShortUnits) -> tf.Tensor:
    """int64 [S, g]: each short unit's member classes, -1 past its members."""
    column = tf.range(short.classes_per_unit, dtype=tf.int64)[tf.newaxis, :]
    positions = short.first_member[:, None] + column
    is_member = column < short.members[:, None]
    return tf.where(is_member, tf.gather(item_class, tf.where(is_member, positions, 0)), -1)


def random_fillers(
    item_class: tf.Tensor,
    short: ShortUnits,
    *,
    num_usable: int,
    chunks: tf.Tensor,
    class_order: tf.Tensor,
    starts: tf.Tensor,
) -> tuple[tf.Tensor, ...]:
    """Fillers from the epoch's random class order (see the module docstring).

    Args:
      item_class: int64 [items], the epoch's items' classes in order.
      short: the plan's short units.
      num_usable: the usable classes.
      chunks: int64 [num_usable], each class's own appearances (chunks) per epoch.
      class_order: int64 [num_usable], the epoch's random order of the classes.
      starts: int64 [S], the offset into `class_order` of each short unit's candidates.

    Returns:
      `(class, unit, slot, appearance)`, each int64 [F].
    """
    g = short.classes_per_unit
    column = tf.range(g, dtype=tf.int64)[tf.newaxis, :]
    members = _member_classes(item_class, short)
    candidates = tf.gather(class_order, (starts[:, None] + column) % num_usable)
    taken = tf.reduce_any(tf.equal(candidates[:, :, None], members[:, None, :]), axis=2)
    rank = tf.cumsum(tf.cast(~taken, tf.int64), axis=1) - 1
    chosen = (~taken) & (rank < (g - short.members)[:, None])
    fill_class = tf.boolean_mask(candidates, chosen)
    fill_unit = tf.boolean_mask(tf.tile(short.unit[:, None], [1, g]), chosen)
    fill_slot = tf.boolean_mask(short.members[:, None] + rank, chosen)
    # Appearance numbers continue after the class's own chunks, counting its earlier fillers.
    by_class = tf.cast(tf.argsort(fill_class, stable=True), tf.int64)
    sorted_class = tf.gather(fill_class, by_class)
    earlier = tf.range(tf.size(fill_class, out_type=tf.int64)) - tf.searchsorted(
        sorted_class, sorted_class, side="left", out_type=tf.int64
    )
    earlier = tf.scatter_nd(by_class[:, None], earlier, tf.shape(fill_class, out_type=tf.int64))
    return fill_class, fill_unit, fill_slot, tf.gather(chunks, fill_class) + earlier


def capped_fillers(
    item_class: tf.Tensor,
    short: ShortUnits,
    *,
    chunks: tf.Tensor,
    max_appearances: tf.Tensor,
    class_rank: tf.Tensor,
    max_draws_per_record: int,
) -> tuple[tf.Tensor, ...]:
    """Fillers with the most appearances left first, within `max_appearances` (see the module
    docstring).

    Args:
      item_class: int64 [items], the epoch's items' classes in order.
      short: the plan's short units.
      chunks: int64 [U], each usable class's own appearances per epoch.
      max_appearances: int64 [U], the appearances that keep each class's records within the cap.
      class_rank: int64 [U], each class's place in the epoch's random order (the tie-break),
        below `2 ** ORDER_BITS`.
      max_draws_per_record: the cap, named in the error.

    Returns:
      `(class, unit, slot, appearance)`, each int64 [F].

    Raises:
      tf.errors.InvalidArgumentError: when run, a unit whose free slots outnumber the eligible
        classes (every other class at its cap or in the unit).
    """
    g = short.classes_per_unit
    members = _member_classes(item_class, short)
    num_short = tf.shape(members, out_type=tf.int64)[0]
    num_usable = tf.shape(chunks, out_type=tf.int64)[0]
    order = (1 << ORDER_BITS) - 1 - class_rank

    def fill(i, appearances, classes, numbers):
        unit_members = members[i]
        present = tf.boolean_mask(unit_members, unit_members >= 0)
        in_unit = tf.scatter_nd(
            present[:, None], tf.ones_like(present), tf.reshape(num_usable, [1])
        )
        left = max_appearances - appearances
        key = tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, ORDER_BITS), order)
        eligible = tf.logical_and(tf.equal(in_unit, 0), left > 0)
        key = tf.where(eligible, key, -1)
        free = g - short.members[i]
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
    classes, numbers = classes.stack(), numbers.stack()
    chosen = classes >= 0
    slot = short.members[:, None] + tf.range(g, dtype=tf.int64)[tf.newaxis, :]
    return (
        tf.boolean_mask(classes, chosen),
        tf.boolean_mask(tf.tile(short.unit[:, None], [1, g]), chosen),
        tf.boolean_mask(slot, chosen),
        tf.boolean_mask(numbers, chosen),
    )


def max_appearances(
    sizes: np.ndarray, chunks: np.ndarray, n_samples_per_class: int, max_draws_per_record: int
) -> np.ndarray:
    """The appearances per epoch that keep every record of each class within the cap.

    `a` appearances draw each of a class's `m` records at most `ceil(a * n_p / m)` times, which
    is within `k` while `a <= floor(k * m / n_p)`.

    Args:
      sizes: int64 [U], each usable class's records.
      chunks: int64 [U], each class's own appearances per epoch (what coverage needs).
      n_samples_per_class: `n_p`.
      max_draws_per_record: the cap `k`.

    Returns:
      int64 [U].

    Raises:
      ValueError: a class whose own appearances already draw a record more than `k` times,
        naming it and the least cap that covers it.
    """
    allowed = max_draws_per_record * sizes // n_samples_per_class
    short = np.flatnonzero(allowed < chunks)
    if len(short):
        needed = -(-chunks * n_samples_per_class // sizes)
        worst = short[np.argmax(needed[short])]
        raise ValueError(
            f"max_draws_per_record={max_draws_per_record} is below what covering a class needs: "
            f"usable class {int(worst)} ({int(sizes[worst])} records, {int(chunks[worst])} "
            f"appearances of {n_samples_per_class}) draws a record {int(needed[worst])} times; "
            f"pass at least {int(needed.max())}"
        )
    return allowed.astype(np.int64)


def least_feasible_cap(
    sizes: np.ndarray, chunks: np.ndarray, n_samples_per_class: int, free_slots: int
) -> int:
    """The least cap whose filler budget (appearances past the own chunks, over all classes)
    covers `free_slots`; a necessary condition, named in errors.

    Args:
      sizes: int64 [U], each usable class's records.
      chunks: int64 [U], each class's own appearances per epoch.
      n_samples_per_class: `n_p`.
      free_slots: the free slots of the epoch's short units.

    Returns:
      The least such cap (at least the one coverage needs).
    """
    cap = int((-(-chunks * n_samples_per_class // sizes)).max())
    while (cap * sizes // n_samples_per_class - chunks).sum() < free_slots:
        cap += 1
    return cap


def least_planning_cap(plans: Callable[[int], bool], start: int) -> int:
    """The least cap from `start` on that `plans` accepts (doubling, then bisection).

    Args:
      plans: whether a cap completes an epoch's short units (monotone: a higher cap does too).
      start: a cap below which `plans` is known to fail (or the least one to try).

    Returns:
      The least cap `>= start` that plans.
    """
    if plans(start):
        return start
    low, high = start, 2 * start
    while not plans(high):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if plans(middle) else (middle, high)
    return high
