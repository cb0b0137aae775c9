"""Batched parsing of materialized records into tensors, and payload checks for the record store.

A *parse function* maps tf.string [B] (serialized records) to a structure of tensors with leading
dimension B. The samplers call it once per batch, inside `Dataset.map`.

`tf.io.parse_example` fails a whole batch, naming no record, when one record is not an Example
(its message holds the raw bytes, which TensorFlow then fails to decode as UTF-8). An
`ExampleGuard` checks every record a sampler reads once, before its batch is parsed: a record
that is not an Example the parser can read is a damaged record (record number, shard, offset),
failed or skipped as the store's `on_damaged` says.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.damaged_records import (
    DamagedRecord,
    DamagedRecordError,
    damage_message,
)
from tfx_dynamic_inputs.inputs.graph_functions import as_written
from tfx_dynamic_inputs.inputs.variables import index_variable

ParseFn = Callable[[tf.Tensor], object]

_IMAGE_DTYPES = (tf.uint8, tf.float16, tf.bfloat16, tf.float32)


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """The fixed shape and dtype images are decoded to; checked when built.

    Images of another size are resized (bilinear), of another channel count converted
    (grey <-> RGB, alpha dropped). Floating dtypes hold values in [0, 1].

    Args:
      height, width: the image size in pixels (>= 1).
      channels: 1 (grey) or 3 (RGB).
      dtype: tf.uint8, tf.float16, tf.bfloat16 or tf.float32.

    Raises:
      ValueError: a size below 1, another channel count or another dtype.

    Example:

        ImageSpec(224, 224, 3, tf.float32).shape  # (224, 224, 3)
    """

    height: int
    width: int
    channels: int = 3
    dtype: tf.DType = tf.uint8

    def __post_init__(self):
        if min(self.height, self.width) < 1:
            raise ValueError(f"image height and width must be >= 1, got {self.height}x{self.width}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels}")
        if tf.as_dtype(self.dtype) not in _IMAGE_DTYPES:
            raise ValueError(f"dtype must be one of {[d.name for d in _IMAGE_DTYPES]}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """`(height, width, channels)`."""
        return (self.height, self.width, self.channels)


def image_example_spec(image_key: str = layout.IMAGE_KEY) -> dict[str, tf.io.FixedLenFeature]:
    """The features `image_example_parser` parses (only the image bytes are required).

    Args:
      image_key: the feature that holds the encoded image.

    Returns:
      A `tf.io.parse_example` spec: `image_key` (tf.string, required), and with defaults
      ``id`` (tf.string), ``image_format`` (tf.string, b"raw"), ``height``, ``width``,
      ``channels`` (int64, 0).
    """
    return {
        layout.ID_KEY: tf.io.FixedLenFeature([], tf.string, default_value=b""),
        image_key: tf.io.FixedLenFeature([], tf.string),
        layout.IMAGE_FORMAT_KEY: tf.io.FixedLenFeature([], tf.string, default_value=b"raw"),
        layout.HEIGHT_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0),
        layout.WIDTH_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0),
        layout.CHANNELS_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0),
    }


# The features `audio_features.parse_audio_examples` parses (the defaults stand for its own).
AUDIO_EXAMPLE_SPEC = {
    layout.AUDIO_KEY: tf.io.FixedLenFeature([], tf.string),
    layout.SAMPLE_RATE_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0),
    layout.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=-1),
}


def image_example_parser(image: ImageSpec, *, image_key: str = layout.IMAGE_KEY) -> ParseFn:
    """A parse function of image Examples: tf.string [B] -> images `image.dtype` [B, H, W, C].

    Reads the layout's image features (`image`, `image_format`, `height`, `width`,
    `channels`, and `id` for error messages). A batch whose images are all raw pixels of exactly
    the target shape is decoded with one vectorized op; other batches decode image by image
    (PNG, JPEG, raw).

    Args:
      image: the shape and dtype to decode to (resized and converted as `ImageSpec` says).
      image_key: the feature that holds the encoded image.

    Returns:
      The parse function.

    Raises:
      tf.errors.InvalidArgumentError: when the parse function runs, for an image that cannot
        take the target shape (raw bytes that are not height x width x channels, more than 4
        channels), naming its record id; or a record that lacks `image_key`.

    Example:

        parse = image_example_parser(ImageSpec(64, 64, 3, tf.float32))
        parse(records)  # float32 [B, 64, 64, 3] in [0, 1]; records: tf.string [B]
    """
    target_pixels = image.height * image.width * image.channels
    features = image_example_spec(image_key)

    def decode_one(record_id, encoded, image_format, height, width, channels):
        def raw():
            pixels = tf.io.decode_raw(encoded, tf.uint8)
            shape = tf.stack([height, width, channels])
            check = tf.debugging.Assert(
                tf.equal(tf.size(pixels, out_type=tf.int64), tf.reduce_prod(shape)),
                [
                    "image record",
                    record_id,
                    "holds",
                    tf.size(pixels),
                    "raw bytes, not height x width x channels of",
                    shape,
                ],
                summarize=3,
            )
            with tf.control_dependencies([check]):
                return tf.reshape(pixels, shape)

        def compressed():
            return tf.io.decode_image(encoded, channels=0, expand_animations=False)

        decoded = tf.cond(tf.equal(image_format, b"raw"), raw, compressed)
        return to_image_spec(decoded, image, record_id)

    def parse(serialized: tf.Tensor) -> tf.Tensor:
        parsed = tf.io.parse_example(serialized, features)
        encoded = parsed[image_key]
        exact_raw = tf.reduce_all(
            [
                tf.reduce_all(tf.equal(parsed[layout.IMAGE_FORMAT_KEY], b"raw")),
                tf.reduce_all(tf.equal(tf.strings.length(encoded), target_pixels)),
                tf.reduce_all(tf.equal(parsed[layout.HEIGHT_KEY], image.height)),
                tf.reduce_all(tf.equal(parsed[layout.WIDTH_KEY], image.width)),
                tf.reduce_all(tf.equal(parsed[layout.CHANNELS_KEY], image.channels)),
            ]
        )

        def vectorized():
            pixels = tf.io.decode_raw(encoded, tf.uint8)
            pixels = tf.reshape(pixels, [-1, *image.shape])
            return tf.image.convert_image_dtype(pixels, image.dtype)

        def one_by_one():
            return tf.map_fn(
                lambda args: decode_one(*args),
                (
                    parsed[layout.ID_KEY],
                    encoded,
                    parsed[layout.IMAGE_FORMAT_KEY],
                    parsed[layout.HEIGHT_KEY],
                    parsed[layout.WIDTH_KEY],
                    parsed[layout.CHANNELS_KEY],
                ),
                fn_output_signature=tf.TensorSpec(image.shape, image.dtype),
            )

        images = tf.cond(exact_raw, vectorized, one_by_one)
        return tf.ensure_shape(images, [None, *image.shape])

    return as_written(parse)


def to_image_spec(decoded: tf.Tensor, image: ImageSpec, record_id: tf.Tensor) -> tf.Tensor:
    """Converts a decoded image (or a batch of them) to the spec's size, channels and dtype.

    Args:
      decoded: uint8 [h, w, c] with c in 1 to 4 (grey, grey + alpha, RGB, RGBA), or a batch
        uint8 [B, h, w, c] (what a serving signature takes).
      image: the target spec.
      record_id: tf.string scalar, named in the error.

    Returns:
      `image.dtype` [H, W, C], or [B, H, W, C] for a batch.

    Raises:
      tf.errors.InvalidArgumentError: when run, for an image of another channel count, naming
        `record_id` (instead of a shape error deep in the batch that names no record).
    """
    channels = tf.shape(decoded)[-1]
    check = tf.debugging.Assert(
        tf.logical_and(channels >= 1, channels <= 4),
        [
            "image record",
            record_id,
            "decodes to shape",
            tf.shape(decoded),
            f"but ImageSpec {image.shape} takes images of 1 to 4 channels (grey, grey + alpha, "
            "RGB, RGBA)",
        ],
    )
    with tf.control_dependencies([check]):
        is_grey = channels <= 2  # grey, or grey + alpha (whose alpha is dropped)
    if image.channels == 3:
        decoded = tf.cond(
            is_grey,
            lambda: tf.image.grayscale_to_rgb(decoded[..., :1]),
            lambda: decoded[..., :3],
        )
    else:
        decoded = tf.cond(
            is_grey,
            lambda: decoded[..., :1],
            lambda: tf.image.rgb_to_grayscale(decoded[..., :3]),
        )
    as_float = tf.image.convert_image_dtype(decoded, tf.float32)
    resized = tf.image.resize(as_float, [image.height, image.width])
    resized = tf.clip_by_value(resized, 0.0, 1.0)
    return tf.ensure_shape(
        tf.image.convert_image_dtype(resized, image.dtype, saturate=True),
        [None] * (decoded.shape.rank - 3) + list(image.shape),
    )


def example_check(required_keys: Sequence[str] = ()) -> Callable[[bytes], str | None]:
    """A record-store payload check: is the payload a `tf.train.Example` with these features.

    Raw images (`image_format` b"raw") must also hold `height * width * channels` bytes.

    Args:
      required_keys: the features every record must hold.

    Returns:
      The check: payload bytes -> None for a good payload, else the reason (a str).

    Example:

        store = RecordStore.open(output_dir, "x", payload_check=example_check(["image"]))
    """
    required = tuple(required_keys)

    def check(payload: bytes) -> str | None:
        try:
            example = tf.train.Example.FromString(payload)
        except DecodeError as error:
            return f"unparsable tf.train.Example ({error})"
        feature = example.features.feature
        missing = [key for key in required if key not in feature]
        if missing:
            return f"tf.train.Example lacks feature(s) {missing}"
        if layout.IMAGE_FORMAT_KEY in feature and layout.IMAGE_KEY in feature:
            image_format = feature[layout.IMAGE_FORMAT_KEY].bytes_list.value
            if list(image_format) == [b"raw"]:
                dims = [
                    list(feature[key].int64_list.value) if key in feature else []
                    for key in (layout.HEIGHT_KEY, layout.WIDTH_KEY, layout.CHANNELS_KEY)
                ]
                if any(len(d) != 1 for d in dims):
                    return "raw image without height, width and channels"
                (height,), (width,), (channels,) = dims
                data = feature[layout.IMAGE_KEY].bytes_list.value
                if len(data) != 1 or len(data[0]) != height * width * channels:
                    return f"raw image bytes do not match {height}x{width}x{channels}"
        return None

    return check


# The `Feature` kind `tf.io.parse_example` reads each dtype from.
_KINDS = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}


def example_problem(payload: bytes, spec: Mapping[str, object]) -> str | None:
    """Why `tf.io.parse_example` would refuse `payload` under `spec`, or None.

    As TensorFlow's parser reads a record: a feature it lacks, or holds as a `Feature` of no
    kind, takes its default; a list of a kind holds the record's values, even an empty list.

    Args:
      payload: one serialized record.
      spec: a `tf.io.parse_example` feature spec; its `FixedLenFeature`, `VarLenFeature` and
        `FixedLenSequenceFeature` entries of tf.string, tf.int64 or tf.float32 are checked.

    Returns:
      None, or the reason: not a `tf.train.Example`; a feature of the spec with a list of
      another kind (bytes, int64, float), even an empty one; a `FixedLenFeature` missing
      without a default (a 0-value shape has none: TensorFlow takes an empty default as none),
      or with a list of another number of values than its shape, even an empty list where a
      default stands; a `FixedLenSequenceFeature` whose values are not a multiple of its shape,
      or missing without `allow_missing`.
    """
    return _problem(payload, _checked_features(spec))


@dataclasses.dataclass(frozen=True)
class _FeatureCheck:
    """What `tf.io.parse_example` asks of one feature of a record."""

    key: str
    kind: str  # the `Feature` field its dtype is read from
    required: bool  # a record without it (or with a `Feature` of no kind) is refused
    size: int | None  # FixedLenFeature: a list of exactly this many values
    stride: int | None  # FixedLenSequenceFeature: a list of a multiple of this many values


def _checked_features(spec: Mapping[str, object]) -> list[_FeatureCheck]:
    checks = []
    for key, entry in spec.items():
        sequence = isinstance(entry, tf.io.FixedLenSequenceFeature)
        if not (sequence or isinstance(entry, tf.io.FixedLenFeature | tf.io.VarLenFeature)):
            continue
        kind = _KINDS.get(tf.as_dtype(entry.dtype))
        if kind is None:  # a dtype that `tf.io.parse_example` refuses when the graph is built
            continue
        if sequence:
            stride = math.prod(entry.shape)
            checks.append(_FeatureCheck(key, kind, not entry.allow_missing, None, stride))
        elif isinstance(entry, tf.io.FixedLenFeature):
            size = math.prod(entry.shape)
            # TensorFlow reads a default of no values (any default of a 0-value shape) as none.
            required = entry.default_value is None or size == 0
            checks.append(_FeatureCheck(key, kind, required, size, None))
        else:
            checks.append(_FeatureCheck(key, kind, False, None, None))
    return checks


def _problem(payload: bytes, checks: list[_FeatureCheck]) -> str | None:
    try:
        example = tf.train.Example.FromString(payload)
    except DecodeError as error:
        return f"not a tf.train.Example ({error})"
    features = example.features.feature
    for check in checks:
        # `in` first: indexing a protobuf map inserts the key.
        found = features[check.key].WhichOneof("kind") if check.key in features else None
        if found is None:
            if check.required:
                return f"tf.train.Example lacks feature {check.key!r}"
            continue
        if found != check.kind:
            return f"feature {check.key!r} is a {found}, not a {check.kind}"
        count = len(getattr(features[check.key], found).value)
        if check.size is not None and count != check.size:
            return f"feature {check.key!r} holds {count} values, not {check.size}"
        if check.stride and count % check.stride:
            return f"feature {check.key!r} holds {count} values, not a multiple of {check.stride}"
    return None


class ExampleGuard:
    """Checks the records a sampler reads from one store against the spec its parser reads,
    before the batch is parsed: each record once (a record that passed, and still passes its
    CRC, is the same bytes), in Python; later reads of it cost one `gather`, no Python.

    A record that fails is a damaged record, `DamagedRecord` naming its record number, shard
    and offset: with the store's `on_damaged="fail"` the read fails naming it
    (`DamagedRecordError`), with `"skip"` it reads as not ok (the sampler leaves its samples
    out and counts them) and is listed in `damaged_records`, with the store's own. Holds one
    byte a record. Not for tf.data service workers (the check calls back into Python).

    Args:
      store: the `RecordStore` the records come from (for `locate`, `on_damaged`).
      spec: the `tf.io.parse_example` feature spec of the parser (see `example_problem`).
    """

    def __init__(self, store, spec: Mapping[str, object]):
        self._store = store
        self._checks = _checked_features(spec)
        self._checked = index_variable(
            tf.zeros([store.num_records], tf.bool), tf.bool, name="examples_checked"
        )
        self._damaged: dict = {}
        self._lock = threading.Lock()

    @property
    def on_damaged(self) -> str:
        """The store's policy: "fail" or "skip"."""
        return self._store.on_damaged

    @property
    def damaged_records(self) -> list:
        """The store's damaged records and those this guard found, by record number."""
        with self._lock:
            found = dict(self._damaged)
        for damaged in self._store.damaged_records:
            found.setdefault(damaged.index, damaged)
        return [found[i] for i in sorted(found)]

    def check(
        self, indices: tf.Tensor, records: tf.Tensor, ok: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks the records of one read that were not checked before.

        Args:
          indices: int64 [B], their record numbers.
          records: tf.string [B], their payloads.
          ok: bool [B], false for records the read already found damaged.

        Returns:
          `(records, ok)`: the same records, available once checked, and `ok` false also
          where a record fails the check.

        Raises:
          tf.errors.OpError: when run, under `on_damaged="fail"`, for records that fail: the
            `DamagedRecordError` the check raises, naming them (record number, shard, offset).
        """
        pending = tf.logical_and(ok, tf.logical_not(tf.gather(self._checked, indices)))

        def check_pending():
            good = tf.numpy_function(
                self._check_records, [indices, records, pending], tf.bool, stateful=True
            )
            good = tf.ensure_shape(good, pending.shape)
            passed = tf.where(tf.logical_and(pending, good))
            update = self._checked.scatter_nd_update(
                tf.gather(indices[:, None], passed[:, 0]), tf.ones_like(passed[:, 0], tf.bool)
            )
            with tf.control_dependencies([update]):
                return tf.logical_and(ok, good)

        checked = tf.cond(tf.reduce_any(pending), check_pending, lambda: tf.identity(ok))
        with tf.control_dependencies([checked]):
            return tf.identity(records), tf.identity(checked)

    def _check_records(
        self, indices: np.ndarray, records: np.ndarray, pending: np.ndarray
    ) -> np.ndarray:
        good = np.ones(len(indices), bool)
        damaged = []
        for i in np.flatnonzero(pending).tolist():
            problem = _problem(records[i], self._checks)
            if problem is None:
                continue
            good[i] = False
            index = int(indices[i])
            where = self._store.locate(index)
            shard, offset = where if where is not None else ("(none: records in memory)", -1)
            damaged.append(DamagedRecord(index, shard, offset, problem))
        if not damaged:
            return good
        if self._store.on_damaged == "fail":
            raise DamagedRecordError(damage_message(damaged))
        with self._lock:
            for d in damaged:
                self._damaged.setdefault(d.index, d)
        return good


def feature_spec_from_schema(schema) -> dict[str, object]:
    """The `tf.io.parse_example` feature spec of a TFMD schema: what TFX components parse with.

    Args:
      schema: a `schema_pb2.Schema`, or the path of a schema.pbtxt such as SchemaGen writes.

    Returns:
      Feature name -> `tf.io.FixedLenFeature` / `VarLenFeature` / ... (`schema_utils`).

    Example:

        spec = feature_spec_from_schema("schemas/image_record.pbtxt")
        tf.io.parse_example(records, spec)
    """
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform.tf_metadata import schema_utils

    if not isinstance(schema, schema_pb2.Schema):
        with tf.io.gfile.GFile(schema) as f:
            schema = text_format.Parse(f.read(), schema_pb2.Schema())
    return dict(schema_utils.schema_as_feature_spec(schema).feature_spec)
