"""Dynamic pairs whose x and y come from several pairs runs: `MixedPairsSampler`.

The runs' x records are concatenated in run order (global x number = the run's x offset + its x
number), their y records likewise, and their valid pairs are combined into one ragged index:
run `k`'s rows, with its y numbers moved by its y offset. An x is thus only ever paired with a y
of its own run, and `pair_plan.PairPlanner` plans the combined index as it plans one run's:
every x of every run once an epoch, a fresh valid y each epoch, elastic and resumable.

**Weights.** Pairs mix by concatenation only: a run weighs by its x count. A weight would have
to repeat or leave out x within an epoch, which breaks the plan's guarantee (each x exactly once
an epoch, and pair coverage counted against that); to draw a run more, mix class-balanced
batches (`mixed_class_balanced`) or materialize the run's x more than once.

`MixedPairCoverage` counts pair coverage per run.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.coverage import PairCoverage
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler
from tfx_dynamic_inputs.inputs.graph_functions import as_given
from tfx_dynamic_inputs.inputs.pair_plan import PairingState, PairPlanner
from tfx_dynamic_inputs.inputs.pairs import pair_plan_key
from tfx_dynamic_inputs.inputs.parsing import ParseFn
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import StoreOptions
from tfx_dynamic_inputs.inputs.run_mix import RunMix, WeightedRun, read_by_run
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs
from tfx_dynamic_inputs.inputs.worker_slices import replicas_per_worker, worker_slice
from tfx_dynamic_inputs.plans import pair_edges
from tfx_dynamic_inputs.plans.run_mix import check_mix_on_damaged


def combined_pairs(valid_pairs, num_y) -> tuple[ValidPairs, np.ndarray, np.ndarray]:
    """One valid-pair index over several runs' concatenated x and y (`plans.pair_edges`, which
    Grain's mixed pairs plan too), as a `ValidPairs`.

    Args:
      valid_pairs: each run's `ValidPairs` (or `GroupPairs`, expanded to its edges).
      num_y: each run's y count.

    Returns:
      `(pairs, x_offsets, y_offsets)`: the combined `ValidPairs` (run `k`'s rows, y moved by
      its offset) and int64 [K + 1] offsets of each run's x and y numbers.

    Example:

        pairs, x_off, y_off = combined_pairs([ValidPairs.build([[0], [1]], num_y=2),
                                              ValidPairs.build([[0, 1]], num_y=3)], [2, 3])
        pairs.row_splits, pairs.values   # [0, 1, 2, 4], [0, 1, 2, 3]
    """
    combined = pair_edges.combined_pairs(valid_pairs, num_y)
    pairs = ValidPairs.build(
        (combined.row_splits, combined.values),
        num_x=combined.num_x,
        num_y=int(combined.y_offsets[-1]),
        on_invalid="skip",
    )
    return pairs, combined.x_offsets, combined.y_offsets


class MixedPairsSampler(EpochSampler):
    """Dynamic pairs over several pairs runs (see the module docstring).

    Args:
      runs: name -> run (a `Run` or its folder), in the order that numbers their records;
        names unique, runs distinct (`run_mix.RunMix`'s checks).
      batch_size: pairs per batch.
      strategy, seed, remainder, state: as `pairs.DynamicPairsSampler`.
      input_context, worker_index, num_workers: this input pipeline's slice of whole batches.
      parse_fn: tf.string [B] -> the parsed batch, for both x and y; None: the serialized
        records.
      store_options: how the runs' records are read; `on_damaged` must be ``"fail"``.

    Raises:
      ValueError: a repeated run or name, `on_damaged="skip"`, and `PairPlanner`'s errors.

    Attributes:
      x_offsets, y_offsets: int64 [K + 1]: run `k`'s x (y) are global numbers
        `[offsets[k], offsets[k + 1])`.
      valid_pairs: the combined `ValidPairs`.

    Example:

        sampler = MixedPairsSampler({"a": "runs/a", "b": "runs/b"}, batch_size=32)
        for batch in sampler.dataset(): ...   # x_index, y_index are global numbers
    """

    plans_batches_alone = True

    def __init__(
        self,
        runs,
        *,
        batch_size: int,
        strategy: str = "uniform",
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        worker_index: int | None = None,
        num_workers: int | None = None,
        state: PairingState | None = None,
        parse_fn: ParseFn | None = None,
        remainder: str = "wrap",
        store_options: StoreOptions | None = None,
    ):
        batch_size = int_argument("batch_size", batch_size, 1)
        seed = seed_argument(seed)
        store_options = store_options or StoreOptions()
        check_mix_on_damaged(store_options.on_damaged)
        self.mix = RunMix(tuple(WeightedRun(run, 1.0, name) for name, run in dict(runs).items()))
        opened = [run.run.pairs(store_options) for run in self.mix.runs]
        self.x_stores: list[RecordStore] = [x for x, _, _ in opened]
        self.y_stores: list[RecordStore] = [y for _, y, _ in opened]
        self.valid_pairs, self.x_offsets, self.y_offsets = combined_pairs(
            [pairs for _, _, pairs in opened], [y.num_records for y in self.y_stores]
        )
        self.per_run_pairs = [pairs for _, _, pairs in opened]
        self.worker_index, self.num_workers = worker_slice(
            input_context, worker_index=worker_index, num_workers=num_workers
        )
        self.batch_size = batch_size
        self.planner = PairPlanner(
            self.valid_pairs,
            strategy=strategy,
            seed=seed,
            batch_size=batch_size,
            num_workers=self.num_workers,
            replicas_per_worker=replicas_per_worker(input_context),
            remainder=remainder,
            state=state,
        )
        self.state = self.planner.state
        self.num_batches = self.planner.num_batches
        self._parse = as_given(parse_fn) if parse_fn is not None else tf.identity

    @property
    def stream(self) -> str:
        run_ids = ", ".join(run.run.run_id for run in self.mix.runs)
        return f"{self.planner.stream} over runs [{run_ids}]"

    @property
    def plan_key(self) -> str:
        return pair_plan_key(self.planner)

    def coverage(self) -> MixedPairCoverage:
        """A `MixedPairCoverage` of this sampler's runs (feed it the batches' indices)."""
        return MixedPairCoverage(self)

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.planner.plan(epoch)

    def _plan_batches(self, epoch: tf.Tensor, batch_numbers: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.planner.plan_batches(epoch, batch_numbers)

    def _stores(self) -> list[RecordStore]:
        return [*self.x_stores, *self.y_stores]

    def _load_batch(
        self, row: dict[str, tf.Tensor], *, for_service: bool = False
    ) -> dict[str, tf.Tensor]:
        x_index, y_index = row["x_index"], row["y_index"]
        run = tf.searchsorted(self.x_offsets[1:], x_index, side="right", out_type=tf.int64)
        x = read_by_run(self.x_stores, self.x_offsets, x_index, run, for_service)
        y = read_by_run(self.y_stores, self.y_offsets, y_index, run, for_service)
        return {
            "x": self._parse(x),
            "y": self._parse(y),
            "x_index": x_index,
            "y_index": y_index,
            "run": run,
        }


class MixedPairCoverage:
    """Pair coverage per run of a `MixedPairsSampler`: one `PairCoverage` each.

    Args:
      sampler: the sampler whose runs are covered.

    Example:

        coverage = sampler.coverage()
        for batch in sampler.dataset():
            coverage.update(batch["x_index"], batch["y_index"])
        coverage.result()   # {"a": {"pair_coverage_epoch": ...}, "b": {...}}
    """

    def __init__(self, sampler: MixedPairsSampler):
        self._names = sampler.mix.names
        self._x_offsets, self._y_offsets = sampler.x_offsets, sampler.y_offsets
        self.per_run = {
            name: PairCoverage(pairs, num_y=store.num_records)
            for name, pairs, store in zip(
                self._names, sampler.per_run_pairs, sampler.y_stores, strict=True
            )
        }

    def update(self, x_index, y_index) -> None:
        """Records the pairs of a batch (global x and y numbers) in their runs' coverage.

        Args:
          x_index, y_index: int64 [B], global record numbers.
        """
        x_index, y_index = np.asarray(x_index), np.asarray(y_index)
        run = np.searchsorted(self._x_offsets, x_index, side="right") - 1
        for k, name in enumerate(self._names):
            mine = run == k
            self.per_run[name].update(
                x_index[mine] - self._x_offsets[k], y_index[mine] - self._y_offsets[k]
            )

    def start_epoch(self) -> None:
        """Starts a new epoch in every run's coverage."""
        for coverage in self.per_run.values():
            coverage.start_epoch()

    def result(self) -> dict[str, dict[str, float]]:
        """Run name -> its `PairCoverage.result()`."""
        return {name: coverage.result() for name, coverage in self.per_run.items()}
