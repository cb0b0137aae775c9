"""Samples a Grain sampler leaves out because their records are damaged (`on_damaged="skip"`).

A run opened with `on_damaged="skip"` (`records.RunRecordSource`) reads a damaged record as None
and lists it in its `damaged_records`; the sampler then leaves the samples that need it out of
the batch (the batch is short of its size, as tf.data's is) rather than train on a record that is
not there. `SkippedSamples` counts them and logs one warning per epoch that skips any, naming the
damaged records, as tf.data's `inputs.skip_log.SkipLog` does. The count is this process's: each
of Grain's worker processes counts the batches it reads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from tfx_dynamic_inputs.records.damage import DamagedRecord

_log = logging.getLogger(__name__)
# Damaged records a warning names; the rest are counted.
_NAMED = 5


class SkippedSamples:
    """Counts the samples left out of batches, and logs the first skip of each epoch.

    Args:
      sampler: the sampler's name, for the warning.
      sources: side name -> its records (a source with `records.damaged_records`, as
        `RunRecordSource`, is named in the warning; others are counted only).

    Attributes:
      total: samples left out so far in this process.

    Example:

        skipped = SkippedSamples("dynamic_pairs", {"x": x_source, "y": y_source})
        skipped.record(epoch, kept)   # kept: bool [B], false for a sample left out
    """

    def __init__(self, sampler: str, sources: Mapping[str, object]):
        self._sampler = sampler
        self._sources = dict(sources)
        self._logged_epochs: set[int] = set()
        self.total = 0

    def record(self, epoch: int, kept: np.ndarray) -> None:
        """Counts a batch's left-out samples; the first batch of an epoch that has any warns.

        Args:
          epoch: the batch's epoch.
          kept: bool [B], false for the samples left out.
        """
        skipped = int(np.count_nonzero(~np.asarray(kept, bool)))
        if not skipped:
            return
        self.total += skipped
        if epoch in self._logged_epochs:
            return
        self._logged_epochs.add(epoch)
        _log.warning(
            "%s: epoch %d skips samples whose records are damaged (on_damaged='skip'); %d "
            "skipped so far in this process. %s",
            self._sampler,
            epoch,
            self.total,
            self.describe(),
        )

    def damaged_records(self) -> dict[str, list[DamagedRecord]]:
        """Side name -> the damaged records its source has met so far (sources that list them)."""
        return {
            name: list(source.records.damaged_records)
            for name, source in self._sources.items()
            if hasattr(getattr(source, "records", None), "damaged_records")
        }

    def describe(self) -> str:
        """The damaged records met so far, the first few named."""
        parts = []
        for name, damaged in self.damaged_records().items():
            if damaged:
                shown = "; ".join(str(record) for record in damaged[:_NAMED])
                more = f" (and {len(damaged) - _NAMED} more)" if len(damaged) > _NAMED else ""
                parts.append(f"{name}: {len(damaged)} damaged record(s): {shown}{more}")
        return " ".join(parts) or "The source names no damaged records."
