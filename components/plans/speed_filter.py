"""Speed perturbation's resampling filter, in NumPy: `y[n] = x(n * factor)` by a polyphase
windowed-sinc filter (Kaiser window, 32 taps a phase, cut off at 0.9 of the narrower Nyquist
band). `inputs.augment_signals` runs the kernel as one strided `conv1d` in the graph;
`perturb_speed` here runs the same kernel in NumPy (`plans.speaker_front`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# The resampler: taps each side of a phase, Kaiser beta, cut-off as a share of the passband.
HALF_TAPS = 16
KAISER_BETA = 8.0
ROLLOFF = 0.9
_MAX_DENOMINATOR = 100


def speed_filter(factor: float) -> tuple[np.ndarray, int, int]:
    """The polyphase kernel of `y[n] = x(n * factor)` as one strided `conv1d`.

    Args:
      factor: the speed factor, a ratio `M / L` of small integers.

    Returns:
      (kernel float32 [M + 2 * half_taps, 1, L], M, L): output `p + L * m` is channel `p` of
      the convolution of the input (starting `half_taps` samples before the segment) with
      stride `M` at step `m`.
    """
    ratio = Fraction(factor).limit_denominator(_MAX_DENOMINATOR)
    step, phases = ratio.numerator, ratio.denominator
    cutoff = 0.5 * ROLLOFF * min(1.0, 1.0 / factor)  # cycles per input sample
    taps = np.arange(step + 2 * HALF_TAPS, dtype=np.float64)[:, None]
    # Channel p reads input k = m*M + t - half at distance p*M/L - k + m*M from its point.
    distance = np.arange(phases)[None, :] * step / phases - taps + HALF_TAPS
    window = np.kaiser(2 * HALF_TAPS + 1, KAISER_BETA)
    inside = np.abs(distance) <= HALF_TAPS
    weight = np.interp(distance, np.arange(-HALF_TAPS, HALF_TAPS + 1), window) * inside
    kernel = 2 * cutoff * np.sinc(2 * cutoff * distance) * weight
    return kernel[:, None, :].astype(np.float32), step, phases


def speed_input_samples(factor: float, segment: int) -> int:
    """Input samples `perturb_speed` needs for `segment` output samples at `factor`."""
    kernel, step, phases = speed_filter(factor)
    return (math.ceil(segment / phases) - 1) * step + kernel.shape[0]


def perturb_speed(signal: np.ndarray, factor: float, segment: int) -> np.ndarray:
    """`inputs.augment_signals.perturb_speed` in NumPy: `y[n] = x(n * factor + half_taps)` for
    `n < segment`.

    Args:
      signal: float32 [B, speed_input_samples(factor, segment)].
      factor: the speed factor.
      segment: output samples.

    Returns:
      float32 [B, segment].
    """
    kernel, step, phases = speed_filter(factor)
    steps = math.ceil(segment / phases)
    taken = np.arange(steps)[:, None] * step + np.arange(kernel.shape[0])[None, :]
    # [B, steps, taps] x [taps, L] -> [B, steps, L], whose rows in order are the outputs; in
    # float32, as the graph's conv1d.
    out = np.asarray(signal, np.float32)[:, taken] @ kernel[:, 0, :]
    return out.reshape(len(signal), steps * phases)[:, :segment]
