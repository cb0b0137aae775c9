"""TensorBoard images of a few training segments' log-mels, clean and augmented.

`augmentation_images` computes them for fixed records; `AugmentationImagesCallback` writes them
at every epoch's end (the draws are keyed by the epoch, so each epoch shows other noise, RIRs and
masks; each example cycles through the speed factors).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.audio_features import log_mel, mean_normalize, parse_audio_examples
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmenter
from tfx_dynamic_inputs.inputs.summaries import summary_writer


def augmentation_images(
    store: RecordStore,
    labels: np.ndarray,
    augmenter: SpeakerAugmenter,
    epoch: int,
    num_examples: int = 4,
) -> dict[str, tf.Tensor]:
    """Clean and augmented log-mels of the first `num_examples` records, as images.

    Args:
      store: the training records.
      labels: int [N] their classes (before speed perturbation).
      augmenter: the augmentation (and its front end).
      epoch: keys the draws (the seed is `[epoch, 0]`).
      num_examples: how many records (at most the store's).

    Returns:
      ``clean`` (the dry segment, speed-perturbed) and ``augmented`` (what the model sees, with
      SpecAugment): float32 [num_examples, num_mel_bins, frames, 1] in [0, 1], low bins at the
      bottom.

    Example:

        images = augmentation_images(store, labels, augmenter, epoch=0)
    """
    count = min(num_examples, store.num_records)
    index = tf.range(count, dtype=tf.int64)
    audio = parse_audio_examples(store.read(index), augmenter.features.sample_rate)["audio"]
    speeds = augmenter.config.num_speeds
    label = tf.constant(labels[:count], tf.int64) + (index % speeds) * augmenter.num_classes
    seed = tf.constant([epoch, 0], tf.int64)
    clean = augmenter.waveforms(audio, label, seed, index)["clean"]
    clean_mel = log_mel(clean, augmenter.features)
    clean_mel = mean_normalize(clean_mel, tf.ones(tf.shape(clean_mel)[:2], tf.bool))
    augmented = augmenter.features_of(audio, label, seed, index)["features"]
    return {"clean": _image(clean_mel), "augmented": _image(augmented)}


def _image(features: tf.Tensor) -> tf.Tensor:
    """[B, T, F] -> [B, F, T, 1] scaled to [0, 1] per example, low mel bins at the bottom."""
    low = tf.reduce_min(features, axis=[1, 2], keepdims=True)
    high = tf.reduce_max(features, axis=[1, 2], keepdims=True)
    scaled = (features - low) / tf.maximum(high - low, 1e-6)
    return tf.reverse(tf.transpose(scaled, [0, 2, 1]), axis=[1])[..., tf.newaxis]


class AugmentationImagesCallback(keras.callbacks.Callback):
    """Writes `augmentation_images` to `<log_dir>/augmentation` at each epoch's end (step =
    epoch), as ``clean`` and ``augmented`` images.

    Args:
      store, labels, augmenter, num_examples: as `augmentation_images`.
      log_dir: the TensorBoard folder.

    Raises:
      ImportError: TensorBoard is not installed.

    Example:

        model.fit(dataset, callbacks=[AugmentationImagesCallback(store, labels, augmenter, "logs")])
    """

    def __init__(
        self,
        store: RecordStore,
        labels: np.ndarray,
        augmenter: SpeakerAugmenter,
        log_dir: str,
        num_examples: int = 4,
    ):
        super().__init__()
        self._args = (store, np.asarray(labels[:num_examples]), augmenter)
        self.num_examples = num_examples
        self._writer = summary_writer(log_dir, "augmentation", "AugmentationImagesCallback")

    def on_epoch_end(self, epoch, logs=None):
        """Writes the epoch's images.

        Args:
          epoch: the epoch Keras ends (0-based): the draws' key and the step.
          logs: Keras' epoch logs; unused.
        """
        images = augmentation_images(*self._args, epoch=epoch, num_examples=self.num_examples)
        with self._writer.as_default():
            for name, image in images.items():
                tf.summary.image(name, image, step=epoch, max_outputs=self.num_examples)
        self._writer.flush()
