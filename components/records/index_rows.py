"""Rows of a record set's offset index read by record number, with `os.pread` on the open
`offsets.npy`: one row (`read_row`), or a batch's rows sorted, those near each other in one
pread (`read_rows`), after its record numbers are checked (`batch_numbers`). `RunRecords` reads
its rows with these.

Rows are read, not memory-mapped: an index cut short under a mapping would kill the process
(SIGBUS), where a short read here is a row that reads as None, refused naming the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence

import numpy as np

from tfx_dynamic_inputs.records.frames import READ_GAP_BYTES

ROW = struct.Struct("<qqq")  # one row of offsets.npy: shard, frame offset, payload length
Row = tuple[int, int, int]
# A batch's rows at most this many rows apart are read in one pread (as frames are, by
# `READ_GAP_BYTES`), of at most `_SPAN_ROWS` rows (256 KiB).
_GAP_ROWS = READ_GAP_BYTES // ROW.size
_SPAN_ROWS = (256 << 10) // ROW.size


def read_row(fd: int, rows_start: int, index: int) -> Row | None:
    """Row `index` of the offset index open as `fd`.

    Args:
      fd: `offsets.npy`, open for reading.
      rows_start: the byte offset of its first row.
      index: a record number.

    Returns:
      `(shard, frame offset, payload length)`; None for a short read.

    Example:
      shard, offset, length = read_row(fd, 128, 3)
    """
    data = os.pread(fd, ROW.size, rows_start + index * ROW.size)
    return ROW.unpack(data) if len(data) == ROW.size else None


def read_rows(fd: int, rows_start: int, numbers: Sequence[int]) -> dict[int, Row | None]:
    """The rows of `numbers` (sorted, distinct) of the offset index open as `fd`; None for a
    row past a short read (an index cut short since it was checked).

    Args:
      fd: `offsets.npy`, open for reading.
      rows_start: the byte offset of its first row.
      numbers: record numbers, sorted and distinct.

    Returns:
      Record number -> its row, each `read_row`'s.

    Example:
      rows = read_rows(fd, 128, [3, 5, 90_000])  # {3: (shard, offset, length), ...}
    """
    rows: dict[int, Row | None] = {}
    begin = 0
    while begin < len(numbers):
        low, end = numbers[begin], begin + 1
        while (
            end < len(numbers)
            and numbers[end] - numbers[end - 1] <= _GAP_ROWS
            and numbers[end] - low < _SPAN_ROWS
        ):
            end += 1
        data = os.pread(fd, (numbers[end - 1] - low + 1) * ROW.size, rows_start + low * ROW.size)
        for index in numbers[begin:end]:
            at = (index - low) * ROW.size
            rows[index] = ROW.unpack_from(data, at) if at + ROW.size <= len(data) else None
        begin = end
    return rows


def row_is_sound(row: Row | None, num_shards: int) -> bool:
    """Whether a row read still passes the checks of open (one that does not was written
    since).

    Args:
      row: a row read (`read_row`, `read_rows`), or None.
      num_shards: the shards of the record set.

    Returns:
      True where the row names one of the shards and holds no negative offset or length.

    Example:
      row_is_sound((1, 0, 120), num_shards=3)  # True
    """
    return row is not None and 0 <= row[0] < num_shards and min(row) >= 0


def batch_numbers(
    indices: Sequence[int] | np.ndarray, num_records: int, checked: Callable[[object], int]
) -> tuple[list[int], TypeError | IndexError | None]:
    """The record numbers of a batch up to the first that `checked` refuses, and its error.

    Args:
      indices: record numbers (a sequence of ints or NumPy integers, or a 1-D integer array).
      num_records: N: record numbers are in [0, N).
      checked: one record number checked (`RunRecords`'s), raising TypeError or IndexError.

    Returns:
      `(numbers, error)`: the record numbers (ints) before the first refused, and the error
      `checked` raised for it (None when all are good).

    Raises:
      TypeError: `indices` is not a sequence or 1-D array.

    Example:
      numbers, error = batch_numbers([4, 2, 99], 10, checked)  # [4, 2], IndexError(...)
    """
    if isinstance(indices, np.ndarray):
        if indices.ndim != 1:
            raise TypeError(
                f"indices must be a 1-D array of record numbers, got shape {indices.shape}"
            )
        if indices.dtype.kind in "iu":
            good = (indices >= 0) & (indices < num_records)
            if good.all():
                return indices.tolist(), None
            indices = indices[: int(np.argmin(good)) + 1]  # its last is refused below
        indices = indices.tolist()
    elif not isinstance(indices, Sequence) or isinstance(indices, str | bytes | bytearray):
        raise TypeError(
            f"indices must be a sequence of record numbers, got {type(indices).__name__} "
            f"{indices!r:.100}"
        )
    elif all(type(index) is int for index in indices) and (
        not indices or min(indices) >= 0 and max(indices) < num_records
    ):
        return list(indices), None  # Python ints in range: the batch Grain and PyTorch pass
    numbers = []
    for index in indices:
        try:
            numbers.append(checked(index))
        except (TypeError, IndexError) as error:
            return numbers, error
    return numbers, None
