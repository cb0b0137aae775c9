"""The audio of a Grain batch: its records' log-mels, with or without speaker augmentation.

What a tf.data sampler's `_load_batch` computes after it parses a batch's audio records, for the
Grain samplers (class-balanced, mixed), in NumPy: `AudioBatches` takes a batch's decoded records
(``audio`` int16 [n] each, ``sample_rate``, and ``label`` where the records carry one), its
record numbers, labels, seed and positions, and returns ``features``, ``lengths`` and ``mask``:
`plans.audio_front.audio_features` without augmentation, `plans.speaker_front.SpeakerFront`
(speed, reverberation, noise, then the same front end) with it. Before computing, it refuses in
one line records at another rate than the front end's and, where the sampler asks, records whose
own label is not the one their class index gives them (tf.data's check of a run's records).

Example:

    audio = AudioBatches(AudioFeatureConfig(), SpeakerAugmentConfig(noise=noise), num_classes=40)
    out = audio.features_of(records, index=index, label=label, seed=seed, positions=positions)
    out["features"].shape   # [B, crop_frames, num_mel_bins]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tfx_dynamic_inputs.plans import audio_front
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.speaker_front import SpeakerFront


def check_front_options(features: object, augment: object) -> None:
    """Refuses, in one line, a front end or an augmentation of the wrong type, or an augmentation
    without a front end (a sampler's `features` and `augment` arguments).

    Args:
      features: an `AudioFeatureConfig` or None.
      augment: a `SpeakerAugmentConfig` or None.

    Raises:
      TypeError: either of another type.
      ValueError: `augment` without `features`.

    Example:

        check_front_options(AudioFeatureConfig(), None)   # passes
    """
    if features is not None and not isinstance(features, AudioFeatureConfig):
        raise TypeError(
            f"features must be an AudioFeatureConfig or None, got {type(features).__name__}"
        )
    if augment is not None and not isinstance(augment, SpeakerAugmentConfig):
        raise TypeError(
            f"augment must be a SpeakerAugmentConfig or None, got {type(augment).__name__}"
        )
    if augment is not None and features is None:
        raise ValueError("augment needs the audio front end: pass features (an AudioFeatureConfig)")


class AudioBatches:
    """A front end, and an augmentation bound to its noise and RIR clips, for a sampler's batches.

    Args:
      features: the front end (`AudioFeatureConfig`, taken as given).
      augment: the speaker augmentation (crop mode only), or None.
      num_classes: C, the classes before speed perturbation (a sample's factor is its
        `label // C`); needed with `augment`.

    Raises:
      TypeError, ValueError: `check_front_options`'s; `augment` without a `num_classes` >= 1;
        `SpeakerFront`'s (a front end in pad mode, a noise or RIR run that is empty, silent or
        at another rate), each in one line.

    Example:

        audio = AudioBatches(AudioFeatureConfig(mode="pad"))
        audio.features_of(records, index=index, label=label, seed=seed, positions=positions)
    """

    def __init__(
        self,
        features: AudioFeatureConfig,
        augment: SpeakerAugmentConfig | None = None,
        num_classes: int | None = None,
    ):
        check_front_options(features, augment)
        if features is None:
            raise ValueError("AudioBatches needs features (an AudioFeatureConfig)")
        self.features = features
        self.front: SpeakerFront | None = None
        if augment is not None:
            if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
                raise TypeError(f"num_classes must be an int with augment, got {num_classes!r}")
            if num_classes < 1:
                raise ValueError(f"num_classes must be >= 1 with augment, got {num_classes}")
            self.front = SpeakerFront(augment, features, int(num_classes))

    def features_of(
        self,
        records: object,
        *,
        index: np.ndarray,
        label: np.ndarray,
        seed: np.ndarray,
        positions: np.ndarray,
        record_labels: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """The features of one batch, as the tf.data sampler's for the same plan row.

        Args:
          records: the batch's decoded records (`batch_reads.BatchReader.read_checked`'s): a
            dict of ``audio`` (B int16 [n]) and ``sample_rate`` (int64 [B]), with ``label``
            (int64 [B]) where the records carry one; anything when B is 0 (all skipped).
          index: int64 [B] record numbers (named in errors).
          label: int64 [B] the plan's labels (derived classes with speed perturbation).
          seed: int64 [2], the plan row's batch seed.
          positions: int64 [B], each sample's position in its global batch (keys its draws).
          record_labels: int64 [B], the label each record must carry (e.g. `label % C` for one
            run), checked where the records hold ``label``; None: not checked.

        Returns:
          ``features`` float32 [B, T, num_mel_bins], ``lengths`` int64 [B], ``mask`` bool [B, T].

        Raises:
          ValueError: records that are not a dict of audio and sample_rate, records at another
            rate, or records whose label differs from `record_labels` (naming them); the front
            end's (an empty record; in pad mode one shorter than a frame).
          TypeError: a record that is not a 1-D int16 array.
        """
        index = np.asarray(index, np.int64)
        if not len(index):
            # Every sample skipped: the front end's empty batch, [0, T, F] (as tf.data's).
            return audio_front.audio_features([], self.features, seed)
        if not isinstance(records, Mapping) or not {"audio", "sample_rate"} <= records.keys():
            raise ValueError(
                "the audio front end needs records of audio and sample_rate (a run's audio "
                f"records), got {type(records).__name__}"
            )
        _check_rates(records["sample_rate"], self.features.sample_rate, index)
        if record_labels is not None and "label" in records:
            _check_labels(np.asarray(records["label"]), np.asarray(record_labels), index)
        audio = list(records["audio"])
        if self.front is None:
            return audio_front.audio_features(
                audio, self.features, seed, index=index, positions=positions
            )
        audio_front.pcm_lengths(audio, index)  # names a bad record by its number
        return self.front.features_of(audio, label, seed, positions)


def _check_rates(sample_rate: object, expected: int, index: np.ndarray) -> None:
    """Refuses records at another rate than the front end's, naming them (tf.data's assert)."""
    rates = np.asarray(sample_rate, np.int64)
    wrong = rates != expected
    if wrong.any():
        raise ValueError(
            f"expected audio at {expected} Hz; records at other rates: {index[wrong]}, rates: "
            f"{rates[wrong]}"
        )


def _check_labels(carried: np.ndarray, expected: np.ndarray, index: np.ndarray) -> None:
    """Refuses records whose own label is not their class index's, naming them."""
    mismatch = carried != expected
    if mismatch.any():
        raise ValueError(
            f"records whose label differs from the class index: {index[mismatch][:16]} carry "
            f"{carried[mismatch][:16]}, the class index gives {expected[mismatch][:16]}"
        )
