"""The checks of the pipeline configs' fields, made where a config is built (its
`__post_init__`), so a bad value fails in one line naming the field (TypeError for a wrong type,
ValueError for a bad value) whether it came from a flag, a config file or Python, before
anything runs: `--crop_seconds nan` or `--eval_fraction 1.0` used to pass and end in a traceback
after the Beam job.

`check_types` checks every field against its annotation: ints are ints (not bools, not floats)
within int64, floats are finite numbers, mappings of JSON values hold finite numbers only (JSON
has no NaN). The bounds are each stated once, and where the component or library that takes the
value checks it, it is that bound:

- the materialize job's (`materialize.config`, imported without TensorFlow): `ShardingConfig`
  and `check_reject_fraction` are called for `num_shards` and `max_reject_fraction`; its
  constants bound `sample_rate`, `split_seed`, `channels`, `image_size` (`MAX_IMAGE_PIXELS`) and
  `crop_seconds` (`MAX_AUDIO_SECONDS`); `eval_fraction` is `AudioConfig.validate`'s [0, 1)
  (`validate` also checks the files, so it is not called here);
- the inputs library's, the augmentation's and the trainer's, from where they are stated without
  TensorFlow (the CLIs answer a bad value before it loads): the epoch modes
  (`plans.class_geometry.EPOCH_MODES`), the pairing strategies (`plans.pair_plan.STRATEGIES`),
  the mix weightings and the SNR range (`option_bounds`: `MixWeighting`, `check_snr_range`,
  which `inputs.run_mix` and `inputs.speaker_augment` take too); the audio front end's frame, the
  draw cap, `held_out` and the gate's rule are restated here (their modules import TensorFlow or
  TFX) and tests/pipeline/test_config_bounds.py checks that each accepts exactly what the
  library accepts.

The seed is the one bound narrower than the library's (`inputs.arguments.seed_argument` takes
any int64): the pipelines' trainer modules also seed Keras with it
(`keras.utils.set_random_seed`, which takes [0, 2**32 - 1]); `--seed -1` failed in the trainer.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import numbers
import operator
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize.config import (
    MAX_AUDIO_SECONDS,
    MAX_IMAGE_PIXELS,
    MAX_SPLIT_SEED,
    MAX_STORED_SAMPLE_RATE,
    MIN_STORED_SAMPLE_RATE,
    RAW_CHANNELS,
    ShardingConfig,
    check_reject_fraction,
)
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.option_bounds import MIX_WEIGHTINGS, check_snr_range
from tfx_dynamic_inputs.plans.class_geometry import EPOCH_MODES
from tfx_dynamic_inputs.plans.pair_plan import STRATEGIES as PAIRING_STRATEGIES

INT64_RANGE = (-(1 << 63), (1 << 63) - 1)  # `inputs.arguments.SEED_RANGE`
# `keras.utils.set_random_seed` (NumPy's legacy seeding) takes no more: the trainers call it.
SEED_RANGE = (0, (1 << 32) - 1)
# `AudioFeatureConfig`'s default frame: a crop must hold one.
FRAME_LENGTH_MS = 25.0
# One pipeline name for both runners (one config file drives both): Kubeflow's rule
# (`kubeflow.spec_files.PIPELINE_NAME_PATTERN`, not imported: the kubeflow extra may be absent;
# a test keeps them equal) within TFX's longest name (`tfx.orchestration.pipeline`'s 63). No such
# name holds a separator or `..`: it also names a folder, `serving/<pipeline name>`.
PIPELINE_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
PIPELINE_NAME_RULE = "1-63 characters of a-z, 0-9 and '-', not starting with '-'"
# How much of a refused value a message shows.
_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """`value`'s repr for a one-line message, cut after `_SHOWN_CHARS` characters."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional_of(tp: Any) -> Any:
    """X for `X | None`, else None."""
    args = typing.get_args(tp)
    if type(None) in args and len(args) == 2:
        return next(arg for arg in args if arg is not type(None))
    return None


