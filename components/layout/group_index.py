"""Valid pairs by group: the group names and the group id of each x and y record, O(N_x + N_y),
and the edge CSR they imply when it is small enough to write.
"""

from __future__ import annotations

import os

import numpy as np

from components.layout.commit import check_part, save_run_file
from components.layout.files import INTEGER, load_lines, load_npy, save_csr, save_lines, save_npy
from components.layout.names import (
    GROUPS_FILE,
    X_GROUPS_FILE,
    Y_GROUPS_FILE,
    IndexFileError,
    gfile,
    pairs_index_dir,
)

# A group pairing with more valid pairs than this gets no edge CSR beside its groups: it takes
# 8 bytes a pair on disk and twice that to build (10M x 10M records in 1,000 groups: 10^11
# pairs). `GroupPairs.edges` and `PairCoverage` list at most as many.
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
    """Writes the group pairing of a run (and its edge CSR when it holds at most
    `MAX_GROUP_EDGES` pairs), then `run.json`; returns the pair index's summary section.

    `x_groups` / `y_groups`: int64 [N], the group id of each x / y record, an index into
    `names` (sorted) or -1 for none.
    """
    directory = pairs_index_dir(output_dir)
    x_groups = np.asarray(x_groups, np.int64)
    y_groups = np.asarray(y_groups, np.int64)
    save_lines(os.path.join(directory, GROUPS_FILE), names)
    save_npy(os.path.join(directory, X_GROUPS_FILE), x_groups)
    save_npy(os.path.join(directory, Y_GROUPS_FILE), y_groups)
    degrees = group_degrees(x_groups, y_groups, len(names))
    num_pairs = int(degrees.sum())
    edges_written = num_pairs <= MAX_GROUP_EDGES
    if edges_written:
        save_csr(directory, *group_edges(x_groups, y_groups))
    save_run_file(directory, run_id)
    return {
        "pairs": {
            "by_group": True,
            "num_groups": len(names),
            "num_pairs": num_pairs,
            "edges_written": edges_written,
            "degree": {
                "min": int(degrees.min()) if len(degrees) else 0,
                "max": int(degrees.max()) if len(degrees) else 0,
                "mean": round(float(degrees.mean()), 3) if len(degrees) else 0.0,
            },
        }
    }


def group_degrees(x_groups: np.ndarray, y_groups: np.ndarray, num_groups: int) -> np.ndarray:
    """int64 [num_x]: the number of valid y of each x, the y records of its group."""
    y_counts = np.bincount(y_groups[y_groups >= 0], minlength=num_groups)
    return np.where(x_groups >= 0, y_counts[np.maximum(x_groups, 0)], 0).astype(np.int64)


def has_group_index(output_dir: str) -> bool:
    """Whether the pair index of the run at `output_dir` was written from groups."""
    return gfile().exists(os.path.join(pairs_index_dir(output_dir), X_GROUPS_FILE))


def load_group_index(output_dir: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The group pairing of the run at `output_dir`: `(names, x_groups, y_groups)`, the group
    names and the int64 group id of each x and y record (-1: none). `ValidPairs.from_groups`
    takes the two arrays (`components.inputs.open_pairs_run` does).

    Raises `RunCommitError` for an index of a run `summary.json` does not commit as ok, and
    `IndexFileError` naming the file for a damaged one (a group id outside `groups.txt`).
    """
    directory = pairs_index_dir(output_dir)
    check_part(output_dir, directory)
    names = load_lines(os.path.join(directory, GROUPS_FILE))
    groups = []
    for name in (X_GROUPS_FILE, Y_GROUPS_FILE):
        path = os.path.join(directory, name)
        ids = load_npy(path, shape=(None,), dtype=INTEGER).astype(np.int64, copy=False)
        bad = np.flatnonzero((ids < -1) | (ids >= len(names)))
        if len(bad):
            raise IndexFileError(
                f"{path}: entry {int(bad[0])} is group {int(ids[bad[0]])}, outside "
                f"[-1, {len(names)}) ({GROUPS_FILE} lists {len(names)})"
            )
        groups.append(ids)
    return names, groups[0], groups[1]
