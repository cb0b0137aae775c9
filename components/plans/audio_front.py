"""The audio front end in NumPy: `inputs.audio_features`' algorithm, without TensorFlow.

For input pipelines without TensorFlow (Grain datasets for Keras 3 on JAX or PyTorch, fed int16
PCM by `tfx_dynamic_inputs.records`): the same crop or pad, log-mel, mean normalization and
SpecAugment as the graph front end, with the same keyed randomness. Every draw is
`plans.keyed_hash.keyed_uniform` of the same seed folds and salts as the graph's
`index_shuffle.keyed_uniform`, bit for bit (with the graph's int32 folds of its salts,
`fold_in_int32`), so the crop offsets and the masks are exactly the graph's; the window and the
filterbank are the same constants (`plans.filterbank`). The STFT is `np.fft.rfft` over the frames
fully inside the signal (`tf.signal.stft` with `pad_end=False`: frame `t` is samples
`[t * step, t * step + frame_length)`, windowed, zero-padded at its end to the FFT length), the
spectrum in float64 on NumPy 1 (NumPy 2 transforms float32 in float32, as the graph does), the
filterbank and the log in float32: the log-mels agree within float32 rounding, within 1e-3
(tests/core/test_audio_front.py states the measured bound), the masks and the lengths exactly.

See `inputs.audio_features` for what each step does and why.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig, SpecAugment, num_frames
from tfx_dynamic_inputs.plans.filterbank import hann_window, mel_matrix
from tfx_dynamic_inputs.plans.keyed_hash import keyed_uniform
from tfx_dynamic_inputs.plans.seed_folds import fold_in

# Sub-streams of a batch's seed, as `inputs.audio_features` folds them.
SALT_CROP = 0
SALT_FREQ_MASK = 1
SALT_TIME_MASK = 2
_FULL_SCALE = 32768.0


def fold_in_int32(seed: np.ndarray, word: int) -> np.ndarray:
    """`tf.random.experimental.stateless_fold_in(seed, word)` with a Python int `word`, bit for
    bit, as int64 [2].

    The graph front ends fold their salts as Python ints, which TensorFlow makes int32: the drawn
    word is then int32, the low 32 bits of the int64 draw (`seed_folds.fold_in`), and the seed
    is int32 [2]. Its values sign-extended to int64 are the same seed to every stateless op.

    Args:
      seed: int64 [2] (an int32 seed's values sign-extended).
      word: the salt, in int32's range.
    """
    drawn = fold_in(np.asarray(seed, np.int64), word)[0]
    low = np.array(int(drawn) & 0xFFFFFFFF, np.uint32).view(np.int32)
    return np.array([low, word], np.int64)


def pcm_lengths(audio: Sequence[np.ndarray], index: np.ndarray | None = None) -> np.ndarray:
    """int64 [B]: the samples of each int16 PCM record of a batch.

    Args:
      audio: B int16 [n] arrays (`records.AudioDecoder`'s ``audio``).
      index: int64 [B] record numbers named in the error; default `0..B-1`.

    Raises:
      TypeError: a record that is not a 1-D int16 array, naming it.
      ValueError: empty records, naming them.
    """
    where = np.arange(len(audio)) if index is None else np.asarray(index, np.int64)
    for number, pcm in zip(where.tolist(), audio, strict=True):
        if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16 or pcm.ndim != 1:
            got = f"{pcm.dtype} {pcm.shape}" if isinstance(pcm, np.ndarray) else type(pcm).__name__
            raise TypeError(f"audio record {number} must be a 1-D int16 array of PCM, got {got}")
    lengths = np.array([len(pcm) for pcm in audio], np.int64)
    if (lengths == 0).any():
        raise ValueError(f"audio records must hold samples; empty records: {where[lengths == 0]}")
    return lengths


def keyed_starts(
    lengths: np.ndarray, width: int, seed: np.ndarray, positions: np.ndarray
) -> np.ndarray:
    """int64 [B]: the first sample of a uniformly placed window of `width` in each record, drawn
    as `inputs.audio_features.random_crop` draws it (0 where a record is shorter).

    Args:
      lengths: int64 [B], samples per record.
      width: the window length.
      seed: int64 [2], the stateless seed of the offsets (already folded with its salt).
      positions: int64 [B], each record's position in its global batch.
    """
    room = np.maximum(np.asarray(lengths, np.int64) - width, 0) + 1
    uniform = keyed_uniform(seed, positions, salt=0)
    return np.minimum((uniform * room.astype(np.float64)).astype(np.int64), room - 1)


def random_crop(
    audio: Sequence[np.ndarray], crop_samples: int, seed: np.ndarray, positions: np.ndarray
) -> np.ndarray:
    """float32 [B, crop_samples]: each record's keyed window, short records tiled from their
    start (`inputs.audio_features.random_crop`).

    Args:
      audio: B int16 [n] arrays (n >= 1).
      crop_samples: the window length.
      seed: int64 [2], the stateless seed of the offsets.
      positions: int64 [B], each record's position in its global batch.
    """
    lengths = np.array([len(pcm) for pcm in audio], np.int64)
    starts = keyed_starts(lengths, crop_samples, seed, positions)
    out = np.empty((len(audio), crop_samples), np.float32)
    for row, (pcm, start) in enumerate(zip(audio, starts.tolist(), strict=True)):
        if len(pcm) >= crop_samples:
            out[row] = pcm[start : start + crop_samples]
        else:
            out[row] = np.resize(pcm, crop_samples)  # repeats the record from its start
    return out / np.float32(_FULL_SCALE)


def decode_padded(audio: Sequence[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """float32 [B, max(lengths)]: each record's first `lengths[b]` samples, zero past them."""
    out = np.zeros((len(audio), int(np.max(lengths, initial=0))), np.float32)
    for row, (pcm, length) in enumerate(zip(audio, np.asarray(lengths).tolist(), strict=True)):
        out[row, :length] = pcm[:length]
    return out / np.float32(_FULL_SCALE)


def log_mel(signal: np.ndarray, config: AudioFeatureConfig) -> np.ndarray:
    """float32 [B, T, num_mel_bins]: log-mel energies of float32 [B, N] signals,
    `T = num_frames(N, config)` (`inputs.audio_features.log_mel`)."""
    frames = num_frames(int(signal.shape[1]), config)
    starts = np.arange(frames) * config.frame_step
    taken = starts[:, None] + np.arange(config.frame_length)[None, :]
    windowed = signal[:, taken] * hann_window(config.frame_length)
    spectrum = np.fft.rfft(windowed, n=config.fft_length, axis=-1)
    # The filterbank and the log in float32, as the graph computes them (a float64 matmul would
    # take 4 times as long).
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
    weights = mel_matrix(
        config.num_mel_bins,
        config.fft_length // 2 + 1,
        config.sample_rate,
        config.lower_edge_hertz,
        config.upper_edge_hertz or config.sample_rate / 2,
    )
    return np.log(power @ weights + np.float32(config.log_offset))


def mean_normalize(features: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`features` [B, T, F] less each record's mean over its valid frames (`mask` [B, T]), per
    mel bin; padded frames 0."""
    weights = mask.astype(features.dtype)[:, :, None]
    count = np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
    mean = (features * weights).sum(axis=1, keepdims=True) / count
    return (features - mean) * weights


def mask_bands(
    extent: np.ndarray, param: int, seed: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, width) int64 [B] of one mask per example, as the graph's SpecAugment draws them:
    width uniform in [0, param) (at most `extent`), start uniform where the band fits.

    Args:
      extent: int64 [B], the bins or valid frames of each example.
      param: the mask parameter (`SpecAugment.*_mask_param`).
      seed: int64 [2], this mask's seed (`spec_augment_bands` folds it).
      positions: int64 [B], each example's position in its global batch.
    """
    extent = np.asarray(extent, np.int64)
    width = (keyed_uniform(seed, positions, salt=0) * param).astype(np.int64)
    width = np.minimum(np.minimum(width, param - 1), extent)
    room = extent - width + 1
    uniform = keyed_uniform(seed, positions, salt=1)
    start = np.minimum((uniform * room.astype(np.float64)).astype(np.int64), room - 1)
    return start, width


def spec_augment_bands(
    bins: int, lengths: np.ndarray, augment: SpecAugment, seed: np.ndarray, positions: np.ndarray
) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Every mask of a batch: ``freq`` and ``time``, one (start, width) pair of int64 [B] per
    mask, drawn from the batch's `seed` as `inputs.audio_features.spec_augment` draws them.

    Args:
      bins: mel bins.
      lengths: int64 [B], valid frames per example.
      augment: how many masks, and how wide.
      seed: int64 [2], the batch's seed.
      positions: int64 [B], each example's position in its global batch.
    """
    seed = np.asarray(seed, np.int64)
    freq_seed = fold_in_int32(seed, SALT_FREQ_MASK)
    time_seed = fold_in_int32(seed, SALT_TIME_MASK)
    lengths = np.asarray(lengths, np.int64)
    every_bin = np.full(lengths.shape, bins, np.int64)
    return {
        "freq": [
            mask_bands(every_bin, augment.freq_mask_param, fold_in_int32(freq_seed, i), positions)
            for i in range(augment.num_freq_masks)
        ],
        "time": [
            mask_bands(lengths, augment.time_mask_param, fold_in_int32(time_seed, i), positions)
            for i in range(augment.num_time_masks)
        ],
    }


def spec_augment(
    features: np.ndarray,
    lengths: np.ndarray,
    augment: SpecAugment,
    seed: np.ndarray,
    positions: np.ndarray,
) -> np.ndarray:
    """`features` [B, T, F] with each example's `spec_augment_bands` set to 0."""
    bands = spec_augment_bands(features.shape[2], lengths, augment, seed, positions)
    keep = np.ones(features.shape, bool)
    bin_ids = np.arange(features.shape[2])[None, None, :]
    frame_ids = np.arange(features.shape[1])[None, :, None]
    for axis, ids in (("freq", bin_ids), ("time", frame_ids)):
        for start, width in bands[axis]:
            keep &= ~((ids >= start[:, None, None]) & (ids < (start + width)[:, None, None]))
    return np.where(keep, features, np.float32(0.0))


def audio_features(
    audio: Sequence[np.ndarray],
    config: AudioFeatureConfig,
    seed: np.ndarray | None = None,
    *,
    index: np.ndarray | None = None,
    sample_rate: np.ndarray | None = None,
    positions: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Log-mel features of a batch of int16 PCM records (`inputs.audio_features.audio_features`).

    Args:
      audio: B int16 [n] arrays of mono PCM (`records.AudioDecoder`'s ``audio``).
      config: what to compute.
      seed: int64 [2] stateless seed of the crop offsets and masks (the sampler's batch seed);
        required when the config draws (``"crop"`` mode or `spec_augment`).
      index: int64 [B] record numbers, named in errors.
      sample_rate: int64 [B], each record's rate; another rate than `config.sample_rate` is an
        error.
      positions: int64 [B], each record's position in its global batch (keys its draws with
        `seed`); None: `0..B-1`.

    Returns:
      ``features`` float32 [B, T, num_mel_bins], ``lengths`` int64 [B], ``mask`` bool [B, T]:
      what the graph front end returns for the same records, seed and positions.

    Raises:
      ValueError: no `seed` while the config draws; an empty record, a record at another rate,
        or in ``"pad"`` mode one shorter than a frame (naming the records).
      TypeError: a record that is not a 1-D int16 array.
    """
    if (config.mode == "crop" or config.spec_augment is not None) and seed is None:
        raise ValueError("audio_features needs a seed for crop mode or SpecAugment")
    where = np.arange(len(audio)) if index is None else np.asarray(index, np.int64)
    if sample_rate is not None:
        wrong = np.asarray(sample_rate, np.int64) != config.sample_rate
        if wrong.any():
            raise ValueError(
                f"expected audio at {config.sample_rate} Hz; records at other rates: "
                f"{where[wrong]}, rates: {np.asarray(sample_rate)[wrong]}"
            )
    lengths_in = pcm_lengths(audio, where)
    positions = np.arange(len(audio)) if positions is None else np.asarray(positions, np.int64)
    if config.mode == "crop":
        crop_seed = fold_in_int32(seed, SALT_CROP)
        signal = random_crop(audio, config.crop_samples, crop_seed, positions)
        lengths = np.full(len(audio), config.crop_frames, np.int64)
    else:
        too_short = lengths_in < config.frame_length
        if too_short.any():
            raise ValueError(
                f"pad mode needs records of at least one frame ({config.frame_length} samples; "
                f"the audio job stores none shorter than {layout.MIN_AUDIO_SECONDS} s); shorter "
                f"records: {where[too_short]}, samples: {lengths_in[too_short]}"
            )
        if config.max_pad_samples is not None:
            lengths_in = np.minimum(lengths_in, config.max_pad_samples)
        signal = decode_padded(audio, lengths_in)
        lengths = num_frames(lengths_in, config)
    features = log_mel(signal, config)
    mask = np.arange(features.shape[1])[None, :] < lengths[:, None]
    if config.mean_normalization:
        features = mean_normalize(features, mask)
    else:
        features = np.where(mask[:, :, None], features, np.float32(0.0))
    if config.spec_augment is not None:
        features = spec_augment(features, lengths, config.spec_augment, seed, positions)
    return {"features": features, "lengths": lengths, "mask": mask}
