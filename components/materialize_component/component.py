"""TFX components that materialize raw inputs with the Beam stage
(`tfx_dynamic_inputs.materialize`).

Each outputs a standard `Examples` artifact, which StatisticsGen, SchemaGen, ExampleValidator
and Trainer read, plus the custom index artifacts of `tfx_dynamic_inputs.artifacts`:

- `MaterializePairs`: image domains X and Y and their valid-pair list (`pairs`), or the group
  of each image (`x_groups` and `y_groups`, or `groups_from_subfolder`) ->
  `examples` (splits `x`, `y`), `offset_index`, `pair_index`.
- `MaterializeAudio`: labelled utterances listed in a manifest (or found below a root, the
  speaker their first folder) ->
  `examples` (splits `train`, `eval`, or the manifest's own), `offset_index`, `class_index`.

Parameters mirror the Beam job's flags (`tfx_dynamic_inputs.materialize.PairsConfig` /
`AudioConfig`); unset ones take the job's defaults. `input_fingerprint` is any string that changes
when the input files change (see `tfx_dynamic_inputs.pipeline.fingerprint`): paths alone do not, so
without it a re-run after the data changed would be served stale outputs from the ML Metadata cache.
`spill` (`auto`, `files` or `none`) is the job's `--spill`: set `none` where the Beam workers share
no file system (`--temp_location` in `beam_pipeline_args` is where `files` spills).
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_dynamic_inputs import artifacts
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize_component import executor

_COMMON_PARAMETERS = {
    keys.NUM_SHARDS_KEY: ExecutionParameter(type=int, optional=True),
    keys.MAX_SHARD_BYTES_KEY: ExecutionParameter(type=int, optional=True),
    keys.MAX_REJECT_FRACTION_KEY: ExecutionParameter(type=float, optional=True),
    keys.INPUT_FINGERPRINT_KEY: ExecutionParameter(type=str, optional=True),
    keys.SPILL_KEY: ExecutionParameter(type=str, optional=True),
}


def _outputs(index_key: str, index_type: type[types.Artifact]) -> dict[str, ChannelParameter]:
    """Examples, their offset index, and the job's own index under `index_key`."""
    return {
        keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        keys.OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
        index_key: ChannelParameter(type=index_type),
    }


class MaterializePairsSpec(types.ComponentSpec):
    """The parameters and outputs of `MaterializePairs` (examples, offset_index, pair_index)."""

    PARAMETERS = {
        keys.X_DIR_KEY: ExecutionParameter(type=str),
        keys.Y_DIR_KEY: ExecutionParameter(type=str),
        keys.PAIRS_KEY: ExecutionParameter(type=str, optional=True),
        keys.PAIRS_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        keys.X_GROUPS_KEY: ExecutionParameter(type=str, optional=True),
        keys.Y_GROUPS_KEY: ExecutionParameter(type=str, optional=True),
        keys.GROUPS_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        keys.GROUPS_FROM_SUBFOLDER_KEY: ExecutionParameter(type=bool, optional=True),
        keys.IMAGE_STORAGE_KEY: ExecutionParameter(type=str, optional=True),
        keys.RAW_HEIGHT_KEY: ExecutionParameter(type=int, optional=True),
        keys.RAW_WIDTH_KEY: ExecutionParameter(type=int, optional=True),
        keys.RAW_CHANNELS_KEY: ExecutionParameter(type=int, optional=True),
        **_COMMON_PARAMETERS,
    }
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = _outputs(keys.PAIR_INDEX_KEY, artifacts.PairIndex)


class MaterializeAudioSpec(types.ComponentSpec):
    """The parameters and outputs of `MaterializeAudio` (examples, offset_index, class_index)."""

    PARAMETERS = {
        keys.MANIFEST_KEY: ExecutionParameter(type=str, optional=True),
        keys.SPEAKER_FROM_PATH_KEY: ExecutionParameter(type=bool, optional=True),
        keys.ROOT_KEY: ExecutionParameter(type=str),
        keys.MANIFEST_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        keys.SAMPLE_RATE_KEY: ExecutionParameter(type=int, optional=True),
        keys.SPLIT_MODE_KEY: ExecutionParameter(type=str, optional=True),
        keys.EVAL_FRACTION_KEY: ExecutionParameter(type=float, optional=True),
        keys.SPLIT_SEED_KEY: ExecutionParameter(type=int, optional=True),
        **_COMMON_PARAMETERS,
    }
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = _outputs(keys.CLASS_INDEX_KEY, artifacts.ClassIndex)


class _MaterializeComponent(base_beam_component.BaseBeamComponent):
    """Takes the common parameters; builds the spec of `SPEC_CLASS` with a new channel per
    output."""

    def __init__(
        self,
        job_parameters: dict[str, Any],
        *,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
        input_fingerprint: str | None = None,
        spill: str | None = None,
    ):
        outputs = {
            name: types.Channel(type=output.type)
            for name, output in self.SPEC_CLASS.OUTPUTS.items()
        }
        super().__init__(
            spec=self.SPEC_CLASS(
                **job_parameters,
                num_shards=num_shards,
                max_shard_bytes=max_shard_bytes,
                max_reject_fraction=max_reject_fraction,
                input_fingerprint=input_fingerprint,
                spill=spill,
                **outputs,
            )
        )


