"""In-graph audio features for batches of int16 PCM records.

Records of an audio record set (see `components.layout`) hold mono little-endian int16 PCM of
varying length at one sample rate. `audio_features` turns a batch of them (tf.string [B]) into
model inputs, all with batched core-TF ops (no per-element Python, no per-element `map`):

1. Crop or pad (`AudioFeatureConfig.mode`):
   * ``"crop"`` (training): a random window of `crop_seconds` from each record; records shorter
     than that are repeated (tiled) to fill it, so every row is real audio.
   * ``"pad"``: every record in full, zero-padded to the longest one of the batch; `lengths` and
     `mask` mark the valid frames (what `keras.utils.pad_sequences` gives users today). A record
     longer than `max_pad_seconds` (default 120 s) is cut to its first `max_pad_seconds`, so a
     batch never pads past that: one 30-minute record in a batch of 8 would otherwise take
     11 GB of features.
2. Log-mel filterbank energies with `tf.signal` (default 80 bins, 25 ms Hann windows every 10 ms,
   frames fully inside the signal, like Kaldi's `snip_edges`).
3. Optional per-utterance mean normalization over the valid frames of each record.
4. Optional SpecAugment frequency and time masks (`SpecAugment`).

Randomness (crop offsets, masks) comes from a stateless seed, so a batch's features are a pure
function of its records and its seed; the samplers derive that seed from (seed, epoch, batch), so
resuming reproduces the same features.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from components import layout

MODES = ("crop", "pad")
# The default `AudioFeatureConfig.max_pad_seconds`.
MAX_PAD_SECONDS = 120.0

# Sub-streams of a batch's seed.
_SALT_CROP = 0
_SALT_FREQ_MASK = 1
_SALT_TIME_MASK = 2


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


def num_frames(num_samples, config: AudioFeatureConfig):
    """Frames fully inside `num_samples` samples (0 when shorter than one frame).

    Args:
      num_samples: a Python int, or an integer tensor of any shape (cast to int64).
      config: gives the frame length and step.

    Returns:
      A Python int for an int input, else int64 of the shape of `num_samples`.
    """
    if isinstance(num_samples, int):
        if num_samples < config.frame_length:
            return 0
        return 1 + (num_samples - config.frame_length) // config.frame_step
    num_samples = tf.convert_to_tensor(num_samples, tf.int64)
    frames = 1 + (num_samples - config.frame_length) // config.frame_step
    return tf.where(num_samples >= config.frame_length, frames, tf.zeros_like(frames))


def pcm16_num_samples(audio: tf.Tensor, index: tf.Tensor | None = None) -> tf.Tensor:
    """Counts the samples of each int16 PCM record of a batch.

    Args:
      audio: tf.string [B], int16 PCM records.
      index: int64 [B] record numbers named in the error; default `0..B-1`.

    Returns:
      int64 [B]: samples per record (bytes / 2).

    Raises:
      tf.errors.InvalidArgumentError: when the result is computed, if a record is empty or
        has an odd number of bytes (naming those records).
    """
    num_bytes = tf.cast(tf.strings.length(audio), tf.int64)
    bad = tf.logical_or(tf.equal(num_bytes, 0), tf.equal(num_bytes % 2, 1))
    where = index if index is not None else tf.range(tf.size(audio, out_type=tf.int64))
    check = tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(bad)),
        [
            "audio records must hold a positive, even number of bytes (int16 PCM); bad records:",
            tf.boolean_mask(where, bad),
            "bytes:",
            tf.boolean_mask(num_bytes, bad),
        ],
        summarize=16,
    )
    with tf.control_dependencies([check]):
        return num_bytes // 2


def decode_padded(audio: tf.Tensor, num_samples: tf.Tensor) -> tf.Tensor:
    """Decodes int16 PCM records to floats, zero-padded to the longest one.

    Args:
      audio: tf.string [B], int16 PCM records.
      num_samples: int64 [B], samples per record (`pcm16_num_samples`); a smaller value cuts
        the record to its first `num_samples[b]` samples.

    Returns:
      float32 [B, max(num_samples)]: samples in [-1, 1), zero past each record's end.
    """
    longest = tf.reduce_max(num_samples)
    pcm = tf.io.decode_raw(
        audio, tf.int16, little_endian=True, fixed_length=tf.cast(2 * longest, tf.int32)
    )
    return tf.cast(pcm, tf.float32) / 32768.0


def random_crop(
    audio: tf.Tensor, num_samples: tf.Tensor, crop_samples: int, seed: tf.Tensor
) -> tf.Tensor:
    """Decodes a uniformly placed window of `crop_samples` samples of each record.

    A record shorter than `crop_samples` is tiled from its start (repeat-padding) instead of
    padded with silence. Only the window's bytes are decoded.

    Args:
      audio: tf.string [B], int16 PCM records.
      num_samples: int64 [B], samples per record (>= 1).
      crop_samples: the window length in samples.
      seed: int64 [2] stateless seed of the window offsets.

    Returns:
      float32 [B, crop_samples]: samples in [-1, 1).
    """
    room = tf.maximum(num_samples - crop_samples, 0) + 1
    uniform = tf.random.stateless_uniform(tf.shape(num_samples), seed=seed, dtype=tf.float64)
    start = tf.minimum(tf.cast(uniform * tf.cast(room, tf.float64), tf.int64), room - 1)
    window_bytes = tf.fill(tf.shape(start), tf.constant(2 * crop_samples, tf.int64))
    window = tf.strings.substr(audio, 2 * start, window_bytes)
    pcm = tf.io.decode_raw(window, tf.int16, little_endian=True, fixed_length=2 * crop_samples)
    # Only short records are tiled (a gather over the whole batch would cost as much as the
    # features): positions past their end wrap around to their start.
    short_rows = tf.where(num_samples < crop_samples)
    short_lengths = tf.gather_nd(num_samples, short_rows)
    positions = tf.range(crop_samples, dtype=tf.int64)[tf.newaxis, :] % short_lengths[:, None]
    tiled = tf.gather(tf.gather_nd(pcm, short_rows), positions, batch_dims=1)
    pcm = tf.tensor_scatter_nd_update(pcm, short_rows, tiled)
    return tf.cast(pcm, tf.float32) / 32768.0


def log_mel(signal: tf.Tensor, config: AudioFeatureConfig) -> tf.Tensor:
    """Log-mel filterbank energies of a batch of signals.

    Args:
      signal: float32 [B, N] samples.
      config: the filterbank (frames, FFT length, mel bins, edges, log offset).

    Returns:
      float32 [B, T, num_mel_bins] with `T = num_frames(N, config)`; frame `t` covers samples
      `[t * frame_step, t * frame_step + frame_length)`.
    """
    spectrum = tf.signal.stft(
        signal,
        frame_length=config.frame_length,
        frame_step=config.frame_step,
        fft_length=config.fft_length,
        window_fn=tf.signal.hann_window,
        pad_end=False,
    )
    power = tf.math.real(spectrum * tf.math.conj(spectrum))
    mel_matrix = tf.signal.linear_to_mel_weight_matrix(
        num_mel_bins=config.num_mel_bins,
        num_spectrogram_bins=config.fft_length // 2 + 1,
        sample_rate=config.sample_rate,
        lower_edge_hertz=config.lower_edge_hertz,
        upper_edge_hertz=config.upper_edge_hertz or config.sample_rate / 2,
    )
    mel = tf.tensordot(power, mel_matrix, axes=1)
    return tf.math.log(mel + config.log_offset)


def mean_normalize(features: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Subtracts each record's mean over its valid frames, per mel bin.

    Args:
      features: float [B, T, F].
      mask: bool [B, T], the valid frames.

    Returns:
      The dtype and shape of `features`; padded frames come out as 0.
    """
    weights = tf.cast(mask, features.dtype)[:, :, tf.newaxis]
    count = tf.maximum(tf.reduce_sum(weights, axis=1, keepdims=True), 1.0)
    mean = tf.reduce_sum(features * weights, axis=1, keepdims=True) / count
    return (features - mean) * weights


