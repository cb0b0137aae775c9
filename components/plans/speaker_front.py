"""The speaker augmentation in NumPy: `inputs.speaker_augment`'s algorithm, without TensorFlow.

Per sample, in the graph's order and with its keyed draws (`plans.keyed_hash.keyed_uniform` of
the same salts, bit for bit): speed perturbation (the class's factor, a keyed crop of the input
it needs, the same polyphase kernel: `plans.speed_filter`), reverberation (a keyed RIR of the
`ClipSet`, at unit energy, FFT convolution), additive noise (a keyed clip, a keyed window, a
keyed SNR), then `plans.audio_front`'s log-mel, mean normalization and SpecAugment. The draws
(factor, RIR, noise clip, window, SNR, whether applied) are exactly the graph's; the samples are
computed in float64 where the graph computes float32, so they agree within float32 rounding
(tests/core/test_speaker_front.py states the bounds). See `inputs.speaker_augment` for why.
"""

from __future__ import annotations

import os

import numpy as np

from tfx_dynamic_inputs.plans import audio_front
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.clip_levels import SILENCE_FLOOR_DB
from tfx_dynamic_inputs.plans.clip_sets import ClipSet
from tfx_dynamic_inputs.plans.keyed_hash import keyed_uniform
from tfx_dynamic_inputs.plans.speed_filter import perturb_speed, speed_input_samples

# Draws of a batch's seed, as `inputs.speaker_augment` salts them (after audio_front's 0-2).
SALT_NOISE_PICK = 30
SALT_NOISE_APPLY = 31
SALT_NOISE_SNR = 32
SALT_NOISE_CROP = 33
SALT_RIR_PICK = 34
SALT_RIR_APPLY = 35
_FLOOR_POWER = np.float32(10.0 ** (SILENCE_FLOOR_DB / 10))


