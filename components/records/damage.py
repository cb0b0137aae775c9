"""Damaged records: where each is and what is wrong with it, and the error that names them.

What every reader of a run reports: the TensorFlow record store (`tfx_dynamic_inputs.inputs`,
whose `damaged_records` adds how its samplers name them) and the reader without TensorFlow
(`RunRecords`). A reader opened with `on_damaged="fail"` raises `DamagedRecordError` with
`damage_message`.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DamagedRecord:
    """Where a damaged record is and what is wrong with it.

    Args:
      index: the record number.
      shard: the shard's path (or a note when the records are in memory).
      offset: the frame's byte offset in the shard (-1: none).
      reason: what is wrong.

    Example:

        for damaged in store.damaged_records:  # a store opened with on_damaged="skip"
            print(damaged)  # record 12 (shard .../data-00001-of-00003.tfrecord, offset 4096): ...
    """

    index: int
    shard: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"record {self.index} (shard {self.shard}, offset {self.offset}): {self.reason}"


class DamagedRecordError(ValueError):
    """A record failed its TFRecord frame check and the store was opened with on_damaged="fail"."""


def damage_message(damaged: list[DamagedRecord]) -> str:
    """The message of a `DamagedRecordError`: how many, and the first five named.

    Args:
      damaged: the damaged records found by one read (or at open).

    Returns:
      "N damaged record(s): ..." naming the first five.
    """
    shown = "; ".join(str(d) for d in damaged[:5])
    more = f" (and {len(damaged) - 5} more)" if len(damaged) > 5 else ""
    return f"{len(damaged)} damaged record(s): {shown}{more}"
