"""Record stores from what users have (datasets, arrays, ids + a loader), for both samplers.

Not every user starts from the Beam job. `record_store_from` turns a `tf.data.Dataset`, arrays /
tensors (or a dict / tuple of them, sliced along the first axis), or a sequence of ids with a
load function into a `RecordStore` whose records are `tf.train.Example`s, one per element
(`element_codec`), with the matching batched parse function (`store.parse_fn`). Inputs whose
encoded size fits `memory_budget_bytes` stay in memory; larger ones are written once to indexed
TFRecord shards under `cache_dir` (the `tfx_dynamic_inputs.layout` of a materialized run) and read
from disk, so memory stays bounded by the budget. Such a cache is not a run: it has no run id and no
`summary.json` (its `shards.json`, written last, marks it complete, and `cache_dir` may gather
record sets written at different times), and the readers' run checks let it through as it is.

`labelled_sources.labelled_records` builds on it for the class-balanced sampler, whose sources
carry a class per record.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.element_codec import (
    Component,
    ExampleEncoder,
    declared_components,
    tensor_parser,
)
from tfx_dynamic_inputs.inputs.record_store import RecordStore

DEFAULT_RECORD_SET = "records"
_SPEC_FILE = "element_spec.json"


def record_store_from(
    source,
    *,
    load_fn: Callable[[object], object] | None = None,
    encode_fn: Callable[[object], bytes] | None = None,
    parse_fn: Callable[[tf.Tensor], object] | None = None,
    cache_dir: str | None = None,
    record_set: str = DEFAULT_RECORD_SET,
    memory_budget_bytes: int = 1 << 30,
    shard_bytes: int = 64 << 20,
) -> RecordStore:
    """Builds a `RecordStore` over the elements of `source`, in order.

    Args:
      source: a `RecordStore` (returned as is), a `tf.data.Dataset` (finite), an array / tensor
        or a dict / tuple of them with a common first dimension, or, with `load_fn`, a sequence
        of ids.
      load_fn: `load_fn(id)` returns the element of that id (a structure of arrays / tensors).
      encode_fn: element -> serialized record, replacing the default Example encoding; give
        `parse_fn` with it (else `store.parse_fn` is None and records are returned raw).
      parse_fn: tf.string [B] -> batched structure, replacing the default decoder.
      cache_dir: where large inputs are written (`<cache_dir>/examples/Split-<record_set>`,
        `<cache_dir>/index/<record_set>`). An existing complete cache there is reused without
        reading `source`. Default: a temporary directory removed with the store.
      record_set: the record set name inside `cache_dir`.
      memory_budget_bytes: inputs whose encoded records fit stay in memory.
      shard_bytes: target size of one shard when writing to disk.

    Returns:
      A RecordStore with `parse_fn` set: tf.string [B] -> the element structure, batched.

    Raises:
      ValueError: an empty or infinite `source`, or arrays without a common first dimension.
      TypeError: with `load_fn`, a `source` that is not a sequence of ids.

    Example:

        store = record_store_from({"image": images, "label": labels})  # [N, 28, 28], [N]
        batch = store.parse_fn(store.read([0, 1]))  # {"image": uint8 [2, 28, 28], "label": [2]}
    """
    if isinstance(source, RecordStore):
        return source
    if cache_dir is not None and _cache_complete(cache_dir, record_set):
        return _open_cache(cache_dir, record_set, encode_fn, parse_fn)

    if isinstance(source, list) and load_fn is None:
        # A list is a list of elements (rows); object dtype keeps bytes with trailing NULs intact.
        is_text = bool(source) and isinstance(source[0], (bytes, str))
        source = np.array(source, dtype=object if is_text else None)
    encoder = None
    if encode_fn is None:
        encoder = ExampleEncoder(None if load_fn is not None else declared_components(source))
        encode_fn = encoder.encode
    sink = _RecordSink(cache_dir, record_set, memory_budget_bytes, shard_bytes)
    try:
        for record in _records(source, load_fn, encode_fn, encoder):
            sink.add(record)
        if sink.count == 0:
            raise ValueError("source has no elements")
        components = encoder.components() if encoder is not None else None
        if components is not None and parse_fn is None:
            parse_fn = tensor_parser(components)
        return sink.finish(components, parse_fn)
    except BaseException:
        sink.abandon()
        raise


def _records(source, load_fn, encode_fn, encoder: ExampleEncoder | None) -> Iterator[bytes]:
    """The records of `source`'s elements: numeric arrays with the default encoding a block of
    rows at a time (`ExampleEncoder.encode_rows`), anything else element by element."""
    if load_fn is not None:
        if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
            raise TypeError("with load_fn, source must be a sequence of ids")
        return (encode_fn(load_fn(item)) for item in source)
    if isinstance(source, tf.data.Dataset):
        if source.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise ValueError("source dataset is infinite; take() the part to store first")
        return (encode_fn(element) for element in source.as_numpy_iterator())
    arrays = _arrays(source)
    if encoder is not None and all(array.dtype.kind not in "SOU" for array in arrays):
        return encoder.encode_rows(arrays)
    elements = (
        tf.nest.pack_sequence_as(source, [a[i] for a in arrays]) for i in range(len(arrays[0]))
    )
    return (encode_fn(element) for element in elements)


def _arrays(source) -> list[np.ndarray]:
    """The leaves of an array source, checked to share their first dimension."""
    flat = tf.nest.flatten(source)
    if not flat:
        raise ValueError("source is empty")
    arrays = [x.numpy() if isinstance(x, tf.Tensor) else np.asarray(x) for x in flat]
    lengths = {len(a) if a.ndim else -1 for a in arrays}
    if len(lengths) != 1 or -1 in lengths:
        raise ValueError(
            "array sources need a common first dimension (one element per row); got shapes "
            f"{[a.shape for a in arrays]}"
        )
    return arrays


# --------------------------------------------------------------------------------- storage


class _RecordSink:
    """Keeps records in memory until they exceed the budget, then writes shards."""

    def __init__(self, cache_dir, record_set, memory_budget_bytes, shard_bytes):
        self._cache_dir = cache_dir
        self._record_set = record_set
        self._budget = memory_budget_bytes
        self._shard_bytes = shard_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._shard_paths: list[str] = []
        self._offsets: list[np.ndarray] = []
        self._count = 0
        self._temporary = False

    @property
    def count(self) -> int:
        return self._count

    def add(self, record: bytes) -> None:
        self._pending.append(record)
        self._pending_bytes += len(record)
        self._count += 1
        spilled = bool(self._shard_paths)
        if (spilled and self._pending_bytes >= self._shard_bytes) or (
            not spilled and self._pending_bytes > self._budget
        ):
            self._flush()

    def _directory(self) -> str:
        if self._cache_dir is None:
            self._cache_dir = tempfile.mkdtemp(prefix="tfx-dynamic-inputs-")
            self._temporary = True
        return self._cache_dir

    def _flush(self) -> None:
        # The shard count is unknown until the end: shards get their layout names in finish().
        directory = layout.examples_dir(self._directory(), self._record_set)
        while self._pending:
            take, size = 0, 0
            while take < len(self._pending) and (take == 0 or size < self._shard_bytes):
                size += len(self._pending[take])
                take += 1
            shard = len(self._shard_paths)
            path = os.path.join(directory, f"partial-{shard:05d}.tfrecord")
            offsets = layout.write_shard(path, self._pending[:take])
            self._offsets.append(np.column_stack([np.full(take, shard), offsets]))
            self._shard_paths.append(path)
            del self._pending[:take]
        self._pending_bytes = 0

    def abandon(self) -> None:
        if self._temporary:
            shutil.rmtree(self._cache_dir, ignore_errors=True)

    def finish(self, components: list[Component] | None, parse_fn) -> RecordStore:
        if not self._shard_paths:
            return RecordStore.from_serialized(
                np.array(self._pending, dtype=object),
                record_set=self._record_set,
                parse_fn=parse_fn,
            )
        self._flush()
        output_dir = self._cache_dir
        num_shards = len(self._shard_paths)
        shard_paths = []
        for shard, partial in enumerate(self._shard_paths):
            path = os.path.join(os.path.dirname(partial), layout.shard_name(shard, num_shards))
            tf.io.gfile.rename(partial, path, overwrite=True)
            shard_paths.append(path)
        offsets = np.concatenate(self._offsets).astype(np.int64)
        ids = [str(i) for i in range(self._count)]
        if components is not None:
            layout.save_json(
                os.path.join(layout.index_dir(output_dir, self._record_set), _SPEC_FILE),
                [{"key": c.key, "dtype": c.dtype.name, "shape": list(c.shape)} for c in components],
            )
        # shards.json, written last, marks the cache complete.
        layout.save_record_set_index(output_dir, self._record_set, shard_paths, offsets, ids)
        store = RecordStore.open(output_dir, self._record_set, backend="disk", parse_fn=parse_fn)
        if self._temporary:
            weakref.finalize(store, shutil.rmtree, output_dir, True)
        return store


def _cache_complete(cache_dir: str, record_set: str) -> bool:
    return tf.io.gfile.exists(
        os.path.join(layout.index_dir(cache_dir, record_set), layout.SHARDS_FILE)
    )


def _open_cache(cache_dir, record_set, encode_fn, parse_fn) -> RecordStore:
    spec_path = os.path.join(layout.index_dir(cache_dir, record_set), _SPEC_FILE)
    if parse_fn is None and encode_fn is None and tf.io.gfile.exists(spec_path):
        components = [
            Component(c["key"], tf.as_dtype(c["dtype"]), tuple(c["shape"]))
            for c in layout.load_json(spec_path)
        ]
        parse_fn = tensor_parser(components)
    return RecordStore.open(cache_dir, record_set, backend="disk", parse_fn=parse_fn)
