"""In-graph audio features for batches of int16 PCM records.

Records of an audio record set (see `tfx_dynamic_inputs.layout`) hold mono little-endian int16 PCM
of varying length at one sample rate. `audio_features` turns a batch of them (tf.string [B]) into
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
   frames fully inside the signal, like Kaldi's `snip_edges`); the window and the filterbank are
   `plans.filterbank`'s constants, which the NumPy front end (`plans.audio_front`) uses too.
3. Optional per-utterance mean normalization over the valid frames of each record.
4. Optional SpecAugment frequency and time masks (`SpecAugment`).

Randomness (crop offsets, masks) comes from a stateless seed and each record's position in its
global batch (`index_shuffle.keyed_uniform`), so a sample's features are a pure function of its
record, the seed and its position; the samplers derive the seed from (seed, epoch, global batch),
so resuming, on any replica count that keeps the global batch, reproduces the same features.

The configuration (`AudioFeatureConfig`, `SpecAugment`) is in `audio_config`.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig, SpecAugment, num_frames
from tfx_dynamic_inputs.inputs.index_shuffle import keyed_uniform
from tfx_dynamic_inputs.plans import audio_front
from tfx_dynamic_inputs.plans.filterbank import hann_window, mel_matrix

# Sub-streams of a batch's seed, stated once with the NumPy front end.
_SALT_CROP = audio_front.SALT_CROP
_SALT_FREQ_MASK = audio_front.SALT_FREQ_MASK
_SALT_TIME_MASK = audio_front.SALT_TIME_MASK


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
    audio: tf.Tensor,
    num_samples: tf.Tensor,
    crop_samples: int,
    seed: tf.Tensor,
    positions: tf.Tensor | None = None,
) -> tf.Tensor:
    """Decodes a uniformly placed window of `crop_samples` samples of each record.

    A record shorter than `crop_samples` is tiled from its start (repeat-padding) instead of
    padded with silence. Only the window's bytes are decoded.

    Args:
      audio: tf.string [B], int16 PCM records.
      num_samples: int64 [B], samples per record (>= 1).
      crop_samples: the window length in samples.
      seed: int64 [2] stateless seed of the window offsets.
      positions: int64 [B], each record's position in its global batch, which keys its offset
        with `seed` (`index_shuffle.keyed_uniform`); None: `0..B-1`.

    Returns:
      float32 [B, crop_samples]: samples in [-1, 1).
    """
    room = tf.maximum(num_samples - crop_samples, 0) + 1
    uniform = keyed_uniform(seed, _positions(positions, num_samples), salt=0)
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
        window_fn=lambda _, dtype: tf.constant(hann_window(config.frame_length), dtype),
        pad_end=False,
    )
    power = tf.math.real(spectrum * tf.math.conj(spectrum))
    # One constant each (built in the graph they would be about 280 nodes, traced again for each
    # dataset), shared with the NumPy front end.
    weights = mel_matrix(
        config.num_mel_bins,
        config.fft_length // 2 + 1,
        config.sample_rate,
        config.lower_edge_hertz,
        config.upper_edge_hertz or config.sample_rate / 2,
    )
    mel = tf.tensordot(power, tf.constant(weights), axes=1)
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
    features: tf.Tensor,
    lengths: tf.Tensor,
    augment: SpecAugment,
    seed: tf.Tensor,
    positions: tf.Tensor | None = None,
) -> tf.Tensor:
    """Zeroes random frequency bands and time spans of each example's features.

    Every example draws its own masks; time masks lie inside its first `lengths[b]` frames.

    Args:
      features: float32 [B, T, F].
      lengths: int64 [B], valid frames per example.
      augment: how many masks, and how wide.
      seed: int64 [2] stateless seed of the masks.
      positions: int64 [B], each example's position in its global batch, which keys its masks
        with `seed`; None: `0..B-1`.

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
    positions = _positions(positions, lengths)
    for i in range(augment.num_freq_masks):
        start, width = _random_bands(
            tf.fill([batch], bins), augment.freq_mask_param, _fold(freq_seed, i), positions
        )
        inside = (bin_ids >= start[:, None, None]) & (bin_ids < (start + width)[:, None, None])
        keep &= ~inside
    for i in range(augment.num_time_masks):
        start, width = _random_bands(
            lengths, augment.time_mask_param, _fold(time_seed, i), positions
        )
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
    positions: tf.Tensor | None = None,
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
      positions: int64 [B], each record's position in its global batch: with `seed` it keys
        the record's crop offset and masks, so a sample draws the same in a global batch and
        in any replica's slice of it (the samplers pass the plan's ``slice_start`` + 0..B-1);
        None: `0..B-1`.

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
        signal = random_crop(audio, num_samples, config.crop_samples, crop_seed, positions)
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
        features = spec_augment(features, lengths, config.spec_augment, seed, positions)
    if config.mode == "crop":
        features = tf.ensure_shape(features, [None, config.crop_frames, config.num_mel_bins])
    return {"features": features, "lengths": lengths, "mask": mask}


def _random_bands(
    extent: tf.Tensor, param: int, seed: tf.Tensor, positions: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per example: width uniform in [0, param) (at most `extent`), start uniform where it fits;
    each example's draws keyed by its position."""
    extent = tf.cast(extent, tf.int64)
    width = tf.cast(keyed_uniform(seed, positions, salt=0) * param, tf.int64)
    width = tf.minimum(tf.minimum(width, param - 1), extent)
    room = extent - width + 1
    uniform = keyed_uniform(seed, positions, salt=1)
    start = tf.minimum(tf.cast(uniform * tf.cast(room, tf.float64), tf.int64), room - 1)
    return start, width


def _positions(positions: tf.Tensor | None, like: tf.Tensor) -> tf.Tensor:
    """`positions` as int64, or `0..B-1` for a batch shaped like `like` [B]."""
    if positions is None:
        return tf.range(tf.size(like, out_type=tf.int64))
    return tf.convert_to_tensor(positions, tf.int64)


def _fold(seed: tf.Tensor, i: int) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(seed, i)
