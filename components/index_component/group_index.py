"""Valid pairs by group in a run's pair index: the layout `IndexExamples` adds for `group_feature`.

`components.layout` stores valid pairs as an explicit CSR over x (`index/pairs/{row_splits,
values}.npy`), one entry per pair: sum_g n_x(g) * n_y(g) entries when "x may pair with any y of
its group". Beside it, a group pairing stores the groups themselves, O(N_x + N_y)::

    index/pairs/groups.txt       the group names, sorted (group id = line number)
    index/pairs/x_groups.npy     int64 [num_x]: the group id of each x record
    index/pairs/y_groups.npy     int64 [num_y]: the group id of each y record
    index/pairs/row_splits.npy, values.npy
                                 the same pairs as edges, written when there are at most
                                 `MAX_GROUP_EDGES` (what `ValidPairs.load` / `open_pairs_run` read)
    index/pairs/run.json         the run that wrote the index, written last

`load_group_pairs` reads the groups back as a `GroupPairs` (what `ValidPairs.from_groups`
builds), which the samplers take wherever they take `ValidPairs`, at any size. Writers run in
Beam workers and import no TensorFlow; the reader imports `components.inputs` on use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from components import layout

if TYPE_CHECKING:
    from components.inputs import GroupPairs

GROUPS_FILE = "groups.txt"
X_GROUPS_FILE = "x_groups.npy"
Y_GROUPS_FILE = "y_groups.npy"
# Group pairings with more valid pairs than this get no edge CSR: it would take 16 bytes a pair
# (10M x 10M records in 1,000 groups: 10^11 pairs). `GroupPairs.edges` and `PairCoverage` list
# at most as many.
MAX_GROUP_EDGES = 50_000_000


def group_edges(x_groups: np.ndarray, y_groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The explicit CSR over x of "x pairs with every y of its group": `(row_splits, values)`,
    the y record numbers of each x ascending. Group ids are >= 0, or -1 for none (no pairs)."""
    x_groups = np.asarray(x_groups, np.int64)
    y_groups = np.asarray(y_groups, np.int64)
    order = np.argsort(y_groups, kind="stable").astype(np.int64)
    sorted_groups = y_groups[order]
    starts = np.searchsorted(sorted_groups, x_groups, side="left")
    ends = np.searchsorted(sorted_groups, x_groups, side="right")
    degrees = np.where(x_groups >= 0, ends - starts, 0).astype(np.int64)
    row_splits = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    positions = np.repeat(starts - row_splits[:-1], degrees) + np.arange(row_splits[-1])
    return row_splits, order[positions]


def save_group_index(
    output_dir: str,
    x_groups: np.ndarray,
    y_groups: np.ndarray,
    names: list[str],
    run_id: str,
) -> dict:
    """Writes the group pairing of a run (and its edges when they are few enough), then
    `run.json`; returns the pair index's summary section."""
    directory = layout.pairs_index_dir(output_dir)
    x_groups = np.asarray(x_groups, np.int64)
    y_groups = np.asarray(y_groups, np.int64)
    layout.save_lines(os.path.join(directory, GROUPS_FILE), names)
    layout.save_npy(os.path.join(directory, X_GROUPS_FILE), x_groups)
    layout.save_npy(os.path.join(directory, Y_GROUPS_FILE), y_groups)
    y_counts = np.bincount(y_groups[y_groups >= 0], minlength=len(names))
    degrees = np.where(x_groups >= 0, y_counts[np.maximum(x_groups, 0)], 0)
    num_pairs = int(degrees.sum())
    edges_written = num_pairs <= MAX_GROUP_EDGES
    if edges_written:
        layout.save_csr(directory, *group_edges(x_groups, y_groups))
    layout.save_run_file(directory, run_id)
    return {
        "pairs": {
            "by_group": True,
            "num_groups": len(names),
            "num_pairs": num_pairs,
            "edges_written": edges_written,
            "degree": {
                "min": int(degrees.min(initial=0)),
                "max": int(degrees.max(initial=0)),
                "mean": round(float(degrees.mean()), 3) if len(degrees) else 0.0,
            },
        }
    }


def has_group_index(output_dir: str) -> bool:
    """Whether the pair index of the run at `output_dir` was written from groups."""
    return layout.gfile().exists(os.path.join(layout.pairs_index_dir(output_dir), X_GROUPS_FILE))


def load_group_pairs(
    output_dir: str,
    *,
    num_x: int | None = None,
    num_y: int | None = None,
    on_invalid: str = "fail",
) -> GroupPairs:
    """The group pairing of the run at `output_dir` (a `PairIndex` artifact URI) as
    `GroupPairs`; `num_x` / `num_y` (the record stores' sizes) and `on_invalid` as in
    `GroupPairs.build`.

    Raises `layout.RunCommitError` for an index of a run `summary.json` does not commit as ok,
    and `layout.IndexFileError` naming the file for a damaged one.
    """
    from components.inputs import ValidPairs

    directory = layout.pairs_index_dir(output_dir)
    layout.check_part(output_dir, directory)
    names = layout.load_lines(os.path.join(directory, GROUPS_FILE))
    groups = []
    for name in (X_GROUPS_FILE, Y_GROUPS_FILE):
        path = os.path.join(directory, name)
        ids = np.asarray(layout.load_npy(path, shape=(None,), dtype=layout.INTEGER), np.int64)
        bad = np.flatnonzero((ids < -1) | (ids >= len(names)))
        if len(bad):
            raise layout.IndexFileError(
                f"{path}: entry {int(bad[0])} is group {int(ids[bad[0]])}, outside "
                f"[-1, {len(names)}) ({GROUPS_FILE} lists {len(names)})"
            )
        groups.append(ids)
    try:
        return ValidPairs.from_groups(*groups, num_x=num_x, num_y=num_y, on_invalid=on_invalid)
    except ValueError as error:
        raise layout.IndexFileError(f"group pair index {directory}: {error}") from error
