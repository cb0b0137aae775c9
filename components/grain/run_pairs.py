"""A pairs run's records and valid pairs for the Grain dynamic pairs, without TensorFlow.

The `x` and `y` record sets are `records.RunRecordSource`s; the valid pairs are the run's pair
index, read and checked by `layout` (inside `without_tensorflow()`) as tf.data's
`open_pairs_run` reads it: an edge CSR over the x or the group of each x and y record
(`valid_pairs.EdgeList`, `valid_pairs.GroupList`).
"""

from __future__ import annotations

import os

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.grain.valid_pairs import EdgeList, GroupList
from tfx_dynamic_inputs.layout.filesystem import without_tensorflow
from tfx_dynamic_inputs.records.source import RunRecordSource


def open_pairs(
    run_dir: str | os.PathLike, decode: object, on_damaged: str = "fail"
) -> tuple[RunRecordSource, RunRecordSource, EdgeList | GroupList]:
    """`(x, y, valid_pairs)` of the committed pairs run at `run_dir`.

    Args:
      run_dir: the run folder (local).
      decode: how its records are decoded (`records.RunRecordSource`: "bytes" gives the
        serialized records, as tf.data's `dynamic_pairs` without `image` or a parser).
      on_damaged: "fail" or "skip", for both record sets (`records.RunRecordSource`).

    Returns:
      The two record sets and the valid pairs.

    Raises:
      layout.RunCommitError, layout.IndexFileError, FileNotFoundError: a damaged or uncommitted
        run, or one without a pair index (named).
      ValueError: valid pairs that do not fit the record sets.
    """
    run_dir = os.fspath(run_dir)
    x = RunRecordSource(run_dir, layout.X_RECORD_SET, decode=decode, on_damaged=on_damaged)
    y = RunRecordSource(run_dir, layout.Y_RECORD_SET, decode=decode, on_damaged=on_damaged)
    with without_tensorflow():
        if layout.has_group_index(run_dir):
            _, x_groups, y_groups = layout.load_group_index(run_dir)
            if (len(x_groups), len(y_groups)) != (len(x), len(y)):
                raise ValueError(
                    f"{run_dir}: the group index covers {len(x_groups)} x and {len(y_groups)} "
                    f"y, the run holds {len(x)} and {len(y)}"
                )
            return x, y, GroupList.build(x_groups, y_groups)
        row_splits, values = layout.load_csr(layout.pairs_index_dir(run_dir))
    return x, y, EdgeList.build((row_splits, values), len(x), len(y))
