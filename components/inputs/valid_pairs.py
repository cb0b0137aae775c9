"""The valid-pair index: for each x record, the y records it may be paired with.

`ValidPairs` is the checked CSR form (`row_splits` int64 [num_x + 1], `values` int64 [num_pairs]:
the y record numbers of each x) that the pair planner and `PairCoverage` take. It is built from a
ragged tensor, CSR arrays or a list of lists, or loaded from a materialized run; bad input (y or x
out of range, an x without a valid y) fails naming the first bad x, or is left out and counted.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs

ON_INVALID = ("fail", "skip")

# Reasons an x is left out of the plan with on_invalid="skip".
EMPTY_VALID_LIST = "empty valid list"
Y_OUT_OF_RANGE = "y out of range"
X_OUT_OF_RANGE = "x out of range"

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ValidPairs:
    """The checked valid-pair index: CSR rows over x, values are y record numbers.

    Attributes:
      row_splits: int64 [num_x + 1].
      values: int64 [num_pairs], each in [0, num_y).
      num_y: the number of y records.
      planned_x: int64 [num_planned]: the x that take part in the plan (non-empty rows).
      skipped: reason -> number of x left out of the plan for it (on_invalid="skip").
      skipped_x: int64 [num_skipped]: the x left out (those beyond num_x excluded).

    Example:

        pairs = ValidPairs.build([[0, 2], [1], [2]], num_y=3)
        pairs.num_x, pairs.num_pairs, pairs.row_splits   # 3, 4, [0, 2, 3, 4]
    """

    row_splits: np.ndarray
    values: np.ndarray
    num_y: int
    planned_x: np.ndarray
    skipped: dict[str, int]
    skipped_x: np.ndarray

    @property
    def num_x(self) -> int:
        """The number of x records (rows of the index, planned or skipped)."""
        return len(self.row_splits) - 1

    @property
    def num_pairs(self) -> int:
        """The number of valid (x, y) pairs kept in the index."""
        return len(self.values)

    @classmethod
    def build(
        cls,
        valid_pairs,
        *,
        num_x: int | None = None,
        num_y: int | None = None,
        on_invalid: str = "fail",
    ) -> ValidPairs:
        """Checks and normalizes `valid_pairs`.

        Args:
          valid_pairs: a `tf.RaggedTensor` [num_x, None], CSR arrays `(row_splits, values)`, a
            list of lists of y indices (one list per x), or a `ValidPairs` (returned as is).
          num_x: the number of x records; rows beyond it are x out of range, x without a row
            have an empty valid list. Default: the number of rows.
          num_y: the number of y records; default: max y + 1.
          on_invalid: "fail" raises ValueError naming the first bad x (y out of range, x out of
            range, empty valid list); "skip" leaves those x out of the plan and counts them.

        Returns:
          The checked `ValidPairs`, with exactly `num_x` rows.

        Raises:
          TypeError: `valid_pairs` of none of the kinds above.
          ValueError: non-integer or malformed CSR arrays, an unknown `on_invalid`, a bad x
            with on_invalid="fail", or no x with a valid pair.

        Example:

            ValidPairs.build([[0, 5], [], [9]], num_y=6, on_invalid="skip").skipped
            # {"y out of range": 1, "empty valid list": 1}
        """
        if isinstance(valid_pairs, ValidPairs):
            return valid_pairs
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, got {on_invalid!r}")
        row_splits, values = _csr_arrays(valid_pairs)
        num_rows = len(row_splits) - 1
        if num_y is None:
            num_y = int(values.max()) + 1 if len(values) else 0
        if num_x is None:
            num_x = num_rows
        degrees = np.diff(row_splits)
        row_of_value = np.repeat(np.arange(num_rows, dtype=np.int64), degrees)

        bad_y = (values < 0) | (values >= num_y)
        problems = {
            X_OUT_OF_RANGE: np.flatnonzero(degrees[num_x:] > 0) + num_x,
            Y_OUT_OF_RANGE: np.unique(row_of_value[bad_y]),
            EMPTY_VALID_LIST: np.concatenate(
                [np.flatnonzero(degrees[:num_x] == 0), np.arange(num_rows, num_x)]
            ).astype(np.int64),
        }
        problems = {reason: rows for reason, rows in problems.items() if len(rows)}
        if problems and on_invalid == "fail":
            raise ValueError(_invalid_message(problems, row_splits, values, num_x, num_y, bad_y))

        keep_row = np.zeros(num_x, dtype=bool)
        keep_row[: min(num_rows, num_x)] = degrees[:num_x] > 0
        if Y_OUT_OF_RANGE in problems:
            keep_row[problems[Y_OUT_OF_RANGE][problems[Y_OUT_OF_RANGE] < num_x]] = False
        if problems or num_rows != num_x:
            # Rows of skipped x become empty; the index gets exactly num_x rows.
            row_splits, values = _keep_rows(row_splits, values, keep_row, num_x)
        skipped_x = np.flatnonzero(~keep_row).astype(np.int64)
        if problems:
            _log.warning(
                "valid_pairs: %d x left out of the plan (%s)",
                len(skipped_x) + len(problems.get(X_OUT_OF_RANGE, ())),
                ", ".join(f"{reason}: {len(rows)}" for reason, rows in problems.items()),
            )
        planned_x = np.flatnonzero(keep_row).astype(np.int64)
        if not len(planned_x):
            raise ValueError("valid_pairs: no x has a valid pair; nothing to plan")
        return cls(
            row_splits=row_splits,
            values=values,
            num_y=int(num_y),
            planned_x=planned_x,
            skipped={reason: len(rows) for reason, rows in problems.items()},
            skipped_x=skipped_x,
        )

    # Valid pairs by group (each x may pair with any y of its group, held in O(N_x + N_y)
    # instead of one edge per pair): `GroupPairs.build` itself, named where users look for
    # valid pairs; the samplers take its `GroupPairs` wherever they take `ValidPairs`.
    # Example: ValidPairs.from_groups(["cat", "dog", "cat"], ["dog", "cat"])
    from_groups = staticmethod(GroupPairs.build)

    @classmethod
    def load(
        cls,
        output_dir: str,
        *,
        num_x: int | None = None,
        num_y: int | None = None,
        on_invalid: str = "fail",
    ) -> ValidPairs:
        """Loads `index/pairs` of a materialized run.

        Args:
          output_dir: the run folder (or the TFX `PairIndex` artifact).
          num_x, num_y, on_invalid: as in `build`.

        Returns:
          The run's `ValidPairs`.

        Raises:
          layout.IndexFileError: a damaged index, naming its folder (and the file, or the first
            bad x).
          layout.RunCommitError: an index of a run that `summary.json` does not commit as ok
            (see `layout.check_committed`).

        Example:

            pairs = ValidPairs.load("runs/digits", num_x=x_store.num_records)
        """
        directory = layout.pairs_index_dir(output_dir)
        layout.check_part(output_dir, directory)
        csr = layout.load_csr(directory)
        try:
            return cls.build(csr, num_x=num_x, num_y=num_y, on_invalid=on_invalid)
        except ValueError as error:
            raise layout.IndexFileError(f"pair index {directory}: {error}") from error


def _csr_arrays(valid_pairs) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(valid_pairs, tf.RaggedTensor):
        if valid_pairs.ragged_rank != 1 or valid_pairs.shape.rank != 2:
            raise ValueError(
                f"valid_pairs must be a [num_x, None] ragged tensor, got {valid_pairs}"
            )
        row_splits = valid_pairs.row_splits.numpy()
        values = valid_pairs.values.numpy()
    elif isinstance(valid_pairs, tuple) and len(valid_pairs) == 2:
        row_splits, values = (np.asarray(a) for a in valid_pairs)
    elif isinstance(valid_pairs, list):
        lengths = np.fromiter((len(row) for row in valid_pairs), np.int64, len(valid_pairs))
        row_splits = np.concatenate([[0], np.cumsum(lengths)])
        # np.array, not np.fromiter: a float or string y must fail the integer check below.
        values = np.array([y for row in valid_pairs for y in row])
    else:
        raise TypeError(
            "valid_pairs must be a tf.RaggedTensor, a (row_splits, values) tuple or a list of "
            f"lists of y indices, got {type(valid_pairs).__name__}"
        )
    for name, array in (("row_splits", row_splits), ("values", values)):
        if array.ndim != 1 or not (array.dtype.kind in "iu" or array.size == 0):
            raise ValueError(
                f"valid_pairs {name} must be a 1-D integer array, got {array.dtype}"
                f"{list(array.shape)}"
            )
    row_splits = row_splits.astype(np.int64, copy=False)
    values = values.astype(np.int64, copy=False)
    if len(row_splits) < 1 or row_splits[0] != 0 or row_splits[-1] != len(values):
        raise ValueError(
            f"valid_pairs row_splits must start at 0 and end at len(values) ({len(values)})"
        )
    if np.any(np.diff(row_splits) < 0):
        raise ValueError("valid_pairs row_splits must be non-decreasing")
    return row_splits, values


def _keep_rows(row_splits, values, keep_row, num_x):
    degrees = np.diff(row_splits)[:num_x]
    degrees = np.concatenate([degrees, np.zeros(num_x - len(degrees), np.int64)])
    kept_degrees = np.where(keep_row, degrees, 0)
    value_row = np.repeat(np.arange(len(degrees), dtype=np.int64), degrees)
    kept_values = values[: row_splits[min(num_x, len(row_splits) - 1)]][keep_row[value_row]]
    return np.concatenate([[0], np.cumsum(kept_degrees)]).astype(np.int64), kept_values


def _invalid_message(problems, row_splits, values, num_x, num_y, bad_y) -> str:
    parts = []
    if Y_OUT_OF_RANGE in problems:
        position = int(np.flatnonzero(bad_y)[0])
        x = int(np.searchsorted(row_splits, position, side="right") - 1)
        parts.append(
            f"y index {int(values[position])} out of range for x {x} (num_y = {num_y}); "
            f"{len(problems[Y_OUT_OF_RANGE])} x affected"
        )
    if X_OUT_OF_RANGE in problems:
        rows = problems[X_OUT_OF_RANGE]
        parts.append(
            f"valid lists for x {int(rows[0])}.. beyond the x records (num_x = {num_x}); "
            f"{len(rows)} x affected"
        )
    if EMPTY_VALID_LIST in problems:
        rows = problems[EMPTY_VALID_LIST]
        parts.append(f"x {int(rows[0])} has an empty valid list; {len(rows)} x affected")
    return "valid_pairs: " + "; ".join(parts) + ". Pass on_invalid='skip' to leave them out."
