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
from components.component_keys import (
    CLASS_INDEX_KEY,
    EVAL_FRACTION_KEY,
    EXAMPLES_KEY,
    IMAGE_STORAGE_KEY,
    INPUT_FINGERPRINT_KEY,
    MANIFEST_FORMAT_KEY,
    MANIFEST_KEY,
    MAX_REJECT_FRACTION_KEY,
    MAX_SHARD_BYTES_KEY,
    NUM_SHARDS_KEY,
    OFFSET_INDEX_KEY,
    PAIR_INDEX_KEY,
    PAIRS_FORMAT_KEY,
    PAIRS_KEY,
    RAW_CHANNELS_KEY,
    RAW_HEIGHT_KEY,
    RAW_WIDTH_KEY,
    ROOT_KEY,
    SAMPLE_RATE_KEY,
    SPLIT_MODE_KEY,
    SPLIT_SEED_KEY,
    X_DIR_KEY,
    Y_DIR_KEY,
)
from components.materialize_component import executor

_COMMON_PARAMETERS = {
    NUM_SHARDS_KEY: ExecutionParameter(type=int, optional=True),
    MAX_SHARD_BYTES_KEY: ExecutionParameter(type=int, optional=True),
    MAX_REJECT_FRACTION_KEY: ExecutionParameter(type=float, optional=True),
    INPUT_FINGERPRINT_KEY: ExecutionParameter(type=str, optional=True),
}


class MaterializePairsSpec(types.ComponentSpec):
    PARAMETERS = {
        X_DIR_KEY: ExecutionParameter(type=str),
        Y_DIR_KEY: ExecutionParameter(type=str),
        PAIRS_KEY: ExecutionParameter(type=str),
        PAIRS_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        IMAGE_STORAGE_KEY: ExecutionParameter(type=str, optional=True),
        RAW_HEIGHT_KEY: ExecutionParameter(type=int, optional=True),
        RAW_WIDTH_KEY: ExecutionParameter(type=int, optional=True),
        RAW_CHANNELS_KEY: ExecutionParameter(type=int, optional=True),
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
        MANIFEST_KEY: ExecutionParameter(type=str),
        ROOT_KEY: ExecutionParameter(type=str),
        MANIFEST_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        SAMPLE_RATE_KEY: ExecutionParameter(type=int, optional=True),
        SPLIT_MODE_KEY: ExecutionParameter(type=str, optional=True),
        EVAL_FRACTION_KEY: ExecutionParameter(type=float, optional=True),
        SPLIT_SEED_KEY: ExecutionParameter(type=int, optional=True),
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
