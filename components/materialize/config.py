"""Job configurations: the flags of `python -m tfx_dynamic_inputs.materialize {pairs,audio}`."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize.errors import MaterializeError

IMAGE_STORAGE_MODES = ("encoded", "raw")
SPLIT_MODES = ("speaker", "utterance")
# File extensions of audio: `--speaker_from_path` lists files with these, and a file with one
# whose content no decoder reads is corrupt rather than unsupported.
AUDIO_EXTENSIONS = (
    ".wav",
    ".wave",
    ".flac",
    ".ogg",
    ".oga",
    ".opus",
    ".mp3",
    ".m4a",
    ".aac",
    ".mp4",
    ".aif",
    ".aiff",
    ".aifc",
    ".caf",
    ".w64",
)
# File extensions of images the pairs job decodes (PNG and JPEG, by content).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
PAIRS_FORMATS = ("auto", "jsonl", "csv")
GROUPS_FORMATS = ("auto", "jsonl", "csv")
MANIFEST_FORMATS = ("auto", "jsonl", "csv")
# How payloads pass between the stages of a job (`spill`): "auto" spills them to files on the
# local runners only, "files" always, "none" never (the runner's shuffle carries them).
SPILL_MODES = ("auto", "files", "none")
# Channels of a raw image: gray, RGB, RGBA.
RAW_CHANNELS = (1, 3, 4)

# Limits on what one input file may decode to, so that a small file cannot take gigabytes: a
# 40 KB WAV that declares 1 Hz resamples to 320M samples, a 660 KB FLAC of an hour of silence
# decodes to 1.4 GB, a 195 KB PNG may declare 8000 x 8000 pixels. Inputs past them are rejects
# (`rejects.TOO_LONG`, `IMPLAUSIBLE_RATE`, `IMAGE_TOO_LARGE`), judged from what the header
# declares before anything is decoded where the format declares it.
#
# 10 minutes: every utterance of VoxCeleb (longest about 145 s), Speakers in the Wild (up to
# 180 s), LibriSpeech and a NIST SRE conversation side (about 5 minutes) is kept; 600 s at 16 kHz
# is 19 MB of int16 per record. Longer recordings are sessions to segment first.
MAX_AUDIO_SECONDS = 600.0
# 1 kHz to 768 kHz: from below narrowband telephone speech (8 kHz) up to the highest PCM rate
# audio interfaces record at (768 kHz); a rate outside it is a broken or forged header.
MIN_INPUT_SAMPLE_RATE = 1000
MAX_INPUT_SAMPLE_RATE = 768000
# 2^25 (33.5 MP): 8K UHD frames (7680 x 4320), 24 MP camera photos and every CycleGAN data set
# (256 x 256 to 2048 x 1024 Cityscapes) fit; the reader's float32 RGB of one such image is 400 MB.
MAX_IMAGE_PIXELS = 1 << 25
# Pillow refuses to open an image of more than twice its `Image.MAX_IMAGE_PIXELS` (89478485).
PILLOW_MAX_IMAGE_PIXELS = 2 * 89478485
# A serialized tf.train.Example (protobuf) must stay under 2 GiB.
_MAX_RECORD_BYTES = (1 << 31) - (1 << 20)
# The largest rate a decoder reports (a C int); `--min/max_input_sample_rate` bound the rates of
# the files, which `AudioLimits` keeps in [1, MAX_DECLARED_SAMPLE_RATE].
MAX_DECLARED_SAMPLE_RATE = (1 << 31) - 1

# The bounds of the numeric options, one per option: the CLI, the Python API (`run_pairs`,
# `run_audio`), the TFX components and the index job all check them through `validate`.
#
# 8 kHz (narrowband telephone speech, the lowest rate speech corpora are recorded at) to
# 192 kHz (the highest rate studio audio is produced at): the rate records are stored at.
MIN_STORED_SAMPLE_RATE = 8000
MAX_STORED_SAMPLE_RATE = 192000
# 10,000 shards: each is a file, a writer and an open file of every reader; at the default
# 128 MiB a shard that is 1.3 TB, and a fixed count is never more than the records anyway.
MAX_NUM_SHARDS = 10_000
# 64 GiB: far above the 100-200 MB TensorFlow advises per TFRecord shard; one writer writes a
# shard whole, so a larger one is hours of one worker.
MAX_SHARD_BYTES = 1 << 36
# Files per Beam element: one element is decoded by one worker (two threads for audio) and
# its payloads are held together; 4096 is 16x the pairs job's default of 256.
MAX_FILES_PER_BATCH = 4096
# Seeds of the speaker / utterance split: what a TFX int parameter (int64) holds.
MAX_SPLIT_SEED = (1 << 63) - 1


@dataclasses.dataclass(frozen=True)
class AudioLimits:
    """What one audio file may decode to: at most `max_seconds`, from a native sample rate in
    [`min_sample_rate`, `max_sample_rate`] Hz (before resampling)."""

    max_seconds: float = MAX_AUDIO_SECONDS
    min_sample_rate: int = MIN_INPUT_SAMPLE_RATE
    max_sample_rate: int = MAX_INPUT_SAMPLE_RATE

    def validate(self, sample_rate: int | None = None) -> None:
        """Checks the limits.

        Args:
            sample_rate: when given, the rate records are stored at (a record must fit a
                tf.train.Example at `max_seconds`).

        Raises:
            MaterializeError: when `max_seconds` is not above `layout.MIN_AUDIO_SECONDS` (or not
                finite), allows records over 2 GiB, or the rate range is empty or leaves
                [1, `MAX_DECLARED_SAMPLE_RATE`].
        """
        if not _is_real(self.max_seconds) or not (
            layout.MIN_AUDIO_SECONDS < self.max_seconds < math.inf
        ):
            raise MaterializeError(
                f"max_audio_seconds must be a number above {layout.MIN_AUDIO_SECONDS} "
                f"(layout.MIN_AUDIO_SECONDS), got {self.max_seconds!r}"
            )
        if sample_rate is not None and self.max_seconds * sample_rate * 2 > _MAX_RECORD_BYTES:
            raise MaterializeError(
                f"max_audio_seconds={self.max_seconds} at sample_rate={sample_rate} allows "
                "records over 2 GiB, more than a tf.train.Example can hold"
            )
        _require_int(self.min_sample_rate, "min_input_sample_rate", 1, MAX_DECLARED_SAMPLE_RATE)
        _require_int(self.max_sample_rate, "max_input_sample_rate", 1, MAX_DECLARED_SAMPLE_RATE)
        if self.min_sample_rate > self.max_sample_rate:
            raise MaterializeError(
                "need min_input_sample_rate <= max_input_sample_rate, got "
                f"{self.min_sample_rate} and {self.max_sample_rate}"
            )


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """How a record set is cut into shards.

    `num_shards` in [1, `MAX_NUM_SHARDS`] fixes the shard count (records split evenly by count,
    never more shards than records); 0 cuts a new shard whenever the next record would push the
    current one past `max_shard_bytes`, in [1, `MAX_SHARD_BYTES`].
    """

    max_shard_bytes: int = 128 << 20
    num_shards: int = 0

    def validate(self) -> None:
        """Checks the config.

        Raises:
            MaterializeError: when `max_shard_bytes` or `num_shards` is not an integer in its
                range.
        """
        _require_int(self.max_shard_bytes, "max_shard_bytes", 1, MAX_SHARD_BYTES)
        _require_int(self.num_shards, "num_shards", 0, MAX_NUM_SHARDS, " (0: by max_shard_bytes)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What every materialize job is given beside its inputs.

    Attributes:
        output_dir: the run's folder.
        sharding: how each record set is cut into shards.
        max_reject_fraction: the largest fraction of inputs that may be rejected.
        spill: how payloads reach the shard writers (`SPILL_MODES`, `spill.resolve_spill_root`).
        overwrite: whether a previous run in `output_dir` may be replaced.
        beam_pipeline_args: Beam options for the default pipeline.
    """

    output_dir: str
    sharding: ShardingConfig = ShardingConfig()
    max_reject_fraction: float = 0.1
    spill: str = "auto"
    overwrite: bool = False
    beam_pipeline_args: tuple[str, ...] = ()

    def _validate_settings(self, files_per_batch: int) -> None:
        self.sharding.validate()
        _require_choice(self.spill, SPILL_MODES, "spill")
        check_reject_fraction(self.max_reject_fraction)
        _require_int(files_per_batch, "files_per_batch", 1, MAX_FILES_PER_BATCH)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairsConfig(JobSettings):
    """Paired image domains X and Y plus which x may pair with which y.

    Ids are paths relative to `x_dir` / `y_dir`. Valid pairs come from one of:

    * `pairs`, a pair list: JSON Lines (`{"x": id, "y": [ids]}`) or a CSV edge list (`x,y` per
      line, optional header), chosen by `pairs_format` or by the file extension;
    * `x_groups` and `y_groups`, the group of each image (x pairs with every y of its group):
      JSON Lines (`{"id": id, "group": name}`) or CSV (`id,group`, optional header), chosen by
      `groups_format` or by the extension;
    * `groups_from_subfolder`: each image's group is the first folder of its id.

    `image_storage="raw"` stores uint8 pixels resized to
    `raw_height x raw_width x raw_channels` instead of the encoded file bytes. An image of more
    than `max_image_pixels` pixels (width x height, from its header) is an `image_too_large`
    reject, and the raw size may not exceed it either. `spill` (`SPILL_MODES`) is how decoded
    payloads reach the shard writers (`spill.resolve_spill_root`).
    """

    x_dir: str
    y_dir: str
    pairs: str = ""
    pairs_format: str = "auto"
    x_groups: str = ""
    y_groups: str = ""
    groups_from_subfolder: bool = False
    groups_format: str = "auto"
    image_storage: str = "encoded"
    raw_height: int = 256
    raw_width: int = 256
    raw_channels: int = 3
    max_image_pixels: int = MAX_IMAGE_PIXELS
    files_per_batch: int = 256

    def input_dirs(self) -> dict[str, str]:
        """The input folders, by flag: the output folder must stay apart from them."""
        return {"--x_dir": self.x_dir, "--y_dir": self.y_dir}

    def input_files(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Flag -> (kind, file extensions) of what each input folder must hold at least one of
        (`preflight.check_holds_inputs`)."""
        return {"--x_dir": ("image", IMAGE_EXTENSIONS), "--y_dir": ("image", IMAGE_EXTENSIONS)}

    def validate(self) -> None:
        """Checks the config before the job touches a folder.

        Raises:
            MaterializeError: naming the first flag that is wrong.
        """
        group_files = bool(self.x_groups or self.y_groups)
        if [bool(self.pairs), group_files, bool(self.groups_from_subfolder)].count(True) != 1:
            raise MaterializeError(
                "give --pairs FILE, or --x_groups FILE and --y_groups FILE, or "
                "--groups_from_subfolder (exactly one of them)"
            )
        if group_files and not (self.x_groups and self.y_groups):
            raise MaterializeError("--x_groups and --y_groups go together: give both")
        _require_dir(self.x_dir, "x_dir")
        _require_dir(self.y_dir, "y_dir")
        if self.pairs:
            _require_file(self.pairs, "pairs")
        for path, flag in ((self.x_groups, "x_groups"), (self.y_groups, "y_groups")):
            if path:
                _require_file(path, flag)
        _require_choice(self.pairs_format, PAIRS_FORMATS, "pairs_format")
        _require_choice(self.groups_format, GROUPS_FORMATS, "groups_format")
        _require_choice(self.image_storage, IMAGE_STORAGE_MODES, "image_storage")
        _require_int(
            self.max_image_pixels,
            "max_image_pixels",
            1,
            PILLOW_MAX_IMAGE_PIXELS,
            " (Pillow opens no larger image)",
        )
        # No side may be longer than the most pixels any image may have; with raw storage the
        # product is bounded by max_image_pixels below.
        _require_int(self.raw_height, "raw_height", 1, PILLOW_MAX_IMAGE_PIXELS)
        _require_int(self.raw_width, "raw_width", 1, PILLOW_MAX_IMAGE_PIXELS)
        if not (_is_int(self.raw_channels) and self.raw_channels in RAW_CHANNELS):
            raise MaterializeError(
                f"--raw_channels must be one of 1, 3, 4; got {self.raw_channels!r}"
            )
        if self.image_storage == "raw" and self.raw_height * self.raw_width > self.max_image_pixels:
            raise MaterializeError(
                f"raw image size {self.raw_height}x{self.raw_width}x{self.raw_channels} is "
                f"{self.raw_height * self.raw_width} pixels "
                f"({self.raw_height * self.raw_width * self.raw_channels} bytes a record), more "
                f"than max_image_pixels={self.max_image_pixels}"
            )
        self._validate_settings(self.files_per_batch)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AudioConfig(JobSettings):
    """Labelled utterances under `root`, listed in a manifest (CSV with a header, or JSON Lines)
    or, with `speaker_from_path`, found there.

    Manifest fields: `path` (relative to `root`), `speaker` (the label), optional `split`. With a
    split field, each split value becomes a record set. `speaker_from_path` instead takes every
    audio file below `root` (by extension, `AUDIO_EXTENSIONS`) and the first folder of its path
    as its speaker (VoxCeleb's `id10001/<video>/00001.wav`), like a manifest without a split
    field. Without one, records go to `train` and `eval`: `split_mode="speaker"` holds out
    `eval_fraction` of the speakers (verification on unseen speakers), `"utterance"` holds out
    that fraction of each speaker's utterances. `eval_fraction=0` puts everything in `train`.
    Audio is decoded, mixed to mono and resampled to `sample_rate`, stored as int16 PCM. A file
    longer than `max_audio_seconds` is a `too_long` reject, one whose own rate is outside
    [`min_input_sample_rate`, `max_input_sample_rate`] an `implausible_rate` reject (`limits`).
    `spill` (`SPILL_MODES`) is how the PCM reaches the shard writers
    (`spill.resolve_spill_root`). Files are decoded `files_per_batch` to a Beam element, each
    batch by two threads.
    """

    root: str
    manifest: str = ""
    speaker_from_path: bool = False
    manifest_format: str = "auto"
    sample_rate: int = 16000
    split_mode: str = "speaker"
    eval_fraction: float = 0.1
    split_seed: int = 0
    max_audio_seconds: float = MAX_AUDIO_SECONDS
    min_input_sample_rate: int = MIN_INPUT_SAMPLE_RATE
    max_input_sample_rate: int = MAX_INPUT_SAMPLE_RATE
    files_per_batch: int = 16

    def input_dirs(self) -> dict[str, str]:
        """The input folders, by flag: the output folder must stay apart from them."""
        return {"--root": self.root}

    def input_files(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Flag -> (kind, file extensions) of what each input folder must hold at least one of
        (`preflight.check_holds_inputs`): with `--speaker_from_path` the job lists `--root` by
        extension; a manifest names its files, whatever their names."""
        return {"--root": ("audio", AUDIO_EXTENSIONS)} if self.speaker_from_path else {}

    def validate(self) -> None:
        """Checks the config before the job touches a folder.

        Raises:
            MaterializeError: naming the first flag that is wrong.
        """
        if bool(self.manifest) == self.speaker_from_path:
            raise MaterializeError(
                "give --manifest FILE, or --speaker_from_path to take each file's speaker from "
                "its first folder under --root (one of them)"
            )
        if self.manifest:
            _require_file(self.manifest, "manifest")
        _require_dir(self.root, "root")
        _require_choice(self.manifest_format, MANIFEST_FORMATS, "manifest_format")
        _require_choice(self.split_mode, SPLIT_MODES, "split_mode")
        _require_int(
            self.sample_rate, "sample_rate", MIN_STORED_SAMPLE_RATE, MAX_STORED_SAMPLE_RATE
        )
        if not _is_real(self.eval_fraction) or not 0.0 <= self.eval_fraction < 1.0:
            raise MaterializeError(
                f"--eval_fraction must be a number in [0, 1), got {self.eval_fraction!r}"
            )
        _require_int(self.split_seed, "split_seed", 0, MAX_SPLIT_SEED)
        self.limits.validate(self.sample_rate)
        self._validate_settings(self.files_per_batch)

    @property
    def limits(self) -> AudioLimits:
        """What one audio file may decode to (`audio.decode_audio`'s `limits`)."""
        return AudioLimits(
            self.max_audio_seconds, self.min_input_sample_rate, self.max_input_sample_rate
        )


JobConfig = TypeVar("JobConfig", PairsConfig, AudioConfig)


def from_flat(config_class: type[JobConfig], values: Mapping[str, Any]) -> JobConfig:
    """A job's config from flat values, as the CLI flags and the component parameters give
    them: `max_shard_bytes` and `num_shards` make its `sharding`. None values keep the
    defaults; names of no field are ignored.

    Args:
        config_class: `PairsConfig` or `AudioConfig`.
        values: flag name -> value.

    Returns:
        The config (not yet validated).

    Raises:
        TypeError: when a required field (e.g. `output_dir`) is missing.

    Example:
        from_flat(AudioConfig, {"root": "/data", "manifest": "m.csv", "output_dir": "/tmp/run",
                                "num_shards": 4})
    """
    given = {name: value for name, value in values.items() if value is not None}
    sharding = {
        f.name: given[f.name] for f in dataclasses.fields(ShardingConfig) if f.name in given
    }
    fields = {f.name for f in dataclasses.fields(config_class)} - {"sharding"}
    return config_class(
        **{name: value for name, value in given.items() if name in fields},
        sharding=ShardingConfig(**sharding),
    )


def check_reject_fraction(fraction: float) -> None:
    """Checks `max_reject_fraction`, the largest fraction of a job's inputs that may be rejected.

    Args:
        fraction: the value, a number in [0, 1].

    Raises:
        MaterializeError: when it is not a number in [0, 1] (NaN included).
    """
    if not _is_real(fraction) or not 0.0 <= fraction <= 1.0:
        raise MaterializeError(f"--max_reject_fraction must be in [0, 1], got {fraction!r}")


def _is_real(value: object) -> bool:
    """Whether `value` is a number (an int or a float, not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    """Whether `value` is an integer (a Python or NumPy int, not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _require_int(value: object, flag: str, low: int, high: int, note: str = "") -> None:
    """Refuses `value` unless it is an integer (not a bool) in [`low`, `high`]."""
    if not _is_int(value) or not low <= value <= high:
        raise MaterializeError(
            f"--{flag} must be an integer in [{low}, {high}]{note}, got {value!r}"
        )


def _require_dir(path: str, flag: str) -> None:
    if not path or not _isdir(path):
        raise MaterializeError(f"--{flag}: not a directory: {path!r}")


def _require_file(path: str, flag: str) -> None:
    if not path or not _exists(path) or _isdir(path):
        raise MaterializeError(f"--{flag}: file not found: {path!r}")


# Local paths are checked with `os`: a CLI refuses a bad folder before TensorFlow loads (2-3 s);
# `tf.io.gfile` (imported on use) reaches the object stores.
def _isdir(path: str) -> bool:
    return os.path.isdir(path) if "://" not in path else layout.gfile().isdir(path)


def _exists(path: str) -> bool:
    return os.path.exists(path) if "://" not in path else layout.gfile().exists(path)


def _require_choice(value: str, choices: tuple[str, ...], flag: str) -> None:
    if value not in choices:
        raise MaterializeError(f"--{flag} must be one of {', '.join(choices)}; got {value!r}")
