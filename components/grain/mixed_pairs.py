"""Dynamic pairs over several pairs runs as Grain datasets: the batches of
`inputs.mixed_pairs.MixedPairsSampler` without TensorFlow.

The runs' x are concatenated in run order (global x number = the run's x offset + its x number),
their y likewise, and their valid pairs combined into one edge index
(`plans.pair_edges.combined_pairs`, the index tf.data's sampler plans: an x only ever pairs with
a y of its own run; groups are listed as edges). `plans.pair_plan.PairPlan` plans it, so each
batch is the tf.data batch of the same runs and arguments: the same ``x_index`` / ``y_index``
(global numbers), ``run`` and x / y records (tests/grain/test_mixed_batches.py). As tf.data's,
pairs mix by concatenation only: a run weighs by its x count (`inputs.mixed_pairs` says why).

Example:

    stream = mixed_pairs({"horses": "runs/horses", "zebras": "runs/zebras"}, batch_size=32)
    for batch in stream:
        batch["x"], batch["y"], batch["run"]   # serialized records, the run of each pair
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from tfx_dynamic_inputs.grain.batch_reads import BatchReader
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, PlannedBatches
from tfx_dynamic_inputs.grain.mixed_runs import ConcatenatedRecords, refuse_repeated_runs
from tfx_dynamic_inputs.grain.run_pairs import open_pairs
from tfx_dynamic_inputs.plans.pair_edges import combined_pairs
from tfx_dynamic_inputs.plans.pair_plan import PairPlan
from tfx_dynamic_inputs.plans.run_mix import FolderMix, WeightedFolder, check_mix_on_damaged
from tfx_dynamic_inputs.records.features import AudioDecoder, ExampleDecoder, ImageDecoder

Decode = str | AudioDecoder | ImageDecoder | ExampleDecoder


def _pair_runs(runs: object) -> FolderMix:
    """The runs (name -> folder), checked as tf.data's (`RunMix` of weights 1)."""
    if not isinstance(runs, Mapping):
        raise TypeError(f"runs must be a mapping of name -> run folder, got {type(runs).__name__}")
    return FolderMix(tuple(WeightedFolder(folder, 1.0, name) for name, folder in runs.items()))


class GrainMixedPairs(PlannedBatches):
    """Dynamic-pairs batches over several pairs runs, for Grain (module docstring).

    Args:
      runs: name -> pairs run folder, in the order that numbers their records; names unique
        (non-empty, no "/"), runs distinct (neither the same folder nor the same run id twice).
      batch_size: pairs per batch of this worker.
      strategy, seed, worker_index, num_workers, remainder: as `pairs.GrainPairs`.
      decode: how the runs' records are decoded (`records.RunRecordSource`); "bytes": the
        serialized records, as tf.data's without a parser.
      on_damaged: "fail", as tf.data's mix requires (a damaged record raises, naming it).

    Raises:
      ValueError, TypeError: a bad argument or run in one line (`plans.run_mix`'s checks,
        `PairPlan`'s, `run_pairs.open_pairs`').

    Attributes:
      names: the runs' names, in order.
      pairs: the combined index (`plans.pair_edges.CombinedPairs`: `x_offsets`, `y_offsets`).

    Example:

        mixed = GrainMixedPairs({"a": "runs/a", "b": "runs/b"}, batch_size=4, seed=3)
        mixed.epoch(0)[0]["run"]   # int64 [4], the run of each pair
    """

    def __init__(
        self,
        runs: Mapping[str, str | os.PathLike],
        *,
        batch_size: int,
        strategy: str = "uniform",
        seed: int = 0,
        worker_index: int = 0,
        num_workers: int = 1,
        remainder: str = "wrap",
        decode: Decode = "bytes",
        on_damaged: str = "fail",
    ):
        check_mix_on_damaged(on_damaged)
        mix = _pair_runs(runs)
        opened = [open_pairs(folder, decode) for folder in mix.folders]
        refuse_repeated_runs([x for x, _, _ in opened])
        self.names = mix.names
        self.pairs = combined_pairs(
            [pairs for _, _, pairs in opened], [len(y) for _, y, _ in opened]
        )
        self._x = BatchReader(ConcatenatedRecords([x for x, _, _ in opened]), "x")
        self._y = BatchReader(ConcatenatedRecords([y for _, y, _ in opened]), "y")
        self.plan = PairPlan(
            self.pairs,
            strategy=strategy,
            seed=seed,
            batch_size=batch_size,
            num_workers=num_workers,
            remainder=remainder,
        )
        self._take_split(self.plan, num_workers, worker_index)
        self.plan_key = json.dumps(
            {
                "kind": "mixed_pairs",
                "seed": self.plan.seed,
                "strategy": strategy,
                "remainder": remainder,
                "runs": [
                    {"name": name, "run_id": x.records.run_id, "x": len(x), "y": len(y)}
                    for name, (x, y, _) in zip(self.names, opened, strict=True)
                ],
                "pairs": len(self.pairs.values),
                "planned_x": len(self.pairs.planned_x),
                "global_batch": num_workers * self.batch_size,
            },
            sort_keys=True,
        )

    def plan_rows(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """``x_index``, ``y_index`` [n, batch_size] (global numbers) of global batches
        `batch_numbers`."""
        return self.plan.plan_batches(epoch, batch_numbers)

    def load(self, epoch: int, row: dict[str, np.ndarray]) -> dict[str, Any]:
        """A planned batch: ``x``, ``y``, ``x_index``, ``y_index`` and ``run`` (int64 [B])."""
        x_index, y_index = row["x_index"], row["y_index"]
        return {
            "x": self._x.read(x_index),
            "y": self._y.read(y_index),
            "x_index": x_index,
            "y_index": y_index,
            "run": self.pairs.run_of_x(x_index),
        }


def mixed_pairs(
    runs: Mapping[str, str | os.PathLike],
    *,
    batch_size: int,
    strategy: str = "uniform",
    seed: int = 0,
    worker_index: int = 0,
    num_workers: int = 1,
    remainder: str = "wrap",
    decode: Decode = "bytes",
    on_damaged: str = "fail",
    first_epoch: int = 0,
    num_epochs: int | None = None,
) -> EpochStream:
    """Pair batches over several pairs runs, re-paired every epoch, as a Grain `IterDataset`.

    Args:
      runs, batch_size, strategy, seed, worker_index, num_workers, remainder, decode,
        on_damaged: as `GrainMixedPairs`.
      first_epoch, num_epochs: the epochs streamed (None: without end).

    Returns:
      The stream of dicts ``x``, ``y`` (the records, stacked), ``x_index``, ``y_index`` (global
      numbers) and ``run`` (int64 [batch_size]); its iterator's `get_state` / `set_state`
      resume exactly.

    Example:

        stream = mixed_pairs({"a": "runs/a", "b": "runs/b"}, batch_size=32, num_epochs=10)
    """
    mixed = GrainMixedPairs(
        runs,
        batch_size=batch_size,
        strategy=strategy,
        seed=seed,
        worker_index=worker_index,
        num_workers=num_workers,
        remainder=remainder,
        decode=decode,
        on_damaged=on_damaged,
    )
    return mixed.stream(first_epoch, num_epochs)
