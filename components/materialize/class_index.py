"""Class index of a labelled record set: vocabulary, class id per record, records per class."""

from __future__ import annotations

import os

import numpy as np

from components import layout


def class_records(class_ids: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the record numbers of each class, ascending within a class.

    Args:
      class_ids: int64 [N], values in [0, num_classes).
    Returns:
      (row_splits int64 [num_classes + 1], values int64 [N]).
    """
    class_ids = np.asarray(class_ids, np.int64)
    values = np.argsort(class_ids, kind="stable").astype(np.int64)
    counts = np.bincount(class_ids, minlength=num_classes)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return row_splits, values


def save_class_index(
    output_dir: str, record_set: str, class_ids: np.ndarray, vocabulary: list[str]
) -> None:
    """Writes `classes.txt`, `class_ids.npy` and `class_records/` of one record set."""
    directory = layout.index_dir(output_dir, record_set)
    layout.save_lines(os.path.join(directory, layout.CLASSES_FILE), vocabulary)
    layout.save_npy(os.path.join(directory, layout.CLASS_IDS_FILE), class_ids)
    row_splits, values = class_records(class_ids, len(vocabulary))
    layout.save_csr(layout.class_records_dir(output_dir, record_set), row_splits, values)
