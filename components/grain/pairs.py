"""Dynamic pairs as Grain datasets: the batches of `inputs.dynamic_pairs` without TensorFlow.

`GrainPairs` plans with `plans.pair_plan.PairPlan` (the record numbers of the tf.data sampler's
`PairPlanner` bit for bit, for the same arguments) and reads the planned x and y with
`batch_reads.BatchReader`, so each batch is the tf.data batch of the same `(x, y, valid_pairs,
batch_size, strategy, seed, worker, remainder)` and epoch: the same `x_index` / `y_index` and
the same x / y values (tests/grain/test_equal_batches.py).

Example:

    stream = dynamic_pairs(x_images, y_images, [[0, 3], [1], [2, 3]], batch_size=2, seed=7)
    for batch in stream:   # epoch 0's batches, then epoch 1's, ...
        batch["x"], batch["y"], batch["x_index"], batch["y_index"]
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import grain
import numpy as np

from tfx_dynamic_inputs.grain.batch_reads import BatchReader
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, epoch_dataset
from tfx_dynamic_inputs.plans.pair_plan import PairPlan
from tfx_dynamic_inputs.plans.worker_slices import batches_per_worker

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


class GrainPairs:
    """Dynamic-pairs batches for Grain: the plan, the sides and the datasets of its epochs.

    Args:
      x, y: the records of each side: an array (a record a row), a dict of arrays, or a
        random-access source (`records.RunRecordSource`).
      valid_pairs: for each x, the y it may pair with (`EdgeList.build`).
      batch_size: pairs per batch of this worker (as tf.data's `batch_size`).
      strategy: ``"uniform"`` or ``"least_sampled"``.
      seed: plans are a pure function of `(seed, epoch)`.
      worker_index, num_workers: this input pipeline's share of whole batches.
      remainder: ``"wrap"`` or ``"drop"``, as tf.data's.

    Raises:
      ValueError, TypeError: a bad argument, named in one line (`PairPlan`'s, `EdgeList`'s).

    Example:

        pairs = GrainPairs(x, y, [[0], [0, 1]], batch_size=2)
        pairs.epoch(3)[0]   # epoch 3's first batch, a dict
    """

    def __init__(
        self,
        x: object,
        y: object,
        valid_pairs: object,
        *,
        batch_size: int,
        strategy: str = "uniform",
        seed: int = 0,
        worker_index: int = 0,
        num_workers: int = 1,
        remainder: str = "wrap",
    ):
        self._x, self._y = BatchReader(x, "x"), BatchReader(y, "y")
        edges = EdgeList.build(valid_pairs, self._x.num_records, self._y.num_records)
        self.plan = PairPlan(
            edges,
            strategy=strategy,
            seed=seed,
            batch_size=batch_size,
            num_workers=num_workers,
            remainder=remainder,
        )
        self.num_batches, self.batch_size = self.plan.num_batches, self.plan.batch_size
        self.num_workers, self.worker_index = num_workers, worker_index
        self.steps_per_epoch = batches_per_worker(self.num_batches, num_workers, worker_index)
        self.plan_key = json.dumps(
            {
                "kind": "pairs",
                "seed": self.plan.seed,
                "strategy": strategy,
                "remainder": remainder,
                "x": self._x.num_records,
                "y": self._y.num_records,
                "pairs": len(edges.values),
                "planned_x": len(edges.planned_x),
                "global_batch": num_workers * self.batch_size,
            },
            sort_keys=True,
        )

    def batch(self, epoch: int, batch_number: int) -> dict[str, Any]:
        """Global batch `batch_number` of `epoch`: ``x``, ``y``, ``x_index``, ``y_index``."""
        planned = self.plan.plan_batches(epoch, np.array([batch_number]))
        x_index, y_index = planned["x_index"][0], planned["y_index"][0]
        return {
            "x": self._x.read(x_index),
            "y": self._y.read(y_index),
            "x_index": x_index,
            "y_index": y_index,
        }

    def epoch(self, epoch: int, initial_step: int = 0) -> grain.MapDataset:
        """This worker's batches of `epoch` (`epoch_stream.epoch_dataset`)."""
        return epoch_dataset(self, epoch, initial_step)

    def stream(self, first_epoch: int = 0, num_epochs: int | None = None) -> EpochStream:
        """Epoch after epoch, checkpointable and elastic (`epoch_stream.EpochStream`)."""
        return EpochStream(self, first_epoch, num_epochs)


def dynamic_pairs(
    x: object,
    y: object,
    valid_pairs: object,
    *,
    batch_size: int,
    strategy: str = "uniform",
    seed: int = 0,
    worker_index: int = 0,
    num_workers: int = 1,
    remainder: str = "wrap",
    first_epoch: int = 0,
    num_epochs: int | None = None,
) -> EpochStream:
    """Pair batches re-paired every epoch, as a Grain `IterDataset` (`GrainPairs.stream`).

    Args:
      x, y, valid_pairs, batch_size, strategy, seed, worker_index, num_workers, remainder: as
        `GrainPairs`.
      first_epoch, num_epochs: the epochs streamed (None: without end).

    Returns:
      The stream of dicts ``x``, ``y`` (the records, stacked), ``x_index``, ``y_index``
      (int64 [batch_size]); its iterator's `get_state` / `set_state` resume exactly.

    Example:

        stream = dynamic_pairs(x, y, [[0, 3], [1], [2, 3]], batch_size=2, num_epochs=10)
    """
    pairs = GrainPairs(
        x,
        y,
        valid_pairs,
        batch_size=batch_size,
        strategy=strategy,
        seed=seed,
        worker_index=worker_index,
        num_workers=num_workers,
        remainder=remainder,
    )
    return pairs.stream(first_epoch, num_epochs)
