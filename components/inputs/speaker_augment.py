"""Speaker augmentation in the graph: speed perturbation, reverberation, additive noise.

What WeSpeaker and voxceleb_trainer do to training segments, as batched core-TF ops whose every
random draw is `index_shuffle.keyed_uniform` of (the batch's seed, the sample's position in its
global batch, a salt per draw). The samplers derive the batch seed from (seed, epoch, global
batch), so an augmented batch is a pure function of the plan: a run resumed mid-epoch, on any
replica count that keeps the global batch, draws the same noise clip, SNR, RIR and crop for
every sample as the uninterrupted run.

Per sample, in this order (WeSpeaker's):

1. **Speed perturbation** (`speed_factors`, default none; WeSpeaker's ``(1.0, 0.9, 1.1)``): a
   perturbed speaker is a new class. With `K` factors the class-balanced plan sees `K x C`
   classes: class `c` at factor index `k` is class `k * C + c` (so factor 1.0 first keeps the
   original ids), and each derived class is planned like any other (every one every epoch).
   The factor of a sample is its label's `label // C`. `segment * factor` input samples (plus
   the filter's context) are cropped and resampled to `segment` samples, `y[n] = x(n * factor)`
   (faster and higher for factors above 1, as sox's ``speed``), by a polyphase windowed-sinc
   filter computed as one strided `conv1d` (`augment_signals.perturb_speed`), which matches
   `soxr` on band-limited signals.
2. **Reverberation** (`Reverberation`), with probability `probability`: a RIR of the RIR run
   (chosen by a keyed draw), its first `max_rir_seconds` from its direct-path peak (the largest
   absolute sample: the output stays aligned with the dry speech), normalized to **unit energy**
   (as WeSpeaker and voxceleb_trainer do, so a diffuse signal keeps its power), convolved by FFT
   (`tf.signal.rfft` / `irfft`) and truncated to the segment. RIRs are zero-padded to the
   longest kept RIR of the run, not to `max_rir_seconds` (at most `MAX_RIR_SECONDS`).
3. **Additive noise** (`AdditiveNoise`), with probability `probability`: a clip of the noise run
   (chosen by a keyed draw), a keyed window of the segment's length (short clips looped), scaled
   so that the segment's power over the noise's is an SNR drawn uniformly in `snr_db` (dB,
   within [`MIN_SNR_DB`, `MAX_SNR_DB`]). A window below the silence floor is not mixed in (the
   sample is not ``noisy``).

The front end then computes log-mels and SpecAugment exactly as `audio_features` does.
Noise clips and RIRs come from `augment_clips.ClipBank`s: silent clips are left out when the run
is opened (counted in `noise_report` / `rir_report`; a run of silence only is refused), and each
batch gathers only the windows it draws, so memory follows the segments, not the clips.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.audio_features import (
    log_mel,
    mean_normalize,
    pcm16_num_samples,
    random_crop,
    spec_augment,
)
from tfx_dynamic_inputs.inputs.augment_clips import SILENCE_FLOOR_DB, ClipBank, ClipReport
from tfx_dynamic_inputs.inputs.augment_signals import (
    mean_power,
    per_row,
    perturb_speed,
    reverberate,
    snr_scale,
    speed_input_samples,
    unit_energy,
)
from tfx_dynamic_inputs.inputs.index_shuffle import keyed_uniform
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions, open_run

# The bounds, stated without TensorFlow (the pipeline config checks them before it loads) and
# named here as the augmentation's own.
from tfx_dynamic_inputs.option_bounds import MAX_RIR_SECONDS as MAX_RIR_SECONDS
from tfx_dynamic_inputs.option_bounds import MAX_SNR_DB as MAX_SNR_DB
from tfx_dynamic_inputs.option_bounds import MIN_SNR_DB as MIN_SNR_DB
from tfx_dynamic_inputs.option_bounds import check_snr_range as check_snr_range

# The options and the derived classes, stated without TensorFlow (the NumPy augmentation,
# plans.speaker_front, and the Grain sampler take them).
from tfx_dynamic_inputs.plans.augment_options import AdditiveNoise as AdditiveNoise
from tfx_dynamic_inputs.plans.augment_options import Reverberation as Reverberation
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig as SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.speed_classes import derived_class_names as derived_class_names
from tfx_dynamic_inputs.plans.speed_classes import derived_row_splits as derived_row_splits

# Draws of a batch's seed, after audio_features' (0-2) and the plans' salts.
_SALT_NOISE_PICK = 30
_SALT_NOISE_APPLY = 31
_SALT_NOISE_SNR = 32
_SALT_NOISE_CROP = 33
_SALT_RIR_PICK = 34
_SALT_RIR_APPLY = 35
_SALT_SPEECH_CROP = 0  # audio_features' crop stream: factor 1.0 crops as the plain front end


class SpeakerAugmenter:
    """A `SpeakerAugmentConfig` bound to its runs' stores and a front end; built by the sampler.

    Args:
      config: the augmentation.
      features: the speech front end (``"crop"`` mode: the segment is `crop_samples`).
      num_classes: C, the classes of the speech run before speed perturbation.
      memory_budget_bytes: the kept noise and RIR samples are each held in memory under it
        (else read by window from disk, `augment_clips`).

    Attributes:
      noise_report, rir_report: what opening the runs found (`augment_clips.ClipReport`: the
        silent clips left out), or None.

    Raises:
      ValueError: a front end in ``"pad"`` mode; a noise or RIR run that is empty, of silence
        only (below `augment_clips.SILENCE_FLOOR_DB`) or at another rate than
        `features.sample_rate` (one line naming the run and the fix).

    Example:

        augmenter = SpeakerAugmenter(config, AudioFeatureConfig(), num_classes=22)
        out = augmenter.features_of(audio, label, seed, positions)
    """

    def __init__(
        self,
        config: SpeakerAugmentConfig,
        features: AudioFeatureConfig,
        num_classes: int,
        memory_budget_bytes: int = 1 << 30,
    ):
        if features.mode != "crop":
            raise ValueError(
                "speaker augmentation needs AudioFeatureConfig(mode='crop') (training segments); "
                f"got mode={features.mode!r}"
            )
        self.config = config
        self.features = features
        self.num_classes = int(num_classes)
        options = StoreOptions(memory_budget_bytes=memory_budget_bytes)
        self._noise = _clip_bank(config.noise, "noise", features.sample_rate, options, None)
        rir_samples = None
        if config.reverb is not None:
            rir_samples = int(round(config.reverb.max_rir_seconds * features.sample_rate))
        self._rirs = _clip_bank(config.reverb, "RIR", features.sample_rate, options, rir_samples)
        self.noise_report: ClipReport | None = None if self._noise is None else self._noise.report
        self.rir_report: ClipReport | None = None if self._rirs is None else self._rirs.report

    def service_problems(self) -> list[str]:
        """Why a tf.data service worker cannot augment (empty: it can): clips read from disk."""
        banks = [b for b in (self._noise, self._rirs) if b is not None]
        return [problem for bank in banks for problem in bank.service_problems()]

    def derived_classes(
        self, row_splits: np.ndarray, classes: list[str] | None
    ) -> tuple[np.ndarray, list[str] | None]:
        """The class CSR and names the plan sees: `K x C` derived classes with K speeds.

        Args:
          row_splits: int64 [C + 1], the speech run's class index.
          classes: its C class names, or None.

        Returns:
          (`derived_row_splits`, `derived_class_names`).
        """
        splits = derived_row_splits(row_splits, self.config.num_speeds)
        return splits, derived_class_names(classes, self.config.speed_factors)

    def features_of(
        self,
        audio: tf.Tensor,
        label: tf.Tensor,
        seed: tf.Tensor,
        positions: tf.Tensor,
        sample_rate: tf.Tensor | None = None,
    ) -> dict[str, tf.Tensor]:
        """Augmented log-mel features of a batch (the sampler's ``features``/``lengths``/``mask``).

        Args:
          audio: tf.string [B] int16 PCM records.
          label: int64 [B] derived class ids (their factor is `label // C`).
          seed: int64 [2], the batch's seed.
          positions: int64 [B], each sample's position in its global batch.
          sample_rate: int64 [B], each record's rate; when given, another rate than the front
            end's is an error.

        Returns:
          ``features`` float32 [B, T, F], ``lengths`` int64 [B], ``mask`` bool [B, T].
        """
        checks = []
        if sample_rate is not None:
            checks.append(
                tf.debugging.assert_equal(
                    tf.cast(sample_rate, tf.int64),
                    tf.constant(self.features.sample_rate, tf.int64),
                    message=f"expected audio at {self.features.sample_rate} Hz",
                )
            )
        with tf.control_dependencies(checks):
            signal = self.waveforms(audio, label, seed, positions)["audio"]
        config = self.features
        features = log_mel(signal, config)
        lengths = tf.fill(tf.shape(label), tf.constant(config.crop_frames, tf.int64))
        mask = tf.sequence_mask(lengths, config.crop_frames)
        if config.mean_normalization:
            features = mean_normalize(features, mask)
        if config.spec_augment is not None:
            features = spec_augment(features, lengths, config.spec_augment, seed, positions)
        features = tf.ensure_shape(features, [None, config.crop_frames, config.num_mel_bins])
        return {"features": features, "lengths": lengths, "mask": mask}

    def waveforms(
        self,
        audio: tf.Tensor,
        label: tf.Tensor,
        seed: tf.Tensor,
        positions: tf.Tensor,
    ) -> dict[str, tf.Tensor]:
        """The augmented segments and what was drawn for each (see the module for the order).

        Args:
          audio, label, seed, positions: as `features_of`.

        Returns:
          ``audio`` float32 [B, segment]; ``clean`` float32 [B, segment] (speed-perturbed, dry);
          ``reverberated`` and ``noisy`` bool [B]; ``snr_db`` float32 [B] (drawn for every
          sample, used where ``noisy``); ``factor`` float32 [B]; ``rir`` and ``noise_clip``
          int64 [B], the record numbers drawn (-1 without RIRs / noise).
        """
        seed, positions, label = (tf.cast(t, tf.int64) for t in (seed, positions, label))
        segment = self.features.crop_samples
        num_samples = pcm16_num_samples(audio)
        speed = label // self.num_classes if self.config.speed_factors else tf.zeros_like(label)
        signal = self._speed_crops(audio, num_samples, speed, seed, positions, segment)
        clean = signal
        batch = tf.shape(label)[0]
        out = {"factor": tf.gather(tf.constant(self.config.speed_factors or (1.0,)), speed)}
        out["reverberated"] = tf.zeros([batch], tf.bool)
        out["rir"] = tf.fill([batch], tf.constant(-1, tf.int64))
        if self._rirs is not None:
            applied = (
                keyed_uniform(seed, positions, _SALT_RIR_APPLY) < self.config.reverb.probability
            )
            rir = _draw(self._rirs, seed, positions, _SALT_RIR_PICK)
            # Padded to the longest kept RIR (each is cut at max_rir_seconds from its peak).
            taken = self._rirs.windows(rir, tf.zeros_like(rir), self._rirs.longest, loop=False)
            signal = tf.where(applied[:, None], reverberate(signal, unit_energy(taken)), signal)
            out["reverberated"], out["rir"] = applied, tf.gather(self._rirs.records, rir)
        out["noisy"] = tf.zeros([batch], tf.bool)
        out["snr_db"] = tf.zeros([batch], tf.float32)
        out["noise_clip"] = tf.fill([batch], tf.constant(-1, tf.int64))
        if self._noise is not None:
            noise_config = self.config.noise
            applied = keyed_uniform(seed, positions, _SALT_NOISE_APPLY) < noise_config.probability
            clip = _draw(self._noise, seed, positions, _SALT_NOISE_PICK)
            noise_seed = tf.random.experimental.stateless_fold_in(seed, _SALT_NOISE_CROP)
            noise = self._noise.windows(
                clip,
                _window_start(self._noise.lengths(clip), segment, noise_seed, positions),
                segment,
                loop=True,
            )
            # A silent window of an audible clip (a pause in it) would leave the sample clean.
            applied = tf.logical_and(applied, mean_power(noise) >= 10.0 ** (SILENCE_FLOOR_DB / 10))
            low, high = noise_config.snr_db
            uniform = keyed_uniform(seed, positions, _SALT_NOISE_SNR)[:, None]
            snr_db = per_row(lambda u: tf.cast(low + u * (high - low), tf.float32), uniform)[:, 0]
            mixed = signal + snr_scale(signal, noise, snr_db) * noise
            signal = tf.where(applied[:, None], mixed, signal)
            out["noisy"], out["snr_db"] = applied, snr_db
            out["noise_clip"] = tf.gather(self._noise.records, clip)
        out["audio"] = tf.ensure_shape(signal, [None, segment])
        out["clean"] = clean
        return out

    def _speed_crops(self, audio, num_samples, speed, seed, positions, segment) -> tf.Tensor:
        """Each record's segment at its factor: a keyed crop of the input it needs, resampled."""
        crop_seed = tf.random.experimental.stateless_fold_in(seed, _SALT_SPEECH_CROP)
        factors = self.config.speed_factors or (1.0,)
        if len(factors) == 1 and factors[0] == 1.0:
            return random_crop(audio, num_samples, segment, crop_seed, positions)
        signal = tf.zeros([tf.shape(audio)[0], segment], tf.float32)
        for k, factor in enumerate(factors):
            rows = tf.where(tf.equal(speed, k))
            picked = [tf.gather_nd(t, rows) for t in (audio, num_samples, positions)]
            if factor == 1.0:
                part = random_crop(*picked[:2], segment, crop_seed, picked[2])
            else:
                needed = speed_input_samples(factor, segment)
                crop = random_crop(*picked[:2], needed, crop_seed, picked[2])
                part = perturb_speed(crop, factor, segment)
            signal = tf.tensor_scatter_nd_update(signal, rows, part)
        return signal


def _draw(bank: ClipBank, seed: tf.Tensor, positions: tf.Tensor, salt: int) -> tf.Tensor:
    """int64 [B]: a clip of `bank` per sample, by a keyed draw."""
    uniform = keyed_uniform(seed, positions, salt)
    return tf.minimum(tf.cast(uniform * bank.num_clips, tf.int64), bank.num_clips - 1)


def _window_start(lengths, segment: int, seed: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """int64 [B]: a uniformly placed window's first sample, drawn as `random_crop` draws it."""
    room = tf.maximum(lengths - segment, 0) + 1
    uniform = keyed_uniform(seed, positions, salt=0)
    return tf.minimum(tf.cast(uniform * tf.cast(room, tf.float64), tf.int64), room - 1)


def _clip_bank(part, what: str, sample_rate: int, options: StoreOptions, max_samples):
    """The `ClipBank` of a noise or RIR run, checked: committed, not empty, at the rate."""
    if part is None:
        return None
    run = part.run if isinstance(part.run, Run) else open_run(str(part.run))
    if run.sample_rate is not None and run.sample_rate != sample_rate:
        raise ValueError(
            f"the {what} run {run.uri} stores audio at {run.sample_rate} Hz but the speech is at "
            f"{sample_rate} Hz; materialize it with --sample_rate {sample_rate}"
        )
    if part.record_set not in run.record_sets or run.num_records(part.record_set) == 0:
        raise ValueError(
            f"the {what} run {run.uri} has no records in record set {part.record_set!r} (it has "
            f"{', '.join(f'{s}={run.num_records(s)}' for s in run.record_sets) or 'none'}); "
            f"give a run with {what} clips"
        )
    return ClipBank.open(run, part.record_set, what, options, max_samples)
