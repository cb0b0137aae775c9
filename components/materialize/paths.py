"""Input paths: record ids, root-escape checks, directory listing, reading file bytes. The
records of a text input (pair list, manifest, groups file) are read by `text_records`.

Files are read with Beam's `FileSystems`, so local paths and object stores (gs://, s3://,
hdfs://) work alike. Local folders are listed with `os.scandir`; other roots with `tf.io.gfile`
(`layout.gfile()`, imported on use), so a worker of a local run never imports TensorFlow.
Symlinks, FIFOs and devices exist only on local file systems; there the resolved path must stay
below the resolved root, and only regular files are opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import stat
from collections.abc import Iterator
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import rejects
from tfx_dynamic_inputs.materialize.owned_files import (
    is_local,  # defined once; also `paths.is_local`
)

_FORBIDDEN_CHARACTERS = frozenset("\n\r\0")
# Put by `list_files` before the id of a file whose name is not UTF-8 and whose printable form
# does not name it alone (another file has that name, or other bytes print alike): a NUL, which
# no file name holds, so `normalize_id` rejects it as NON_UTF8_NAME before it becomes an id.
_AMBIGUOUS_NAME = "\0"
# How `printable` writes a byte that is not UTF-8; `_undo_printable` reverses it.
_ESCAPED_BYTE = re.compile(rb"\\x([89a-f][0-9a-f])")
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def normalize_id(raw_path: str) -> str:
    """Returns the record id of a path given relative to a root (posix, without `.` parts).

    Args:
        raw_path: the path relative to the root, as listed or as a list names it.

    Returns:
        The normalized record id, e.g. "a/b.png" for "a/./b.png".

    Raises:
        RejectedInput: UNSAFE_PATH for absolute paths, paths leaving the root through `..`,
            empty paths and ids that cannot be stored one per line (newlines, NUL, invalid
            UTF-8); NON_UTF8_NAME for a listed name `list_files` marked as not UTF-8.

    Example:
        normalize_id("cats/./a.png")  # "cats/a.png"
    """
    if raw_path.startswith(_AMBIGUOUS_NAME):
        raise rejects.RejectedInput(rejects.NON_UTF8_NAME, _ambiguous_detail(raw_path))
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


def normalize_listed_id(raw_path: str, reason: str, what: str) -> str:
    """`normalize_id` of an id a list names (a pair list's, a groups file's).

    Args:
        raw_path: the id as the list gives it.
        reason: the reject reason when it is not a safe id (`rejects.UNSAFE_PAIR_PATH`, ...).
        what: what the reject calls it ("x id", "id").

    Returns:
        The record id.

    Raises:
        RejectedInput: with `reason`, saying which id and why.
    """
    try:
        return normalize_id(raw_path)
    except rejects.RejectedInput as error:
        raise rejects.RejectedInput(
            reason, f"{what} {printable(raw_path)!r}: {error.detail}"
        ) from error


def _ambiguous_detail(marked: str) -> str:
    shown = marked[len(_AMBIGUOUS_NAME) :]
    return (
        f"the file name is not valid UTF-8; printed it reads {shown!r}, as another file's name "
        "(or other bytes) also reads, so it cannot be an id"
    )


def _has_drive(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


def check_inside_root(root: str, path: str) -> None:
    """Raises `RejectedInput(SYMLINK_ESCAPES_ROOT)` if a local `path` resolves outside `root`.

    `path` is `root` joined with a normalized id. Only a symlink below `root` can lead out, so
    the full resolution runs only when one of the id's components is a link.

    Args:
        root: the input root.
        path: `root` joined with a normalized id.

    Raises:
        RejectedInput: SYMLINK_ESCAPES_ROOT when it resolves outside `root`.
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
    """Reads a whole file below `root` (`open_input`).

    Args:
        root: the input root.
        path: the file, `root` joined with its id.

    Returns:
        The file's bytes.

    Raises:
        RejectedInput: as `open_input`; READ_ERROR when reading fails.
    """
    with open_input(root, path) as handle:
        try:
            return handle.read()
        except Exception as error:  # Beam wraps file-system errors in several types.
            raise _unreadable(path, error) from error


@contextlib.contextmanager
def open_input(root: str, path: str) -> Iterator[BinaryIO]:
    """Opens a file below `root` for reading, after the root-escape check; a local path must be
    a regular file (after following links) before it is opened. A local file is a real file
    object, whose descriptor a decoder can read itself (`audio.decode_audio_file`).

    Args:
        root: the input root.
        path: the file, `root` joined with its id.

    Yields:
        The open binary file, closed on leaving the context.

    Raises:
        RejectedInput: with MISSING_FILE, SYMLINK_ESCAPES_ROOT, SYMLINK_LOOP,
            NOT_REGULAR_FILE, NON_UTF8_NAME, UNSUPPORTED_FORMAT (a directory) or READ_ERROR.

    Example:
        with open_input(root, posixpath.join(root, "a.wav")) as f:
            header = f.read(12)
    """
    if _AMBIGUOUS_NAME in path:
        marked = path[path.index(_AMBIGUOUS_NAME) :]
        raise rejects.RejectedInput(rejects.NON_UTF8_NAME, _ambiguous_detail(marked))
    check_inside_root(root, path)
    if is_local(path):
        _check_regular_file(path)
    try:
        handle = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as error:  # Beam wraps file-system errors in several types.
        raise _unreadable(path, error) from error
    with handle:
        yield handle


