"""Record stores from what users have: datasets, in-memory arrays, or ids plus a load function.

Not every user starts from the Beam job. `record_store_from` turns a `tf.data.Dataset`, arrays /
tensors (or a dict / tuple of them, sliced along the first axis), or a sequence of ids with a
load function into a `RecordStore` whose records are `tf.train.Example`s, one per element, and
attaches the matching batched parse function (`store.parse_fn`). Inputs whose encoded size fits
`memory_budget_bytes` stay in memory; larger ones are written once to indexed TFRecord shards
under `cache_dir` (the `components.layout` of a materialized run) and read from disk, so memory
stays bounded by the budget.

Element encoding: each component of the element structure is one bytes feature, keyed by its
structure path. Numeric tensors are stored as raw little-endian bytes in C order and decoded with
one vectorized op per batch; scalar strings as they are. A component whose first dimension varies
between elements (audio of any length) comes back as a `tf.RaggedTensor` [B, None, ...].
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from components import examples, layout
from components.inputs.record_store import RecordStore

DEFAULT_RECORD_SET = "records"
_SPEC_FILE = "element_spec.json"
_SINGLE_KEY = "value"


@dataclasses.dataclass(frozen=True)
class _Component:
    key: str
    dtype: tf.DType
    shape: tuple[int | None, ...]


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
        encoder = _ExampleEncoder(None if load_fn is not None else _declared_components(source))
        encode_fn = encoder.encode
    sink = _RecordSink(cache_dir, record_set, memory_budget_bytes, shard_bytes)
    try:
        for element in _elements(source, load_fn):
            sink.add(encode_fn(element))
        if sink.count == 0:
            raise ValueError("source has no elements")
        components = encoder.components() if encoder is not None else None
        if components is not None and parse_fn is None:
            parse_fn = tensor_parser(components)
        store = sink.finish(components)
    except BaseException:
        sink.abandon()
        raise
    store.parse_fn = parse_fn
    return store


def tensor_parser(components: Sequence[_Component] | tf.TypeSpec | object) -> Callable:
    """The batched decoder of records written by the default encoder.

    `components` is an element spec (a structure of `tf.TensorSpec`) or the encoder's components.
    Returns tf.string [B] -> the element structure with a leading batch dimension; components
    whose first dimension is unknown come back ragged.
    """
    if not (isinstance(components, list) and components and isinstance(components[0], _Component)):
        components = _components_of_spec(components)
    for c in components:
        if any(d is None for d in c.shape[1:]):
            raise ValueError(
                f"component {c.key!r} has shape {list(c.shape)}: only the first dimension may "
                "vary between elements (give parse_fn to decode it yourself)"
            )
    structure = _structure_of(components)
    features = {c.key: tf.io.FixedLenFeature([], tf.string) for c in components}

    def parse(serialized: tf.Tensor):
        parsed = tf.io.parse_example(serialized, features)
        flat = [_decode(parsed[c.key], c) for c in components]
        return tf.nest.pack_sequence_as(structure, flat)

    return parse


# --------------------------------------------------------------------------------- elements


def _elements(source, load_fn) -> Iterator:
    if load_fn is not None:
        if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
            raise TypeError("with load_fn, source must be a sequence of ids")
        return (load_fn(item) for item in source)
    if isinstance(source, tf.data.Dataset):
        if source.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise ValueError("source dataset is infinite; take() the part to store first")
        return source.as_numpy_iterator()
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
    (length,) = lengths
    return (tf.nest.pack_sequence_as(source, [a[i] for a in arrays]) for i in range(length))


def _declared_components(source) -> list[_Component]:
    """The components of a dataset's or arrays' elements, known before reading any."""
    if isinstance(source, tf.data.Dataset):
        return _components_of_spec(source.element_spec)
    flat = tf.nest.flatten(source)
    specs = []
    for x in flat:
        array = np.asarray(x)
        dtype = tf.string if array.dtype.kind in "SOU" else tf.as_dtype(array.dtype)
        specs.append(tf.TensorSpec(array.shape[1:], dtype))
    return _components_of_spec(tf.nest.pack_sequence_as(source, specs))


def _components_of_spec(spec) -> list[_Component]:
    paths = _flatten_with_paths(spec)
    components = []
    for path, leaf in paths:
        if not isinstance(leaf, tf.TensorSpec):
            raise TypeError(
                f"element component {path or _SINGLE_KEY!r} is {leaf}; only dense tensors are "
                "stored by default (give encode_fn and parse_fn for others)"
            )
        components.append(_Component(path or _SINGLE_KEY, leaf.dtype, tuple(leaf.shape.as_list())))
    return components


def _flatten_with_paths(structure, prefix: str = "") -> list[tuple[str, object]]:
    """[(path, leaf)] in `tf.nest.flatten` order; paths join dict keys and positions with "/"."""
    if isinstance(structure, dict):
        items = [(str(k), structure[k]) for k in sorted(structure)]
    elif isinstance(structure, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(structure)]
    else:
        return [(prefix, structure)]
    flat = []
    for key, value in items:
        flat.extend(_flatten_with_paths(value, f"{prefix}/{key}" if prefix else key))
    return flat


def _structure_of(components: Sequence[_Component]):
    """Rebuilds a nested structure (dicts / lists keyed by path) from component keys."""
    if len(components) == 1 and components[0].key == _SINGLE_KEY:
        return 0
    root: dict = {}
    for i, c in enumerate(components):
        node = root
        *parents, last = c.key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = i
    return _lists_for_integer_keys(root)


def _lists_for_integer_keys(node):
    if not isinstance(node, dict):
        return node
    converted = {k: _lists_for_integer_keys(v) for k, v in node.items()}
    if all(k.isdigit() for k in converted):
        return tuple(converted[str(i)] for i in range(len(converted)))
    return converted


# --------------------------------------------------------------------------------- encoding


class _ExampleEncoder:
    """Encodes elements as Examples, one bytes feature per component.

    Records the observed shape of each component, widening a dimension to None when it varies
    between elements, so the decoder knows which components are ragged.
    """

    def __init__(self, declared: list[_Component] | None):
        self._declared = {c.key: c for c in declared} if declared is not None else None
        self._observed: dict[str, _Component] = {}

    def encode(self, element) -> bytes:
        if isinstance(element, (tf.Tensor, np.ndarray, np.generic, bytes, str, int, float)):
            flat = [(_SINGLE_KEY, element)]
        else:
            flat = [(path or _SINGLE_KEY, value) for path, value in _flatten_with_paths(element)]
        feature = {}
        for key, value in flat:
            array = _as_array(value)
            component = self._observe(key, array)
            feature[key] = examples.bytes_feature(_component_bytes(array, component))
        expected = self._declared if self._declared is not None else self._observed
        if set(feature) != set(expected):
            raise ValueError(
                f"element has components {sorted(feature)}, expected {sorted(expected)}"
            )
        return examples.serialize_example(feature)

    def components(self) -> list[_Component]:
        keys = self._declared if self._declared is not None else self._observed
        return [self._observed[key] for key in keys]

    def _observe(self, key: str, array: np.ndarray) -> _Component:
        dtype = tf.string if array.dtype.kind in "SOU" else tf.as_dtype(array.dtype)
        shape = tuple(array.shape)
        if dtype == tf.string and shape:
            raise ValueError(
                f"component {key!r}: only scalar strings are stored by default, got shape "
                f"{list(shape)} (give encode_fn and parse_fn)"
            )
        reference = self._observed.get(key)
        if reference is None and self._declared is not None:
            reference = self._declared.get(key)
            if reference is None:
                raise ValueError(f"unexpected element component {key!r}")
        if reference is not None:
            if reference.dtype != dtype or len(reference.shape) != len(shape):
                raise ValueError(
                    f"component {key!r} is {dtype.name}{list(shape)}, but elements so far are "
                    f"{reference.dtype.name}{list(reference.shape)}"
                )
            shape = tuple(
                r if r == s else None for r, s in zip(reference.shape, shape, strict=True)
            )
        component = _Component(key, dtype, shape)
        self._observed[key] = component
        return component


def _as_array(value) -> np.ndarray:
    if isinstance(value, tf.Tensor):
        value = value.numpy()
    if isinstance(value, (bytes, str)):
        # Not np.asarray: fixed-width bytes arrays drop trailing NULs.
        return np.array(value, dtype=object)
    return np.asarray(value)


def _component_bytes(array: np.ndarray, component: _Component) -> bytes:
    if component.dtype == tf.string:
        item = array.item()
        return item.encode() if isinstance(item, str) else bytes(item)
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


# --------------------------------------------------------------------------------- decoding


def _decode(encoded: tf.Tensor, c: _Component):
    if c.dtype == tf.string:
        return encoded
    inner = c.shape[1:] if c.shape else ()
    raw_dtype = tf.uint8 if c.dtype == tf.bool else c.dtype
    if c.shape and c.shape[0] is None:
        # Variable first dimension: one decode over the concatenated batch, then split by length.
        item_bytes = raw_dtype.size * int(np.prod(inner, dtype=np.int64))
        values = tf.io.decode_raw(tf.strings.reduce_join(encoded), raw_dtype)
        values = tf.reshape(values, [-1, *inner])
        row_lengths = tf.cast(tf.strings.length(encoded) // item_bytes, tf.int64)
        decoded = tf.RaggedTensor.from_row_lengths(values, row_lengths, validate=False)
        return tf.cast(decoded, tf.bool) if c.dtype == tf.bool else decoded
    decoded = tf.reshape(tf.io.decode_raw(encoded, raw_dtype), [-1, *c.shape])
    return tf.cast(decoded, tf.bool) if c.dtype == tf.bool else decoded


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

    def finish(self, components: list[_Component] | None) -> RecordStore:
        if not self._shard_paths:
            return RecordStore.from_serialized(
                np.array(self._pending, dtype=object), record_set=self._record_set
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
        store = RecordStore.open(output_dir, self._record_set, backend="disk")
        if self._temporary:
            weakref.finalize(store, shutil.rmtree, output_dir, True)
        return store


def _cache_complete(cache_dir: str, record_set: str) -> bool:
    return tf.io.gfile.exists(
        os.path.join(layout.index_dir(cache_dir, record_set), layout.SHARDS_FILE)
    )


def _open_cache(cache_dir, record_set, encode_fn, parse_fn) -> RecordStore:
    store = RecordStore.open(cache_dir, record_set, backend="disk")
    spec_path = os.path.join(layout.index_dir(cache_dir, record_set), _SPEC_FILE)
    if parse_fn is None and encode_fn is None and tf.io.gfile.exists(spec_path):
        components = [
            _Component(c["key"], tf.as_dtype(c["dtype"]), tuple(c["shape"]))
            for c in layout.load_json(spec_path)
        ]
        parse_fn = tensor_parser(components)
    store.parse_fn = parse_fn
    return store
