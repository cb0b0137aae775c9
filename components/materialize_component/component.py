"""TFX components that materialize raw inputs with the Beam stage (`components.materialize`).

Each outputs a standard `Examples` artifact, which StatisticsGen, SchemaGen, ExampleValidator
and Trainer read, plus the custom index artifacts of `components.artifacts`:

- `MaterializePairs`: image domains X and Y and their valid-pair list ->
  `examples` (splits `x`, `y`), `offset_index`, `pair_index`.
- `MaterializeAudio`: labelled utterances listed in a manifest ->
  `examples` (splits `train`, `eval`, or the manifest's own), `offset_index`, `class_index`.

Parameters mirror the Beam job's flags (`components.materialize.PairsConfig` / `AudioConfig`);
unset ones take the job's defaults. `input_fingerprint` is any string that changes when the
input files change (see `pipeline.fingerprint`): paths alone do not, so without it a re-run
after the data changed would be served stale outputs from the ML Metadata cache.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from components import artifacts
from components.materialize_component import executor
from components.materialize_component.executor import (
    CLASS_INDEX_KEY,
    EXAMPLES_KEY,
    OFFSET_INDEX_KEY,
    PAIR_INDEX_KEY,
)

_COMMON_PARAMETERS = {
    "num_shards": ExecutionParameter(type=int, optional=True),
    "max_shard_bytes": ExecutionParameter(type=int, optional=True),
    "max_reject_fraction": ExecutionParameter(type=float, optional=True),
    "input_fingerprint": ExecutionParameter(type=str, optional=True),
}


class MaterializePairsSpec(types.ComponentSpec):
    PARAMETERS = {
        "x_dir": ExecutionParameter(type=str),
        "y_dir": ExecutionParameter(type=str),
        "pairs": ExecutionParameter(type=str),
        "pairs_format": ExecutionParameter(type=str, optional=True),
        "image_storage": ExecutionParameter(type=str, optional=True),
        "raw_height": ExecutionParameter(type=int, optional=True),
        "raw_width": ExecutionParameter(type=int, optional=True),
        "raw_channels": ExecutionParameter(type=int, optional=True),
        **_COMMON_PARAMETERS,
    }
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
        PAIR_INDEX_KEY: ChannelParameter(type=artifacts.PairIndex),
    }


class MaterializeAudioSpec(types.ComponentSpec):
    PARAMETERS = {
        "manifest": ExecutionParameter(type=str),
        "root": ExecutionParameter(type=str),
        "manifest_format": ExecutionParameter(type=str, optional=True),
        "sample_rate": ExecutionParameter(type=int, optional=True),
        "split_mode": ExecutionParameter(type=str, optional=True),
        "eval_fraction": ExecutionParameter(type=float, optional=True),
        "split_seed": ExecutionParameter(type=int, optional=True),
        **_COMMON_PARAMETERS,
    }
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
        CLASS_INDEX_KEY: ChannelParameter(type=artifacts.ClassIndex),
    }


class MaterializePairs(base_beam_component.BaseBeamComponent):
    """Beam job: image domains X, Y + valid-pair list -> Examples, OffsetIndex, PairIndex."""

    SPEC_CLASS = MaterializePairsSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.PairsExecutor)

    def __init__(
        self,
        x_dir: str,
        y_dir: str,
        pairs: str,
        *,
        pairs_format: str | None = None,
        image_storage: str | None = None,
        raw_height: int | None = None,
        raw_width: int | None = None,
        raw_channels: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
        input_fingerprint: str | None = None,
    ):
        super().__init__(
            spec=MaterializePairsSpec(
                x_dir=x_dir,
                y_dir=y_dir,
                pairs=pairs,
                pairs_format=pairs_format,
                image_storage=image_storage,
                raw_height=raw_height,
                raw_width=raw_width,
                raw_channels=raw_channels,
                num_shards=num_shards,
                max_shard_bytes=max_shard_bytes,
                max_reject_fraction=max_reject_fraction,
                input_fingerprint=input_fingerprint,
                examples=types.Channel(type=standard_artifacts.Examples),
                offset_index=types.Channel(type=artifacts.OffsetIndex),
                pair_index=types.Channel(type=artifacts.PairIndex),
            )
        )


class MaterializeAudio(base_beam_component.BaseBeamComponent):
    """Beam job: speaker manifest + audio files -> Examples, OffsetIndex, ClassIndex."""

    SPEC_CLASS = MaterializeAudioSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.AudioExecutor)

    def __init__(
        self,
        manifest: str,
        root: str,
        *,
        manifest_format: str | None = None,
        sample_rate: int | None = None,
        split_mode: str | None = None,
        eval_fraction: float | None = None,
        split_seed: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
        input_fingerprint: str | None = None,
    ):
        super().__init__(
            spec=MaterializeAudioSpec(
                manifest=manifest,
                root=root,
                manifest_format=manifest_format,
                sample_rate=sample_rate,
                split_mode=split_mode,
                eval_fraction=eval_fraction,
                split_seed=split_seed,
                num_shards=num_shards,
                max_shard_bytes=max_shard_bytes,
                max_reject_fraction=max_reject_fraction,
                input_fingerprint=input_fingerprint,
                examples=types.Channel(type=standard_artifacts.Examples),
                offset_index=types.Channel(type=artifacts.OffsetIndex),
                class_index=types.Channel(type=artifacts.ClassIndex),
            )
        )
