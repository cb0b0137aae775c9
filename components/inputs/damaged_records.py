"""Damaged records: where each is and what is wrong with it, and how they are reported.

`DamagedRecord` is what the readers (`shard_readers`, which also names the records the native
op flags) and the payload checks (`parsing`) report; a store opened with `on_damaged="fail"`
raises `DamagedRecordError` with `damage_message`, and the samplers name what their stores
found with `describe_damaged`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfx_dynamic_inputs.inputs.record_store import RecordStore


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


def describe_damaged(stores: Mapping[str, RecordStore], limit: int = 3) -> str:
    """The first damaged records found in `stores` (name -> store; the name prefixes each).

    Args:
      stores: name -> store.
      limit: the most damaged records named; the rest are counted.

    Returns:
      "Damaged so far: ..." naming them, or "" when no store has found a damaged record.
    """
    damaged = [
        f"{name} {d}".lstrip() for name, store in stores.items() for d in store.damaged_records
    ]
    more = f" (and {len(damaged) - limit} more)" if len(damaged) > limit else ""
    return f"Damaged so far: {'; '.join(damaged[:limit])}{more}" if damaged else ""
