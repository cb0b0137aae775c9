"""Which op library this process may load: one this installation built, checked on descriptors.

A library is loaded only when, checked on open file descriptors right before the load:

* its folder is owned by this user (or root) and is not writable by group or others. A sticky,
  world-writable folder (`/tmp`, a shared cache) is refused too: anyone may add names to it, and
  a compiler writing into it could be sent through a planted link. Builds go only into such a
  private folder (`make_private_folder`, which creates it with mode 0700);
* the library and its build record (`<library>.sha256`, written by the build, one line as
  `sha256sum` writes it) are regular files, not links, owned by this user (or root) and not
  writable by group or others;
* the record names the library and holds the SHA-256 of the bytes read from the library's own
  descriptor.

Root is trusted beside the user because it owns system-wide installs and can replace any file
anyway. The library is then loaded through the descriptor that was checked (`/proc/self/fd/N`),
never by its name again: a name swapped in the folder between the check and the load (TOCTOU)
changes nothing, and the bytes of the file loaded can only change by a writer that is this user
or root (its owner, its mode).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator

RECORD_SUFFIX = ".sha256"
_MAX_RECORD_BYTES = 4096
_RECORD_LINE = re.compile(r"([0-9a-f]{64})  ([^\s/]+)\n")
# Never follow a link at the last name, never block on a FIFO planted at it.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UntrustedLibraryError(RuntimeError):
    """A library, its build record or its folder is not provably this installation's (the
    message names the file and what is wrong with it)."""


def _owner_problem(info: os.stat_result, path: str) -> str | None:
    """Why `path` (its `info`) is not ours: its owner, or write access for group or others."""
    user = os.geteuid()
    if info.st_uid not in (user, 0):
        return f"{path} is owned by uid {info.st_uid}, not by this user (uid {user}) or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def folder_problem(folder: str) -> str | None:
    """Why builds may not go into, or be loaded from, `folder`; None when it is private.

    Args:
        folder: An existing folder (a link to one is followed).

    Returns:
        None, or one line naming the folder: it is not a folder, not ours, or writable by others.
    """
    try:
        info = os.stat(folder)
    except OSError as error:
        return f"cannot use {folder}: {error.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a folder"
    return _owner_problem(info, folder)


def make_private_folder(folder: str) -> None:
    """Creates `folder` (mode 0700) unless it exists, and checks that it is private.

    Args:
        folder: Where builds go.

    Raises:
        OSError: it cannot be created (e.g. a file stands in the path, or no write access).
        UntrustedLibraryError: it exists but is not private (`folder_problem`).
    """
    os.makedirs(folder, mode=0o700, exist_ok=True)
    problem = folder_problem(folder)
    if problem is not None:
        raise UntrustedLibraryError(problem)


def file_sha256(fd: int) -> str:
    """The SHA-256 (hex) of the bytes of the open file `fd`, read from its start."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def save_record(library: str, digest: str) -> None:
    """Writes the build record of `library` (`<library>.sha256`, mode 0644) in one rename: a
    reader sees the old record or the new one, never part of one.

    Args:
        library: The library's path (the record names its file name).
        digest: The SHA-256 (hex) of the library's bytes.
    """
    folder, name = os.path.split(library)
    fd, scratch = tempfile.mkstemp(prefix=".", suffix=RECORD_SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{digest}  {name}\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(scratch, 0o644)
        os.replace(scratch, library + RECORD_SUFFIX)
    finally:
        if os.path.lexists(scratch):
            os.remove(scratch)


def _open_checked(name: str, folder_fd: int, path: str) -> tuple[int, os.stat_result]:
    """Opens `name` in the folder `folder_fd` (no link followed) if it is a regular file of ours.

    Raises:
        FileNotFoundError: nothing has the name.
        UntrustedLibraryError: something else than our regular file has it.
    """
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=folder_fd)
    except FileNotFoundError:
        raise
    except OSError as error:  # ELOOP: a symbolic link
        raise UntrustedLibraryError(f"cannot open {path} as a file: {error.strerror}") from error
    info = os.fstat(fd)
    problem = None if stat.S_ISREG(info.st_mode) else f"{path} is not a regular file"
    problem = problem or _owner_problem(info, path)
    if problem is not None:
        os.close(fd)
        raise UntrustedLibraryError(problem)
    return fd, info


def _recorded_digest(name: str, folder_fd: int, library: str) -> str:
    """The SHA-256 the build record of `name` holds, the record checked as the library is."""
    record = library + RECORD_SUFFIX
    try:
        fd, info = _open_checked(name + RECORD_SUFFIX, folder_fd, record)
    except FileNotFoundError as error:
        raise UntrustedLibraryError(f"{library} has no build record ({record})") from error
    try:
        text = os.pread(fd, _MAX_RECORD_BYTES + 1, 0)
    finally:
        os.close(fd)
    match = _RECORD_LINE.fullmatch(text.decode("ascii", "replace"))
    if len(text) > _MAX_RECORD_BYTES or match is None:
        raise UntrustedLibraryError(f"{record} is not a build record (one `sha256  name` line)")
    if match.group(2) != name:
        raise UntrustedLibraryError(f"{record} records {match.group(2)!r}, not {name!r}")
    return match.group(1)


@contextlib.contextmanager
def open_verified(library: str) -> Iterator[str]:
    """Opens `library` if this installation built it, for loading through its descriptor.

    Args:
        library: The library's path.

    Yields:
        `/proc/self/fd/N`, a path to the checked open file (valid until the context ends).

    Raises:
        FileNotFoundError: the library (or its folder) does not exist: it is not built.
        UntrustedLibraryError: the library, its record or its folder fails a check (the module
            docstring lists them); one line naming the file.

    Example:
        with open_verified(path) as checked:
            module = tf.load_op_library(checked)
    """
    folder, name = os.path.split(library)
    try:
        folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise FileNotFoundError(f"{folder} does not exist") from error
    except OSError as error:
        raise UntrustedLibraryError(f"cannot open {folder}: {error.strerror}") from error
    try:
        problem = _owner_problem(os.fstat(folder_fd), folder)
        if problem is not None:
            raise UntrustedLibraryError(problem)
        fd, _ = _open_checked(name, folder_fd, library)
        try:
            recorded = _recorded_digest(name, folder_fd, library)
            if file_sha256(fd) != recorded:
                raise UntrustedLibraryError(
                    f"{library} does not hold the bytes its build record names (SHA-256 "
                    f"{recorded[:12]}...): it was changed or replaced since it was built"
                )
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
    finally:
        os.close(folder_fd)
