"""Valid pairs by group: the group names and the group id of each x and y record, O(N_x + N_y),
and the edge CSR they imply when it is small enough to write.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_dynamic_inputs.layout.commit import check_part, save_run_file
from tfx_dynamic_inputs.layout.files import (
    INTEGER,
    load_lines,
    load_npy,
    save_csr,
    save_lines,
    save_npy,
)
from tfx_dynamic_inputs.layout.filesystem import gfile
from tfx_dynamic_inputs.layout.names import (
    GROUPS_FILE,
    X_GROUPS_FILE,
    Y_GROUPS_FILE,
    IndexFileError,
    pairs_index_dir,
)

# A group pairing with more valid pairs than this gets no edge CSR beside its groups: it takes
# 8 bytes a pair on disk and twice that to build (10M x 10M records in 1,000 groups: 10^11
# pairs). `GroupPairs.edges` and `PairCoverage` list at most as many.
MAX_GROUP_EDGES = 50_000_000


def group_edges(x_groups: np.ndarray, y_groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The explicit CSR over x of "x pairs with every y of its group".

    Args:
        x_groups: int [N_x], the group id of each x record (>= 0, or -1 for none: no pairs).
        y_groups: int [N_y], the group id of each y record (>= 0, or -1 for none).

    Returns:
        `(row_splits, values)`: int64 [N_x + 1] and int64 [num_pairs], the y record numbers of
        each x, ascending.

    Example:
        group_edges(np.array([0, -1, 1]), np.array([1, 0, 0]))  # ([0, 2, 2, 3], [1, 2, 0])
    """
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
    """Writes the group pairing of a run, its edge CSR when small enough, then `run.json`.

    The edge CSR (`group_edges`) is written when it holds at most `MAX_GROUP_EDGES` pairs.

    Args:
        output_dir: The run directory.
        x_groups: int [N_x], the group id of each x record: an index into `names`, or -1 for
            none.
        y_groups: int [N_y], the group id of each y record, likewise.
        names: The group names, sorted.
        run_id: The run writing it, stored in `run.json`.

    Returns:
        The pair index's section of `summary.json`: `{"pairs": {"by_group", "num_groups",
        "num_pairs", "edges_written", "degree": {"min", "max", "mean"}}}`.
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
    """The number of valid y of each x: the y records of its group.

    Args:
        x_groups: int [N_x], the group id of each x record (-1: none).
        y_groups: int64 [N_y], the group id of each y record (-1: none).
        num_groups: How many groups there are (ids are in [0, num_groups)).

    Returns:
        int64 [N_x]: the degree of each x record (0 for one without a group).
    """
    y_counts = np.bincount(y_groups[y_groups >= 0], minlength=num_groups)
    return np.where(x_groups >= 0, y_counts[np.maximum(x_groups, 0)], 0).astype(np.int64)


def has_group_index(output_dir: str) -> bool:
    """Whether the pair index of the run at `output_dir` was written from groups.

    Args:
        output_dir: The run directory.

    Returns:
        True when the pair index holds `x_groups.npy` (`save_group_index` wrote it).
    """
    return gfile().exists(os.path.join(pairs_index_dir(output_dir), X_GROUPS_FILE))


def load_group_index(output_dir: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The group pairing of the run at `output_dir`, checked.

    `ValidPairs.from_groups` takes the two arrays (`tfx_dynamic_inputs.inputs.open_pairs_run` does).

    Args:
        output_dir: The run directory.

    Returns:
        `(names, x_groups, y_groups)`: the group names, and int64 [N_x] and int64 [N_y], the
        group id of each x and y record (-1: none).

    Raises:
        RunCommitError: the index belongs to a run `summary.json` does not commit as ok.
        IndexFileError: a file is damaged (not text, not a 1-D integer array, or a group id
            outside `groups.txt`); the message names it.

    Example:
        names, x_groups, y_groups = load_group_index(run)
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