def spec_augment(
    features: tf.Tensor, lengths: tf.Tensor, augment: SpecAugment, seed: tf.Tensor
) -> tf.Tensor:
    """Zeroes random frequency bands and time spans of each example's features.

    Every example draws its own masks; time masks lie inside its first `lengths[b]` frames.

    Args:
      features: float32 [B, T, F].
      lengths: int64 [B], valid frames per example.
      augment: how many masks, and how wide.
      seed: int64 [2] stateless seed of the masks.

    Returns:
      float32 [B, T, F]: `features` with the masked entries set to 0.
    """
    shape = tf.shape(features, out_type=tf.int64)
    batch, frames, bins = shape[0], shape[1], shape[2]
    keep = tf.ones_like(features, dtype=tf.bool)
    bin_ids = tf.range(bins)[tf.newaxis, tf.newaxis, :]
    frame_ids = tf.range(frames)[tf.newaxis, :, tf.newaxis]
    freq_seed = tf.random.experimental.stateless_fold_in(seed, _SALT_FREQ_MASK)
    time_seed = tf.random.experimental.stateless_fold_in(seed, _SALT_TIME_MASK)
    for i in range(augment.num_freq_masks):
        start, width = _random_bands(
            tf.fill([batch], bins), augment.freq_mask_param, _fold(freq_seed, i)
        )
        inside = (bin_ids >= start[:, None, None]) & (bin_ids < (start + width)[:, None, None])
        keep &= ~inside
    for i in range(augment.num_time_masks):
        start, width = _random_bands(lengths, augment.time_mask_param, _fold(time_seed, i))
        inside = (frame_ids >= start[:, None, None]) & (frame_ids < (start + width)[:, None, None])
        keep &= ~inside
    return tf.where(keep, features, tf.zeros_like(features))


