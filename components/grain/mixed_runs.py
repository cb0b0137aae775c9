"""Several runs' records read as one, for the Grain mixed samplers: `ConcatenatedRecords`.

A mix numbers its records globally: run `k`'s record `i` is `offsets[k] + i`, the runs in mix
order (tf.data's `inputs.run_mix.read_by_run` reads the same numbers from each run's store).
`ConcatenatedRecords` is that numbering as one random-access source, so `batch_reads.BatchReader`
reads a batch of global numbers, each sample from its own run, in batch order.
`refuse_repeated_runs` refuses a run opened twice under two folders (the same run id), as
tf.data's `RunMix` does.

Example:

    records = ConcatenatedRecords([RunRecordSource("runs/a", "x"), RunRecordSource("runs/b", "x")])
    records[len(records) - 1]   # run b's last x
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfx_dynamic_inputs.plans.run_mix import refuse_repeats
from tfx_dynamic_inputs.records.source import RunRecordSource


class ConcatenatedRecords:
    """Random-access sources as one, in order: record `offsets[k] + i` is source `k`'s `i`.

    Args:
      sources: the sources (`__len__`, `__getitem__`), in the order that numbers them.

    Raises:
      ValueError: no source.

    Attributes:
      offsets: int64 [K + 1]: source `k`'s records are `[offsets[k], offsets[k + 1])`.

    Example:

        ConcatenatedRecords([source_a, source_b]).run_of(np.array([0, len(source_a)]))  # [0, 1]
    """

    def __init__(self, sources: Sequence[RunRecordSource]):
        self._sources = tuple(sources)
        if not self._sources:
            raise ValueError("ConcatenatedRecords needs at least one source")
        sizes = [len(source) for source in self._sources]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int) -> object:
        """Global record `index`, read from its own source."""
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"a record number is an int, got {index!r}")
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} is outside [0, {len(self)})")
        run = int(self.run_of(np.array([index]))[0])
        return self._sources[run][int(index - self.offsets[run])]

    def run_of(self, numbers: np.ndarray) -> np.ndarray:
        """int64 [B]: the source (run) of each global record number."""
        return np.searchsorted(self.offsets[1:], numbers, side="right").astype(np.int64)


def refuse_repeated_runs(sources: Sequence[RunRecordSource]) -> None:
    """Refuses a run twice among a mix's opened runs (one source per run, in mix order).

    Args:
      sources: one record set of each run.

    Raises:
      ValueError: a run id named twice (`plans.run_mix.refuse_repeats`).
    """
    refuse_repeats("run id", [source.records.run_id for source in sources])
