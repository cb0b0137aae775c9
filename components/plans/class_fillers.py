"""Which classes complete the short units of a class-balanced epoch plan, in NumPy: the fillers
of `inputs.class_fillers` bit for bit, and the caps both executors share.

`inputs.class_fillers`' docstring says how the two kinds choose (`random_fillers`: windows of the
epoch's random class order; `capped_fillers`: the most appearances left under
`max_draws_per_record` first). Both return the fillers of every short unit as rows `[S, g]`:
entry `j` of a unit's row is the filler of its slot `members + j` (-1 past its free slots), with
its class and appearance number. The caps' arithmetic (`max_appearances`, `least_feasible_cap`,
`least_planning_cap`) is stated here once; `inputs.class_fillers` takes it from here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# The key of a class: its appearances left, then its place in the epoch's order (lower first).
ORDER_BITS = 20


def random_fillers(
    member_classes: np.ndarray, members: np.ndarray, candidates: np.ndarray, chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Fillers from windows of the epoch's random class order.

    Args:
      member_classes: int64 [S, g], each short unit's member classes, -1 past its members.
      members: int64 [S], each short unit's members.
      candidates: int64 [S, g], each short unit's window of `g` consecutive classes of the
        epoch's random class order: distinct classes.
      chunks: int64 [U], each usable class's own appearances (chunks) per epoch.

    Returns:
      `(class, appearance)`, each int64 [S, g]: entry `j` fills slot `members + j`, -1 past
      the unit's free slots.
    """
    num_short, g = candidates.shape
    # A candidate is taken when it is one of its unit's members: keyed by (unit, class).
    width = np.int64(len(chunks) + 1)
    unit = np.arange(num_short, dtype=np.int64)[:, None] * width
    taken = np.isin(unit + candidates + 1, unit + member_classes + 1)
    rank = np.cumsum(~taken, axis=1) - 1
    chosen = ~taken & (rank < (g - members)[:, None])
    rows, columns = np.nonzero(chosen)
    fill_class = candidates[rows, columns]
    appearance = chunks[fill_class] + _earlier_fillers(fill_class)
    classes = np.full((num_short, g), -1, np.int64)
    appearances = np.full((num_short, g), -1, np.int64)
    # The chosen candidates of a unit, in window order, are its fillers 0, 1, ...
    classes[rows, rank[rows, columns]] = fill_class
    appearances[rows, rank[rows, columns]] = appearance
    return classes, appearances


def capped_fillers(
    member_classes: np.ndarray,
    members: np.ndarray,
    *,
    chunks: np.ndarray,
    max_appearances: np.ndarray,
    class_rank: np.ndarray,
    max_draws_per_record: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Fillers with the most appearances left first, within `max_appearances`, unit after unit.

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
      ValueError: a unit whose free slots outnumber the eligible classes (every other class at
        its cap or in the unit).
    """
    num_short, g = member_classes.shape
    order = (1 << ORDER_BITS) - 1 - np.asarray(class_rank, np.int64)
    appearances = np.array(chunks, np.int64)
    classes = np.full((num_short, g), -1, np.int64)
    numbers = np.full((num_short, g), -1, np.int64)
    for unit in range(num_short):
        in_unit = np.zeros(len(appearances), bool)
        unit_members = member_classes[unit]
        in_unit[unit_members[unit_members >= 0]] = True
        left = max_appearances - appearances
        key = np.where(~in_unit & (left > 0), (left << ORDER_BITS) | order, -1)
        free = g - int(members[unit])
        # The `free` largest keys, ties to the lower class (as `tf.math.top_k`).
        best = np.argsort(-key, kind="stable")[:free]
        if np.any(key[best] < 0):
            raise ValueError(
                f"max_draws_per_record={max_draws_per_record} leaves a batch without enough "
                "classes under the cap; raise max_draws_per_record"
            )
        classes[unit, :free] = best
        numbers[unit, :free] = appearances[best]
        appearances[best] += 1
    return classes, numbers


def _earlier_fillers(fill_class: np.ndarray) -> np.ndarray:
    """int64 [F]: how many fillers before each one (in order) are of its class."""
    by_class = np.argsort(fill_class, kind="stable")
    sorted_class = fill_class[by_class]
    earlier = np.empty(len(fill_class), np.int64)
    earlier[by_class] = np.arange(len(fill_class)) - np.searchsorted(
        sorted_class, sorted_class, side="left"
    )
    return earlier


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
