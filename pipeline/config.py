"""Every setting of the two pipelines, in one place.

- `PipelineConfig`: what the two have alike (sharding, seed, checkpoints, the gate's rule).
- `CycleGanConfig`: image domains + valid-pair list -> CycleGAN on dynamic pairs.
- `SpeakerConfig`: speaker manifest + audio -> speaker embedding on class-balanced batches.
- `RunConfig`: where a run writes (pipeline root, sqlite ML Metadata) and its Beam arguments.
- `KubeflowConfig`: the image and paths a compiled Kubeflow spec uses.

Both end alike: `ModelGate` blesses the trained model when its held-out metric
(`blessing_metric`) is within `blessing_threshold` and at most `blessing_tolerance` worse than
the latest blessed model's, and the standard Pusher copies a blessed model to
`<serving_dir>/<version>` (`serving_dir` None: `<pipeline root>/serving/<pipeline name>`).

Every config checks its fields when it is built (`config_checks`): a wrong type is a TypeError, a
bad value a ValueError, each one line naming `<Class>.<field>`.

Defaults are the demo's (bundled sample data, small models, CPU-friendly); `TEST_OVERRIDES`
shrink the training for the test suite. Nothing here imports TFX or TensorFlow, nor do the
checks (a `SpeakerConfig`'s SNR range is `option_bounds.check_snr_range`, `AdditiveNoise`'s own).
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Mapping
from typing import Any

import tfx_dynamic_inputs
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize.config import AudioConfig
from tfx_dynamic_inputs.pipeline import config_checks, kubeflow_checks

# The installed package's folder (the checkout's components/): the record schemas and the bundled
# speaker corpus are its package data, so a wheel finds them where a checkout does.
PACKAGE_DIR = os.path.dirname(os.path.abspath(tfx_dynamic_inputs.__file__))
SCHEMAS_DIR = os.path.join(PACKAGE_DIR, "schemas")
IMAGE_SCHEMA = "image_record.pbtxt"
AUDIO_SCHEMA = "audio_record.pbtxt"
SAMPLE_DATA_DIR = os.path.join(PACKAGE_DIR, "sample_data")
SPEAKER_CORPUS_DIR = os.path.join(SAMPLE_DATA_DIR, "speakers")
SPEAKER_MANIFEST = os.path.join(SPEAKER_CORPUS_DIR, "manifest.csv")
# Where every command writes by default (`run_local`, the demo, the Kubeflow specs, the image's
# tasks, each in a folder of its own below it): relative, so under the folder the command runs
# in, never into the installation.
OUTPUT_DIR = "tfx-dynamic-inputs-out"
# Where the image holds this repository (the Dockerfile's WORKDIR).
IMAGE_REPO_ROOT = "/app"
# Where Pusher pushes when a pipeline config gives no `serving_dir`: this folder under the
# pipeline root, one folder per pipeline name below it.
SERVING_DIR = "serving"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The settings both pipelines have, with one default: sharding and reject budget of the
    materialize job, the seed, the trainer's checkpoints, and how the gate compares and where
    Pusher pushes (each pipeline names its own `blessing_metric` and `blessing_threshold`).

    Keyword-only, so that a pipeline's required data paths can follow these defaults and stay
    its first positional arguments. (`tfx_dynamic_inputs.pipeline.cli` lists a pipeline's own fields
    first in `--help`, then these; each flag's help is its entry below.)

    Args:
      num_shards: TFRecord shards per record set the materialize job writes.
      max_reject_fraction: the materialize job fails when more of its inputs than this are
        rejected (each reject is counted, with its reason, in rejects.jsonl).
      seed: the samplers' seed: every epoch's plan is a function of it and the epoch.
      checkpoint_every_steps: the trainer checkpoints every so many batches (0: at epoch ends
        only); a retried trainer resumes from the latest.
      blessing_direction: whether the gate's metric is better lower or higher.
      blessing_tolerance: how much worse than the latest blessed model's metric still blesses.
      serving_dir: where Pusher pushes (default: `serving/<pipeline_name>` under the root).
    """

    num_shards: int = 2
    max_reject_fraction: float = 0.1
    seed: int = 0
    # The trainer's mid-epoch checkpoints, every so many batches (0: at epoch ends only); a
    # retried trainer resumes from the latest.
    checkpoint_every_steps: int = 1000
    blessing_direction: str = keys.LOWER_IS_BETTER
    blessing_tolerance: float = 0.0
    serving_dir: str | None = None

    def __post_init__(self):
        config_checks.check_types(self)
        config_checks.check_pipeline_fields(self)

    def input_paths(self) -> list[str]:
        """The input files and folders (what `tfx_dynamic_inputs.pipeline.fingerprint`
        fingerprints).

        Returns:
            The paths, as the config gives them.
        """
        raise NotImplementedError(f"{type(self).__name__} names no input paths")


