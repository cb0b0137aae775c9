"""The trainer components' `input_options`, typed: one frozen option object per trainer.

`PairsTrainer` takes `PairsInputOptions`, `ClassBalancedTrainer` takes
`ClassBalancedInputOptions` (or their fields as a dict); each checks them when the component is
built, so a misspelt or bad option fails in the pipeline file, naming itself (with "did you
mean"), not inside the trainer pod. They travel to the executor as the JSON of the options that
differ from their defaults (`to_json`: a TFX execution parameter is a primitive), and the
executor reads them back through the same class.

Example:

    PairsTrainer(..., input_options=PairsInputOptions(image={"height": 32, "width": 32,
                                                             "channels": 3}))
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfx_dynamic_inputs import component_keys
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, ImageSpec, SpecAugment, StoreOptions
from tfx_dynamic_inputs.inputs.arguments import choice, int_argument
from tfx_dynamic_inputs.inputs.class_plan import EPOCH_MODES
from tfx_dynamic_inputs.inputs.class_report import SMALL_CLASS_POLICIES
from tfx_dynamic_inputs.inputs.pair_plan import REMAINDERS, STRATEGIES
from tfx_dynamic_inputs.inputs.record_store import BACKENDS
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting
from tfx_dynamic_inputs.inputs.speaker_augment import (
    AdditiveNoise,
    Reverberation,
    SpeakerAugmentConfig,
)
from tfx_dynamic_inputs.inputs.valid_pairs import ON_INVALID

_IMAGE_KEYS = ("height", "width", "channels")
# Where `ClassBalancedInputOptions.feature_spec` takes the spec of records that are not audio.
SCHEMA_SPEC = "schema"  # the `schema` channel's spec (`parsing.feature_spec_from_schema`)
TRANSFORMED_SPEC = "transformed"  # records are Transform's output: its transformed_feature_spec
FEATURE_SPECS = (SCHEMA_SPEC, TRANSFORMED_SPEC)


def audio_feature_config(values: Mapping[str, Any] | None) -> AudioFeatureConfig:
    """`AudioFeatureConfig` from its fields as JSON values (`spec_augment` a dict or None).

    Args:
      values: the fields that differ from the defaults; None: the defaults.

    Returns:
      The `AudioFeatureConfig`.

    Raises:
      TypeError: an unknown field. ValueError: a bad value (named).
    """
    fields = dict(values or {})
    spec_augment = fields.pop("spec_augment", None)
    if spec_augment is not None:
        fields["spec_augment"] = SpecAugment(**spec_augment)
    return AudioFeatureConfig(**fields)


@dataclasses.dataclass(frozen=True)
class PairsInputOptions:
    """How `PairsTrainer` reads its pairs.

    Args:
      image: `{"height", "width", "channels"}`: images decode to float32 in [0, 1] of that shape.
      held_out: hold this many x and y records out of training, for `run_fn`'s `eval_dataset`.
      strategy, remainder, on_invalid: as in `tfx_dynamic_inputs.inputs.dynamic_pairs`.
      backend, memory_budget_bytes: how the record stores open (`StoreOptions`).
    """

    image: Mapping[str, int]
    held_out: int = 0
    strategy: str = "uniform"
    remainder: str = "wrap"
    on_invalid: str = "fail"
    backend: str = "auto"
    memory_budget_bytes: int = 1 << 30

    def __post_init__(self):
        if not isinstance(self.image, Mapping) or sorted(self.image) != sorted(_IMAGE_KEYS):
            raise ValueError(
                f"input option image must be {{height, width, channels}}, got {self.image!r}"
            )
        for key in _IMAGE_KEYS:
            int_argument(f"image {key}", self.image[key], 1)
        int_argument("held_out", self.held_out, 0)
        choice("strategy", self.strategy, STRATEGIES)
        choice("remainder", self.remainder, REMAINDERS)
        choice("on_invalid", self.on_invalid, ON_INVALID)
        choice("backend", self.backend, BACKENDS)
        int_argument("memory_budget_bytes", self.memory_budget_bytes, 0)

    def needed_channels(self) -> dict[str, str]:
        """The optional trainer inputs these options read: none."""
        return {}

    def store_options(self) -> StoreOptions:
        """How the x and y record stores open."""
        return StoreOptions(backend=self.backend, memory_budget_bytes=self.memory_budget_bytes)

    def image_spec(self) -> ImageSpec:
        """The images' decoded shape: float32 in [0, 1]."""
        return ImageSpec(**self.image, dtype=tf.float32)


