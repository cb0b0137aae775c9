"""A mix's runs named and weighted, checked without TensorFlow.

The checks of a mix (a run's name and weight, the weighting, a run named twice, the shares, the
read policy, one sample rate, no speed perturbation) are stated here once: tf.data's
`inputs.run_mix` (`WeightedRun`, `RunMix`, which hold opened `inputs.run.Run`s) and
`inputs.mixed_class_balanced` take them from here, and `FolderMix` / `WeightedFolder` are the same
mix over run folders, for the Grain samplers (`grain.mixed_class_balanced`), which must not import
TensorFlow. What the weights mean is `MixWeighting`'s; how a mix is planned is `mix_plan`'s.

Example:

    mix = FolderMix((WeightedFolder("runs/vox1", 1.0, "vox1"),
                     WeightedFolder("runs/mine", 3.0, "mine")), weighting="batches")
    mix.shares   # (0.25, 0.75)
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from tfx_dynamic_inputs.option_bounds import MixWeighting
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig


def run_name(name: object) -> str:
    """A run's name in a mix, checked: class names become ``"<name>/<class>"``.

    Args:
      name: the name.

    Returns:
      The name.

    Raises:
      ValueError: not a non-empty string, or one with "/".
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(
            f"a run's name in a mix must be a non-empty string without '/', got {name!r}"
        )
    return name


def run_weight(name: object, weight: object) -> float:
    """A run's weight in a mix, as a float, checked.

    Args:
      name: the run's name (for the message).
      weight: the weight, a finite number > 0, relative to the mix's other weights.

    Returns:
      The weight as a float.

    Raises:
      TypeError: not a number (a bool is not).
      ValueError: not finite and > 0.
    """
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise TypeError(f"the weight of run {name!r} must be a number, got {weight!r}")
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"the weight of run {name!r} must be > 0, got {weight!r}")
    return float(weight)


def mix_weighting(weighting: object) -> MixWeighting:
    """The `MixWeighting` of `weighting` (a member or its value).

    Args:
      weighting: what the weights are a share of.

    Returns:
      The `MixWeighting`.

    Raises:
      ValueError: an unknown weighting, naming the allowed ones.
    """
    try:
        return MixWeighting(weighting)
    except ValueError:
        allowed = [member.value for member in MixWeighting]
        raise ValueError(f"weighting must be one of {allowed}, got {weighting!r}") from None


def refuse_repeats(what: str, values: Sequence[str]) -> None:
    """Refuses a value named twice among a mix's runs (its names, folders, run ids).

    Args:
      what: what the values are, for the message (e.g. "run folder").
      values: one value per run, in mix order.

    Raises:
      ValueError: the first value named twice.
    """
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(
                f"a mix names {what} {value!r} twice; each run once (to draw a run more, "
                "raise its weight)"
            )
        seen.add(value)


def mix_shares(weights: Sequence[float]) -> tuple[float, ...]:
    """Each run's `weight / sum(weights)`.

    Args:
      weights: the runs' checked weights, in mix order.

    Returns:
      The shares, in mix order.
    """
    total = sum(weights)
    return tuple(weight / total for weight in weights)


def check_mix_on_damaged(on_damaged: str) -> None:
    """Refuses any read policy but "fail" for a mix's runs: a sample left out of a mix's batch
    would shift the runs' shares and, for pairs, a run's x once an epoch.

    Args:
      on_damaged: the runs' read policy.

    Raises:
      ValueError: a policy other than "fail".
    """
    if on_damaged != "fail":
        raise ValueError(
            f"a run mix reads with on_damaged='fail', got {on_damaged!r:.50}; repair or drop "
            "the run"
        )


def one_sample_rate(rates: Mapping[str, int | None]) -> int | None:
    """The one sample rate a mix's runs stored, for the audio front end over all of them.

    Args:
      rates: run name -> the rate its summary records (None: none recorded).

    Returns:
      The rate the runs share (None where none recorded one).

    Raises:
      ValueError: runs of several rates, naming each run's.
    """
    if len(set(rates.values())) > 1:
        raise ValueError(
            f"the runs of a mix must store one sample rate, got {dict(rates)}; "
            "materialize them at one rate"
        )
    return next(iter(rates.values()))


