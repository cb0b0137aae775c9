"""`tf.train.Example` payloads decoded to NumPy without TensorFlow, through our own messages
(`example_pb2`), as `tf.io.parse_example` parses them one at a time.

* `FixedFeature`: a feature of a fixed number of values (`tf.io.FixedLenFeature`'s counterpart);
  `ExampleDecoder`: payload -> {name: value} for a spec of them;
* `AudioDecoder`, `ImageDecoder`: the records of an audio run (int16 PCM) and of a pairs run
  (raw uint8 pixels), decoded as the TensorFlow parsers read them (`parse_audio_examples`,
  `image_example_parser`'s raw path).

A payload that is not an Example of the spec raises `ExampleError` with the reason; the
readers make it a damaged record (`on_damaged`). The decoders are frozen dataclasses: they
pickle into Grain's worker processes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
from google.protobuf.message import DecodeError

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records import example_pb2

# Each kind of feature value and the `Feature` field (oneof `kind`) that holds it.
KINDS = {"bytes": "bytes_list", "int64": "int64_list", "float": "float_list"}

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_ARRAY_DTYPES = {"int64": np.int64, "float": np.float32}

# What a decoded value is: bytes (one bytes value), or an array of the feature's shape.
Value = bytes | np.ndarray


class ExampleError(ValueError):
    """A payload is not a `tf.train.Example` of the spec: the message says why."""


@dataclasses.dataclass(frozen=True)
class FixedFeature:
    """A feature that holds `prod(shape)` values of one kind in every record, or is absent where
    a `default` stands in (`tf.io.FixedLenFeature`); checked when built.

    Args:
      kind: "bytes", "int64" or "float".
      shape: the shape of its values, e.g. `()` for one value.
      default: the value of every entry where a record lacks the feature (an empty list of
        its kind is not lacking it: as for TensorFlow, it holds 0 values); None: the feature
        is required.

    Raises:
      ValueError, TypeError: an unknown kind, a negative or non-integer dimension, or a
        default that is not a value of the kind.

    Example:

        FixedFeature("int64", default=-1)
    """

    kind: str
    shape: tuple[int, ...] = ()
    default: bytes | int | float | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r:.100}")
        if not isinstance(self.shape, tuple) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in self.shape
        ):
            raise TypeError(f"shape must be a tuple of integers >= 0, got {self.shape!r:.100}")
        if self.default is not None and not _is_value(self.kind, self.default):
            raise TypeError(f"default {self.default!r:.100} is not a {self.kind} value")

    @property
    def size(self) -> int:
        """How many values a record holds: the product of `shape`."""
        return math.prod(self.shape)


def _is_value(kind: str, value: object) -> bool:
    if kind == "bytes":
        return isinstance(value, bytes)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "int64":
        return isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX
    return True  # any real number is a float32 value (rounded, as TensorFlow takes it)


@dataclasses.dataclass(frozen=True)
class ExampleDecoder:
    """Decodes a `tf.train.Example` payload to `{name: value}` for a spec of `FixedFeature`s.

    A value is `bytes` for one bytes value, an object array of `bytes` for several, int64 or
    float32 arrays of the feature's shape for numbers; as `tf.io.parse_example` gives them.

    Args:
      features: (name, feature) pairs; `ExampleDecoder.of` builds them from a mapping.

    Example:

        decode = ExampleDecoder.of({"label": FixedFeature("int64", default=-1)})
        decode(payload)["label"]  # array(3)
    """

    features: tuple[tuple[str, FixedFeature], ...]

    @classmethod
    def of(cls, spec: Mapping[str, FixedFeature]) -> ExampleDecoder:
        """The decoder of `spec`.

        Args:
          spec: feature name -> `FixedFeature`.

        Returns:
          The decoder.

        Raises:
          TypeError: a name that is not a string, or an entry that is not a `FixedFeature`.
        """
        for name, feature in spec.items():
            if not isinstance(name, str) or not isinstance(feature, FixedFeature):
                raise TypeError(
                    f"a spec maps feature names to FixedFeature, got {name!r:.100}: "
                    f"{feature!r:.100}"
                )
        return cls(tuple(sorted(spec.items())))

    def __call__(self, payload: bytes) -> dict[str, Value]:
        """The features of one payload.

        Args:
          payload: a serialized `tf.train.Example`.

        Returns:
          Feature name -> value.

        Raises:
          ExampleError: `payload` is not an Example, or a feature of the spec is of another
            kind, is missing without a default, or holds another number of values.
        """
        try:
            example = example_pb2.Example.FromString(payload)
        except DecodeError as error:
            raise ExampleError(f"not a tf.train.Example ({error})") from None
        stored = example.features.feature
        return {name: _value(name, feature, stored) for name, feature in self.features}


def _value(name: str, feature: FixedFeature, stored) -> Value:
    # As TensorFlow's parser: the default stands in for a feature the record does not hold, or
    # holds as a `Feature` of no kind; a list of the kind must hold exactly `size` values, even
    # an empty one.
    found = stored[name].WhichOneof("kind") if name in stored else None
    if found is not None:
        if found != KINDS[feature.kind]:
            raise ExampleError(f"feature {name!r} is a {found}, not a {KINDS[feature.kind]}")
        values = list(getattr(stored[name], found).value)
        if len(values) != feature.size:
            raise ExampleError(f"feature {name!r} holds {len(values)} values, not {feature.size}")
    elif feature.default is None:
        raise ExampleError(f"tf.train.Example lacks feature {name!r}")
    else:
        values = [feature.default] * feature.size
    if feature.kind == "bytes":
        if feature.shape == ():
            return values[0]
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(feature.shape)
    return np.array(values, _ARRAY_DTYPES[feature.kind]).reshape(feature.shape)


@dataclasses.dataclass(frozen=True)
class AudioDecoder:
    """Decodes an audio run's record as `parse_audio_examples` reads it.

    Args:
      sample_rate: the rate of a record without a `sample_rate` feature (the run's).

    Returns (when called on a payload):
      ``audio`` int16 [n] (the little-endian PCM), ``sample_rate`` and ``label`` int64 scalars
      (-1 without a label), ``id`` bytes (b"" without one).

    Example:

        AudioDecoder(16000)(payload)["audio"]  # int16 [n]
    """

    sample_rate: int
    _features: ExampleDecoder = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if isinstance(self.sample_rate, bool) or not isinstance(self.sample_rate, int):
            raise TypeError(f"sample_rate must be an integer, got {self.sample_rate!r:.100}")
        if not 0 < self.sample_rate <= _INT64_MAX:
            raise ValueError(f"sample_rate must be > 0, got {self.sample_rate}")
        features = ExampleDecoder.of(
            {
                layout.AUDIO_KEY: FixedFeature("bytes"),
                layout.SAMPLE_RATE_KEY: FixedFeature("int64", default=self.sample_rate),
                layout.LABEL_KEY: FixedFeature("int64", default=-1),
                layout.ID_KEY: FixedFeature("bytes", default=b""),
            }
        )
        object.__setattr__(self, "_features", features)  # frozen: set once, here

    def __call__(self, payload: bytes) -> dict[str, Value]:
        """The features of one audio record (see the class).

        Args:
          payload: a serialized `tf.train.Example` of an audio run.

        Returns:
          ``audio``, ``sample_rate``, ``label`` and ``id``.

        Raises:
          ExampleError: not an Example with an ``audio`` feature of whole int16 samples.
        """
        decoded = self._features(payload)
        pcm = decoded[layout.AUDIO_KEY]
        if len(pcm) % 2:
            raise ExampleError(f"audio feature holds {len(pcm)} bytes, not whole int16 samples")
        decoded[layout.AUDIO_KEY] = np.frombuffer(pcm, "<i2").astype(np.int16)
        return decoded


@dataclasses.dataclass(frozen=True)
class ImageDecoder:
    """Decodes a pairs run's record: raw pixels to uint8 [height, width, channels], as
    `image_example_parser` reads them before converting them to its `ImageSpec`.

    Returns (when called on a payload):
      ``image`` uint8 [h, w, c] for a raw image, else the encoded file's bytes (PNG, JPEG: to
      decode with an image library); ``image_format`` bytes (b"raw", b"png", b"jpeg"); ``id``
      bytes (b"" without one).

    Example:

        ImageDecoder()(payload)["image"].shape  # (64, 64, 3)
    """

    def __call__(self, payload: bytes) -> dict[str, Value]:
        """The features of one image record (see the class).

        Args:
          payload: a serialized `tf.train.Example` of a pairs run.

        Returns:
          ``image``, ``image_format`` and ``id``.

        Raises:
          ExampleError: not an Example with an ``image``, or a raw image whose bytes are not
            height x width x channels.
        """
        decoded = _IMAGE_FEATURES(payload)
        shape = [int(decoded.pop(key)) for key in _IMAGE_DIMS]
        if decoded[layout.IMAGE_FORMAT_KEY] == b"raw":
            pixels = decoded[layout.IMAGE_KEY]
            if min(shape) < 1 or len(pixels) != math.prod(shape):
                raise ExampleError(
                    f"raw image of {len(pixels)} bytes is not height x width x channels "
                    f"{'x'.join(map(str, shape))}"
                )
            decoded[layout.IMAGE_KEY] = np.frombuffer(pixels, np.uint8).reshape(shape).copy()
        return decoded


_IMAGE_DIMS = (layout.HEIGHT_KEY, layout.WIDTH_KEY, layout.CHANNELS_KEY)
# What `image_example_spec` parses, with its defaults.
_IMAGE_FEATURES = ExampleDecoder.of(
    {
        layout.ID_KEY: FixedFeature("bytes", default=b""),
        layout.IMAGE_KEY: FixedFeature("bytes"),
        layout.IMAGE_FORMAT_KEY: FixedFeature("bytes", default=b"raw"),
        **{key: FixedFeature("int64", default=0) for key in _IMAGE_DIMS},
    }
)