class SpeakerFront:
    """A `SpeakerAugmentConfig` bound to its clips and a crop front end, in NumPy.

    Args:
      config: the augmentation (its runs: folders, or `inputs.run.Run`s by their `uri`).
      features: the speech front end, ``"crop"`` mode.
      num_classes: C, the classes of the speech run before speed perturbation.

    Raises:
      ValueError: a front end in ``"pad"`` mode; a noise or RIR run that is empty, of silence
        only, or at another rate (one line naming the run).

    Example:

        front = SpeakerFront(config, AudioFeatureConfig(), num_classes=22)
        out = front.features_of(audio, label, seed, positions)
    """

    def __init__(
        self, config: SpeakerAugmentConfig, features: AudioFeatureConfig, num_classes: int
    ):
        if features.mode != "crop":
            raise ValueError(
                "speaker augmentation needs AudioFeatureConfig(mode='crop') (training segments); "
                f"got mode={features.mode!r}"
            )
        self.config = config
        self.features = features
        self.num_classes = int(num_classes)
        rate = features.sample_rate
        self.noise: ClipSet | None = None
        self.rirs: ClipSet | None = None
        if config.noise is not None:
            self.noise = ClipSet.open(
                _run_dir(config.noise.run), config.noise.record_set, "noise", rate
            )
        if config.reverb is not None:
            kept = int(round(config.reverb.max_rir_seconds * rate))
            self.rirs = ClipSet.open(
                _run_dir(config.reverb.run), config.reverb.record_set, "RIR", rate, kept
            )

    def features_of(
        self,
        audio: list[np.ndarray],
        label: np.ndarray,
        seed: np.ndarray,
        positions: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Augmented log-mel features of a batch, as `SpeakerAugmenter.features_of`.

        Args:
          audio: B int16 [n] records.
          label: int64 [B] derived class ids (their factor is `label // C`).
          seed: int64 [2], the batch's seed.
          positions: int64 [B], each sample's position in its global batch.

        Returns:
          ``features`` float32 [B, T, F], ``lengths`` int64 [B], ``mask`` bool [B, T].
        """
        signal = self.waveforms(audio, label, seed, positions)["audio"]
        config = self.features
        features = audio_front.log_mel(signal, config)
        lengths = np.full(len(audio), config.crop_frames, np.int64)
        mask = np.ones((len(audio), config.crop_frames), bool)
        if config.mean_normalization:
            features = audio_front.mean_normalize(features, mask)
        if config.spec_augment is not None:
            features = audio_front.spec_augment(
                features, lengths, config.spec_augment, seed, np.asarray(positions, np.int64)
            )
        return {"features": features, "lengths": lengths, "mask": mask}

    def waveforms(
        self,
        audio: list[np.ndarray],
        label: np.ndarray,
        seed: np.ndarray,
        positions: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The augmented segments and what was drawn for each, as `SpeakerAugmenter.waveforms`.

        Args:
          audio, label, seed, positions: as `features_of`.

        Returns:
          ``audio`` and ``clean`` float32 [B, segment]; ``reverberated``, ``noisy`` bool [B];
          ``snr_db``, ``factor`` float32 [B]; ``rir``, ``noise_clip`` int64 [B] (record
          numbers, -1 without RIRs / noise).
        """
        seed = np.asarray(seed, np.int64)
        positions = np.asarray(positions, np.int64)
        label = np.asarray(label, np.int64)
        audio_front.pcm_lengths(audio)
        segment = self.features.crop_samples
        factors = self.config.speed_factors or (1.0,)
        speed = label // self.num_classes if self.config.speed_factors else np.zeros_like(label)
        signal = self._speed_crops(audio, speed, seed, positions, segment)
        batch = len(label)
        out = {
            "clean": signal,
            "factor": np.array(factors, np.float32)[speed],
            "reverberated": np.zeros(batch, bool),
            "rir": np.full(batch, -1, np.int64),
            "noisy": np.zeros(batch, bool),
            "snr_db": np.zeros(batch, np.float32),
            "noise_clip": np.full(batch, -1, np.int64),
        }
        if self.rirs is not None:
            applied = (
                keyed_uniform(seed, positions, SALT_RIR_APPLY) < self.config.reverb.probability
            )
            rir = _draw(self.rirs, seed, positions, SALT_RIR_PICK)
            taken = self.rirs.windows(rir, np.zeros_like(rir), self.rirs.longest, loop=False)
            # Only the reverberated rows are convolved (each row's FFT is its own).
            rows = np.flatnonzero(applied)
            signal = signal.copy()
            signal[rows] = reverberate(signal[rows], unit_energy(taken[rows]))
            out["reverberated"], out["rir"] = applied, self.rirs.records[rir]
        if self.noise is not None:
            noise_config = self.config.noise
            applied = keyed_uniform(seed, positions, SALT_NOISE_APPLY) < noise_config.probability
            clip = _draw(self.noise, seed, positions, SALT_NOISE_PICK)
            noise_seed = audio_front.fold_in_int32(seed, SALT_NOISE_CROP)
            starts = audio_front.keyed_starts(
                self.noise.lengths(clip), segment, noise_seed, positions
            )
            noise = self.noise.windows(clip, starts, segment, loop=True)
            applied &= mean_power(noise) >= _FLOOR_POWER
            low, high = noise_config.snr_db
            uniform = keyed_uniform(seed, positions, SALT_NOISE_SNR)
            snr_db = (low + uniform * (high - low)).astype(np.float32)
            mixed = signal + snr_scale(signal, noise, snr_db) * noise
            signal = np.where(applied[:, None], mixed, signal)
            out["noisy"], out["snr_db"] = applied, snr_db
            out["noise_clip"] = self.noise.records[clip]
        out["audio"] = signal.astype(np.float32)
        return out

    def _speed_crops(self, audio, speed, seed, positions, segment) -> np.ndarray:
        """Each record's segment at its factor: a keyed crop of the input it needs, resampled."""
        crop_seed = audio_front.fold_in_int32(seed, audio_front.SALT_CROP)
        signal = np.zeros((len(audio), segment), np.float32)
        for k, factor in enumerate(self.config.speed_factors or (1.0,)):
            rows = np.flatnonzero(speed == k)
            if not len(rows):
                continue
            picked = [audio[row] for row in rows.tolist()]
            if factor == 1.0:
                signal[rows] = audio_front.random_crop(picked, segment, crop_seed, positions[rows])
            else:
                needed = speed_input_samples(factor, segment)
                crop = audio_front.random_crop(picked, needed, crop_seed, positions[rows])
                signal[rows] = perturb_speed(crop, factor, segment)
        return signal


def reverberate(signal: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """float32 [B, S]: each signal [B, S] convolved with its RIR [B, R], truncated to S (FFT)."""
    length = signal.shape[1] + rir.shape[1] - 1
    fft_length = 1 << (length - 1).bit_length()
    spectrum = np.fft.rfft(signal, fft_length) * np.fft.rfft(rir, fft_length)
    return np.fft.irfft(spectrum, fft_length)[:, : signal.shape[1]].astype(np.float32)


def unit_energy(rir: np.ndarray) -> np.ndarray:
    """float32 [B, R]: each RIR scaled to a sum of squares of 1 (0 for silence)."""
    energy = _row_sum(np.square(rir))
    return rir / np.sqrt(np.maximum(energy, np.float32(1e-20)))


def mean_power(signal: np.ndarray) -> np.ndarray:
    """float32 [B]: each row's mean square."""
    return _row_sum(np.square(signal))[:, 0] / np.float32(signal.shape[1])


def snr_scale(speech: np.ndarray, noise: np.ndarray, snr_db: np.ndarray) -> np.ndarray:
    """float32 [B, 1]: the gain per row that puts `noise` at `snr_db` below `speech`."""
    speech_energy = _row_sum(np.square(speech)).astype(np.float64)
    noise_energy = np.maximum(_row_sum(np.square(noise)), np.float32(1e-20)).astype(np.float64)
    ratio = speech_energy / (noise_energy * 10.0 ** (snr_db.astype(np.float64)[:, None] / 10.0))
    return np.sqrt(ratio).astype(np.float32)


def _row_sum(values: np.ndarray) -> np.ndarray:
    """float32 [B, N] -> [B, 1] sums accumulated in float64, rounded to float32 (the graph's)."""
    return values.astype(np.float64).sum(axis=1, keepdims=True).astype(np.float32)


def _draw(clips: ClipSet, seed: np.ndarray, positions: np.ndarray, salt: int) -> np.ndarray:
    """int64 [B]: a clip per sample, by a keyed draw (`inputs.speaker_augment._draw`)."""
    uniform = keyed_uniform(seed, positions, salt)
    return np.minimum((uniform * clips.num_clips).astype(np.int64), clips.num_clips - 1)


def _run_dir(run: object) -> str | os.PathLike:
    """A run's folder: a path as given, or an `inputs.run.Run`'s `uri`."""
    return getattr(run, "uri", run)