def check_types(config: Any) -> None:
    """Checks every field of the dataclass `config` against its annotation.

    Args:
        config: a config dataclass.

    Raises:
        TypeError: a value of another type, naming `<Class>.<field>`.
        ValueError: an int outside int64, a float that is not finite, or a mapping of JSON
            values that is not JSON (NaN included), naming `<Class>.<field>`.
    """
    types = _field_types(type(config))
    for field in dataclasses.fields(config):
        where = f"{type(config).__name__}.{field.name}"
        _check_type(where, types[field.name], getattr(config, field.name))


def _check_type(where: str, tp: Any, value: Any) -> None:
    inner = _optional_of(tp)
    if inner is not None:
        if value is not None:
            _check_type(where, inner, value)
        return
    origin = typing.get_origin(tp)
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{where} must be a bool, got {shown(value)}")
    elif tp is int:
        integer(where, value)
    elif tp is float:
        real(where, value)
    elif tp is str:
        if not isinstance(value, str):
            raise TypeError(f"{where} must be a string, got {shown(value)}")
    elif origin is tuple:
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{where} must be a tuple of strings, got {shown(value)}")
    elif origin in (dict, Mapping):
        _check_mapping(where, typing.get_args(tp)[1], value)
    else:
        raise TypeError(f"{where}: no check for fields of type {tp!r}")


def _check_mapping(where: str, item_type: Any, value: Any) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{where} must be a mapping with string keys, got {shown(value)}")
    if dataclasses.is_dataclass(item_type):
        for key, item in value.items():
            if not isinstance(item, item_type):
                raise TypeError(
                    f"{where}[{key!r}] must be a {item_type.__name__}, got {shown(item)}"
                )
        return
    try:
        json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(f"{where} must be a JSON object of finite numbers: {error}") from None


