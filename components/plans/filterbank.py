"""The log-mel front end's constants, in NumPy: the STFT window and the mel filterbank.

Both executors of the audio front end take them from here: `inputs.audio_features` puts them in
its graph as one constant each, `plans.audio_front` multiplies by them in NumPy, so the two
compute with the same float32 values. They are `tf.signal.hann_window(periodic=True)` and
`tf.signal.linear_to_mel_weight_matrix`'s formulas (HTK mels, triangles between adjacent band
edges, the DC bin zeroed), computed in float64 and rounded once: within 2.4e-7 of TensorFlow's
float32 window and 1.1e-5 of its float32 filterbank (80 bins at 16 kHz), which accumulates its
rounding (tests/core/test_audio_front.py).
"""

from __future__ import annotations

import functools

import numpy as np

# HTK's mel scale, as tf.signal's: mel = 1127 ln(1 + f / 700).
_MEL_BREAK_HERTZ = 700.0
_MEL_HIGH_FREQUENCY_Q = 1127.0


@functools.lru_cache(maxsize=32)
def hann_window(length: int) -> np.ndarray:
    """The periodic Hann window of `length` samples, as `tf.signal.hann_window` computes it
    (which is periodic for even lengths only: an odd window is symmetric).

    Args:
      length: samples (>= 2).

    Returns:
      float32 [length], read-only.
    """
    denominator = length if length % 2 == 0 else length - 1
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / denominator)
    return _frozen(window.astype(np.float32))


@functools.lru_cache(maxsize=32)
def mel_matrix(
    num_mel_bins: int,
    num_spectrogram_bins: int,
    sample_rate: int,
    lower_edge_hertz: float,
    upper_edge_hertz: float,
) -> np.ndarray:
    """The mel filterbank that `tf.signal.linear_to_mel_weight_matrix` computes.

    Args:
      num_mel_bins: triangles.
      num_spectrogram_bins: FFT bins, `fft_length // 2 + 1`.
      sample_rate: Hz.
      lower_edge_hertz, upper_edge_hertz: the first triangle's start and the last one's end.

    Returns:
      float32 [num_spectrogram_bins, num_mel_bins], read-only: weight of each FFT bin in each
      mel bin (row 0, DC, all zero).
    """
    linear = np.linspace(0.0, sample_rate / 2.0, num_spectrogram_bins)[1:]
    bins = _hertz_to_mel(linear)[:, None]
    edges = np.linspace(
        _hertz_to_mel(lower_edge_hertz), _hertz_to_mel(upper_edge_hertz), num_mel_bins + 2
    )
    lower, center, upper = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
    rising = (bins - lower) / (center - lower)
    falling = (upper - bins) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return _frozen(np.pad(weights, [[1, 0], [0, 0]]).astype(np.float32))


def _hertz_to_mel(hertz: float | np.ndarray) -> np.ndarray:
    return _MEL_HIGH_FREQUENCY_Q * np.log1p(np.asarray(hertz, np.float64) / _MEL_BREAK_HERTZ)


def _frozen(values: np.ndarray) -> np.ndarray:
    """`values` read-only: the cached constant is shared by every caller."""
    values.setflags(write=False)
    return values
