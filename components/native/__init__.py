"""Native TensorFlow ops of the project, built from source against the installed TensorFlow.

Four ops, in one library:

* `ReadRecordsByIndex` (`read_records_op.cc`): the disk backend of
  `tfx_dynamic_inputs.inputs.record_store.RecordStore` reads a batch of records by record number
  in C++ (one `pread` per record into the output strings, frame and CRC32C checks, reads spread
  over the intra-op threads), where the Python reader pays a `os.pread` call, slices and a
  `tf.numpy_function` conversion per record;
* `PermutePositions` (`index_shuffle_op.cc`): the keyed elementwise permutation of
  `tfx_dynamic_inputs.inputs.index_shuffle`, bit for bit what its TensorFlow-ops form computes;
* `GatherPermuted` (same file): one such permutation and a table gathered at it in one pass
  (`index_shuffle.gather_permuted`, the pair plans' epoch order);
* `ElementKeys` (same file): the keyed hash under `index_shuffle.keyed_uniform`,
  `keyed_offsets` and `keyed_seeds`, one node of a plan's graph instead of about 40 TensorFlow
  ops (tf.data traces a dataset's functions for each dataset and optimizes them again for each
  epoch's iterator).

The library is built for whatever TensorFlow is installed (2.16 to 2.21 are tested), with the
C++ compiler and TensorFlow's own compile and link flags: by `make setup`
(`python -m tfx_dynamic_inputs.native`), or else at first use, when the disk backend first asks for
it (about 5 s, once). It goes beside the source, or, where the installed package folder is not
writable by this user or not private (`trusted_files.folder_problem`), into
`$TFX_DYNAMIC_INPUTS_CACHE/native` (default `~/.cache/tfx-dynamic-inputs/native`, created with
mode 0700). Its file name carries a hash of the source, the TensorFlow version and the flags, so
a stale build is never loaded; the build records the library's SHA-256 beside it, and only a
library that `trusted_files.open_verified` proves this installation built is loaded (a planted
or altered file, a link, a folder others can write to are not). Otherwise, or without a
compiler, or when the build fails, nothing else fails: `op_library()` returns None after one
warning line naming the reason, and the record store keeps its Python reader.
`TFX_DYNAMIC_INPUTS_NATIVE_BUILD=0` turns the build at first use off (a library that is not
built is then no warning here; one that fails the checks still is). A process that runs graphs
built elsewhere (a tf.data service worker, `tfx_dynamic_inputs.data_service_worker`) registers
the op with `load_op_library()` first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from types import ModuleType

from tfx_dynamic_inputs.native import trusted_files

_HERE = os.path.dirname(os.path.abspath(__file__))
# Compiled into one library, as one translation unit (`_unity_source`); its name hashes them all.
SOURCES = (
    os.path.join(_HERE, "read_records_op.cc"),
    os.path.join(_HERE, "index_shuffle_op.cc"),
)
# Included by the sources: their text is in the library's name too.
HEADERS = (os.path.join(_HERE, "summary_json.h"),)
COMPILER_ENV = "CXX"
CACHE_ENV = "TFX_DYNAMIC_INPUTS_CACHE"
BUILD_AT_FIRST_USE_ENV = "TFX_DYNAMIC_INPUTS_NATIVE_BUILD"
_LIBRARY_PREFIX = "_native_ops_"

_log = logging.getLogger(__name__)


class NativeBuildError(RuntimeError):
    """The native op could not be compiled (message: the command and the compiler's output)."""


def _build_flags() -> tuple[list[str], list[str], str]:
    import tensorflow as tf

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf.__version__


def library_path() -> str:
    """Where the build for this source, TensorFlow version and flags lives (it may not exist).

    Imports TensorFlow (for its version and build flags).

    Returns:
        `<library_dir()>/_native_ops_tf<version>_<hash>.so`, the hash (12 hex digits of a SHA-256)
        taken over the sources and headers, the TensorFlow version and the compile and link
        flags.
    """
    compile_flags, link_flags, tf_version = _build_flags()
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        with open(source, "rb") as f:
            digest.update(f.read())
    digest.update(" ".join([tf_version, *compile_flags, *link_flags]).encode())
    return os.path.join(
        library_dir(), f"{_LIBRARY_PREFIX}{_tf_tag(tf_version)}_{digest.hexdigest()[:12]}.so"
    )


def _tf_tag(tf_version: str) -> str:
    """The TensorFlow version in a library's name: builds for other versions (a second venv
    over the same checkout) are told apart, and left alone, by it."""
    return "tf" + "".join(c if c.isalnum() or c == "." else "_" for c in tf_version)


def library_dir() -> str:
    """The folder builds go to and are loaded from: beside the source when this user may write
    there and it is private (a checkout, a venv), else the user's cache
    (`$TFX_DYNAMIC_INPUTS_CACHE/native`, default `~/.cache/tfx-dynamic-inputs/native`), e.g. for
    a system-wide install or a checkout its group may write to."""
    if os.access(_HERE, os.W_OK) and trusted_files.folder_problem(_HERE) is None:
        return _HERE
    cache = os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "tfx-dynamic-inputs"
    )
    return os.path.join(cache, "native")


