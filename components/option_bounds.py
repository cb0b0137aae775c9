"""Bounds and choices of the library's options, stated once and without TensorFlow.

The samplers' and the augmentation's modules import TensorFlow; the pipeline configs check the
same options before anything imports it (`pipeline.config_checks`: the CLIs answer a bad value
in one line first). Each bound that has no TensorFlow-free home of its own is stated here, and
both sides take it from here:

* `MixWeighting` (and `MIX_WEIGHTINGS`, its values): what a mix's weights are a share of
  (`inputs.run_mix`, `SpeakerConfig.mix_weighting`);
* `MIN_SNR_DB`, `MAX_SNR_DB`, `check_snr_range`: the SNR range noise is mixed at
  (`inputs.speaker_augment.AdditiveNoise`, `SpeakerConfig.min_snr_db` / `max_snr_db`);
* `MAX_RIR_SECONDS`: the most of a room impulse response used (`Reverberation`).

The plans' own choices live in `tfx_dynamic_inputs.plans` (NumPy alone): the epoch modes
(`plans.class_geometry.EPOCH_MODES`) and the pairing strategies (`plans.pair_plan.STRATEGIES`).
"""

from __future__ import annotations

import enum
import numbers


class MixWeighting(str, enum.Enum):
    """What a run's weight is a share of.

    * ``CLASSES``: of each global batch's class slots: in expectation run `r` holds
      `weight_r / sum(weights)` of the `n_c x R` classes of every global batch.
    * ``BATCHES``: of the global batches: each global batch is drawn from one run, run `r` with
      probability `weight_r / sum(weights)` (every run then needs `n_c x R` usable classes).
    """

    CLASSES = "classes"
    BATCHES = "batches"


MIX_WEIGHTINGS = tuple(weighting.value for weighting in MixWeighting)

# The SNR range. The gain is sqrt(speech energy / (max(noise energy, 1e-20) * 10 ** (snr / 10)))
# in float32: below about -250 dB the power ratio underflows and the gain is inf (NaN in the
# batch). Within +-100 dB the ratio is 1e-10 .. 1e10, the divisor stays above 1e-30 (float32's
# smallest normal is 1.2e-38) and the gain is finite; and 16-bit PCM spans 96 dB, so past 100 dB
# one signal is below the other's quantization step: the mix is the speech or the noise alone.
MIN_SNR_DB = -100.0
MAX_SNR_DB = 100.0
# The most of a RIR used: rooms' reverberation times are seconds; 10 s x 16 kHz is 640 KB a
# sample of the batch before the FFT (RIRs are padded to the longest kept one, not to this).
MAX_RIR_SECONDS = 10.0


def check_snr_range(low: float, high: float, names: str = "snr_db") -> tuple[float, float]:
    """The SNR range (low, high) in dB as floats, checked (`AdditiveNoise`, the pipeline config).

    Args:
      low: the range's low end, in dB.
      high: the range's high end, in dB.
      names: what the range is called in the message, e.g. "min_snr_db/max_snr_db".

    Returns:
      (low, high) as floats.

    Raises:
      TypeError: an end that is not a number (a bool is not).
      ValueError: an end outside [MIN_SNR_DB, MAX_SNR_DB] (NaN and inf too), or low > high.
    """
    ends = []
    for value in (low, high):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{names} must be numbers (dB), got {low!r}, {high!r}")
        ends.append(float(value))
    if not all(MIN_SNR_DB <= v <= MAX_SNR_DB for v in ends):
        raise ValueError(
            f"{names} must be within [{MIN_SNR_DB:g}, {MAX_SNR_DB:g}] dB, got {low!r}, {high!r} "
            "(beyond it the float32 gain overflows and one signal is below 16-bit quantization)"
        )
    if ends[0] > ends[1]:
        raise ValueError(f"{names} must have low <= high, got {low!r}, {high!r}: swap them")
    return ends[0], ends[1]