@dataclasses.dataclass(frozen=True)
class ClassBalancedInputOptions:
    """How `ClassBalancedTrainer` reads its batches.

    Args:
      features: the audio front end's `AudioFeatureConfig` fields (`spec_augment` a dict), for
        audio records; None: its defaults.
      feature_spec: "schema" or "transformed": records that are not audio, parsed with that
        feature spec instead of the audio front end.
      apply_transform: parse raw records with Transform's raw spec, then apply its layer.
      eval_batch_size: batch size of the eval split (default n_c x n_p).
      epoch_mode, small_classes, max_draws_per_record: as in
        `tfx_dynamic_inputs.inputs.class_balanced`.
      backend, memory_budget_bytes: how the record stores open (`StoreOptions`).
      run_weights: with the trainer's `mixed_class_index` runs, one weight (> 0) per run: its
        own run first, then the mixed runs in channel order (None: all 1.0;
        `tfx_dynamic_inputs.inputs.RunMix`).
      mix_weighting: what the weights are a share of, "classes" or "batches" (`MixWeighting`).
      augment: the speaker augmentation as JSON values: ``speed_factors`` (a list, e.g.
        ``[1.0, 0.9, 1.1]``), ``noise`` (`AdditiveNoise` fields but `run`: ``snr_db``,
        ``probability``, ``record_set``; needs the trainer's `noise_examples` input) and
        ``reverb`` (`Reverberation` fields but `run`; needs `rir_examples`). None: none.
    """

    features: Mapping[str, Any] | None = None
    feature_spec: str | None = None
    apply_transform: bool = False
    eval_batch_size: int | None = None
    epoch_mode: str = "classes"
    small_classes: str = "replace"
    max_draws_per_record: int | None = None
    backend: str = "auto"
    memory_budget_bytes: int = 1 << 30
    run_weights: tuple[float, ...] | None = None
    mix_weighting: str = "classes"
    augment: Mapping[str, Any] | None = None

    def __post_init__(self):
        if self.run_weights is not None:
            object.__setattr__(self, "run_weights", _run_weights(self.run_weights))
        choice("mix_weighting", self.mix_weighting, MIX_WEIGHTINGS)
        if self.augment is not None:
            self.speaker_augment("noise-run", "rir-run")  # raises, naming the bad field
            if self.parses_with_a_feature_spec:
                raise ValueError("augment needs the audio front end: drop feature_spec")
        if self.features is not None:
            if not isinstance(self.features, Mapping):
                raise TypeError(f"input option features must be a dict, got {self.features!r}")
            audio_feature_config(self.features)  # raises, naming the bad field
        if self.feature_spec is not None:
            choice("feature_spec", self.feature_spec, FEATURE_SPECS)
        if not isinstance(self.apply_transform, bool):
            raise TypeError(f"apply_transform must be a bool, got {self.apply_transform!r}")
        if self.eval_batch_size is not None:
            int_argument("eval_batch_size", self.eval_batch_size, 1)
        if self.features is not None and self.parses_with_a_feature_spec:
            raise ValueError(
                "give features (the audio front end) or feature_spec / apply_transform, not both"
            )
        if self.apply_transform and self.feature_spec == TRANSFORMED_SPEC:
            raise ValueError(
                f"feature_spec={TRANSFORMED_SPEC!r} reads records Transform already transformed: "
                "drop apply_transform"
            )
        choice("epoch_mode", self.epoch_mode, EPOCH_MODES)
        choice("small_classes", self.small_classes, SMALL_CLASS_POLICIES)
        if self.max_draws_per_record is not None:
            int_argument("max_draws_per_record", self.max_draws_per_record, 1)
        choice("backend", self.backend, BACKENDS)
        int_argument("memory_budget_bytes", self.memory_budget_bytes, 0)

    @property
    def parses_with_a_feature_spec(self) -> bool:
        """Whether the records are not audio: parsed with a feature spec (and maybe Transform)."""
        return self.feature_spec is not None or self.apply_transform

    @property
    def needs_transform_graph(self) -> bool:
        """Whether parsing needs the trainer's `transform_graph` input."""
        return self.apply_transform or self.feature_spec == TRANSFORMED_SPEC

    def needed_channels(self) -> dict[str, str]:
        """The optional trainer inputs these options read, each with the options that do."""
        needed = {}
        if self.needs_transform_graph:
            needed[component_keys.TRANSFORM_GRAPH_KEY] = (
                "apply_transform / feature_spec='transformed'"
            )
        if self.feature_spec == SCHEMA_SPEC:
            needed[component_keys.SCHEMA_KEY] = "feature_spec='schema'"
        if (self.augment or {}).get("noise") is not None:
            needed[component_keys.NOISE_EXAMPLES_KEY] = "augment noise"
        if (self.augment or {}).get("reverb") is not None:
            needed[component_keys.RIR_EXAMPLES_KEY] = "augment reverb"
        return needed

    def speaker_augment(
        self, noise_run: str | None, rir_run: str | None
    ) -> SpeakerAugmentConfig | None:
        """The `SpeakerAugmentConfig` of `augment` over the given runs (URIs), or None.

        Args:
          noise_run, rir_run: the noise and RIR runs (e.g. the trainer's `noise_examples` and
            `rir_examples` artifact URIs), used where `augment` asks for noise / reverb.

        Returns:
          The config, or None without `augment`.

        Raises:
          ValueError: an unknown key or a bad value, named.
        """
        if self.augment is None:
            return None
        if not isinstance(self.augment, Mapping):
            raise TypeError(f"input option augment must be a dict, got {self.augment!r}")
        fields = dict(self.augment)
        unknown = sorted(set(fields) - {"noise", "reverb", "speed_factors"})
        if unknown:
            raise ValueError(
                f"input option augment has no key {unknown[0]!r} (keys: noise, reverb, "
                "speed_factors)"
            )
        noise, reverb = fields.get("noise"), fields.get("reverb")
        return SpeakerAugmentConfig(
            noise=None if noise is None else AdditiveNoise(noise_run, **_tupled(noise)),
            reverb=None if reverb is None else Reverberation(rir_run, **dict(reverb)),
            speed_factors=tuple(fields.get("speed_factors") or ()),
        )

    def audio_features(self) -> AudioFeatureConfig:
        """The audio front end's settings (its defaults where `features` is None)."""
        return audio_feature_config(self.features)

    def store_options(self) -> StoreOptions:
        """How the record stores open."""
        return StoreOptions(backend=self.backend, memory_budget_bytes=self.memory_budget_bytes)


