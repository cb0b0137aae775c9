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

import json
import os
from typing import Any

import numpy as np

from tfx_dynamic_inputs.grain.batch_reads import BatchReader, rows_of
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, PlannedBatches
from tfx_dynamic_inputs.grain.run_pairs import open_pairs
from tfx_dynamic_inputs.grain.skipped import SkippedSamples
from tfx_dynamic_inputs.grain.valid_pairs import EdgeList
from tfx_dynamic_inputs.plans.pair_plan import PairPlan


class GrainPairs(PlannedBatches):
    """Dynamic-pairs batches for Grain: the plan, the sides and the datasets of its epochs.

    Args:
      x, y: the records of each side: an array (a record a row), a dict of arrays, or a
        random-access source (`records.RunRecordSource`). Or `x` alone a pairs run folder,
        whose record sets and pair index (edges or groups: `run_pairs.open_pairs`) are used.
      valid_pairs: for each x, the y it may pair with (`EdgeList.build`).
      batch_size: pairs per batch of this worker (as tf.data's `batch_size`).
      strategy: ``"uniform"`` or ``"least_sampled"``.
      seed: plans are a pure function of `(seed, epoch)`.
      worker_index, num_workers: this input pipeline's share of whole batches.
      remainder: ``"wrap"`` or ``"drop"``, as tf.data's.
      decode: how a run's records are decoded (`records.RunRecordSource`); "bytes": the
        serialized records, as tf.data's without `image` or a parser.
      on_damaged: for a run folder, "fail" (a damaged record raises, naming it) or "skip": a
        pair whose x or y is damaged is left out of its batch (the batch is then short, as
        tf.data's), counted in `skipped.total` and warned once an epoch (`skipped.SkippedSamples`).
        A source given is read with its own policy; one that reads a record as None skips it.

    Raises:
      ValueError, TypeError: a bad argument, named in one line (`PairPlan`'s, `EdgeList`'s).

    Example:

        pairs = GrainPairs(x, y, [[0], [0, 1]], batch_size=2)
        pairs.epoch(3)[0]   # epoch 3's first batch, a dict
    """

    def __init__(
        self,
        x: object,
        y: object = None,
        valid_pairs: object = None,
        *,
        batch_size: int,
        strategy: str = "uniform",
        seed: int = 0,
        worker_index: int = 0,
        num_workers: int = 1,
        remainder: str = "wrap",
        decode: object = "bytes",
        on_damaged: str = "fail",
    ):
        if isinstance(x, str | os.PathLike):
            if y is not None or valid_pairs is not None:
                raise ValueError("a run holds its own y and valid pairs: pass the run alone")
            x, y, edges = open_pairs(x, decode, on_damaged)
            self._x, self._y = BatchReader(x, "x"), BatchReader(y, "y")
        elif y is None or valid_pairs is None:
            raise TypeError("pass x, y and valid_pairs, or a pairs run folder as x alone")
        elif on_damaged != "fail":
            raise ValueError(
                f"on_damaged={on_damaged!r:.50} is for a run folder; a source given is read with "
                "its own policy (RunRecordSource(..., on_damaged=...))"
            )
        else:
            self._x, self._y = BatchReader(x, "x"), BatchReader(y, "y")
            edges = EdgeList.build(valid_pairs, self._x.num_records, self._y.num_records)
        self.skipped = SkippedSamples("dynamic_pairs", {"x": x, "y": y})
        grouped = hasattr(edges, "group_row_splits")
        num_pairs = len(edges.group_values if grouped else edges.values)
        self.plan = PairPlan(
            edges,
            strategy=strategy,
            seed=seed,
            batch_size=batch_size,
            num_workers=num_workers,
            remainder=remainder,
        )
        self._take_split(self.plan, num_workers, worker_index)
        self.plan_key = json.dumps(
            {
                "kind": "pairs",
                "seed": self.plan.seed,
                "strategy": strategy,
                "remainder": remainder,
                "x": self._x.num_records,
                "y": self._y.num_records,
                "pairs": num_pairs,
                "pairing": "groups" if grouped else "edges",
                "planned_x": len(edges.planned_x),
                "global_batch": num_workers * self.batch_size,
            },
            sort_keys=True,
        )

    def plan_rows(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """``x_index``, ``y_index`` [n, batch_size] of global batches `batch_numbers`."""
        return self.plan.plan_batches(epoch, batch_numbers)

    def load(self, epoch: int, row: dict[str, np.ndarray]) -> dict[str, Any]:
        """A planned batch: ``x``, ``y``, ``x_index``, ``y_index``."""
        x_index, y_index = row["x_index"], row["y_index"]
        x, x_kept = self._x.read_checked(x_index)
        y, y_kept = self._y.read_checked(y_index)
        kept = x_kept & y_kept
        if not kept.all():
            self.skipped.record(epoch, kept)
            x, y = rows_of(x, kept[x_kept]), rows_of(y, kept[y_kept])
            x_index, y_index = x_index[kept], y_index[kept]
        return {"x": x, "y": y, "x_index": x_index, "y_index": y_index}


def dynamic_pairs(
    x: object,
    y: object = None,
    valid_pairs: object = None,
    *,
    batch_size: int,
    strategy: str = "uniform",
    seed: int = 0,
    worker_index: int = 0,
    num_workers: int = 1,
    remainder: str = "wrap",
    decode: object = "bytes",
    on_damaged: str = "fail",
    first_epoch: int = 0,
    num_epochs: int | None = None,
) -> EpochStream:
    """Pair batches re-paired every epoch, as a Grain `IterDataset` (`GrainPairs.stream`).

    Args:
      x, y, valid_pairs, batch_size, strategy, seed, worker_index, num_workers, remainder,
        decode, on_damaged: as `GrainPairs`.
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
        decode=decode,
        on_damaged=on_damaged,
    )
    return pairs.stream(first_epoch, num_epochs)