def parse_audio_examples(records: tf.Tensor, sample_rate: int) -> dict[str, tf.Tensor]:
    """The features of a batch of audio Examples (a materialized audio record set's records).

    Args:
      records: tf.string [B] serialized `tf.train.Example`s.
      sample_rate: the rate of records without a `sample_rate` feature.

    Returns:
      ``audio`` tf.string [B] (int16 PCM), ``sample_rate`` int64 [B], ``label`` int64 [B]
      (-1 where a record has none).

    Raises:
      tf.errors.InvalidArgumentError: when run, for a record that is not an Example or lacks
        ``audio``.
    """
    parsed = tf.io.parse_example(
        records,
        {
            layout.AUDIO_KEY: tf.io.FixedLenFeature([], tf.string),
            layout.SAMPLE_RATE_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=sample_rate),
            layout.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        },
    )
    return {
        "audio": parsed[layout.AUDIO_KEY],
        "sample_rate": parsed[layout.SAMPLE_RATE_KEY],
        "label": parsed[layout.LABEL_KEY],
    }


def audio_features(
    audio: tf.Tensor,
    config: AudioFeatureConfig,
    seed: tf.Tensor | None = None,
    *,
    index: tf.Tensor | None = None,
    sample_rate: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """Log-mel features of a batch of int16 PCM records, cropped or padded (see the module).

    Args:
      audio: tf.string [B], little-endian int16 mono PCM (the `audio` feature of a record).
      config: what to compute.
      seed: int64 [2] stateless seed for crop offsets and masks; required when the config
        draws anything (``"crop"`` mode or `spec_augment`).
      index: int64 [B] record numbers, named in error messages.
      sample_rate: int64 [B] rate of each record (the `sample_rate` feature); when given, a
        record at another rate than `config.sample_rate` is an error.

    Returns:
      ``features``: float32 [B, T, num_mel_bins]; T is `config.crop_frames` in ``"crop"`` mode
      and the longest record's frame count in ``"pad"`` mode (of at most
      `config.max_pad_seconds`).
      ``lengths``: int64 [B], valid frames per record.
      ``mask``: bool [B, T], `t < lengths[b]`.

    Raises:
      ValueError: no `seed` while the config draws (``"crop"`` mode or `spec_augment`).
      tf.errors.InvalidArgumentError: when run, naming the records: empty or odd-sized audio,
        a record at another sample rate, and in ``"pad"`` mode a record shorter than one frame.

    Example:

        pcm = bytes(32000)  # 1 s of int16 silence at 16 kHz
        out = audio_features(tf.constant([pcm]), AudioFeatureConfig(mode="pad"))
        out["features"].shape, out["lengths"]  # [1, 98, 80], [98]
    """
    draws = config.mode == "crop" or config.spec_augment is not None
    if draws and seed is None:
        raise ValueError("audio_features needs a seed for crop mode or SpecAugment")
    audio = tf.convert_to_tensor(audio, tf.string)
    if index is None:
        index = tf.range(tf.size(audio, out_type=tf.int64))
    checks = []
    if sample_rate is not None:
        wrong = tf.not_equal(tf.cast(sample_rate, tf.int64), config.sample_rate)
        checks.append(
            tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(wrong)),
                [
                    f"expected audio at {config.sample_rate} Hz; records at other rates:",
                    tf.boolean_mask(index, wrong),
                    "rates:",
                    tf.boolean_mask(sample_rate, wrong),
                ],
                summarize=16,
            )
        )
    with tf.control_dependencies(checks):
        num_samples = pcm16_num_samples(audio, index)
    if config.mode == "crop":
        crop_seed = tf.random.experimental.stateless_fold_in(seed, _SALT_CROP)
        signal = random_crop(audio, num_samples, config.crop_samples, crop_seed)
        lengths = tf.fill(tf.shape(num_samples), tf.constant(config.crop_frames, tf.int64))
    else:
        too_short = num_samples < config.frame_length
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(too_short)),
            [
                f"pad mode needs records of at least one frame ({config.frame_length} samples; "
                f"the audio job stores none shorter than {layout.MIN_AUDIO_SECONDS} s); "
                "shorter records:",
                tf.boolean_mask(index, too_short),
                "samples:",
                tf.boolean_mask(num_samples, too_short),
            ],
            summarize=16,
        )
        if config.max_pad_samples is not None:
            # decode_padded's fixed length cuts the longer records: only their start is decoded.
            num_samples = tf.minimum(num_samples, config.max_pad_samples)
        with tf.control_dependencies([check]):
            signal = decode_padded(audio, num_samples)
        lengths = num_frames(num_samples, config)
    features = log_mel(signal, config)
    mask = tf.sequence_mask(lengths, tf.shape(features, out_type=tf.int64)[1])
    if config.mean_normalization:
        features = mean_normalize(features, mask)
    else:
        features = tf.where(mask[:, :, tf.newaxis], features, tf.zeros_like(features))
    if config.spec_augment is not None:
        features = spec_augment(features, lengths, config.spec_augment, seed)
    if config.mode == "crop":
        features = tf.ensure_shape(features, [None, config.crop_frames, config.num_mel_bins])
    return {"features": features, "lengths": lengths, "mask": mask}


def _random_bands(extent: tf.Tensor, param: int, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per example: width uniform in [0, param) (at most `extent`), start uniform where it fits."""
    extent = tf.cast(extent, tf.int64)
    width_seed, start_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    width = tf.random.stateless_uniform(
        tf.shape(extent), seed=width_seed, minval=0, maxval=param, dtype=tf.int64
    )
    width = tf.minimum(width, extent)
    room = extent - width + 1
    uniform = tf.random.stateless_uniform(tf.shape(extent), seed=start_seed, dtype=tf.float64)
    start = tf.minimum(tf.cast(uniform * tf.cast(room, tf.float64), tf.int64), room - 1)
    return start, width


def _fold(seed: tf.Tensor, i: int) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(seed, i)