def compiler() -> str | None:
    """The C++ compiler to build with.

    Returns:
        `$CXX` when it names a program on PATH, else `g++` or `c++` found on PATH, else None.
    """
    for candidate in (os.environ.get(COMPILER_ENV), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def build(force: bool = False) -> str:
    """Compiles the op library unless a verified build of it exists (`trusted_files`).

    Builds go only into a private folder (`trusted_files.make_private_folder`), one at a time (a
    lock file in the folder); the compiler writes a temporary file, whose SHA-256 is recorded
    beside the library (`<library>.sha256`) before both are renamed into place, so concurrent
    builds never leave half a library. Older builds for the same TensorFlow are removed
    (another TensorFlow's are kept: a second venv may use them).

    Args:
        force: Whether to rebuild even when a verified library for this source and TensorFlow
            exists.

    Returns:
        The library's path (`library_path()`).

    Raises:
        NativeBuildError: no compiler is found (`compiler()`), the folder cannot be created or is
            not private, a file cannot be written, or compilation fails (the message holds the
            command and the end of the compiler's output).

    Example:
        path = build()
    """
    target = library_path()
    if not force and _is_verified(target):
        return target
    cxx = compiler()
    if cxx is None:
        raise NativeBuildError(
            f"no C++ compiler found (set ${COMPILER_ENV} or install g++) to build "
            f"{' '.join(SOURCES)}"
        )
    folder = os.path.dirname(target)
    try:
        trusted_files.make_private_folder(folder)
        with _build_lock(folder):
            # Another process may have built it while this one waited for the lock.
            if force or not _is_verified(target):
                # Shown by default (a warning): the build takes seconds and writes a file.
                _log.warning(
                    "building the native ops for TensorFlow %s (once, about 5 s) into %s",
                    _build_flags()[2],
                    target,
                )
                _compile(cxx, target)
    except (OSError, trusted_files.UntrustedLibraryError) as error:
        raise NativeBuildError(f"cannot build into {folder}: {error}") from error
    return target


def _is_verified(library: str) -> bool:
    try:
        with trusted_files.open_verified(library):
            return True
    except (FileNotFoundError, trusted_files.UntrustedLibraryError):
        return False


@contextlib.contextmanager
def _build_lock(folder: str) -> Iterator[None]:
    """Holds `folder`'s build lock: one build at a time, so a library and its record are
    always renamed into place by the same build."""
    fd = os.open(
        os.path.join(folder, ".build.lock"),
        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _compile(cxx: str, target: str) -> None:
    """Compiles the library to `target` and records its SHA-256, then removes older builds."""
    compile_flags, link_flags, _ = _build_flags()
    folder = os.path.dirname(target)
    fd, scratch = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    # One translation unit read from stdin: TensorFlow's headers, most of the compile time, are
    # parsed once (5.4 s against 9.8 s for the two files, g++ 12, TF 2.16); the first error
    # ends the build.
    unity = ["-x", "c++", "-"]
    command = [cxx, "-shared", "-fPIC", "-O2", "-Wfatal-errors", *unity, "-o", scratch]
    command += [*compile_flags, *link_flags]
    try:
        result = subprocess.run(command, input=_unity_source(), capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeBuildError(
                f"{' '.join(command)} (of {', '.join(SOURCES)}) failed ({result.returncode}):\n"
                f"{result.stderr[-4000:]}"
            )
        # The linker's mode follows the umask; a library others may write is never loaded.
        os.chmod(scratch, 0o755)
        with open(scratch, "rb") as built:
            digest = trusted_files.file_sha256(built.fileno())
        # The record first: a record without its library reads as not built (a reader then
        # waits on this lock to build, and finds this build); a library without its record
        # would read as planted.
        trusted_files.save_record(target, digest)
        os.replace(scratch, target)
    finally:
        if os.path.lexists(scratch):
            os.remove(scratch)
    # Older builds for this TensorFlow; another TensorFlow's builds belong to another venv.
    same_tf = os.path.basename(target).rsplit("_", 1)[0] + "_"
    keep = {target, target + trusted_files.RECORD_SUFFIX}
    for name in os.listdir(folder):
        stale = os.path.join(folder, name)
        built = name.endswith(".so") or name.endswith(".so" + trusted_files.RECORD_SUFFIX)
        if name.startswith(same_tf) and built and stale not in keep:
            os.remove(stale)


def _unity_source() -> str:
    """The translation unit the library is compiled from: an `#include` of each of `SOURCES`
    (the compiler's messages name the files and lines)."""
    return "".join(f'#include "{source}"\n' for source in SOURCES)


@dataclasses.dataclass(frozen=True)
class LoadOutcome:
    """What looking up the op library found (`load_outcome`).

    Args:
        module: The op module, or None when the library is not loaded.
        warning: The one warning line logged when it is not loaded; None when none was (loaded,
            or not built with the build at first use off).
    """

    module: ModuleType | None
    warning: str | None


@functools.cache
def load_outcome() -> LoadOutcome:
    """Loads the op library into this process, looked up once: later calls return the same.

    Only a library `trusted_files.open_verified` proves this installation built is loaded, through
    the descriptor it checked. Not built yet for this TensorFlow, or failing the checks, it is
    built now (`build`), unless `TFX_DYNAMIC_INPUTS_NATIVE_BUILD=0`; a build that cannot be made,
    or a library that fails the checks with the build off, is one warning line.

    Returns:
        The outcome: the op module, or None and the warning logged.

    Example:
        outcome = load_outcome()
        reader = outcome.module.read_records_by_index if outcome.module is not None else None
    """
    path = library_path()
    try:
        return LoadOutcome(_load_verified(path), None)
    except FileNotFoundError:
        refused = None
    except trusted_files.UntrustedLibraryError as error:
        refused = str(error)
    if os.environ.get(BUILD_AT_FIRST_USE_ENV, "1") == "0":
        if refused is None:
            return LoadOutcome(None, None)
        return _not_loaded(f"not loading it: {refused}")
    # A library that fails the checks is rebuilt over (in a private folder; `build` refuses
    # any other), and `build` says so in one line.
    try:
        build()
        return LoadOutcome(_load_verified(path), None)
    except (NativeBuildError, FileNotFoundError, trusted_files.UntrustedLibraryError) as error:
        return _not_loaded(str(error).splitlines()[0])


def _load_verified(path: str) -> ModuleType:
    import tensorflow as tf

    with trusted_files.open_verified(path) as checked:
        return tf.load_op_library(checked)


def _not_loaded(reason: str) -> LoadOutcome:
    warning = (
        f"native ops not loaded ({reason[:300]}): the disk backend reads in Python and "
        "permutations run as TensorFlow ops; `python -m tfx_dynamic_inputs.native` says why"
    )
    _log.warning(warning)
    return LoadOutcome(None, warning)


def op_library() -> ModuleType | None:
    """The op library loaded into this process (`load_outcome`), or None when it is not.

    Returns:
        The op module (its `read_records_by_index`, `permute_positions`, `gather_permuted`
        and `element_keys` ops), or None when it is not built or not ours.

    Example:
        op_module = op_library()
        reader = op_module.read_records_by_index if op_module is not None else None
    """
    return load_outcome().module


def load_op_library() -> ModuleType:
    """Loads the op library into this process, registering its ops (`ReadRecordsByIndex`,
    `PermutePositions`, `GatherPermuted`, `ElementKeys`).

    For processes that run graphs built elsewhere (tf.data service workers): a graph naming an op
    that the process has not registered fails with "Op type not registered".

    Returns:
        The op module, as `op_library()` returns it.

    Raises:
        NativeBuildError: the library is not built for this source and TensorFlow, or is not
            provably ours (the message says why and how to build it).

    Example:
        load_op_library()  # before starting a tf.data service worker
    """
    op_module = op_library()
    if op_module is None:
        raise NativeBuildError(
            f"the native op is not loaded for this source and TensorFlow {_build_flags()[2]} "
            f"(expected {library_path()}; {load_outcome().warning or 'not built'}): run "
            "`python -m tfx_dynamic_inputs.native`"
        )
    return op_module