class MaterializePairs(_MaterializeComponent):
    """Beam job: image domains X, Y + valid-pair list or groups -> Examples, OffsetIndex,
    PairIndex. Give `pairs`, or `x_groups` and `y_groups`, or `groups_from_subfolder=True`.

    Args:
        x_dir: the folder of the x images (PNG/JPEG); ids are paths below it.
        y_dir: the folder of the y images.
        pairs: the valid-pair list (JSON Lines or a CSV edge list), or None.
        pairs_format: "auto" (by extension), "jsonl" or "csv".
        x_groups: the groups file of the x images, or None.
        y_groups: the groups file of the y images, or None.
        groups_format: "auto", "jsonl" or "csv".
        groups_from_subfolder: each image's group is the first folder of its id.
        image_storage: "encoded" (the file bytes) or "raw" (uint8 pixels, HWC).
        raw_height: the raw pixels' height.
        raw_width: the raw pixels' width.
        raw_channels: the raw pixels' channels (1, 3 or 4).
        num_shards, max_shard_bytes, max_reject_fraction, input_fingerprint, spill: the
            settings both jobs take (module doc).

    Example:
        MaterializePairs(x_dir="data/x", y_dir="data/y", pairs="data/pairs.jsonl",
                         input_fingerprint=input_fingerprint(["data"]))
    """

    SPEC_CLASS = MaterializePairsSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.PairsExecutor)

    def __init__(
        self,
        x_dir: str,
        y_dir: str,
        pairs: str | None = None,
        *,
        pairs_format: str | None = None,
        x_groups: str | None = None,
        y_groups: str | None = None,
        groups_format: str | None = None,
        groups_from_subfolder: bool | None = None,
        image_storage: str | None = None,
        raw_height: int | None = None,
        raw_width: int | None = None,
        raw_channels: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
        input_fingerprint: str | None = None,
        spill: str | None = None,
    ):
        super().__init__(
            {
                keys.X_DIR_KEY: x_dir,
                keys.Y_DIR_KEY: y_dir,
                keys.PAIRS_KEY: pairs,
                keys.PAIRS_FORMAT_KEY: pairs_format,
                keys.X_GROUPS_KEY: x_groups,
                keys.Y_GROUPS_KEY: y_groups,
                keys.GROUPS_FORMAT_KEY: groups_format,
                keys.GROUPS_FROM_SUBFOLDER_KEY: groups_from_subfolder,
                keys.IMAGE_STORAGE_KEY: image_storage,
                keys.RAW_HEIGHT_KEY: raw_height,
                keys.RAW_WIDTH_KEY: raw_width,
                keys.RAW_CHANNELS_KEY: raw_channels,
            },
            num_shards=num_shards,
            max_shard_bytes=max_shard_bytes,
            max_reject_fraction=max_reject_fraction,
            input_fingerprint=input_fingerprint,
            spill=spill,
        )


class MaterializeAudio(_MaterializeComponent):
    """Beam job: speaker manifest + audio files -> Examples, OffsetIndex, ClassIndex.

    Give `manifest`, or `manifest=None` and `speaker_from_path=True`: every audio file below
    `root`, its speaker the first folder of its path (VoxCeleb's `id10001/<video>/00001.wav`).

    Args:
        manifest: the manifest (CSV with a header, or JSON Lines), or None.
        root: the folder the manifest's paths are relative to.
        speaker_from_path: take every audio file below `root`, its speaker its first folder.
        manifest_format: "auto", "csv" or "jsonl".
        sample_rate: the rate, in Hz, the int16 PCM is stored at.
        split_mode: "speaker" or "utterance", for a manifest without splits.
        eval_fraction: the fraction of speakers (or utterances) held out as `eval`.
        split_seed: the seed of that split.
        num_shards, max_shard_bytes, max_reject_fraction, input_fingerprint, spill: the
            settings both jobs take (module doc).

    Raises:
        ValueError: when neither or both of `manifest` and `speaker_from_path` are given.

    Example:
        MaterializeAudio(manifest="data/manifest.csv", root="data/audio", sample_rate=16000)
    """

    SPEC_CLASS = MaterializeAudioSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.AudioExecutor)

    def __init__(
        self,
        manifest: str | None,
        root: str,
        *,
        speaker_from_path: bool | None = None,
        manifest_format: str | None = None,
        sample_rate: int | None = None,
        split_mode: str | None = None,
        eval_fraction: float | None = None,
        split_seed: int | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
        input_fingerprint: str | None = None,
        spill: str | None = None,
    ):
        if bool(manifest) == bool(speaker_from_path):
            raise ValueError(
                "MaterializeAudio needs manifest, or manifest=None and speaker_from_path=True"
            )
        super().__init__(
            {
                keys.MANIFEST_KEY: manifest,
                keys.SPEAKER_FROM_PATH_KEY: speaker_from_path,
                keys.ROOT_KEY: root,
                keys.MANIFEST_FORMAT_KEY: manifest_format,
                keys.SAMPLE_RATE_KEY: sample_rate,
                keys.SPLIT_MODE_KEY: split_mode,
                keys.EVAL_FRACTION_KEY: eval_fraction,
                keys.SPLIT_SEED_KEY: split_seed,
            },
            num_shards=num_shards,
            max_shard_bytes=max_shard_bytes,
            max_reject_fraction=max_reject_fraction,
            input_fingerprint=input_fingerprint,
            spill=spill,
        )