@dataclasses.dataclass(frozen=True)
class CycleGanConfig(PipelineConfig):
    """CycleGAN pipeline: MaterializePairs -> StatisticsGen -> ImportSchemaGen ->
    ExampleValidator -> PairsTrainer -> ModelGate -> Pusher.

    Images are stored as raw `image_size x image_size x channels` uint8 pixels (resized once by
    the Beam stage), so the trainer decodes a batch with one vectorized op. Left None, both are
    inferred from the images before the pipeline is built (`image_shape.resolve`: the median
    side, 3 channels if any image is in colour), and `run_local` prints what it chose.

    Each x pairs with the y listed for it in `pairs` (a pair list), or with any y of its group:
    `x_groups` and `y_groups` (groups files), or `groups_from_subfolder` (an image's group is the
    first folder of its path: the bundled digits' classes). Give exactly one of the three.

    Args:
      x_dir: the folder of the x images (PNG/JPEG; ids are their paths below it).
      y_dir: the folder of the y images.
      pairs: the valid-pair list (JSON Lines or a CSV edge list): the y each x may pair with.
      x_groups: the groups file of the x images (pair by group, with y_groups).
      y_groups: the groups file of the y images.
      groups_from_subfolder: pair each x with any y of its first folder (no pair list).
      pipeline_name: the pipeline's name (ML Metadata, the serving folder).
      image_size: the side, in pixels, the images are resized to once by the Beam stage (a
        multiple of 4); none: the images' median side, rounded to a multiple of 4, at most 256.
      channels: the images' channels (1: grey, 3: RGB, 4: RGBA); none: 3 if any image is in
        colour, else 1.
      batch_size: pairs per training batch.
      num_epochs: training epochs; every epoch re-pairs each x with a fresh valid y.
      pairing_strategy: "uniform" or "least_sampled" (every valid pair within max-degree
        epochs).
      held_out: x and y images held out of training: the translation pictures' fixed images
        and the gate's held-out cycle loss (val_cycle_loss).
      trainer_module: the module of the trainer's run_fn.
      custom_config: a JSON object handed to run_fn (e.g. the learning rate).
      schema_file: the record schema ExampleValidator checks the examples against.
      blessing_metric: the gate's metric: the cycle loss on the held-out images (0 to 2).
      blessing_threshold: the gate refuses a model whose metric is worse than this.
    """

    x_dir: str
    y_dir: str
    pairs: str | None = None
    x_groups: str | None = None
    y_groups: str | None = None
    groups_from_subfolder: bool = False
    pipeline_name: str = "cyclegan-dynamic-pairs"
    image_size: int | None = None
    channels: int | None = None
    batch_size: int = 32
    num_epochs: int = 3
    pairing_strategy: str = "uniform"
    held_out: int = 4
    trainer_module: str = "tfx_dynamic_inputs.trainer_modules.cyclegan_trainer"
    custom_config: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: {"learning_rate": 2e-4}
    )
    schema_file: str = os.path.join(SCHEMAS_DIR, IMAGE_SCHEMA)
    # The gate: the cycle loss on the held-out images, the sum of the x -> y -> x and
    # y -> x -> y mean L1 distances of pixels in [0, 1] (0 to 2): the threshold refuses a model
    # whose round trips lose half the intensity.
    blessing_metric: str = "val_cycle_loss"
    blessing_threshold: float | None = 1.0

    def __post_init__(self):
        super().__post_init__()
        config_checks.check_cyclegan_fields(self)
        pairings = [
            self.pairs is not None,
            self.x_groups is not None or self.y_groups is not None,
            self.groups_from_subfolder,
        ]
        if sum(pairings) != 1:
            raise ValueError(
                "give one pairing: pairs, or x_groups and y_groups, or groups_from_subfolder"
            )
        if (self.x_groups is None) != (self.y_groups is None):
            raise ValueError("x_groups and y_groups go together")

    def input_paths(self) -> list[str]:
        """The image folders and the pair list or groups files that pair them."""
        listed = [self.pairs, self.x_groups, self.y_groups]
        return [self.x_dir, self.y_dir, *(path for path in listed if path is not None)]


