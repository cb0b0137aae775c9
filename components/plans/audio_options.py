"""How a batch of int16 PCM records becomes log-mel features: `AudioFeatureConfig`, `SpecAugment`.

Both are frozen dataclasses checked when built, with no TensorFlow: the graph front end
(`inputs.audio_features`) and the NumPy one (`plans.audio_front`) compute what they describe.
`num_frames` is the frame count of a record under a config (a Python int or a NumPy array;
`inputs.audio_config.num_frames` also takes tensors).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tfx_dynamic_inputs import layout

MODES = ("crop", "pad")
# The default `AudioFeatureConfig.max_pad_seconds`.
MAX_PAD_SECONDS = 120.0


@dataclasses.dataclass(frozen=True)
class SpecAugment:
    """SpecAugment masks (Park et al., 2019), applied after mean normalization.

    Each mask follows `tensorflow_io.audio.freq_mask` / `time_mask`: a width drawn uniformly from
    `[0, param)` and a start drawn uniformly so that the band fits, values set to 0. Unlike those
    functions (one mask per call, shared by the whole tensor, stateful RNG), masks here are drawn
    per example from a stateless seed, and time masks stay inside each record's valid frames.

    Args:
      freq_mask_param: masks are up to `freq_mask_param - 1` mel bins wide (>= 1).
      time_mask_param: masks are up to `time_mask_param - 1` frames long (>= 1).
      num_freq_masks: frequency masks per example (>= 0).
      num_time_masks: time masks per example (>= 0).

    Raises:
      ValueError: a `*_mask_param` below 1 or a `num_*_masks` below 0.

    Example:

        AudioFeatureConfig(spec_augment=SpecAugment(freq_mask_param=8, num_time_masks=2))
    """

    freq_mask_param: int = 10
    time_mask_param: int = 20
    num_freq_masks: int = 1
    num_time_masks: int = 1

    def __post_init__(self):
        for name in ("freq_mask_param", "time_mask_param"):
            if getattr(self, name) < 1:
                raise ValueError(f"SpecAugment.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("num_freq_masks", "num_time_masks"):
            if getattr(self, name) < 0:
                raise ValueError(f"SpecAugment.{name} must be >= 0, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class AudioFeatureConfig:
    """How a batch of int16 PCM records becomes log-mel features; checked when built.

    Args:
      mode: ``"crop"`` (fixed `crop_seconds` windows, random offsets, short records repeated) or
        ``"pad"`` (whole records, padded to the longest of the batch).
      sample_rate: Hz; every record must have this rate (the Beam stage resamples to one rate).
      crop_seconds: window length in ``"crop"`` mode.
      num_mel_bins, frame_length_ms, frame_step_ms, lower_edge_hertz, upper_edge_hertz: the
        filterbank; `upper_edge_hertz=None` means `sample_rate / 2`. The FFT length is the
        smallest power of two that holds one frame. A frame may be at most
        `layout.MIN_AUDIO_SECONDS` long, the shortest record the audio job keeps.
      log_offset: added to the mel energies before the log, so silence stays finite.
      mean_normalization: subtract each record's mean over its valid frames, per mel bin.
      spec_augment: masks to apply, or None.
      max_pad_seconds: in ``"pad"`` mode, the most of each record featurized: a longer record
        is cut to its first `max_pad_seconds` (its `lengths` count the frames of that part), so
        a batch's working memory stays under about 0.8 MB per record per second of the cap at
        the defaults (0.75 GB for 8 records at 120 s). None: no cap, every record in full.
        120 s keeps whole nearly every evaluation utterance of VoxCeleb1 (longest about 145 s)
        and most of Speakers in the Wild (up to 180 s), and is more audio than a speaker
        embedding gains from; the audio job stores records of up to 600 s
        (`--max_audio_seconds`).

    Raises:
      ValueError: an unknown `mode`; a rate or bin count below 1; frames shorter than 2
        samples (or steps under 1); edges outside `0 <= lower < upper <= sample_rate / 2`; a
        frame longer than `layout.MIN_AUDIO_SECONDS`; a `max_pad_seconds` that is not finite
        or shorter than a frame; in ``"crop"`` mode, `crop_seconds` shorter than a frame.

    Example:

        config = AudioFeatureConfig(mode="crop", crop_seconds=2.0, num_mel_bins=80)
        config.crop_frames  # 198 frames of 25 ms every 10 ms
    """

    mode: str = "crop"
    sample_rate: int = 16000
    crop_seconds: float = 2.0
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_step_ms: float = 10.0
    lower_edge_hertz: float = 20.0
    upper_edge_hertz: float | None = None
    log_offset: float = 1e-6
    mean_normalization: bool = True
    spec_augment: SpecAugment | None = None
    max_pad_seconds: float | None = MAX_PAD_SECONDS

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.sample_rate < 1 or self.num_mel_bins < 1:
            raise ValueError("sample_rate and num_mel_bins must be >= 1")
        if self.frame_length < 2 or self.frame_step < 1:
            raise ValueError(
                f"frames of {self.frame_length_ms} ms every {self.frame_step_ms} ms at "
                f"{self.sample_rate} Hz are too short"
            )
        upper = self.upper_edge_hertz or self.sample_rate / 2
        if not 0 <= self.lower_edge_hertz < upper <= self.sample_rate / 2:
            raise ValueError(
                f"need 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2, got "
                f"{self.lower_edge_hertz}, {upper}, {self.sample_rate / 2}"
            )
        # The audio job keeps records of at least MIN_AUDIO_SECONDS (compared the same way), so
        # with this bound pad mode accepts every record it stored.
        if self.frame_length > layout.MIN_AUDIO_SECONDS * self.sample_rate:
            raise ValueError(
                f"frame_length_ms={self.frame_length_ms} is longer than the shortest audio "
                f"record the audio job keeps (layout.MIN_AUDIO_SECONDS = "
                f"{layout.MIN_AUDIO_SECONDS} s), which pad mode could then not featurize"
            )
        if self.max_pad_seconds is not None and not (
            math.isfinite(self.max_pad_seconds) and self.frame_length <= self.max_pad_samples
        ):
            raise ValueError(
                f"max_pad_seconds={self.max_pad_seconds} must be None or a length of at least one "
                f"frame ({self.frame_length_ms} ms)"
            )
        if self.mode == "crop" and self.crop_samples < self.frame_length:
            raise ValueError(
                f"crop_seconds={self.crop_seconds} is shorter than one frame "
                f"({self.frame_length_ms} ms)"
            )

    @property
    def frame_length(self) -> int:
        """Samples per frame."""
        return int(round(self.sample_rate * self.frame_length_ms / 1000))

    @property
    def frame_step(self) -> int:
        """Samples between frame starts."""
        return int(round(self.sample_rate * self.frame_step_ms / 1000))

    @property
    def fft_length(self) -> int:
        """FFT size: the smallest power of two that holds one frame."""
        return 1 << math.ceil(math.log2(self.frame_length))

    @property
    def crop_samples(self) -> int:
        """Samples per record in ``"crop"`` mode."""
        return int(round(self.sample_rate * self.crop_seconds))

    @property
    def max_pad_samples(self) -> int | None:
        """Samples of a record ``"pad"`` mode featurizes at most (None: all of them)."""
        if self.max_pad_seconds is None:
            return None
        return int(round(self.sample_rate * self.max_pad_seconds))

    @property
    def crop_frames(self) -> int:
        """Frames per record in ``"crop"`` mode."""
        return num_frames(self.crop_samples, self)


def num_frames(num_samples: int | np.ndarray, config: AudioFeatureConfig) -> int | np.ndarray:
    """Frames fully inside `num_samples` samples (0 when shorter than one frame).

    Args:
      num_samples: a Python int, or an integer array of any shape (cast to int64).
      config: gives the frame length and step.

    Returns:
      A Python int for an int input, else int64 of the shape of `num_samples`.
    """
    if isinstance(num_samples, int):
        if num_samples < config.frame_length:
            return 0
        return 1 + (num_samples - config.frame_length) // config.frame_step
    num_samples = np.asarray(num_samples, np.int64)
    frames = 1 + (num_samples - config.frame_length) // config.frame_step
    return np.where(num_samples >= config.frame_length, frames, 0)