InputOptions = PairsInputOptions | ClassBalancedInputOptions
MIX_WEIGHTINGS = tuple(weighting.value for weighting in MixWeighting)


def _run_weights(values) -> tuple[float, ...]:
    """`values` as a tuple of weights, each a finite number > 0 (JSON sends a list)."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise TypeError(f"run_weights must be a list of numbers, got {values!r}")
    weights = tuple(values)
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"run_weights must be numbers, got {weight!r}")
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"run_weights must be > 0, got {weight!r}")
    if not weights:
        raise ValueError("run_weights must list one weight per run, got none")
    return tuple(float(weight) for weight in weights)


def input_options(
    option_class: type[InputOptions], values: InputOptions | Mapping[str, Any] | None
) -> InputOptions:
    """The typed options of `option_class` from `values`.

    Args:
      option_class: `PairsInputOptions` or `ClassBalancedInputOptions`.
      values: an `option_class` object (returned as it is), or its fields as a dict (None: none).

    Returns:
      The `option_class` object.

    Raises:
      ValueError: an unknown option (named, with "did you mean"), a bad value, or a missing
        required one.
      TypeError: options of the other class, or a value of the wrong type.

    Example:

        input_options(PairsInputOptions, {"image": {"height": 8, "width": 8, "channels": 1}})
    """
    if isinstance(values, option_class):
        return values
    if isinstance(values, (PairsInputOptions, ClassBalancedInputOptions)):
        raise TypeError(
            f"input_options takes {option_class.__name__} (or its fields as a dict), got "
            f"{type(values).__name__}"
        )
    values = dict(values or {})
    fields = dataclasses.fields(option_class)
    names = [field.name for field in fields]
    for key in values:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{option_class.__name__} has no option {key!r}{hint} (options: {', '.join(names)})"
            )
    for field in fields:
        if field.default is dataclasses.MISSING and field.name not in values:
            raise ValueError(f"{option_class.__name__} needs {field.name}")
    return option_class(**values)


def to_json(options: InputOptions) -> str | None:
    """The JSON of the options that differ from their defaults (what the component sends its
    executor); None when none does.

    Args:
        options: `PairsInputOptions` or `ClassBalancedInputOptions`.

    Returns:
        A JSON object with sorted keys, or None.

    Example:

        to_json(PairsInputOptions(image={"height": 8, "width": 8, "channels": 1}, held_out=2))
        # '{"held_out": 2, "image": {"channels": 1, "height": 8, "width": 8}}'
    """
    changed = {
        field.name: getattr(options, field.name)
        for field in dataclasses.fields(options)
        if field.default is dataclasses.MISSING or getattr(options, field.name) != field.default
    }
    return json.dumps(_plain(changed), sort_keys=True) if changed else None


def _tupled(noise: Mapping[str, Any]) -> dict[str, Any]:
    """`AdditiveNoise` fields from JSON: `snr_db` a list of two numbers."""
    fields = dict(noise)
    if "snr_db" in fields:
        fields["snr_db"] = tuple(fields["snr_db"])
    return fields


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