def check_mix_augment(augment: SpeakerAugmentConfig | None) -> None:
    """Refuses speed perturbation over a mix: its derived classes (`speed_classes`) are not
    planned there; noise and reverberation are drawn per sample as for one run.

    Args:
      augment: the augmentation, or None.

    Raises:
      ValueError: speed factors other than none or (1.0,).
    """
    if augment is not None and augment.speed_factors not in ((), (1.0,)):
        raise ValueError(
            "speed perturbation does not run over a mix of runs yet (its derived classes "
            "are not planned there): drop speed_factors, or train on one run"
        )


@dataclasses.dataclass(frozen=True)
class WeightedFolder:
    """One run folder of a mix, with its weight and the name that namespaces its classes.

    Args:
      folder: the committed run's folder (local).
      weight: its weight, a finite number > 0 (relative to the mix's other weights).
      name: the run's name in the mix: class names become ``"<name>/<class>"``; no "/" in it.

    Raises:
      TypeError: a folder that is not a path, or a weight that is not a number.
      ValueError: a weight that is not finite and > 0, or an empty name or one with "/".

    Example:

        WeightedFolder("runs/vox1", weight=2.0, name="vox1")
    """

    folder: str
    weight: float
    name: str

    def __post_init__(self):
        if not isinstance(self.folder, str | os.PathLike):
            raise TypeError(
                f"the folder of run {self.name!r} must be a path, got {type(self.folder).__name__}"
            )
        object.__setattr__(self, "folder", os.fspath(self.folder))
        object.__setattr__(self, "weight", run_weight(self.name, self.weight))
        run_name(self.name)


@dataclasses.dataclass(frozen=True)
class FolderMix:
    """Several run folders mixed by weight (see `MixWeighting`): tf.data's `inputs.RunMix`
    without TensorFlow.

    Args:
      runs: the `WeightedFolder`s, in the order that numbers their classes and records (run 0's
        first); at least one; names and folders unique (a run mixed with itself is a weight,
        not a second run; the samplers refuse a run id twice when they open the runs).
      weighting: what the weights are a share of (`MixWeighting` or its value).

    Raises:
      ValueError: no runs, a repeated name or folder (naming it), or an unknown weighting.
      TypeError: a run that is not a `WeightedFolder`.

    Example:

        FolderMix((WeightedFolder("runs/a", 1.0, "a"), WeightedFolder("runs/b", 2.0, "b")))
    """

    runs: tuple[WeightedFolder, ...]
    weighting: MixWeighting = MixWeighting.CLASSES

    def __post_init__(self):
        runs = tuple(self.runs)
        object.__setattr__(self, "runs", runs)
        if not runs:
            raise ValueError("a FolderMix needs at least one run")
        for run in runs:
            if not isinstance(run, WeightedFolder):
                raise TypeError(f"FolderMix runs must be WeightedFolder, got {type(run).__name__}")
        object.__setattr__(self, "weighting", mix_weighting(self.weighting))
        refuse_repeats("name", self.names)
        refuse_repeats("run folder", [os.path.normpath(folder) for folder in self.folders])

    @property
    def names(self) -> tuple[str, ...]:
        """The runs' names, in mix order."""
        return tuple(run.name for run in self.runs)

    @property
    def folders(self) -> tuple[str, ...]:
        """The runs' folders, in mix order."""
        return tuple(run.folder for run in self.runs)

    @property
    def weights(self) -> tuple[float, ...]:
        """The runs' weights, in mix order."""
        return tuple(run.weight for run in self.runs)

    @property
    def shares(self) -> tuple[float, ...]:
        """Each run's `weight / sum(weights)`."""
        return mix_shares(self.weights)
