"""How a batch of int16 PCM records becomes log-mel features: `AudioFeatureConfig`, `SpecAugment`.

The options are stated once, without TensorFlow, in `plans.audio_options` (the NumPy front end,
`plans.audio_front`, takes them too); this module names them for the graph front end
(`audio_features`) and adds `num_frames` of tensors.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dynamic_inputs.plans import audio_options
from tfx_dynamic_inputs.plans.audio_options import (
    MAX_PAD_SECONDS,
    MODES,
    AudioFeatureConfig,
    SpecAugment,
)

__all__ = ["MAX_PAD_SECONDS", "MODES", "AudioFeatureConfig", "SpecAugment", "num_frames"]


def num_frames(num_samples, config: AudioFeatureConfig):
    """Frames fully inside `num_samples` samples (0 when shorter than one frame).

    Args:
      num_samples: a Python int, or an integer tensor of any shape (cast to int64).
      config: gives the frame length and step.

    Returns:
      A Python int for an int input, else int64 of the shape of `num_samples`.
    """
    if isinstance(num_samples, int):
        return audio_options.num_frames(num_samples, config)
    num_samples = tf.convert_to_tensor(num_samples, tf.int64)
    frames = 1 + (num_samples - config.frame_length) // config.frame_step
    return tf.where(num_samples >= config.frame_length, frames, tf.zeros_like(frames))
