"""The native disk reader: the `ReadRecordsByIndex` op bound to one record set.

`open_native_reader` binds the op (`tfx_dynamic_inputs.native`: C++, no Python per batch) when it is
built and can be used, and otherwise says why the Python reader (`shard_readers.ShardReader`)
reads instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.inputs.shard_checks import PayloadCheck
from tfx_dynamic_inputs.records.index_checks import RunPin

# The native op bound to one record set: int64 [B] -> (tf.string [B] records, tf.bool [B] ok).
NativeRead = Callable[[tf.Tensor], "tuple[tf.Tensor, tf.Tensor]"]


def open_native_reader(
    reader: str,
    shard_paths: list[str],
    offsets: np.ndarray,
    verify_crc: bool,
    payload_check: PayloadCheck | None,
    pin: RunPin,
) -> tuple[NativeRead | None, str | None]:
    """The native reader bound to one record set, when `reader` asks for it and it can be used.

    Args:
      reader: "auto", "native", "mapped" (the native reader over shards mapped into memory) or
        "python".
      shard_paths: the shards, in index order.
      offsets: the offset index, a memory-mapped little-endian int64 [N, 3].
      verify_crc: check each frame's CRCs.
      payload_check: a Python payload check (which rules the native reader out), or None.
      pin: checked by the op each time it is instantiated (every epoch).

    Returns:
      `(read, None)`, `read` int64 [B] -> (tf.string [B], bool [B] ok); or `(None, why)`: the
      Python reader reads, because of `why` (a tf.data service worker cannot run the Python
      reader, so the store says why).

    Raises:
      ValueError: `reader="native"` or `"mapped"` and the native reader cannot be used.
    """
    if reader == "python":
        return None, "the store was opened with reader='python'"
    problem = None
    loaded = native.load_outcome()
    op_module = loaded.module
    if op_module is None:
        problem = "the native op is not built (python -m tfx_dynamic_inputs.native)"
    elif payload_check is not None:
        problem = "a payload_check runs in Python"
    elif not (
        isinstance(offsets, np.memmap)
        and offsets.dtype == np.dtype("<i8")
        and offsets.flags.c_contiguous
    ):
        problem = "the offset index is not a memory-mapped little-endian int64 array"
    if problem is None:
        read = functools.partial(
            op_module.read_records_by_index,
            shard_paths=shard_paths,
            offsets_path=offsets.filename,
            offsets_header_bytes=int(offsets.offset),
            num_records=len(offsets),
            verify_crc=verify_crc,
            map_shards=reader == "mapped",
            shard_bytes=list(pin.shard_bytes),
            run_id=pin.run_id or "",
            summary_path=pin.summary_path,
        )
        return read, None
    if reader in ("native", "mapped"):
        raise ValueError(f"reader={reader!r} cannot be used: {problem}")
    # One warning: the native module's own, when it logged why it did not load the library.
    if op_module is None and loaded.warning is None:
        _warn_not_built()
    return None, problem


@functools.cache
def _warn_not_built() -> None:
    logging.getLogger(__name__).warning(
        "RecordStore disk backend: the native reader is not built, reading with os.pread in "
        "Python (slower). Build it with `python -m tfx_dynamic_inputs.native` (make setup does)."
    )
