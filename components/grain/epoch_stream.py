"""A sampler's epochs as Grain datasets: one epoch as a `grain.MapDataset`, and the stream of
epochs as a `grain.IterDataset` whose iterator checkpoints (`get_state` / `set_state`).

A plan gives each global batch's record numbers from `(seed, epoch, batch number)` alone, so one
epoch of one worker is `MapDataset.range(steps)` mapped to its batches (the worker's batch
numbers are `plans.worker_slices.worker_batch_numbers`: `b % num_workers == worker_index`, as
the tf.data samplers take them). Epochs advance in the stream: after the last step of epoch `e`
comes step 0 of epoch `e + 1`, as iterating a tf.data sampler's dataset again does.

The stream's state is `{"plan", "epoch", "examples_done"}`: the plan's key (everything that
shapes the global batches: kind, seed, options, sizes and the global batch), the epoch in
progress and the examples all workers have consumed of it (`step x num_workers x batch_size`).
It names no worker count, so it resumes on another one that keeps the global batch (e.g. 2
workers of 32 -> 1 worker of 64), as the tf.data samplers' `initial_step` does; a state of
another plan, or a point that is not a whole step of this split, is refused in one line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import grain
import numpy as np

from tfx_dynamic_inputs.plans.worker_slices import batches_per_worker, worker_batch_numbers

# Global batches a worker plans in one call. A plan call has a fixed cost (its epoch's seed folds
# and keyed walks: ~10 ms at 100k records, whatever the batches), paid once a block of this many
# batches; a block holds `PLAN_BLOCK x batch_size` planned numbers, however large the data.
PLAN_BLOCK = 32


class PlannedBatches(ABC):
    """A Grain sampler: its split, its plan's key, its plan's rows and how a row is read.

    Subclasses take their split with `_take_split` (`num_batches`: global batches an epoch,
    `batch_size`: this worker's, `num_workers`, `worker_index`, `steps_per_epoch`), set
    `plan_key`, and define `plan_rows` and `load`; the epochs (`epoch`, `stream`) and single
    batches (`batch`) are stated here once for all of them.
    """

    num_batches: int
    num_workers: int
    worker_index: int
    batch_size: int
    plan_key: str

    def _take_split(self, plan: object, num_workers: int, worker_index: int) -> None:
        """Takes the plan's batches and this worker's share of them, checked
        (`plans.worker_slices.batches_per_worker`: a worker outside the split is one line)."""
        self.num_batches, self.batch_size = plan.num_batches, plan.batch_size
        self.num_workers, self.worker_index = num_workers, worker_index
        self.steps_per_epoch = batches_per_worker(plan.num_batches, num_workers, worker_index)

    @abstractmethod
    def plan_rows(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """The plan of global batches `batch_numbers` of `epoch`: arrays of leading dim [n]."""

    @abstractmethod
    def load(self, epoch: int, row: dict[str, np.ndarray]) -> dict[str, Any]:
        """One planned batch (a row of `plan_rows`), read."""

    def batch(self, epoch: int, batch_number: int) -> dict[str, Any]:
        """Global batch `batch_number` of `epoch`, planned alone and read."""
        planned = self.plan_rows(_epoch_int(epoch), np.array([batch_number], np.int64))
        return self.load(epoch, {key: value[0] for key, value in planned.items()})

    def epoch(self, epoch: int, initial_step: int = 0) -> grain.MapDataset:
        """This worker's batches of `epoch` (`epoch_dataset`)."""
        return epoch_dataset(self, epoch, initial_step)

    def stream(self, first_epoch: int = 0, num_epochs: int | None = None) -> EpochStream:
        """Epoch after epoch, checkpointable and elastic (`EpochStream`)."""
        return EpochStream(self, first_epoch, num_epochs)


class _PlanBlocks:
    """One worker's planned rows of an epoch, planned `PLAN_BLOCK` steps at a time; the block in
    use is kept (a picklable cache: a copy starts empty)."""

    def __init__(self, batches: PlannedBatches, numbers: np.ndarray):
        self._batches, self._numbers = batches, numbers
        self._key: tuple[int, int] | None = None
        self._rows: dict[str, np.ndarray] = {}

    def row(self, epoch: int, step: int) -> dict[str, np.ndarray]:
        block, offset = divmod(step, PLAN_BLOCK)
        if self._key != (epoch, block):
            numbers = self._numbers[block * PLAN_BLOCK : (block + 1) * PLAN_BLOCK]
            self._rows = self._batches.plan_rows(epoch, numbers)
            self._key = (epoch, block)
        return {key: value[offset] for key, value in self._rows.items()}


class _EpochBatch:
    """Step `i` of one worker's epoch -> its batch (a picklable callable for Grain's map)."""

    def __init__(self, batches: PlannedBatches, epoch: int, numbers: np.ndarray, first: int):
        self._batches, self._epoch, self._first = batches, epoch, first
        self._blocks = _PlanBlocks(batches, numbers)

    def __call__(self, step: int) -> dict[str, Any]:
        return self._batches.load(self._epoch, self._blocks.row(self._epoch, self._first + step))


def _epoch_int(epoch: object) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
        raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
    return int(epoch)


def epoch_dataset(batches: PlannedBatches, epoch: int, initial_step: int = 0) -> grain.MapDataset:
    """One worker's batches of one epoch, from its `initial_step`-th on.

    Args:
      batches: the sampler.
      epoch: the epoch (>= 0).
      initial_step: batches of this worker already consumed in the epoch.

    Returns:
      A `grain.MapDataset` of `steps_per_epoch - initial_step` batches (dicts).

    Raises:
      ValueError: a negative epoch or an `initial_step` outside the epoch.
    """
    left = worker_batch_numbers(
        batches.num_batches, batches.num_workers, batches.worker_index, initial_step
    )
    # Blocks are aligned on the epoch's steps, whatever `initial_step`: the same rows are planned
    # together on a resume.
    numbers = worker_batch_numbers(batches.num_batches, batches.num_workers, batches.worker_index)
    first = len(numbers) - len(left)
    mapped = _EpochBatch(batches, _epoch_int(epoch), numbers, first)
    return grain.MapDataset.range(len(left)).map(mapped)


class EpochStream(grain.IterDataset):
    """A worker's batches epoch after epoch, checkpointable and elastic (module docstring).

    Args:
      batches: the sampler.
      first_epoch: the epoch the stream starts at.
      num_epochs: epochs to stream; None: without end.

    Raises:
      ValueError: a negative `first_epoch` or a `num_epochs` below 1.
    """

    def __init__(
        self, batches: PlannedBatches, first_epoch: int = 0, num_epochs: int | None = None
    ):
        super().__init__()
        if num_epochs is not None and (
            isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1
        ):
            raise ValueError(f"num_epochs must be an int >= 1 or None, got {num_epochs!r}")
        self._batches = batches
        self._first_epoch = _epoch_int(first_epoch)
        self._end = None if num_epochs is None else self._first_epoch + num_epochs

    def __iter__(self) -> _EpochStreamIterator:
        return _EpochStreamIterator(self._batches, self._first_epoch, self._end)

    def __str__(self) -> str:
        return f"EpochStream(first_epoch={self._first_epoch}, end={self._end})"


class _EpochStreamIterator(grain.DatasetIterator):
    """The stream's position: an epoch and a step of this worker in it."""

    def __init__(self, batches: PlannedBatches, epoch: int, end: int | None):
        super().__init__()
        self._batches, self._epoch, self._end, self._step = batches, epoch, end, 0
        self._numbers = worker_batch_numbers(
            batches.num_batches, batches.num_workers, batches.worker_index
        )
        self._blocks = _PlanBlocks(batches, self._numbers)
        # Examples all workers consume in one step: the global batch.
        self._global_batch = batches.num_workers * batches.batch_size

    def __next__(self) -> dict[str, Any]:
        if self._step == len(self._numbers):
            self._epoch, self._step = self._epoch + 1, 0
        if self._end is not None and self._epoch >= self._end:
            raise StopIteration
        batch = self._batches.load(self._epoch, self._blocks.row(self._epoch, self._step))
        self._step += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        return {
            "plan": self._batches.plan_key,
            "epoch": self._epoch,
            "examples_done": self._step * self._global_batch,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or set(state) != {"plan", "epoch", "examples_done"}:
            raise ValueError(
                f"a Grain sampler state is a dict of plan, epoch and examples_done, got {state!r}"
            )
        if state["plan"] != self._batches.plan_key:
            raise ValueError(
                f"the state was saved by another plan: {state['plan']!r}, this stream plans "
                f"{self._batches.plan_key!r}"
            )
        done = state["examples_done"]
        step, rest = divmod(done, self._global_batch)
        if rest or not 0 <= step <= len(self._numbers):
            raise ValueError(
                f"examples_done={done} is not a whole step of this split "
                f"({self._batches.num_workers} workers x {self._batches.batch_size}, "
                f"{len(self._numbers)} steps an epoch)"
            )
        self._epoch, self._step = _epoch_int(state["epoch"]), step