def integer(where: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int in [`low`, `high`] (None: int64's end), as `inputs.arguments`
    checks ints: not a bool, not a float.

    Args:
        where: what the message names, e.g. "SpeakerConfig.num_epochs".
        value: the value.
        low: the least allowed (None: int64's least).
        high: the most allowed (None: int64's most).

    Returns:
        The int.

    Raises:
        TypeError: not an int. ValueError: outside the range.
    """
    if isinstance(value, bool):
        raise TypeError(f"{where} must be an int, got the bool {value!r}")
    try:
        as_int = operator.index(value)
    except TypeError:
        raise TypeError(f"{where} must be an int, got {shown(value)}") from None
    if low is not None and as_int < low:
        raise ValueError(f"{where} must be >= {low}, got {as_int}")
    if high is not None and as_int > high:
        raise ValueError(f"{where} must be <= {high}, got {shown(as_int)}")
    if not INT64_RANGE[0] <= as_int <= INT64_RANGE[1]:
        raise ValueError(f"{where} must fit in int64, got {shown(as_int)}")
    return as_int


def real(where: str, value: Any) -> float:
    """`value` as a finite float (an int passes; a bool does not).

    Args:
        where: what the message names.
        value: the value.

    Returns:
        The float.

    Raises:
        TypeError: not a number. ValueError: NaN or infinite (or too large for a float), or an
            int outside int64.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where} must be a number, got {shown(value)}")
    # An int stays an int in the frozen config and reaches TFX's int64 properties as one.
    if isinstance(value, numbers.Integral) and not -(2**63) <= value < 2**63:
        raise ValueError(f"{where} must be a finite number, got the int {shown(value)}")
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float):
        raise ValueError(f"{where} must be a finite number, got {shown(value)}")
    return as_float


def within(where: str, value: float, low: float, high: float, *, high_open: bool = False) -> None:
    """Raises ValueError unless `low <= value <= high` (`< high` when `high_open`).

    Args:
        where: what the message names.
        value: a number (`check_types` has checked it).
        low: the least allowed.
        high: the most allowed (or the bound below it).
        high_open: whether `high` itself is refused.
    """
    if not (low <= value and (value < high if high_open else value <= high)):
        bracket = ")" if high_open else "]"
        raise ValueError(f"{where} must be in [{low}, {high}{bracket}, got {value}")


def one_of(where: str, value: str, allowed: Sequence[str]) -> None:
    """Raises ValueError unless `value` is one of `allowed`, with the closest ("did you mean").

    Args:
        where: what the message names.
        value: the value.
        allowed: the choices.
    """
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{where} must be one of {', '.join(allowed)}, got {shown(value)}{hint}")


def reject_fraction(where: str, value: float) -> None:
    """Raises ValueError unless `value` is a `max_reject_fraction` the jobs take
    (`materialize.config.check_reject_fraction`: [0, 1]).

    Args:
        where: what the message names.
        value: the fraction.
    """
    try:
        check_reject_fraction(value)
    except MaterializeError as error:
        raise ValueError(f"{where}: {error}") from None


def not_empty(where: str, value: str | None) -> None:
    """Raises ValueError for an empty string (None passes: the field's "none")."""
    if value is not None and not value.strip():
        raise ValueError(f"{where} must not be empty, got {value!r}")


def check_pipeline_fields(config: Any) -> None:
    """The bounds of the fields every pipeline config has (`PipelineConfig`'s, with
    `pipeline_name`, `trainer_module`, `schema_file` and the gate's).

    Args:
        config: a `CycleGanConfig` or `SpeakerConfig`, its types checked.

    Raises:
        ValueError: naming the first field out of its bounds.
    """
    name = type(config).__name__
    try:
        ShardingConfig(num_shards=config.num_shards).validate()
    except MaterializeError as error:
        raise ValueError(f"{name}.num_shards: {error}") from None
    reject_fraction(f"{name}.max_reject_fraction", config.max_reject_fraction)
    integer(f"{name}.seed", config.seed, *SEED_RANGE)
    integer(f"{name}.checkpoint_every_steps", config.checkpoint_every_steps, 0)
    integer(f"{name}.num_epochs", config.num_epochs, 1)
    check_pipeline_name(f"{name}.pipeline_name", config.pipeline_name)
    check_module(f"{name}.trainer_module", config.trainer_module)
    not_empty(f"{name}.schema_file", config.schema_file)
    check_gate(config)


def check_gate(config: Any) -> None:
    """The gate's fields as `ModelGate`'s rule (`evaluator_component.decision.Rule`) checks
    them: a metric named, a known direction, a tolerance >= 0; and `serving_dir` not empty.

    Args:
        config: a pipeline config (`common.GatedConfig`), its types checked.

    Raises:
        ValueError: naming the field.
    """
    name = type(config).__name__
    not_empty(f"{name}.blessing_metric", config.blessing_metric)
    one_of(f"{name}.blessing_direction", config.blessing_direction, keys.DIRECTIONS)
    if config.blessing_tolerance < 0:
        raise ValueError(f"{name}.blessing_tolerance must be >= 0, got {config.blessing_tolerance}")
    not_empty(f"{name}.serving_dir", config.serving_dir)


def check_pipeline_name(where: str, value: str) -> None:
    """Raises ValueError unless `value` is a pipeline name both runners take
    (`PIPELINE_NAME_PATTERN`).

    Args:
        where: what the message names.
        value: the name.
    """
    if not PIPELINE_NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{where} {shown(value)} is not a legal Kubeflow pipeline name: "
            f"{PIPELINE_NAME_RULE} (at most 63: TFX's limit; the name is also a folder)"
        )


def check_module(where: str, value: str) -> None:
    """Raises ValueError unless `value` is an importable module path (`package.module`).

    Args:
        where: what the message names.
        value: the module path.
    """
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"{where} must be a module path like package.module, got {shown(value)}")


