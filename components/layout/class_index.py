"""The class index of a labelled record set: `classes.txt`, `class_ids.npy` and the CSR of the
record numbers of each class (`class_records/`), which its readers load with `load_csr`.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_dynamic_inputs.layout.commit import save_run_file
from tfx_dynamic_inputs.layout.files import save_csr, save_lines, save_npy
from tfx_dynamic_inputs.layout.names import (
    CLASS_IDS_FILE,
    CLASSES_FILE,
    class_records_dir,
    index_dir,
)


def class_records(class_ids: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the record numbers of each class, ascending within a class.

    Args:
        class_ids: int64 [N], the class of each record, values in [0, num_classes).
        num_classes: How many classes (a class without records gets an empty row).

    Returns:
        `(row_splits, values)`: int64 [num_classes + 1] and int64 [N]; the records of class c
        are `values[row_splits[c]:row_splits[c + 1]]`.

    Example:
        class_records(np.array([1, 0, 1]), 2)  # ([0, 1, 3], [1, 0, 2])
    """
    class_ids = np.asarray(class_ids, np.int64)
    values = np.argsort(class_ids, kind="stable").astype(np.int64)
    counts = np.bincount(class_ids, minlength=num_classes)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return row_splits, values


def save_class_index(
    output_dir: str,
    record_set: str,
    class_ids: np.ndarray,
    num_classes: int,
    vocabulary: list[str] | None = None,
    run_id: str | None = None,
) -> None:
    """Writes the class index of one record set.

    `class_ids.npy`, `classes.txt` (when there is a vocabulary) and, last, the `class_records/`
    CSR: readers take the CSR as the mark of a whole index.

    Args:
        output_dir: The run directory.
        record_set: The labelled record set's name.
        class_ids: int [N], the class of each record, values in [0, num_classes).
        num_classes: How many classes there are.
        vocabulary: The `num_classes` class names, by class id; None writes no `classes.txt`.
        run_id: The run writing it, stored in `class_records/run.json` after the CSR; None for
            a store that is not a run.

    Example:
        save_class_index(run, "train", class_ids, 3, ["spk0", "spk1", "spk2"], run_id)
    """
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, CLASS_IDS_FILE), np.asarray(class_ids, np.int64))
    if vocabulary is not None:
        save_lines(os.path.join(directory, CLASSES_FILE), vocabulary)
    row_splits, values = class_records(class_ids, num_classes)
    save_csr(class_records_dir(output_dir, record_set), row_splits, values)
    if run_id is not None:
        save_run_file(class_records_dir(output_dir, record_set), run_id)
