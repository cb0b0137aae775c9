"""Input paths: record ids, root-escape checks, directory listing and reading file bytes.

Files are read with Beam's `FileSystems`, so local paths and object stores (gs://, s3://,
hdfs://) work alike. Local folders are listed with `os.scandir`; other roots with `tf.io.gfile`
(`layout.gfile()`, imported on use), so a worker of a local run never imports TensorFlow.
Symlinks exist only on local file systems; there the resolved path must stay below the resolved
root.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from components import layout
from components.materialize import rejects

_FORBIDDEN_CHARACTERS = frozenset("\n\r\0")


def normalize_id(raw_path: str) -> str:
    """Returns the record id of a path given relative to a root (posix, without `.` parts).

    Raises `RejectedInput(UNSAFE_PATH)` for absolute paths, paths leaving the root through
    `..`, empty paths and ids that cannot be stored one per line (newlines, NUL, invalid UTF-8).
    """
    if not raw_path or not raw_path.strip():
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "empty path")
    if _FORBIDDEN_CHARACTERS.intersection(raw_path):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path contains a newline or NUL")
    try:
        raw_path.encode("utf-8")
    except UnicodeEncodeError as error:
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path is not valid UTF-8") from error
    if raw_path.startswith(("/", "\\")) or "://" in raw_path or _has_drive(raw_path):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "absolute path")
    record_id = posixpath.normpath(raw_path)
    if record_id == ".." or record_id.startswith("../"):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path leaves the root through '..'")
    if record_id == ".":
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path names the root itself")
    return record_id


def _has_drive(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


def is_local(path: str) -> bool:
    return "://" not in path


def check_inside_root(root: str, path: str) -> None:
    """Raises `RejectedInput(SYMLINK_ESCAPES_ROOT)` if a local `path` resolves outside `root`.

    `path` is `root` joined with a normalized id. Only a symlink below `root` can lead out, so
    the full resolution runs only when one of the id's components is a link.
    """
    if not is_local(path):
        return
    relative = os.path.relpath(path, root)
    current = root
    for part in relative.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            break
    else:
        return
    real_root = os.path.realpath(root)
    real_path = os.path.realpath(path)
    if real_path != real_root and not real_path.startswith(real_root.rstrip(os.sep) + os.sep):
        raise rejects.RejectedInput(
            rejects.SYMLINK_ESCAPES_ROOT, f"resolves to {real_path}, outside {real_root}"
        )


def read_bytes(root: str, path: str) -> bytes:
    """Reads a whole file below `root`, after the root-escape check.

    Raises `RejectedInput` with MISSING_FILE, SYMLINK_ESCAPES_ROOT or READ_ERROR.
    """
    check_inside_root(root, path)
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()
    except Exception as error:  # Beam wraps file-system errors in several types.
        if not FileSystems.exists(path):
            raise rejects.RejectedInput(rejects.MISSING_FILE, "file not found") from error
        # Object stores have no directories: a prefix there does not exist as a file.
        if is_local(path) and os.path.isdir(path):
            raise rejects.RejectedInput(rejects.UNSUPPORTED_FORMAT, "a directory") from error
        raise rejects.RejectedInput(rejects.READ_ERROR, _one_line(error)) from error


def list_files(root: str) -> Iterator[str]:
    """Yields the path of every file below `root` (any gfile path), in no particular order.

    Local symlinks to directories are not followed: one resolving inside `root` is an alias of
    a directory listed under its real path; one resolving outside is yielded itself, so the
    reader rejects it as escaping the root instead of it vanishing silently.
    """
    if is_local(root):
        yield from _list_local_files(root)
        return
    gfile = layout.gfile()
    pending = [root]
    while pending:
        directory = pending.pop()
        for name in gfile.listdir(directory):
            path = posixpath.join(directory, name.rstrip("/"))
            if gfile.isdir(path):
                pending.append(path)
            else:
                yield path


def _list_local_files(root: str) -> Iterator[str]:
    # os.scandir reads the entry types with the listing; a gfile.isdir per entry costs a
    # stat each (~80 us), as much as reading a small image.
    pending = [root]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                path = posixpath.join(directory, entry.name)
                if not entry.is_dir():
                    yield path
                elif not entry.is_symlink():
                    pending.append(path)
                elif not _resolves_inside(root, path):
                    yield path


def _resolves_inside(root: str, path: str) -> bool:
    try:
        check_inside_root(root, path)
    except rejects.RejectedInput:
        return False
    return True


def relative_id(root: str, path: str) -> str:
    """The record id of a file `list_files(root)` yielded: its path relative to `root`.

    `list_files` joins names onto `root` as given, so the id is what follows that prefix; this
    runs once per file in the serial listing step, where `posixpath.relpath` (two `abspath`
    calls) cost more than the listing itself.
    """
    return path[len(root) :].lstrip("/")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