def check_cyclegan_fields(config: Any) -> None:
    """The bounds of `CycleGanConfig`'s own fields.

    Args:
        config: the `CycleGanConfig`, its types checked.

    Raises:
        ValueError: naming the first field out of its bounds.
    """
    for field in ("x_dir", "y_dir", "pairs", "x_groups", "y_groups"):
        not_empty(f"CycleGanConfig.{field}", getattr(config, field))
    if config.image_size is not None:  # None: inferred from the images (`image_shape`)
        check_image_size(config.image_size)
    if config.channels is not None and config.channels not in RAW_CHANNELS:
        raise ValueError(
            f"CycleGanConfig.channels must be one of {', '.join(map(str, RAW_CHANNELS))}, got "
            f"{config.channels}"
        )
    integer("CycleGanConfig.batch_size", config.batch_size, 1)
    one_of("CycleGanConfig.pairing_strategy", config.pairing_strategy, PAIRING_STRATEGIES)
    integer("CycleGanConfig.held_out", config.held_out, 0)


def check_image_size(value: Any) -> int:
    """`CycleGanConfig.image_size` checked: the materialize job stores raw pixels of images of
    at most `MAX_IMAGE_PIXELS`.

    Args:
        value: the image side, in pixels.

    Returns:
        The side.

    Raises:
        TypeError: not an int. ValueError: below 1 or above the square root of the bound.
    """
    return integer("CycleGanConfig.image_size", value, 1, math.isqrt(MAX_IMAGE_PIXELS))


def check_speaker_fields(config: Any) -> None:
    """The bounds of `SpeakerConfig`'s own fields, the SNR range as `AdditiveNoise` checks it
    (`option_bounds.check_snr_range`, with or without `noise_dir`).

    Args:
        config: the `SpeakerConfig`, its types checked.

    Raises:
        ValueError: naming the first field out of its bounds.
    """
    for field in ("manifest", "audio_root", "mix", "noise_dir", "rir_dir"):
        not_empty(f"SpeakerConfig.{field}", getattr(config, field))
    integer(
        "SpeakerConfig.sample_rate",
        config.sample_rate,
        MIN_STORED_SAMPLE_RATE,
        MAX_STORED_SAMPLE_RATE,
    )
    integer("SpeakerConfig.split_seed", config.split_seed, 0, MAX_SPLIT_SEED)
    within("SpeakerConfig.eval_fraction", config.eval_fraction, 0.0, 1.0, high_open=True)
    integer("SpeakerConfig.n_classes_per_batch", config.n_classes_per_batch, 1)
    integer("SpeakerConfig.n_samples_per_class", config.n_samples_per_class, 1)
    one_of("SpeakerConfig.epoch_mode", config.epoch_mode, EPOCH_MODES)
    if config.max_draws_per_record is not None:
        integer("SpeakerConfig.max_draws_per_record", config.max_draws_per_record, 1)
    # `AudioFeatureConfig`: a crop holds a frame; no longer than the longest stored record.
    frame_samples = round(config.sample_rate * FRAME_LENGTH_MS / 1000)
    if not (
        config.crop_seconds <= MAX_AUDIO_SECONDS
        and round(config.crop_seconds * config.sample_rate) >= frame_samples
    ):
        raise ValueError(
            f"SpeakerConfig.crop_seconds must be from one frame ({FRAME_LENGTH_MS} ms) to "
            f"{MAX_AUDIO_SECONDS} s (the longest record the audio job stores), got "
            f"{config.crop_seconds}"
        )
    integer("SpeakerConfig.num_mel_bins", config.num_mel_bins, 1)
    one_of("SpeakerConfig.mix_weighting", config.mix_weighting, MIX_WEIGHTINGS)
    check_snr_range(
        config.min_snr_db, config.max_snr_db, names="SpeakerConfig.min_snr_db / max_snr_db"
    )