def _unreadable(path: str, error: Exception) -> rejects.RejectedInput:
    """The reject of a file that could not be opened or read."""
    # Object stores have no directories: a prefix there does not exist as a file.
    if not FileSystems.exists(path):
        return rejects.RejectedInput(rejects.MISSING_FILE, "file not found")
    return rejects.RejectedInput(rejects.READ_ERROR, _one_line(error))


def _check_regular_file(path: str) -> None:
    # Opening a FIFO blocks until a writer appears, and opening a device can have side effects:
    # only what `stat` (which follows links) calls a regular file is opened.
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise rejects.RejectedInput(
                rejects.SYMLINK_LOOP, "symbolic links form a loop"
            ) from error
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise rejects.RejectedInput(rejects.READ_ERROR, _one_line(error)) from error
        if os.path.lexists(path):
            raise rejects.RejectedInput(
                rejects.MISSING_FILE, "broken symbolic link: its target does not exist"
            ) from error
        if _ESCAPED_BYTE.search(os.fsencode(path)) and os.path.lexists(_undo_printable(path)):
            raise rejects.RejectedInput(
                rejects.NON_UTF8_NAME, "the file name is not valid UTF-8"
            ) from error
        raise rejects.RejectedInput(rejects.MISSING_FILE, "file not found") from error
    if stat.S_ISDIR(mode):
        raise rejects.RejectedInput(rejects.UNSUPPORTED_FORMAT, "a directory")
    if not stat.S_ISREG(mode):
        kind = next((name for is_kind, name in _FILE_KINDS if is_kind(mode)), "a special file")
        raise rejects.RejectedInput(
            rejects.NOT_REGULAR_FILE, f"{kind}, not a regular file: not opened"
        )


def printable(text: str) -> str:
    """`text` with each byte that was not UTF-8 (a lone surrogate from `os.fsdecode` or a
    `surrogateescape` decode) written as `\\xNN`, so it can pass through Beam's coders and be
    written to JSON; other lone surrogates (from a JSON escape) are written as `\\uNNNN`.

    Args:
        text: a str, perhaps holding lone surrogates.

    Returns:
        A str that encodes as UTF-8.

    Example:
        printable(os.fsdecode(b"a\\xff"))  # "a\\\\xff"
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # A surrogate that no undecodable byte stands for.
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _undo_printable(path: str) -> bytes:
    return _ESCAPED_BYTE.sub(lambda match: bytes([int(match[1], 16)]), os.fsencode(path))


def list_files(root: str) -> Iterator[str]:
    """Yields the path of every file below `root` (any gfile path), in no particular order.

    Local symlinks to directories are not followed: one resolving inside `root` is an alias of
    a directory listed under its real path; one resolving outside is yielded itself, so the
    reader rejects it as escaping the root instead of it vanishing silently. A link that cannot
    be followed (a loop) and anything that is not a regular file is yielded too, for the reader
    to reject. A local name that is not valid UTF-8 is yielded as `printable` writes it: the
    reader rejects it as NON_UTF8_NAME (such a name cannot be a record id). When that printable
    form does not lead back to this file alone (a file is named so: `a\\xff.png` beside the
    non-UTF-8 `a<FF>.png`; or other bytes print alike), the id part is yielded behind a NUL
    marker, so `normalize_id` rejects it as NON_UTF8_NAME and the other file keeps its own id.

    Args:
        root: the folder to list: a local path or any gfile URL.

    Returns:
        An iterator of file paths, each `root` joined with the file's relative path.
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
                if not _is_dir(entry):
                    yield _listed(root, path)
                elif not entry.is_symlink():
                    pending.append(path)
                elif not _resolves_inside(root, path):
                    yield _listed(root, path)


def _listed(root: str, path: str) -> str:
    """How `list_files` yields a local `path` below `root`: as it is when its name is UTF-8,
    else in its printable form, marked when that form does not name this file alone."""
    if path.isascii():
        return path
    shown = printable(path)
    if shown == path:
        return path
    if _undo_printable(shown) == os.fsencode(path) and not os.path.lexists(shown):
        return shown  # `read_bytes` finds no such file and rejects it as NON_UTF8_NAME
    start = len(shown) - len(printable(relative_id(root, path)))
    return shown[:start] + _AMBIGUOUS_NAME + shown[start:]


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # A link that cannot be followed (ELOOP): `read_bytes` says why.
        return False


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

    Args:
        root: the root given to `list_files`.
        path: a path it yielded.

    Returns:
        The path relative to `root`.

    Example:
        relative_id("/data", "/data/cats/a.png")  # "cats/a.png"
    """
    return path[len(root) :].lstrip("/")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
