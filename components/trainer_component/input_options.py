"""The trainer's `input_options`, typed: one frozen option object per input kind.

`ResampledTrainer` checks them when the component is built, so a misspelt or bad option fails in
the pipeline file, naming itself (with "did you mean"), not inside the trainer pod. They travel
to the executor as the JSON of the options that differ from their defaults (a TFX execution
parameter is a primitive), and the executor reads them back through the same class.

Example:

    ResampledTrainer(..., input_kind="dynamic_pairs",
                     input_options=PairsInputOptions(image={"height": 32, "width": 32,
                                                            "channels": 3}))
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from components import component_keys as keys
from components.inputs.arguments import choice, int_argument
from components.inputs.class_plan import EPOCH_MODES, SMALL_CLASS_POLICIES
from components.inputs.pair_plan import REMAINDERS, STRATEGIES
from components.inputs.record_store import BACKENDS
from components.inputs.valid_pairs import ON_INVALID
from components.trainer_component.training_inputs import FEATURE_SPECS, audio_feature_config

_IMAGE_KEYS = ("height", "width", "channels")


@dataclasses.dataclass(frozen=True)
class PairsInputOptions:
    """How `input_kind="dynamic_pairs"` reads its pairs.

    Args:
      image: `{"height", "width", "channels"}`: images decode to float32 in [0, 1] of that shape.
      held_out: hold this many x and y records out of training, for `run_fn`'s `eval_dataset`.
      strategy, remainder, on_invalid: as in `components.inputs.dynamic_pairs`.
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


@dataclasses.dataclass(frozen=True)
class ClassBalancedInputOptions:
    """How `input_kind="class_balanced"` reads its batches.

    Args:
      features: the audio front end's `AudioFeatureConfig` fields (`spec_augment` a dict), for
        audio records; None: its defaults.
      feature_spec: "schema" or "transformed": records that are not audio, parsed with that
        feature spec instead of the audio front end.
      apply_transform: parse raw records with Transform's raw spec, then apply its layer.
      eval_batch_size: batch size of the eval split (default n_c x n_p).
      epoch_mode, small_classes: as in `components.inputs.class_balanced`.
      backend, memory_budget_bytes: how the record stores open (`StoreOptions`).
    """

    features: Mapping[str, Any] | None = None
    feature_spec: str | None = None
    apply_transform: bool = False
    eval_batch_size: int | None = None
    epoch_mode: str = "classes"
    small_classes: str = "replace"
    backend: str = "auto"
    memory_budget_bytes: int = 1 << 30

    def __post_init__(self):
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
        choice("epoch_mode", self.epoch_mode, EPOCH_MODES)
        choice("small_classes", self.small_classes, SMALL_CLASS_POLICIES)
        choice("backend", self.backend, BACKENDS)
        int_argument("memory_budget_bytes", self.memory_budget_bytes, 0)


InputOptions = PairsInputOptions | ClassBalancedInputOptions
_BY_KIND = {keys.DYNAMIC_PAIRS: PairsInputOptions, keys.CLASS_BALANCED: ClassBalancedInputOptions}


def input_options(input_kind: str, values: InputOptions | Mapping[str, Any] | None) -> InputOptions:
    """The typed options of `input_kind` from `values` (the object itself, or its fields as a
    dict). Raises ValueError naming an unknown option (with "did you mean") or a bad value, and
    TypeError for options of the other kind."""
    option_class = _BY_KIND[choice("input_kind", input_kind, tuple(_BY_KIND))]
    if isinstance(values, option_class):
        return values
    if isinstance(values, tuple(_BY_KIND.values())):
        raise TypeError(
            f"input_kind={input_kind!r} takes {option_class.__name__}, got {type(values).__name__}"
        )
    values = dict(values or {})
    names = [field.name for field in dataclasses.fields(option_class)]
    for key in values:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"input_options of input_kind={input_kind!r} has no option {key!r}{hint} "
                f"(options: {', '.join(names)})"
            )
    if option_class is PairsInputOptions and "image" not in values:
        raise ValueError("input_options of input_kind='dynamic_pairs' needs image")
    return option_class(**values)


def to_json(options: InputOptions) -> str | None:
    """The JSON of the options that differ from their defaults; None when none does."""
    changed = {
        field.name: getattr(options, field.name)
        for field in dataclasses.fields(options)
        if field.default is dataclasses.MISSING or getattr(options, field.name) != field.default
    }
    return json.dumps(_plain(changed), sort_keys=True) if changed else None


def as_dict(options: InputOptions) -> dict[str, Any]:
    """The options that differ from their defaults, as the executor's input functions take."""
    return json.loads(to_json(options) or "{}")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
