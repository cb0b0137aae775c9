"""The file system the layout's writers go through: Beam's `FileSystems`, else `tf.io.gfile`.

The Beam jobs write shards and indexes from their workers, where Beam's `FileSystems` reaches
every path the runner does (local, gs://, s3://, hdfs://) and TensorFlow need not be imported
(10-25 s per worker process). The core install (`pip install tfx-dynamic-inputs`, no Beam) writes
the same layout, e.g. a dataset cache of the samplers, through `tf.io.gfile`, which TensorFlow's
file systems back (local and gs://). Which one is used is decided per call: Beam when it is
installed, so a run written by a job and a cache written by a sampler are the same bytes.

The readers (`load_json`, `load_shards`, `check_committed`, `load_summary`, ...) go through
`gfile()`: `tf.io.gfile`, except inside `without_tensorflow()`, where it is `LocalFiles`, the
same calls on local paths through `os`, so a reader that must not import TensorFlow
(`tfx_dynamic_inputs.records`, for JAX and PyTorch) runs the very same checks.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
from collections.abc import Iterator
from typing import IO


def has_beam() -> bool:
    """Whether Apache Beam is installed (the `[beam]` extra).

    Returns:
        True when `apache_beam` can be imported: the layout then writes through its `FileSystems`.
    """
    return importlib.util.find_spec("apache_beam") is not None


def gfile():
    """`tf.io.gfile`, imported on first use; `LocalFiles` inside `without_tensorflow()`.

    Code that Beam workers import must not pull in TensorFlow (a 10-25 s start-up per worker
    process) unless it really reads through it.

    Returns:
        The `tf.io.gfile` module, or a `LocalFiles`.

    Example:
        exists = gfile().exists(path)
    """
    if _WITHOUT_TENSORFLOW.get():
        return _LOCAL_FILES
    import tensorflow as tf

    return tf.io.gfile


class LocalFiles:
    """The calls of `tf.io.gfile` the layout's readers make, on local paths through `os`.

    A remote path (`scheme://...`) is refused in one line: without TensorFlow (or Beam) nothing
    here reaches an object store.
    """

    def exists(self, path: str) -> bool:
        """Whether anything is at `path`.

        Args:
            path: a local path.

        Returns:
            True when a file or folder is there.
        """
        return os.path.exists(_local(path))

    def isdir(self, path: str) -> bool:
        """Whether `path` is a folder.

        Args:
            path: a local path.

        Returns:
            True for a folder.
        """
        return os.path.isdir(_local(path))

    def GFile(self, path: str, mode: str = "r") -> IO:
        """Opens `path` as `tf.io.gfile.GFile` does (whose name this keeps): `open`.

        Args:
            path: a local path.
            mode: as `open` takes it.

        Returns:
            The open file.
        """
        return open(_local(path), mode)


def _local(path: str) -> str:
    if "://" in path:
        raise ValueError(
            f"{path} is remote: reading without TensorFlow reaches local files only; copy the "
            "run to a local folder"
        )
    return path


_LOCAL_FILES = LocalFiles()
_WITHOUT_TENSORFLOW = contextvars.ContextVar("without_tensorflow", default=False)


@contextlib.contextmanager
def without_tensorflow() -> Iterator[None]:
    """Within the block (in this thread), `gfile()` is `LocalFiles`: the layout's readers check
    and read local runs through `os`, never importing TensorFlow.

    Example:
        with without_tensorflow():
            manifest = load_shards(run, "train")
    """
    token = _WITHOUT_TENSORFLOW.set(True)
    try:
        yield
    finally:
        _WITHOUT_TENSORFLOW.reset(token)


def create(path: str) -> IO[bytes]:
    """Opens `path` for writing, uncompressed whatever its name.

    Args:
        path: Any path the file system writes (local, gs://, ...). A local parent folder is made.

    Returns:
        A binary file object; the file is complete once it is closed.

    Example:
        with create(path) as f:
            f.write(data)
    """
    if has_beam():
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        gfile().makedirs(parent)
    file = gfile().GFile(path, "wb")
    # GFile makes the file at its first write: an empty shard would not exist once closed.
    file.write(b"")
    return file


def replace(source: str, target: str) -> None:
    """Renames `source` to `target`, replacing a file at `target`.

    Args:
        source: the file written (e.g. under a temporary name).
        target: its final path.

    Raises:
        OSError (`BeamIOError` with Beam): the rename failed and `target` does not exist.
    """
    if not has_beam():
        gfile().rename(source, target, overwrite=True)
        return
    from apache_beam.io.filesystem import BeamIOError
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.rename([source], [target])  # replaces `target` locally and on object stores
    except BeamIOError:
        if not FileSystems.exists(target):
            raise
        FileSystems.delete([target])  # file systems whose rename refuses to replace (HDFS)
        FileSystems.rename([source], [target])


def size(path: str) -> int:
    """The size of the file at `path`, in bytes.

    Not a glob match (`FileSystems.match`): run folders may hold `[` or `*` in their names.

    Args:
        path: any path the file system reads (local, gs://, ...).

    Returns:
        The file's size in bytes.
    """
    if not has_beam():
        return int(gfile().stat(path).length)
    from apache_beam.io.filesystems import FileSystems

    return int(FileSystems.get_filesystem(path).size(path))


def read_at(path: str, positions: list[int], length: int) -> bytes:
    """`length` bytes at each of `positions` of the file at `path`, concatenated in order.

    Args:
        path: any path the file system reads (local, gs://, ...).
        positions: byte offsets in the file, read in this order.
        length: the bytes read at each position (fewer where the file ends first).

    Returns:
        The bytes read, concatenated in the order of `positions` (b"" for no positions).

    Example:
        headers = read_at(shard_path, [0, 4096], 12)
    """
    if not positions:
        return b""
    if has_beam():
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        opened = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    else:
        opened = gfile().GFile(path, "rb")
    with opened as f:
        parts = []
        for position in positions:
            f.seek(position)
            parts.append(f.read(length))
    return b"".join(parts)
