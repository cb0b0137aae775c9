"""The file formats of the indexes, each writer beside its checked reader: `.npy` arrays, CSR
pairs of them, JSON values and text lines. Readers raise `IndexFileError` naming the file.
"""

from __future__ import annotations

import io
import json
import os
import tempfile

import numpy as np

from tfx_dynamic_inputs.layout.filesystem import create, gfile
from tfx_dynamic_inputs.layout.names import ROW_SPLITS_FILE, VALUES_FILE, IndexFileError


def save_npy(path: str, array: np.ndarray) -> None:
    """Writes `array` as .npy to any Beam `FileSystems` path (C-contiguous, no pickles).

    Args:
        path: The file to write.
        array: The array, of any shape and of a non-object dtype.

    Example:
        save_npy(os.path.join(index_dir(run, "x"), OFFSETS_FILE), offsets)
    """
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    with create(path) as f:
        f.write(buffer.getvalue())


# `load_npy(dtype=INTEGER)`: any signed or unsigned integer dtype.
INTEGER = "integer"


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(
    path: str,
    mmap: bool = True,
    *,
    shape: tuple[int | None, ...] | None = None,
    dtype: str | np.dtype | None = None,
) -> np.ndarray:
    """Loads a .npy file; local files are memory-mapped so memory does not grow with N.

    Remote files (gs://, s3://, ...) are copied once to a local temporary file first.

    Args:
        path: The .npy file, local or remote.
        mmap: Whether to return the read-only memory map; False loads a copy into memory.
        shape: The expected shape, None for an axis of any length; not checked when None.
        dtype: The expected dtype (a numpy dtype, or `INTEGER` for any integer dtype); not
            checked when None.

    Returns:
        The array as stored (a read-only `np.memmap` when `mmap`).

    Raises:
        FileNotFoundError: there is no file at a local `path` (a missing remote file fails
            in its copy, with `tf.errors.NotFoundError`).
        IndexFileError: the file is not a readable .npy array (a zip, a pickle, a damaged
            header) or not of `shape` and `dtype`; the message names the file.

    Example:
        offsets = load_npy(path, shape=(None, 3), dtype=INTEGER)  # int [N, 3]
    """
    if "://" in path:
        fd, local = tempfile.mkstemp(suffix=".npy")
        os.close(fd)
        gfile().copy(path, local, overwrite=True)
        source = local
    else:
        source = path
    if not os.path.exists(source):
        raise FileNotFoundError(f"index file not found: {path}")
    with open(source, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    # np.load would also take a zip (.npz) or a pickle; neither is an index array.
    if magic != _NPY_MAGIC:
        raise IndexFileError(f"{path}: not a .npy file (it starts with {magic!r})")
    try:
        # Mapped first even when a copy is wanted: mapping checks the header's shape against the
        # file size, where a plain load of a damaged header would try to allocate what it claims.
        array = np.load(source, mmap_mode="r", allow_pickle=False)
    except Exception as error:
        # numpy's header parser lets through whatever a damaged header makes it raise (ValueError,
        # EOFError, tokenize.TokenError, TypeError, ...); all of them mean this file is damaged.
        raise IndexFileError(f"{path}: not a readable .npy array: {error!r}") from error
    if dtype is not None and not _dtype_matches(array.dtype, dtype):
        expected = "an integer dtype" if dtype == INTEGER else np.dtype(dtype).str
        raise IndexFileError(f"{path}: expected {expected}, got {array.dtype.str}")
    if shape is not None and (
        array.ndim != len(shape)
        or any(w is not None and g != w for g, w in zip(array.shape, shape, strict=True))
    ):
        expected = "[" + ", ".join("N" if s is None else str(s) for s in shape) + "]"
        raise IndexFileError(f"{path}: expected shape {expected}, got {list(array.shape)}")
    return array if mmap else np.array(array)


def _dtype_matches(got: np.dtype, expected: str | np.dtype) -> bool:
    if isinstance(expected, str) and expected == INTEGER:
        return got.kind in "iu"
    return got == np.dtype(expected)


def save_csr(directory: str, row_splits: np.ndarray, values: np.ndarray) -> None:
    """Writes a CSR as `<directory>/row_splits.npy` and `<directory>/values.npy`, int64.

    Args:
        directory: The index folder (created as the files are written, locally).
        row_splits: int [num_rows + 1], from 0 to `len(values)`, non-decreasing.
        values: int [num_values]: the entries of row r are `values[row_splits[r]:row_splits[r+1]]`.
    """
    save_npy(os.path.join(directory, ROW_SPLITS_FILE), np.asarray(row_splits, np.int64))
    save_npy(os.path.join(directory, VALUES_FILE), np.asarray(values, np.int64))


def load_csr(directory: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Loads the CSR `save_csr` wrote in `directory`, checked.

    The values are not range-checked here: their range depends on the index (y records, record
    numbers).

    Args:
        directory: The index folder holding `row_splits.npy` and `values.npy`.
        mmap: Whether local files stay memory-mapped (see `load_npy`).

    Returns:
        `(row_splits, values)`: int64 [num_rows + 1] and int64 [num_values];
        `tf.RaggedTensor.from_row_splits` takes them.

    Raises:
        FileNotFoundError: one of the two files is missing (locally; see `load_npy`).
        IndexFileError: either is not a 1-D integer array, or `row_splits` does not start at 0,
            decreases or does not end at `len(values)`; the message names the file.

    Example:
        row_splits, values = load_csr(pairs_index_dir(run))
    """
    splits_path = os.path.join(directory, ROW_SPLITS_FILE)
    row_splits = load_npy(splits_path, mmap, shape=(None,), dtype=INTEGER)
    values = load_npy(os.path.join(directory, VALUES_FILE), mmap, shape=(None,), dtype=INTEGER)
    row_splits = row_splits.astype(np.int64, copy=False)
    values = values.astype(np.int64, copy=False)
    if len(row_splits) < 1 or row_splits[0] != 0 or row_splits[-1] != len(values):
        raise IndexFileError(
            f"{splits_path}: row_splits must start at 0 and end at the number of values "
            f"({len(values)}), got {len(row_splits)} splits"
            + (f" from {row_splits[0]} to {row_splits[-1]}" if len(row_splits) else "")
        )
    decreasing = np.flatnonzero(np.diff(row_splits) < 0)
    if len(decreasing):
        row = int(decreasing[0])
        raise IndexFileError(
            f"{splits_path}: row_splits decrease at row {row} "
            f"({row_splits[row]} -> {row_splits[row + 1]})"
        )
    return row_splits, values


def save_json(path: str, obj: object) -> None:
    """Writes `obj` as JSON (indented, keys sorted, a final newline) to any `FileSystems` path.

    Args:
        path: The file to write.
        obj: A JSON-serializable value.

    Example:
        save_json(os.path.join(run, SUMMARY_FILE), {"ok": True, "run_id": run_id})
    """
    with create(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_json(path: str) -> object:
    """The JSON value in `path`, read through `tf.io.gfile`.

    Args:
        path: The file to read, local or remote.

    Returns:
        The decoded value (any JSON value: callers check its type).

    Raises:
        IndexFileError: the path is a folder, or the file is not UTF-8 JSON (or nests too
            deep); the message names it.
    """
    if gfile().isdir(path):
        raise IndexFileError(f"{path} is a folder, not a JSON file")
    try:
        with gfile().GFile(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise IndexFileError(f"{path}: not valid JSON: {error}") from error


def save_lines(path: str, lines: list[str]) -> None:
    """Writes `lines` as UTF-8 text, each ended by "\n" (`load_lines` reads them back).

    Args:
        path: The file to write.
        lines: The lines, none holding "\n" (the writers of ids and class names refuse it).

    Example:
        save_lines(os.path.join(index_dir(run, "train"), CLASSES_FILE), ["spk0", "spk1"])
    """
    with create(path) as f:
        f.write("".join(f"{line}\n" for line in lines).encode())


def load_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file as `save_lines` writes them.

    Lines end at "\n" only: `str.splitlines` would also break at U+2028, \x1c, \x0c, \x0b and
    other separators a class name or id may hold (the writer refuses only "\n" and "\r").

    Args:
        path: The file to read, local or remote (through `tf.io.gfile`).

    Returns:
        The lines without their "\n"; a last line without one is kept.

    Raises:
        IndexFileError: the file is not UTF-8 text; the message names it.
    """
    with gfile().GFile(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise IndexFileError(f"{path}: not UTF-8 text: {error}") from error
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
