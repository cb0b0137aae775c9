"""Records by record number, stacked into a batch: from arrays or from any random-access source.

A Grain batch reads the records its plan names in one call. Arrays (or a dict of arrays, one
record per row) are indexed at once; a random-access source (`records.RunRecordSource`, or any
object with `__len__` and `__getitem__`, as Grain's data sources are) is read with its batched
read, `__getitems__`, where it has one (`RunRecordSource`: its files checked once a batch, its
frames read in file order; ArrayRecord's source), else record by record. Its records are
stacked: a dict's entries each into one array, bytes into an object array, arrays along a new
first axis (an object array of them where their shapes differ: the decoded audio of a run, say).
A source that reads a damaged record as None (a run opened with `on_damaged="skip"`) leaves it
out: `read_checked` says which were read.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Batch = np.ndarray | dict[str, np.ndarray]


class BatchReader:
    """The records of one side (x, y, or a labelled source), read a batch at a time.

    Args:
      source: an array (one record per row), a dict of arrays of one length, or a
        random-access source (`__len__`, `__getitem__`).
      name: what the source is called in errors (e.g. "x").

    Raises:
      TypeError: a source of no kind above.
      ValueError: a dict whose arrays differ in length, or an array of no rows axis.

    Example:

        BatchReader({"image": images, "label": labels}, "x").read([3, 1])["image"].shape
    """

    def __init__(self, source: object, name: str):
        self.name = name
        if isinstance(source, np.ndarray):
            if source.ndim < 1:
                raise ValueError(f"{name}: an array of records needs a first axis, got a scalar")
            self._arrays, self.num_records = source, len(source)
        elif isinstance(source, Mapping):
            arrays = {key: np.asarray(value) for key, value in source.items()}
            lengths = {key: len(value) if value.ndim else None for key, value in arrays.items()}
            if not arrays or len(set(lengths.values())) != 1 or None in lengths.values():
                raise ValueError(
                    f"{name}: a dict of arrays needs arrays of one length, got lengths {lengths}"
                )
            self._arrays, self.num_records = arrays, next(iter(lengths.values()))
        elif hasattr(source, "__len__") and hasattr(source, "__getitem__"):
            self._arrays, self.num_records = None, len(source)
        else:
            raise TypeError(
                f"{name} must be an array, a dict of arrays or a random-access source "
                f"(__len__, __getitem__), got {type(source).__name__}"
            )
        self._source = source

    def read(self, numbers: np.ndarray) -> Batch:
        """The records `numbers`, stacked.

        Args:
          numbers: int64 [B] record numbers, each in `[0, num_records)`.

        Returns:
          An array `[B, ...]` or a dict of them (a source's bytes records, or records of several
          shapes: object [B]).
        """
        records, kept = self.read_checked(numbers)
        if not kept.all():
            raise ValueError(
                f"{self.name}: records {np.asarray(numbers)[~kept].tolist()[:5]} read as None "
                "(damaged, skipped by the source): read them with read_checked"
            )
        return records

    def read_checked(self, numbers: np.ndarray) -> tuple[Batch, np.ndarray]:
        """The records `numbers` that read, stacked, and which did.

        Args:
          numbers: int64 [B] record numbers, each in `[0, num_records)`.

        Returns:
          `(records, kept)`: the records read (`read`'s batch, of `kept.sum()` rows) and bool
          [B], false where the source read None (a damaged record it skips).
        """
        numbers = np.asarray(numbers, np.int64)
        kept = np.ones(len(numbers), bool)
        if isinstance(self._arrays, dict):
            return {key: value[numbers] for key, value in self._arrays.items()}, kept
        if self._arrays is not None:
            return self._arrays[numbers], kept
        read_batch = getattr(self._source, "__getitems__", None)
        if read_batch is None:
            records = [self._source[int(number)] for number in numbers]
        else:
            records = list(read_batch(numbers.tolist()))
            if len(records) != len(numbers):
                raise ValueError(
                    f"{self.name}: the source's __getitems__ returned {len(records)} records for "
                    f"{len(numbers)} record numbers"
                )
        kept = np.array([record is not None for record in records], bool)
        return _stacked([record for record in records if record is not None]), kept


def rows_of(batch: Batch, rows: np.ndarray) -> Batch:
    """The rows `rows` (an index or a mask) of a batch, or of each entry of a dict batch."""
    if isinstance(batch, dict):
        return {key: rows_of(value, rows) for key, value in batch.items()}
    return batch[rows]


def _stacked(records: list[object]) -> Batch:
    """Records of one structure as one batch (see the module docstring)."""
    if not records:
        # Every record of the batch was skipped: no structure to stack into.
        return np.empty(0, dtype=object)
    first = records[0]
    if isinstance(first, Mapping):
        return {key: _stacked([record[key] for record in records]) for key in first}
    if isinstance(first, bytes):
        stacked = np.empty(len(records), dtype=object)
        stacked[:] = records
        return stacked
    arrays = [np.asarray(record) for record in records]
    if len({array.shape for array in arrays}) > 1:
        # Records of several shapes (audio of several lengths) stay apart: a ragged batch.
        ragged = np.empty(len(arrays), dtype=object)
        ragged[:] = arrays
        return ragged
    return np.stack(arrays)
