"""tensorflow-io's compiled audio ops load and compute correctly against this TensorFlow."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_io as tfio


def _wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    """Encodes int16 samples [n, channels] as a PCM WAV file with the standard library."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(samples.shape[1])
        writer.setsampwidth(2)
        writer.setframerate(sample_rate)
        writer.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


def _tone(frequency: float, sample_rate: int, seconds: float, channels: int) -> np.ndarray:
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    wave_ = (12000 * np.sin(2 * np.pi * frequency * t)).astype(np.int16)
    return np.repeat(wave_[:, None], channels, axis=1)


def _peak_frequency(signal: np.ndarray, sample_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(signal))
    return float(np.fft.rfftfreq(len(signal), 1 / sample_rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("channels", [1, 2])
def test_decode_wav_returns_the_encoded_samples(channels):
    samples = _tone(440.0, 16000, 0.25, channels)
    decoded = tfio.audio.decode_wav(tf.constant(_wav_bytes(samples, 16000)), dtype=tf.int16)
    assert decoded.dtype == tf.int16
    np.testing.assert_array_equal(decoded.numpy(), samples)


@pytest.mark.parametrize(
    ("rate_in", "rate_out", "frequency"), [(22050, 16000, 440.0), (8000, 16000, 1000.0)]
)
def test_resample_changes_the_rate_and_keeps_the_pitch(rate_in, rate_out, frequency):
    samples = _tone(frequency, rate_in, 1.0, 1)
    decoded = tfio.audio.decode_wav(tf.constant(_wav_bytes(samples, rate_in)), dtype=tf.int16)
    resampled = tfio.audio.resample(
        tf.cast(decoded, tf.float32) / 32768.0, rate_in=rate_in, rate_out=rate_out
    ).numpy()
    assert resampled.shape[1] == 1
    assert abs(resampled.shape[0] - rate_out) <= 2
    assert abs(_peak_frequency(resampled[:, 0], rate_out) - frequency) <= 2.0
    # The tone's amplitude (12000 / 32768) survives resampling, away from the edge effects.
    middle = resampled[rate_out // 4 : -rate_out // 4, 0]
    assert np.max(np.abs(middle)) == pytest.approx(12000 / 32768, rel=0.05)
