"""The batched signal operations of the speaker augmentation (`speaker_augment`).

* Speed perturbation: `y[n] = x(n * factor)` by a polyphase windowed-sinc filter (Kaiser window,
  32 taps a phase, cut off at 0.9 of the narrower Nyquist band): a factor `M / L` (0.9 = 9/10)
  is `L` phases, which one strided `conv1d` computes for the whole batch. Chosen over an FFT
  resampler (which needs the whole signal and a transform of its length per sample) and over
  `tensorflow-io` (hundreds of times slower than soxr, `docs/design.md`); it matches `soxr`
  within 1 % RMS on band-limited signals (`tests/class_balanced/test_speaker_augment.py`).
* Reverberation: RIRs (from their direct-path peak, `augment_clips`) at unit energy, FFT
  convolution.
* Additive noise: the gain that puts a noise at an SNR.

Every per-sample value is computed the same bits whatever the batch size (`per_row`,
`_row_sum`), so a sample's augmentation does not change with the replica count.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

# The filter is stated once, in NumPy, with the NumPy augmentation (plans.speed_filter).
from tfx_dynamic_inputs.plans.speed_filter import HALF_TAPS as _HALF_TAPS
from tfx_dynamic_inputs.plans.speed_filter import KAISER_BETA as _KAISER_BETA
from tfx_dynamic_inputs.plans.speed_filter import ROLLOFF as _ROLLOFF
from tfx_dynamic_inputs.plans.speed_filter import speed_filter as speed_filter
from tfx_dynamic_inputs.plans.speed_filter import speed_input_samples as speed_input_samples


def perturb_speed(signal: tf.Tensor, factor: float, segment: int) -> tf.Tensor:
    """Resamples `y[n] = x(n * factor + half_taps)` for `n < segment` (see `speed_filter`).

    Args:
      signal: float32 [B, speed_input_samples(factor, segment)].
      factor: the speed factor.
      segment: output samples.

    Returns:
      float32 [B, segment].

    Example:

        perturb_speed(tf.zeros([2, speed_input_samples(1.1, 16000)]), 1.1, 16000)  # [2, 16000]
    """
    kernel, step, phases = speed_filter(factor)
    out = tf.nn.conv1d(signal[:, :, tf.newaxis], kernel, stride=step, padding="VALID")
    steps = math.ceil(segment / phases)
    # [B, steps, L] -> [B, steps * L] is output order; the sizes are given, as a batch may be empty.
    out = tf.reshape(out, [tf.shape(signal)[0], steps * phases])
    return out[:, :segment]


def reverberate(signal: tf.Tensor, rir: tf.Tensor) -> tf.Tensor:
    """FFT convolution of each signal with its RIR, truncated to the signal's length.

    Args:
      signal: float32 [B, S].
      rir: float32 [B, R], already normalized.

    Returns:
      float32 [B, S]: `(signal * rir)[:S]`.
    """
    length = signal.shape[1] + rir.shape[1] - 1
    fft_length = 1 << (length - 1).bit_length()
    spectrum = tf.signal.rfft(signal, [fft_length]) * tf.signal.rfft(rir, [fft_length])
    return tf.signal.irfft(spectrum, [fft_length])[:, : signal.shape[1]]


def unit_energy(rir: tf.Tensor) -> tf.Tensor:
    """Each RIR at unit energy (`augment_clips` takes it from its direct-path peak).

    Args:
      rir: float32 [B, R], zero past each RIR's end.

    Returns:
      float32 [B, R] with sum of squares 1 (0 for silence).
    """
    energy = _row_sum(tf.square(rir))
    return rir * per_row(lambda e: tf.math.rsqrt(tf.maximum(e, 1e-20)), energy)


def mean_power(signal: tf.Tensor) -> tf.Tensor:
    """float32 [B]: each row's mean square, the same bits whatever B.

    Args:
      signal: float32 [B, S], S known.
    """
    return _row_sum(tf.square(signal))[:, 0] / signal.shape[1]


def snr_scale(speech: tf.Tensor, noise: tf.Tensor, snr_db: tf.Tensor) -> tf.Tensor:
    """The gain per row that puts `noise` at `snr_db` below `speech` (power over the segment).

    Args:
      speech, noise: float32 [B, S].
      snr_db: float32 [B].

    Returns:
      float32 [B, 1].
    """
    speech_energy, noise_energy = _row_sum(tf.square(speech)), _row_sum(tf.square(noise))

    def gain(speech_energy, noise_energy, snr_db):
        ratio = speech_energy / (tf.maximum(noise_energy, 1e-20) * tf.pow(10.0, snr_db / 10.0))
        return tf.sqrt(ratio)

    return per_row(gain, speech_energy, noise_energy, snr_db[:, None])


# Eigen computes elementwise ops in SIMD packets and the tail of a tensor one value at a time,
# and its transcendental functions (rsqrt, pow, exp) round differently on the two paths. A
# per-sample value computed on a [B] tensor would then depend on B (the replica count); on
# [B, _LANES] rows every value is in a full packet (16 floats: AVX-512, and a multiple of the
# narrower ones), whatever B.
_LANES = 16


def per_row(fn, *columns: tf.Tensor) -> tf.Tensor:
    """`fn` of [B, 1] columns, computed on rows of `_LANES` copies: the same bits for every B.

    Args:
      fn: elementwise function of the columns.
      *columns: [B, 1] tensors.

    Returns:
      [B, 1]: `fn(*columns)`, each row's value independent of B.

    Example:

        gain = per_row(lambda e: tf.math.rsqrt(e), energy)  # energy [B, 1]
    """
    wide = [tf.tile(c, [1, _LANES]) for c in columns]
    return fn(*wide)[:, :1]


def _row_sum(values: tf.Tensor) -> tf.Tensor:
    """float32 [B, N] -> [B, 1] sums, accumulated in float64: TensorFlow splits a row's sum
    over threads by the batch's size, so a float32 sum of a sample could change with the
    replica count; the float64 sum rounded to float32 does not (in practice: ~1e-16 apart)."""
    return tf.cast(tf.reduce_sum(tf.cast(values, tf.float64), axis=1, keepdims=True), tf.float32)


# Resampling between rates known only when the graph runs (a served WAV's header declares its
# rate): `speed_filter`'s filter, its taps computed in the graph by `windowed_sinc` for each
# output's own phase instead of a kernel built in numpy for one ratio, so any pair of integer
# rates is exact (a kernel of all phases of 47999 -> 16000 Hz would hold 768M taps). Where it
# decimates, the window spans `half_taps` output samples, not input samples: the speed factors
# (near 1) lose little to a window 10 % short, 48 -> 16 kHz would lose 3.5-6.4 kHz (soxr 20 dB
# apart there). Outputs are computed in blocks of about `_RESAMPLE_BLOCK_TAPS` taps, which
# bounds the [block, taps] temporaries.
_RESAMPLE_BLOCK_TAPS = 1 << 19


def windowed_sinc(distance: tf.Tensor, cutoff: tf.Tensor, stretch: tf.Tensor) -> tf.Tensor:
    """`speed_filter`'s taps, computed in the graph: its formula on float64 tensors.

    Args:
      distance: float64 [...], an output point's position minus an input sample's (in input
        samples).
      cutoff: float64 scalar, cycles per input sample (`0.5 * rolloff * min(1, 1 / factor)`).
      stretch: float64 scalar, the window's span in `half_taps` units (1: `speed_filter`'s).

    Returns:
      float64 [...]: `2 cutoff sinc(2 cutoff distance)` times the Kaiser window, linearly
      interpolated at `distance / stretch` as `np.interp` does; 0 farther than
      `half_taps * stretch`.
    """
    window = tf.constant(np.kaiser(2 * _HALF_TAPS + 1, _KAISER_BETA), tf.float64)
    window_distance = distance / stretch
    position = tf.clip_by_value(window_distance + _HALF_TAPS, 0.0, 2.0 * _HALF_TAPS)
    below = tf.minimum(tf.floor(position), 2.0 * _HALF_TAPS - 1)
    index = tf.cast(below, tf.int32)
    lower, upper = tf.gather(window, index), tf.gather(window, index + 1)
    weight = lower + (position - below) * (upper - lower)
    weight = tf.where(tf.abs(window_distance) <= _HALF_TAPS, weight, 0.0)
    # np.sinc's own way: pi * x, with 1e-20 for 0.
    tiny = tf.constant(1e-20, tf.float64)
    angle = math.pi * tf.where(tf.equal(distance, 0.0), tiny, 2 * cutoff * distance)
    return 2 * cutoff * (tf.sin(angle) / angle) * weight


def resampled_length(num_samples: tf.Tensor, input_rate: tf.Tensor, output_rate: int) -> tf.Tensor:
    """`round(num_samples * output_rate / input_rate)`, halves to even, as soxr's `resample`.

    Args:
      num_samples: int64 scalar, the input's samples.
      input_rate: int64 scalar, Hz.
      output_rate: Hz.

    Returns:
      int64 scalar: the output's samples.
    """
    scaled = num_samples * output_rate
    quotient, remainder = scaled // input_rate, scaled % input_rate
    up = tf.logical_or(
        2 * remainder > input_rate,
        tf.logical_and(tf.equal(2 * remainder, input_rate), tf.equal(quotient % 2, 1)),
    )
    return quotient + tf.cast(up, tf.int64)


def resample(signal: tf.Tensor, input_rate: tf.Tensor, output_rate: int) -> tf.Tensor:
    """One signal from `input_rate` to `output_rate` Hz by `speed_filter`'s filter.

    `y[n] = x(n * input_rate / output_rate)` (no delay, as soxr's `resample`), the input zero
    outside its samples; the position and phase of each output computed exactly in int64. Where
    `input_rate <= output_rate` it is `perturb_speed`'s filter: past the first `half_taps`
    outputs, `resample(x[half_taps:], 9, 10)` is `perturb_speed(x, 0.9, ...)`.

    Args:
      signal: float32 [n].
      input_rate: int64 scalar, Hz (a tensor: known when the graph runs).
      output_rate: Hz.

    Returns:
      float32 [resampled_length(n, input_rate, output_rate)].

    Example:

        resample(tf.zeros([44100]), tf.constant(44100, tf.int64), 16000)  # [16000]
    """
    input_rate = tf.cast(input_rate, tf.int64)
    num_in = tf.size(signal, out_type=tf.int64)
    num_out = resampled_length(num_in, input_rate, output_rate)
    ratio = tf.cast(output_rate, tf.float64) / tf.cast(input_rate, tf.float64)
    one = tf.constant(1.0, tf.float64)
    cutoff = 0.5 * _ROLLOFF * tf.minimum(one, ratio)
    stretch = tf.maximum(one, 1.0 / ratio)
    half = tf.cast(tf.math.ceil(_HALF_TAPS * stretch), tf.int64)
    taps = tf.range(2 * half + 1, dtype=tf.int64)
    block_size = tf.maximum(tf.constant(1, tf.int64), _RESAMPLE_BLOCK_TAPS // (2 * half + 1))

    def phase_taps(phase: tf.Tensor) -> tf.Tensor:
        """float64 [k] output positions past their input sample -> float32 [k, taps]."""
        distance = phase[:, None] + tf.cast(half - taps, tf.float64)[None, :]
        return tf.cast(windowed_sinc(distance, cutoff, stretch), tf.float32)

    # The phases repeat every output_rate / gcd outputs (2 of them at 8 -> 16 kHz, 160 at 44.1);
    # where they are fewer than the outputs and fit a block, their taps are computed once.
    phases = output_rate // _gcd(input_rate, tf.constant(output_rate, tf.int64))
    tabled = tf.logical_and(phases <= num_out, phases * (2 * half + 1) <= _RESAMPLE_BLOCK_TAPS)
    steps = tf.cond(tabled, lambda: phases, lambda: tf.constant(0, tf.int64))
    # i / phases is (i * gcd) / output_rate: the same float64 as the direct phase below.
    table = phase_taps(tf.cast(tf.range(steps), tf.float64) / tf.cast(phases, tf.float64))

    @tf.autograph.experimental.do_not_convert  # plain ops: converting them only costs time
    def block(start: tf.Tensor) -> tf.Tensor:
        scaled = (start + tf.range(block_size, dtype=tf.int64)) * input_rate
        nearest = scaled // output_rate  # the input sample at or before each output point
        residue = scaled % output_rate
        weights = tf.cond(
            tabled,
            lambda: tf.gather(table, residue // (output_rate // phases)),
            lambda: phase_taps(tf.cast(residue, tf.float64) / output_rate),
        )
        inputs = nearest[:, None] + taps[None, :] - half
        # Inputs outside the signal read the zero after it.
        outside = tf.logical_or(inputs < 0, inputs >= num_in)
        values = tf.gather(padded, tf.where(outside, num_in, inputs))
        return tf.reduce_sum(weights * values, axis=1)

    padded = tf.concat([signal, tf.zeros([1], signal.dtype)], axis=0)
    # At least one block: map_fn over no elements cannot give a [0, None] result.
    starts = tf.range(0, tf.maximum(num_out, 1), block_size, dtype=tf.int64)
    blocks = tf.map_fn(block, starts, fn_output_signature=tf.TensorSpec([None], tf.float32))
    return tf.reshape(blocks, [-1])[:num_out]


def _gcd(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """The greatest common divisor of two positive int64 scalars (Euclid)."""
    return tf.while_loop(lambda a, b: b > 0, lambda a, b: (b, a % b), (a, b))[0]
