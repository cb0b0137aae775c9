"""The epoch-independent shape of a class-balanced plan: its rounds, units and short units.

Both executors of the class-balanced plan (`inputs.class_plan`, TensorFlow ops; `plans.class_plan`,
NumPy) take it from `class_units`, so the arithmetic that sets how many batches an epoch has and
which of them are completed with other classes is stated once. `inputs.class_plan`'s docstring
says what a round, a unit and a short unit are.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tfx_dynamic_inputs.plans.worker_slices import round_batches

EPOCH_MODES = ("classes", "samples")


@dataclasses.dataclass(frozen=True)
class ClassUnits:
    """The rounds and units of a plan (int64 arrays; U usable classes, S short units).

    Attributes:
      elastic: whether the unit is the global batch of all replicas (`n_c x R` usable classes
        or more).
      classes_per_unit: `g`, `n_c x R` when elastic, else `n_c`.
      rows_per_unit: the batches a unit is cut into (`R` when elastic, else 1).
      num_units: units per epoch (a multiple of the replicas a unit does not hold).
      num_batches: batches per epoch, over all replicas.
      chunks: [U], each usable class's appearances of its own per epoch.
      round_sizes: [rounds], the classes with a chunk in each round.
      unit_offsets: [rounds], each round's first unit.
      by_chunks: [U], the usable classes by chunks, most first (stable): round `r`'s classes are
        the first `round_sizes[r]`.
      fill_unit, fill_round, fill_first_member, fill_members: [S], each short unit, the round its
        members come from, the round position of its first member and its members.
    """

    elastic: bool
    classes_per_unit: int
    rows_per_unit: int
    num_units: int
    num_batches: int
    chunks: np.ndarray
    round_sizes: np.ndarray
    unit_offsets: np.ndarray
    by_chunks: np.ndarray
    fill_unit: np.ndarray
    fill_round: np.ndarray
    fill_first_member: np.ndarray
    fill_members: np.ndarray


def class_units(
    usable_sizes: np.ndarray,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    epoch_mode: str,
    num_replicas: int,
) -> ClassUnits:
    """The rounds and units of a plan over usable classes of `usable_sizes` records.

    Args:
      usable_sizes: int64 [U], the records of each usable class (U >= `n_classes_per_batch`).
      n_classes_per_batch: `n_c`.
      n_samples_per_class: `n_p`.
      epoch_mode: ``"classes"`` or ``"samples"``.
      num_replicas: `R`, workers x replicas per worker.

    Returns:
      The `ClassUnits`.

    Raises:
      ValueError: an unknown `epoch_mode`.
    """
    if epoch_mode not in EPOCH_MODES:
        raise ValueError(f"epoch_mode must be one of {EPOCH_MODES}, got {epoch_mode!r}")
    usable_sizes = np.asarray(usable_sizes, np.int64)
    num_usable = len(usable_sizes)
    n_c = n_classes_per_batch
    # The unit of the plan is the global batch (all replicas' batches of one step) when its
    # classes can all be distinct: the stream of global batches then depends on n_c x
    # replicas only, and the same stream splits over any other replica count (elastic).
    elastic = n_c * num_replicas <= num_usable
    g = n_c * num_replicas if elastic else n_c
    rows_per_unit = g // n_c
    if epoch_mode == "classes":
        chunks = np.ones(num_usable, np.int64)
    else:
        chunks = np.maximum(1, -(-usable_sizes // n_samples_per_class))
    # active[r]: classes with a chunk in round r; the rounds' groups are the units.
    active = np.cumsum(np.bincount(chunks, minlength=chunks.max() + 1)[::-1])[::-1][1:]
    groups = -(-active // g)
    unit_offsets = np.concatenate([[0], np.cumsum(groups)[:-1]])
    planned = int(groups.sum())
    # An elastic unit is one step of every replica; a replica's batch needs rounding.
    num_units = round_batches(planned, num_workers=num_replicas // rows_per_unit)
    extra = num_units - planned
    # Units to complete with other classes: the short last group of a round (its members are
    # the round's last `active % g` positions), then whole extra units for the replicas.
    short = np.flatnonzero(active % g)
    members = active[short] % g
    none = np.zeros(extra, np.int64)
    return ClassUnits(
        elastic=elastic,
        classes_per_unit=g,
        rows_per_unit=rows_per_unit,
        num_units=num_units,
        num_batches=num_units * rows_per_unit,
        chunks=chunks.astype(np.int64),
        round_sizes=active.astype(np.int64),
        unit_offsets=unit_offsets.astype(np.int64),
        by_chunks=np.argsort(-chunks, kind="stable").astype(np.int64),
        fill_unit=np.concatenate(
            [unit_offsets[short] + groups[short] - 1, planned + np.arange(extra)]
        ).astype(np.int64),
        fill_round=np.concatenate([short, none]).astype(np.int64),
        fill_first_member=np.concatenate([active[short] - members, none]).astype(np.int64),
        fill_members=np.concatenate([members, none]).astype(np.int64),
    )