# The bundled digit domains (`sample_data.write_digit_domains`): the side the demo writes and
# trains them at, and their channels (grey).
DIGITS_IMAGE_SIZE = 16
DIGITS_CHANNELS = 1

# WeSpeaker's speed perturbation: factor index k makes speaker c the class k * C + c.
SPEED_FACTORS = (1.0, 0.9, 1.1)


@dataclasses.dataclass(frozen=True)
class SpeakerConfig(PipelineConfig):
    """Speaker pipeline: MaterializeAudio -> StatisticsGen -> ImportSchemaGen ->
    ExampleValidator -> ClassBalancedTrainer -> ModelGate -> Pusher.

    `manifest` lists the audio files by paths relative to `audio_root`; with `speaker_from_path`
    the manifest is not read: every audio file below `audio_root` is an utterance of the speaker
    its first folder names (VoxCeleb's layout). The Beam stage holds out
    `eval_fraction` of the speakers (`split_mode="speaker"`): the trainer learns on `train` and
    reports the equal error rate on the unseen `eval` speakers.

    Args:
      manifest: the manifest (CSV with a header, or JSON Lines): path, speaker[, split].
      audio_root: the folder the manifest's paths are relative to.
      speaker_from_path: read no manifest: every audio file below audio_root, its speaker its
        first folder (VoxCeleb's layout).
      pipeline_name: the pipeline's name (ML Metadata, the serving folder).
      sample_rate: the rate, in Hz, the audio is stored and featurized at.
      eval_fraction: the share of speakers held out as eval, for the equal error rate. 0.3
        here, where the materialize CLI's default is 0.1: the bundled 22 speakers leave 7 to
        measure; 0.1 suits large corpora.
      split_seed: the seed of that split.
      n_classes_per_batch: speakers per batch (n_c); at most the training speakers.
      n_samples_per_class: utterances of each speaker in a batch (n_p).
      epoch_mode: "samples" (every utterance every epoch) or "classes" (every speaker every
        epoch, the library's default); "samples" here, so the small corpus trains on all of it.
      max_draws_per_record: at most this many draws of any utterance in an epoch: in "samples"
        mode the batches of the late rounds (only the big speakers left) are otherwise filled
        with other speakers again, drawing small speakers' utterances many times; too low a
        cap stops the trainer naming the least it takes. None: no cap.
      crop_seconds: the training crop of each utterance, in seconds.
      num_mel_bins: log-mel bins of the features.
      num_epochs: training epochs; every epoch re-plans the batches.
      trainer_module: the module of the trainer's run_fn.
      custom_config: a JSON object handed to run_fn (e.g. the learning rate).
      schema_file: the record schema ExampleValidator checks the examples against.
      blessing_metric: the gate's metric: the equal error rate on the held-out speakers.
      blessing_threshold: the gate refuses a model whose metric is worse than this (chance: 0.5).
      mix: a JSON file listing more corpora to train on with this one, each with a weight
        (this corpus weighs 1.0; `tfx_dynamic_inputs.pipeline.mixed_corpora`): speakers are
        namespaced by corpus. Needs epoch_mode "classes". None: this corpus alone.
      mix_weighting: what the mix's weights are a share of: "classes" (each batch's speakers)
        or "batches" (each batch from one corpus).
      noise_dir: a folder of noise clips (MUSAN's `noise/<source>/*.wav` layout: any folders of
        audio files), materialized by the audio job in the pipeline and mixed into training
        segments (`inputs.speaker_augment.AdditiveNoise`). None: no noise.
      rir_dir: a folder of room impulse responses (audio files in folders), materialized the
        same way and convolved with training segments (`Reverberation`). None: no reverb.
      speed_perturb: speed perturbation 0.9 / 1.0 / 1.1, each perturbed speaker a new class (the
        model classifies 3x the training speakers).
      min_snr_db: the lowest SNR the noise is mixed at, in dB (drawn uniformly per segment).
      max_snr_db: the highest SNR the noise is mixed at, in dB.
    """

    manifest: str = SPEAKER_MANIFEST
    audio_root: str = SPEAKER_CORPUS_DIR
    speaker_from_path: bool = False
    pipeline_name: str = "speaker-class-balanced"
    sample_rate: int = AudioConfig.sample_rate  # the audio job's own default, said once
    eval_fraction: float = 0.3
    split_seed: int = 0
    n_classes_per_batch: int = 8
    n_samples_per_class: int = 4
    epoch_mode: str = "samples"
    max_draws_per_record: int | None = None
    crop_seconds: float = 1.0
    num_mel_bins: int = 40
    num_epochs: int = 12
    trainer_module: str = "tfx_dynamic_inputs.trainer_modules.speaker_trainer"
    custom_config: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: {"learning_rate": 1e-3}
    )
    schema_file: str = os.path.join(SCHEMAS_DIR, AUDIO_SCHEMA)
    blessing_metric: str = "eer"
    blessing_threshold: float | None = 0.3
    mix: str | None = None
    mix_weighting: str = "classes"
    noise_dir: str | None = None
    rir_dir: str | None = None
    speed_perturb: bool = False
    min_snr_db: float = 0.0
    max_snr_db: float = 15.0

    def __post_init__(self):
        super().__post_init__()
        config_checks.check_speaker_fields(self)
        if self.mix is not None and self.speed_perturb:
            raise ValueError(
                "mix and speed_perturb do not run together yet (a mix does not plan the speed "
                "classes): drop one; noise_dir and rir_dir do run with a mix"
            )

    def augment_options(self) -> dict[str, Any] | None:
        """The trainer's input option `augment` (`ClassBalancedInputOptions`), or None."""
        augment: dict[str, Any] = {}
        if self.noise_dir is not None:
            augment["noise"] = {"snr_db": [self.min_snr_db, self.max_snr_db]}
        if self.rir_dir is not None:
            augment["reverb"] = {}
        if self.speed_perturb:
            augment["speed_factors"] = list(SPEED_FACTORS)
        return augment or None

    def input_paths(self) -> list[str]:
        """The audio folder, and the manifest unless speakers come from the folders (a mix's
        corpora are their own MaterializeAudio's inputs)."""
        return [self.audio_root] if self.speaker_from_path else [self.manifest, self.audio_root]

    def feature_options(self) -> dict[str, Any]:
        """`tfx_dynamic_inputs.inputs.AudioFeatureConfig` fields, as the trainer takes them."""
        return {
            "sample_rate": self.sample_rate,
            "crop_seconds": self.crop_seconds,
            "num_mel_bins": self.num_mel_bins,
        }


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Where a pipeline run writes and how its Beam jobs run.

    `metadata_path`: sqlite ML Metadata file for local runs; None when the orchestrator brings
    its own (Kubeflow). `beam_pipeline_args` stay empty locally (DirectRunner): non-empty args
    without `--setup_file` make TFX build an sdist of the project on every run. On a cluster
    pass e.g. `--runner=DataflowRunner --project=... --region=... --temp_location=gs://...`.
    `fingerprint_inputs`: pass a fingerprint of the input files to the materialize component,
    so the cache re-runs it when they change (listing costs one stat per file).

    Args:
      pipeline_root: where the pipeline's artifacts are written.
      metadata_path: the sqlite ML Metadata file (None: the orchestrator's own).
      enable_cache: serve components whose inputs are unchanged from the ML Metadata cache.
      beam_pipeline_args: Beam options of the Beam components (e.g. --runner=...).
      fingerprint_inputs: fingerprint the input files, so changed data re-runs the pipeline.
    """

    pipeline_root: str
    metadata_path: str | None = None
    enable_cache: bool = True
    beam_pipeline_args: tuple[str, ...] = ()
    fingerprint_inputs: bool = True

    def __post_init__(self):
        config_checks.check_types(self)
        config_checks.not_empty("RunConfig.pipeline_root", self.pipeline_root)
        config_checks.not_empty("RunConfig.metadata_path", self.metadata_path)


@dataclasses.dataclass(frozen=True)
class TaskResources:
    """The Kubernetes requests and limits of one compiled task's pod (KFP's container resources).

    Args:
      cpu_request: CPU cores the pod is scheduled with; None leaves the cluster's default.
      cpu_limit: CPU cores the pod may use at most; None for no limit.
      memory_request: memory the pod is scheduled with, in GB; None leaves the default.
      memory_limit: memory the pod may use at most, in GB (the pod is killed beyond); None for none.
      accelerator_type: the accelerator the pod needs, as the cluster names it (e.g.
        ``"nvidia-tesla-t4"``); None for none.
      accelerator_count: how many of `accelerator_type` (>= 1 with a type, else 0).

    Raises:
      ValueError: a negative amount, a request above its limit, or a count without a type (or
        a type without a count).

    Example:

        TaskResources(cpu_request=2, memory_limit=16, accelerator_type="nvidia-tesla-t4",
                      accelerator_count=1)
    """

    cpu_request: float | None = None
    cpu_limit: float | None = None
    memory_request: float | None = None
    memory_limit: float | None = None
    accelerator_type: str | None = None
    accelerator_count: int = 0

    def __post_init__(self):
        config_checks.check_types(self)
        config_checks.integer("TaskResources.accelerator_count", self.accelerator_count, 0)
        for name in ("cpu_request", "cpu_limit", "memory_request", "memory_limit"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"TaskResources.{name} must be > 0 or None, got {value}")
        for kind in ("cpu", "memory"):
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            if request is not None and limit is not None and request > limit:
                raise ValueError(
                    f"TaskResources.{kind}_request ({request}) is above {kind}_limit ({limit})"
                )
        if (self.accelerator_type is None) != (self.accelerator_count == 0):
            raise ValueError(
                "TaskResources: accelerator_type and accelerator_count >= 1 go together, got "
                f"{self.accelerator_type!r} x {self.accelerator_count}"
            )


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    """What `python -m tfx_dynamic_inputs.kubeflow.runner` compiles into the KFP v2 specs.

    Paths in the specs are read inside the pod: `pipeline_root` and the data are normally
    object-store URIs (gs://...). `data_root` holds the pipelines' default inputs laid out as the
    image ships the bundled sample data (`digits/`, `speakers/`); a pipeline's own data paths
    replace them. `schemas_dir` holds the record schemas as the pods see them.
    """

    image: str = "tfx-dynamic-inputs:latest"
    output_dir: str = os.path.join(OUTPUT_DIR, "kubeflow")
    pipeline_root: str = "gs://YOUR_BUCKET/tfx-dynamic-inputs"
    data_root: str = posixpath.join(IMAGE_REPO_ROOT, "sample_data")
    schemas_dir: str = posixpath.join(IMAGE_REPO_ROOT, os.path.basename(SCHEMAS_DIR))
    beam_pipeline_args: tuple[str, ...] = ()
    # KFP retries of a failed trainer pod (preempted nodes); a retry resumes from the trainer's
    # checkpoints.
    trainer_retries: int = 3
    # Node id (e.g. "PairsTrainer", "MaterializeAudio") -> its pod's requests and limits; a task
    # not named keeps the cluster's defaults.
    resources: Mapping[str, TaskResources] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        config_checks.check_types(self)
        kubeflow_checks.check_kubeflow_config(self)


# Smaller training for the test suite: same data, same components, fewer epochs.
TEST_OVERRIDES = {
    CycleGanConfig: {"num_epochs": 2, "batch_size": 128, "image_size": 8},
    SpeakerConfig: {"num_epochs": 3},
}


def for_tests(config: CycleGanConfig | SpeakerConfig) -> CycleGanConfig | SpeakerConfig:
    """`config` with `TEST_OVERRIDES` applied.

    Args:
      config: a pipeline config.

    Returns:
      A copy with its type's `TEST_OVERRIDES`.

    Example:

        for_tests(SpeakerConfig()).num_epochs  # 3
    """
    return dataclasses.replace(config, **TEST_OVERRIDES[type(config)])
