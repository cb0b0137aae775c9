"""The file formats of the indexes, each writer beside its checked reader: `.npy` arrays, CSR
pairs of them, JSON values and text lines. Readers raise `IndexFileError` naming the file.
"""

from __future__ import annotations

import io
import json
import os
import tempfile

import numpy as np

from components.layout.names import ROW_SPLITS_FILE, VALUES_FILE, IndexFileError, create, gfile


def save_npy(path: str, array: np.ndarray) -> None:
    """Writes `array` as .npy to any Beam `FileSystems` path."""
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

    Remote files (gs://, s3://, ...) are copied once to a local temporary file first. `shape`
    (None for an axis of any length) and `dtype` (a numpy dtype, or `INTEGER` for any integer
    dtype) are checked when given. A file that is not a readable array of that shape and dtype
    raises `IndexFileError` naming it.
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
    save_npy(os.path.join(directory, ROW_SPLITS_FILE), np.asarray(row_splits, np.int64))
    save_npy(os.path.join(directory, VALUES_FILE), np.asarray(values, np.int64))


def load_csr(directory: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(row_splits, values)`, int64; `tf.RaggedTensor.from_row_splits` takes them.

    Both must be 1-D integer arrays, and `row_splits` must start at 0, never decrease and end at
    `len(values)`; otherwise `IndexFileError` names the file. The values are not range-checked
    here: their range depends on the index (y records, record numbers).
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
    with create(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def load_json(path: str) -> object:
    """The JSON value in `path`; `IndexFileError` naming the file when it is not JSON."""
    try:
        with gfile().GFile(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise IndexFileError(f"{path}: not valid JSON: {error}") from error


def save_lines(path: str, lines: list[str]) -> None:
    with create(path) as f:
        f.write("".join(f"{line}\n" for line in lines).encode())


def load_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file as `save_lines` writes them; `IndexFileError` naming the
    file when it is not text.

    Lines end at "\n" only: `str.splitlines` would also break at U+2028, \x1c, \x0c, \x0b and
    other separators a class name or id may hold (the writer refuses only "\n" and "\r").
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
