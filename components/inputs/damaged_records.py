"""Damaged records: where each is and what is wrong with it, and how they are reported.

`DamagedRecord` is what the readers (`shard_readers`, which also names the records the native
op flags) and the payload checks (`parsing`) report; a store opened with `on_damaged="fail"`
raises `DamagedRecordError` with `damage_message` (the three are `tfx_dynamic_inputs.records`',
which the reader without TensorFlow reports with too), and the samplers name what their stores
found with `describe_damaged`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tfx_dynamic_inputs.records.damage import DamagedRecord, DamagedRecordError, damage_message

if TYPE_CHECKING:
    from tfx_dynamic_inputs.inputs.record_store import RecordStore


__all__ = ["DamagedRecord", "DamagedRecordError", "damage_message", "describe_damaged"]


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
