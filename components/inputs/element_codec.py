"""Elements <-> `tf.train.Example` records: the default encoding of `sources.record_store_from`.

Each component of the element structure is one bytes feature, keyed by its structure path.
Numeric tensors are stored as raw little-endian bytes in C order and decoded with one vectorized
op per batch; scalar strings as they are. A component whose first dimension varies between
elements (audio of any length) comes back as a `tf.RaggedTensor` [B, None, ...].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import examples
from tfx_dynamic_inputs.inputs.graph_functions import as_written

SINGLE_KEY = "value"


@dataclasses.dataclass(frozen=True)
class Component:
    """One component of an element: one bytes feature of its Example.

    Args:
      key: the feature key, the component's structure path ("a/0"; `SINGLE_KEY` for a single
        tensor).
      dtype: the component's dtype.
      shape: its shape in one element; None for a dimension that varies (only the first may,
        for decoding).
    """

    key: str
    dtype: tf.DType
    shape: tuple[int | None, ...]


def tensor_parser(components: Sequence[Component] | tf.TypeSpec | object) -> Callable:
    """The batched decoder of records written by the default encoder (`ExampleEncoder`).

    Args:
      components: an element spec (a structure of `tf.TensorSpec`) or the encoder's
        `components()`.

    Returns:
      A function of tf.string [B] (serialized Examples) -> the element structure, each
      component with a leading dimension B (its dtype; a component whose first dimension is
      None comes back as a `tf.RaggedTensor` [B, None, ...]).

    Raises:
      ValueError: a component with an unknown dimension after the first.
      TypeError: a spec component that is not a `tf.TensorSpec`.

    Example:

        spec = {"x": tf.TensorSpec([3], tf.float32), "y": tf.TensorSpec([], tf.int64)}
        tensor_parser(spec)(records)["x"]  # float32 [B, 3]; records: tf.string [B]
    """
    if not (isinstance(components, list) and components and isinstance(components[0], Component)):
        components = components_of_spec(components)
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

    return as_written(parse)


def declared_components(source) -> list[Component]:
    """The components of a dataset's or arrays' elements, known before reading any.

    Args:
      source: a `tf.data.Dataset`, or a structure of arrays whose first dimension indexes the
        elements.

    Returns:
      One `Component` per leaf, in `tf.nest.flatten` order.

    Raises:
      TypeError: a dataset component that is not a dense tensor.
    """
    if isinstance(source, tf.data.Dataset):
        return components_of_spec(source.element_spec)
    flat = tf.nest.flatten(source)
    specs = []
    for x in flat:
        array = np.asarray(x)
        dtype = tf.string if array.dtype.kind in "SOU" else tf.as_dtype(array.dtype)
        specs.append(tf.TensorSpec(array.shape[1:], dtype))
    return components_of_spec(tf.nest.pack_sequence_as(source, specs))


def components_of_spec(spec) -> list[Component]:
    """The components of an element spec.

    Args:
      spec: a structure (dicts, tuples, lists) of `tf.TensorSpec`.

    Returns:
      One `Component` per leaf, in `tf.nest.flatten` order, keyed by its "/"-joined path.

    Raises:
      TypeError: a leaf that is not a `tf.TensorSpec` (ragged, sparse, ...).
    """
    paths = _flatten_with_paths(spec)
    components = []
    for path, leaf in paths:
        if not isinstance(leaf, tf.TensorSpec):
            raise TypeError(
                f"element component {path or SINGLE_KEY!r} is {leaf}; only dense tensors are "
                "stored by default (give encode_fn and parse_fn for others)"
            )
        components.append(Component(path or SINGLE_KEY, leaf.dtype, tuple(leaf.shape.as_list())))
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


def _structure_of(components: Sequence[Component]):
    """Rebuilds a nested structure (dicts / lists keyed by path) from component keys."""
    if len(components) == 1 and components[0].key == SINGLE_KEY:
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

# Rows `ExampleEncoder.encode_rows` makes records of at once (their layout copied that often).
ROWS_PER_BLOCK = 4096


class ExampleEncoder:
    """Encodes elements as Examples, one bytes feature per component.

    Records the observed shape of each component, widening a dimension to None when it varies
    between elements, so the decoder knows which components are ragged.

    Args:
      declared: the components elements must have (`declared_components`), or None to take
        them from the first element.
    """

    def __init__(self, declared: list[Component] | None):
        self._declared = {c.key: c for c in declared} if declared is not None else None
        self._observed: dict[str, Component] = {}

    def encode(self, element) -> bytes:
        """Encodes one element.

        Args:
          element: a tensor, array or scalar, or a structure (dicts, tuples, lists) of them:
            numeric of any shape, strings scalar only.

        Returns:
          The serialized `tf.train.Example`.

        Raises:
          ValueError: a string that is not a scalar, a component not declared or missing, or
            one whose dtype or rank differs from the elements before.
        """
        if isinstance(element, (tf.Tensor, np.ndarray, np.generic, bytes, str, int, float)):
            flat = [(SINGLE_KEY, element)]
        else:
            flat = [(path or SINGLE_KEY, value) for path, value in _flatten_with_paths(element)]
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

    def encode_rows(self, arrays: Sequence[np.ndarray]) -> Iterator[bytes]:
        """The records of the rows of numeric arrays: record `i` holds row `i` of each array as
        its declared component, the same bytes as `encode` of that element.

        Every row has the same components, so every record the same layout: only the component
        bytes differ, at fixed places. The records are made a block of `ROWS_PER_BLOCK` rows at
        a time by writing those bytes into copies of the layout (NumPy), not element by element
        (about 37 us an element through `encode`).

        Args:
          arrays: numeric arrays with a common first dimension, one per declared component, in
            their order (`declared_components` of the arrays' structure).

        Yields:
          The serialized `tf.train.Example` of each row, in order.

        Raises:
          ValueError: an encoder without declared components, an array count other than theirs,
            a string array, or the errors of `encode` (a component that differs from the
            elements before).

        Example:

            arrays = [np.zeros([3, 2], np.float32)]
            records = list(ExampleEncoder(declared_components(arrays[0])).encode_rows(arrays))
        """
        if self._declared is None:
            raise ValueError("encode_rows needs the encoder's components declared")
        keys = list(self._declared)
        if len(arrays) != len(keys):
            raise ValueError(f"{len(arrays)} arrays for the {len(keys)} components {keys}")
        num_rows = len(arrays[0])
        if not num_rows:
            return
        for key, array in zip(keys, arrays, strict=True):
            if self._observe(key, np.asarray(array[0])).dtype == tf.string:
                raise ValueError(f"component {key!r}: encode_rows takes numeric arrays only")
        # The component bytes of each row, as `_component_bytes` makes them, in the records'
        # order of features (their keys' UTF-8 bytes, as `examples.serialize_example` sorts).
        order = sorted(range(len(keys)), key=lambda i: keys[i].encode("utf-8"))
        row_bytes = [
            _little_endian(arrays[i]).reshape(len(arrays[i]), -1).view(np.uint8) for i in order
        ]
        widths = {keys[i]: rows.shape[1] for i, rows in zip(order, row_bytes, strict=True)}
        # Two records whose component bytes are all 0x00 and all 0xff differ exactly there.
        zeros, ones = (
            np.frombuffer(
                examples.serialize_example(
                    {key: examples.bytes_feature(fill * width) for key, width in widths.items()}
                ),
                np.uint8,
            )
            for fill in (b"\x00", b"\xff")
        )
        component_at = np.flatnonzero(zeros != ones)
        for start in range(0, num_rows, ROWS_PER_BLOCK):
            stop = min(start + ROWS_PER_BLOCK, num_rows)
            records = np.repeat(zeros[None], stop - start, axis=0)
            records[:, component_at] = np.concatenate([rows[start:stop] for rows in row_bytes], 1)
            yield from (record.tobytes() for record in records)

    def components(self) -> list[Component]:
        """The components seen so far, a dimension None where it varied (for `tensor_parser`).

        Returns:
          One `Component` per key: the declared keys in order, else those observed.
        """
        keys = self._declared if self._declared is not None else self._observed
        return [self._observed[key] for key in keys]

    def _observe(self, key: str, array: np.ndarray) -> Component:
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
        component = Component(key, dtype, shape)
        self._observed[key] = component
        return component


def _as_array(value) -> np.ndarray:
    if isinstance(value, tf.Tensor):
        value = value.numpy()
    if isinstance(value, (bytes, str)):
        # Not np.asarray: fixed-width bytes arrays drop trailing NULs.
        return np.array(value, dtype=object)
    return np.asarray(value)


def _component_bytes(array: np.ndarray, component: Component) -> bytes:
    if component.dtype == tf.string:
        item = array.item()
        return item.encode() if isinstance(item, str) else bytes(item)
    return _little_endian(array).tobytes()


def _little_endian(array: np.ndarray) -> np.ndarray:
    """`array` in C order and little-endian bytes, the stored form of a numeric component; a
    bool is stored as byte 0 or 1 (a bool array viewed from other bytes may hold any byte)."""
    if array.dtype.kind == "b":
        return np.ascontiguousarray(array).view(np.uint8) != 0
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)


# --------------------------------------------------------------------------------- decoding


def _decode(encoded: tf.Tensor, c: Component):
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
