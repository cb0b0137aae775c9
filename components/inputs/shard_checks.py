"""What the record store's shard checks read through `tf.io.gfile` (any file system the readers
reach): the shard sizes (`shard_sizes`) and the sampled CRCs (`read_crcs`); and `PayloadCheck`.

The checks themselves are `tfx_dynamic_inputs.records`', shared with the reader without
TensorFlow: of frames (`records.frames`: `frame_problem`, `frames_fit`, `past_end`) and of an
offset index and shards at open, and the run a disk reader pins (`records.index_checks`:
`check_offsets`, `check_shard_contents`, `RunPin`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout

# A payload check returns None for a good payload and the reason otherwise.
PayloadCheck = Callable[[bytes], "str | None"]


def shard_sizes(shard_paths: list[str], where: str) -> np.ndarray:
    """The size in bytes of each shard (one stat each).

    Args:
      shard_paths: the shards (any `tf.io.gfile` file system).
      where: the shard list (`shards.json`), named in errors.

    Returns:
      int64 [S].

    Raises:
      FileNotFoundError: a shard does not exist.
      OSError: a shard cannot be stat'ed (permission denied, ...).
      layout.IndexFileError: a shard is a directory.
    """
    sizes = np.zeros(len(shard_paths), np.int64)
    for shard, path in enumerate(shard_paths):
        try:
            stat = tf.io.gfile.stat(path)
        except tf.errors.NotFoundError as error:
            raise FileNotFoundError(f"{where}: shard {shard} not found: {path}") from error
        except tf.errors.OpError as error:  # permission denied, a name too long, ...
            message = f"{where}: cannot stat shard {shard} ({path}): {error.message}"
            raise OSError(message) from error
        if stat.is_directory:
            raise layout.IndexFileError(f"{where}: shard {shard} is a directory: {path}")
        sizes[shard] = stat.length
    return sizes


def read_crcs(path: str, positions: list[int]) -> bytes:
    """`layout.ReadCrcs` through `tf.io.gfile` (any file system the readers reach), for
    `check_shard_contents`.

    Args:
      path: a shard.
      positions: byte positions in it.

    Returns:
      The 4 bytes at each position, joined in order.
    """
    parts = []
    with tf.io.gfile.GFile(path, "rb") as f:
        for position in positions:
            f.seek(position)
            parts.append(f.read(layout.CRC_BYTES))
    return b"".join(parts)
