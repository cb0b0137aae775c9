"""Resampling between rates known when the graph runs (`augment_signals.resample`, what a served
WAV at another rate goes through): the speed perturbation's own filter, exact for any pair of
integer rates, and within 40 dB of soxr (the audio job's resampler) on band-limited signals."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs.augment_signals import (
    perturb_speed,
    resample,
    resampled_length,
    speed_filter,
    speed_input_samples,
    windowed_sinc,
)

HALF_TAPS = 16


def _resample(signal: np.ndarray, input_rate: int, output_rate: int) -> np.ndarray:
    return resample(tf.constant(signal, tf.float32), tf.constant(input_rate, tf.int64), output_rate)


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    return 10 * np.log10(np.sum(reference**2) / np.sum((other - reference) ** 2))


def _tones(rate: int, seconds: float, top_hertz: float, rng: np.random.Generator):
    """Ten sines below `top_hertz` as a function of time, and sampled at `rate`."""
    freqs, phases = rng.uniform(50, top_hertz, 10), rng.uniform(0, 2 * np.pi, 10)

    def at(t: np.ndarray) -> np.ndarray:
        return sum(0.08 * np.sin(2 * np.pi * f * t + p) for f, p in zip(freqs, phases, strict=True))

    return at, at(np.arange(int(rate * seconds)) / rate).astype(np.float32)


@pytest.mark.parametrize("factor", [0.9, 1.1, 1.25, 0.8])
def test_the_graph_taps_are_the_speed_filters_kernel(factor):
    kernel, step, phases = speed_filter(factor)
    taps = np.arange(step + 2 * HALF_TAPS, dtype=np.float64)[:, None]
    distance = np.arange(phases)[None, :] * step / phases - taps + HALF_TAPS
    cutoff = 0.5 * 0.9 * min(1.0, 1.0 / factor)
    ours = windowed_sinc(
        tf.constant(distance), tf.constant(cutoff, tf.float64), tf.constant(1.0, tf.float64)
    )
    np.testing.assert_array_equal(tf.cast(ours, tf.float32).numpy(), kernel[:, 0, :])


def test_upsampling_is_the_speed_perturbation():
    # perturb_speed(x, 0.9)[n] = x(0.9 n + 16) = resample(x[16:], 9 -> 10)[n]; the first 18
    # outputs reach before x[16], which perturb_speed has and x[16:] does not.
    segment = 4000
    signal = np.random.default_rng(0).standard_normal(speed_input_samples(0.9, segment))
    signal = signal.astype(np.float32)
    speed = perturb_speed(tf.constant(signal[None]), 0.9, segment).numpy()[0]
    resampled = _resample(signal[HALF_TAPS:], 9, 10).numpy()[:segment]
    np.testing.assert_allclose(resampled[18:], speed[18:], atol=2e-6)


@settings(max_examples=25, deadline=None)
@given(
    input_rate=st.integers(1000, 768000),
    output_rate=st.sampled_from([8000, 16000, 22050]),
    num_samples=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_rates_give_the_tones_at_the_output_rate(input_rate, output_rate, num_samples, seed):
    assert resampled_length(
        tf.constant(num_samples, tf.int64), tf.constant(input_rate, tf.int64), output_rate
    ).numpy() == round(num_samples * output_rate / input_rate)
    seconds = 0.06
    top = 0.75 * min(input_rate, output_rate) / 2
    at, signal = _tones(input_rate, seconds, top, np.random.default_rng(seed))
    resampled = _resample(signal, input_rate, output_rate).numpy()
    assert len(resampled) == round(len(signal) * output_rate / input_rate)
    # Away from the ends, where the filter reaches past the signal (the window spans 16 samples
    # of the lower rate each side).
    margin = int(np.ceil(HALF_TAPS * max(1.0, output_rate / input_rate))) + 1
    inner = np.arange(margin, len(resampled) - margin)
    expected = at(inner / output_rate)
    assert _snr_db(expected, resampled[inner]) > 40


@pytest.mark.full
@pytest.mark.parametrize("input_rate", [8000, 11025, 22050, 44100, 48000, 96000])
def test_resampling_is_within_40_db_of_soxr_on_band_limited_signals(input_rate):
    soxr = pytest.importorskip("soxr")
    # Tones up to 0.8 of the narrower Nyquist band: the filter's pass band (it rolls off from
    # there to 0.9, soxr later), where speech carries its energy.
    top = 0.8 * min(input_rate, 16000) / 2
    _, signal = _tones(input_rate, 1.0, top, np.random.default_rng(input_rate))
    ours = _resample(signal, input_rate, 16000).numpy()
    theirs = soxr.resample(signal, input_rate, 16000, quality="HQ")
    assert len(ours) == len(theirs)
    inner = slice(100, -100)
    assert _snr_db(theirs[inner], ours[inner]) > 40


def test_an_empty_signal_resamples_to_nothing():
    assert _resample(np.zeros(0, np.float32), 44100, 16000).shape == (0,)
    assert _resample(np.ones(1, np.float32), 48000, 16000).shape == (0,)
    assert _resample(np.ones(2, np.float32), 48000, 16000).shape == (1,)


def test_a_graph_resamples_as_eager_code_does():
    # A served file's rate is a tensor of a traced graph: Python constants must take its dtypes.
    graph = tf.function(
        lambda signal, rate: resample(signal, rate, 16000),
        input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int64)],
    )
    signal = np.random.default_rng(1).standard_normal(4410).astype(np.float32)
    for rate in (8000, 44100):
        eager = _resample(signal, rate, 16000).numpy()
        np.testing.assert_array_equal(graph(signal, tf.constant(rate, tf.int64)).numpy(), eager)


def test_tabled_and_direct_phase_taps_give_the_same_outputs():
    # 44.1 -> 16 kHz has 160 phases: 36 outputs (of 100 inputs) compute each output's taps, a
    # longer signal computes the 160 once; outputs that read only the first 100 inputs agree.
    signal = np.random.default_rng(2).standard_normal(44100).astype(np.float32)
    direct = _resample(signal[:100], 44100, 16000).numpy()
    tabled = _resample(signal, 44100, 16000).numpy()
    assert len(direct) == 36
    # Output n reads inputs up to n * 2.75625 + 49 (the window spans 16 output samples).
    np.testing.assert_array_equal(direct[:18], tabled[:18])
