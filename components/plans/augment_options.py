"""The speaker augmentation's options: `AdditiveNoise`, `Reverberation`, `SpeakerAugmentConfig`.

Frozen dataclasses checked when built, with no TensorFlow: the graph augmentation
(`inputs.speaker_augment.SpeakerAugmenter`) and the NumPy one (`plans.speaker_front`) execute
what they describe (`inputs.speaker_augment` says what each draw does).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tfx_dynamic_inputs.option_bounds import MAX_RIR_SECONDS, check_snr_range

if TYPE_CHECKING:
    from tfx_dynamic_inputs.inputs.run import Run


@dataclasses.dataclass(frozen=True)
class AdditiveNoise:
    """Noise clips mixed into each segment at a random SNR.

    Args:
      run: the noise run: a `Run` (`open_run`) or its URI, materialized by the audio job (e.g.
        `materialize audio --root musan/noise --speaker_from_path`) at the speech's rate.
      record_set: the run's record set of clips.
      snr_db: (low, high): the SNR of a sample is drawn uniformly in it, in dB, each within
        [`MIN_SNR_DB`, `MAX_SNR_DB`] (= [-100, 100]).
      probability: the share of samples that get noise, in [0, 1].

    Raises:
      ValueError: a reversed `snr_db` or one outside [-100, 100] dB (NaN, inf), or a
        `probability` outside [0, 1].
      TypeError: an `snr_db` that is not two numbers.

    Example:

        AdditiveNoise("runs/musan_noise", snr_db=(0.0, 15.0), probability=0.6)
    """

    run: Run | str
    record_set: str = "train"
    snr_db: tuple[float, float] = (0.0, 15.0)
    probability: float = 0.6

    def __post_init__(self):
        if not isinstance(self.snr_db, (tuple, list)) or len(self.snr_db) != 2:
            raise TypeError(f"AdditiveNoise.snr_db must be (low, high) in dB, got {self.snr_db!r}")
        snr_db = check_snr_range(*self.snr_db, names="AdditiveNoise.snr_db")
        object.__setattr__(self, "snr_db", snr_db)
        _check_probability("AdditiveNoise", self.probability)


@dataclasses.dataclass(frozen=True)
class Reverberation:
    """Room impulse responses convolved with each segment.

    Args:
      run: the RIR run: a `Run` or its URI, materialized by the audio job at the speech's rate.
      record_set: the run's record set of RIRs.
      probability: the share of samples that are reverberated, in [0, 1].
      max_rir_seconds: the most of each RIR used, from its direct-path peak on, in
        (0, `MAX_RIR_SECONDS`] (10 s).

    Raises:
      ValueError: a `probability` outside [0, 1] or a `max_rir_seconds` outside (0, 10].

    Example:

        Reverberation("runs/rirs", probability=0.2)
    """

    run: Run | str
    record_set: str = "train"
    probability: float = 0.2
    max_rir_seconds: float = 1.0

    def __post_init__(self):
        _check_probability("Reverberation", self.probability)
        seconds = self.max_rir_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"Reverberation.max_rir_seconds must be a number, got {seconds!r}")
        if not 0 < seconds <= MAX_RIR_SECONDS:
            raise ValueError(
                f"Reverberation.max_rir_seconds must be in (0, {MAX_RIR_SECONDS:g}], got {seconds}"
            )


@dataclasses.dataclass(frozen=True)
class SpeakerAugmentConfig:
    """The training augmentation of a class-balanced speaker input (see the module).

    Args:
      noise: additive noise, or None.
      reverb: reverberation, or None.
      speed_factors: speed perturbation factors, e.g. WeSpeaker's ``(1.0, 0.9, 1.1)``; factor
        index `k` turns class `c` into class `k * C + c`; () for none. Each in [0.5, 2], distinct.

    Raises:
      ValueError: a factor outside [0.5, 2] or repeated.

    Example:

        SpeakerAugmentConfig(noise=AdditiveNoise("runs/noise"), speed_factors=(1.0, 0.9, 1.1))
    """

    noise: AdditiveNoise | None = None
    reverb: Reverberation | None = None
    speed_factors: tuple[float, ...] = ()

    def __post_init__(self):
        factors = tuple(float(f) for f in self.speed_factors)
        if any(not 0.5 <= f <= 2.0 for f in factors) or len(set(factors)) != len(factors):
            raise ValueError(
                f"SpeakerAugmentConfig.speed_factors must be distinct factors in [0.5, 2], got "
                f"{self.speed_factors}"
            )
        object.__setattr__(self, "speed_factors", factors)

    @property
    def num_speeds(self) -> int:
        """How many derived classes each class becomes (1 without speed perturbation)."""
        return max(len(self.speed_factors), 1)


def _check_probability(owner: str, probability: float) -> None:
    if isinstance(probability, bool) or not isinstance(probability, (int, float)):
        raise TypeError(f"{owner}.probability must be a number, got {probability!r}")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"{owner}.probability must be in [0, 1], got {probability}")
