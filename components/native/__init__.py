"""Native TensorFlow ops of the project, built from source against the installed TensorFlow.

One op today, `ReadRecordsByIndex` (`read_records_op.cc`): the disk backend of
`components.inputs.record_store.RecordStore` reads a batch of records by record number in C++ (one
`pread` per record into the output strings, frame and CRC32C checks, reads spread over the intra-op
threads), where the Python reader pays a `os.pread` call, slices and a `tf.numpy_function`
conversion per record.

The library is built by `make setup` (`python -m components.native`) with the C++ compiler and
TensorFlow's own compile and link flags. Its file name carries a hash of the source, the
TensorFlow version and the flags, so a stale build is never loaded. Without a compiler nothing
fails: `read_records_op()` returns None and the record store keeps its Python reader.
A process that runs graphs built elsewhere (a tf.data service worker,
`components.data_service_worker`) registers the op with `load_read_records_op()` first.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from types import ModuleType

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, "read_records_op.cc")
COMPILER_ENV = "CXX"


class NativeBuildError(RuntimeError):
    """The native op could not be compiled (message: the command and the compiler's output)."""


def _build_flags() -> tuple[list[str], list[str], str]:
    import tensorflow as tf

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf.__version__


def library_path() -> str:
    """Where the build for this source, TensorFlow version and flags lives (may not exist)."""
    compile_flags, link_flags, tf_version = _build_flags()
    digest = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        digest.update(f.read())
    digest.update(" ".join([tf_version, *compile_flags, *link_flags]).encode())
    return os.path.join(_HERE, f"_read_records_op_{digest.hexdigest()[:12]}.so")


def compiler() -> str | None:
    """The C++ compiler to build with: $CXX, else g++ or c++ on PATH, else None."""
    for candidate in (os.environ.get(COMPILER_ENV), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def build(force: bool = False) -> str:
    """Compiles the op library if it is not built yet; returns its path.

    Raises NativeBuildError when no compiler is found or compilation fails.
    """
    target = library_path()
    if os.path.exists(target) and not force:
        return target
    cxx = compiler()
    if cxx is None:
        raise NativeBuildError(
            f"no C++ compiler found (set ${COMPILER_ENV} or install g++) to build {SOURCE}"
        )
    compile_flags, link_flags, _ = _build_flags()
    fd, scratch = tempfile.mkstemp(suffix=".so", dir=_HERE)
    os.close(fd)
    command = [cxx, "-shared", "-fPIC", "-O2", SOURCE, "-o", scratch, *compile_flags, *link_flags]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeBuildError(
                f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-4000:]}"
            )
        # Concurrent builds each write their own file; the rename makes the last one win whole.
        os.replace(scratch, target)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    for name in os.listdir(_HERE):
        stale = os.path.join(_HERE, name)
        if name.startswith("_read_records_op_") and name.endswith(".so") and stale != target:
            os.remove(stale)
    return target


@functools.cache
def read_records_op() -> ModuleType | None:
    """The loaded op module (`.read_records_by_index`), or None when it is not built."""
    import tensorflow as tf

    path = library_path()
    if not os.path.exists(path):
        return None
    return tf.load_op_library(path)


def load_read_records_op() -> ModuleType:
    """Loads the op library into this process (registering `ReadRecordsByIndex`) and returns it.

    For processes that run graphs built elsewhere (tf.data service workers): a graph naming an op
    that the process has not registered fails with "Op type not registered". Raises
    NativeBuildError when it is not built.
    """
    op_module = read_records_op()
    if op_module is None:
        raise NativeBuildError(
            f"the native op is not built for this source and TensorFlow {_build_flags()[2]} "
            f"(expected {library_path()}): run `python -m components.native`"
        )
    return op_module
