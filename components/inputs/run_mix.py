"""Several runs named together, each with a weight: `WeightedRun`, `RunMix`, `MixWeighting`;
`read_by_run` reads a batch of global record numbers from the runs' stores.

A mix is what `mixed_class_balanced.MixedClassBalancedSampler` reads: the runs' classes are
namespaced by run (the global class id is the run's offset plus its own class id, the class name
``"<run name>/<class>"``), so two speakers of two runs are never merged, even with equal names.
What the weights mean is `MixWeighting`'s (see `mix_plan` for the plan and what an epoch is).
The checks of a name, a weight, the weighting and a run named twice are `plans.run_mix`'s,
stated without TensorFlow and shared with the Grain samplers' mix of run folders
(`plans.run_mix.FolderMix`).

Example:

    mix = RunMix((
        WeightedRun(open_run("runs/vox1"), weight=1.0, name="vox1"),
        WeightedRun(open_run("runs/mine"), weight=3.0, name="mine"),
    ), weighting=MixWeighting.CLASSES)
    mix.shares   # (0.25, 0.75)
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.run import Run, open_run

# Stated without TensorFlow (the pipeline config checks a weighting before it loads).
from tfx_dynamic_inputs.option_bounds import MixWeighting as MixWeighting
from tfx_dynamic_inputs.plans.run_mix import (
    mix_shares,
    mix_weighting,
    refuse_repeats,
    run_name,
    run_weight,
)


@dataclasses.dataclass(frozen=True)
class WeightedRun:
    """One run of a mix, with its weight and the name that namespaces its classes.

    Args:
      run: the run (a `Run`, or its folder, opened with `open_run` here).
      weight: its weight, a finite number > 0 (relative to the mix's other weights).
      name: the run's name in the mix: class names become ``"<name>/<class>"``; no "/" in it.

    Raises:
      ValueError: a weight that is not finite and > 0, or an empty name or one with "/".
      TypeError: a weight that is not a number, or a name that is not a string.

    Example:

        WeightedRun("runs/vox1", weight=2.0, name="vox1")
    """

    run: Run
    weight: float
    name: str

    def __post_init__(self):
        if isinstance(self.run, (str, os.PathLike)):
            object.__setattr__(self, "run", open_run(os.fspath(self.run)))
        if not isinstance(self.run, Run):
            raise TypeError(f"run must be a Run or a run folder, got {type(self.run).__name__}")
        object.__setattr__(self, "weight", run_weight(self.name, self.weight))
        run_name(self.name)


@dataclasses.dataclass(frozen=True)
class RunMix:
    """Several runs mixed by weight (see `MixWeighting`).

    Args:
      runs: the `WeightedRun`s, in the order that numbers their classes (run 0's classes
        first); at least one; names unique, runs distinct (neither the same folder nor the same
        run id twice: a run mixed with itself is a weight, not a second run).
      weighting: what the weights are a share of (`MixWeighting` or its value).

    Raises:
      ValueError: no runs, a repeated name, folder or run id (naming them), or an unknown
        weighting.
      TypeError: a run that is not a `WeightedRun`.

    Attributes:
      shares: each run's `weight / sum(weights)`.

    Example:

        RunMix((WeightedRun("runs/a", 1.0, "a"), WeightedRun("runs/b", 1.0, "b")))
    """

    runs: tuple[WeightedRun, ...]
    weighting: MixWeighting = MixWeighting.CLASSES

    def __post_init__(self):
        runs = tuple(self.runs)
        object.__setattr__(self, "runs", runs)
        if not runs:
            raise ValueError("a RunMix needs at least one run")
        for run in runs:
            if not isinstance(run, WeightedRun):
                raise TypeError(f"RunMix runs must be WeightedRun, got {type(run).__name__}")
        object.__setattr__(self, "weighting", mix_weighting(self.weighting))
        refuse_repeats("name", [run.name for run in runs])
        refuse_repeats("run folder", [os.path.normpath(run.run.uri) for run in runs])
        refuse_repeats("run id", [run.run.run_id for run in runs])

    @property
    def names(self) -> tuple[str, ...]:
        """The runs' names, in mix order."""
        return tuple(run.name for run in self.runs)

    @property
    def weights(self) -> tuple[float, ...]:
        """The runs' weights, in mix order."""
        return tuple(run.weight for run in self.runs)

    @property
    def shares(self) -> tuple[float, ...]:
        """Each run's `weight / sum(weights)`."""
        return mix_shares(self.weights)

    def with_weights(self, weights) -> RunMix:
        """The same runs with other weights (e.g. to resume with new weights, `mix_plan`).

        Args:
          weights: one weight per run, in mix order.

        Returns:
          A new `RunMix`.

        Raises:
          ValueError: not one weight per run, or a bad weight.
        """
        weights = tuple(weights)
        if len(weights) != len(self.runs):
            raise ValueError(f"{len(weights)} weights for {len(self.runs)} runs")
        runs = tuple(
            dataclasses.replace(run, weight=weight)
            for run, weight in zip(self.runs, weights, strict=True)
        )
        return RunMix(runs, self.weighting)


def read_by_run(stores, offsets: np.ndarray, index: tf.Tensor, run: tf.Tensor, for_service: bool):
    """Reads each sample of a batch from its own run's store, in batch order.

    Args:
      stores: each run's `RecordStore`.
      offsets: int64 [K + 1]: run `k`'s records are global numbers `[offsets[k], offsets[k+1])`.
      index: int64 [B] global record numbers.
      run: int64 [B] the run of each sample.
      for_service: the read runs on a tf.data service worker (`RecordStore.read_checked`).

    Returns:
      tf.string [B], the records.

    Example:

        records = read_by_run([store_a, store_b], np.array([0, 5, 9]), index, run, False)
    """
    places, parts = [], []
    for k, store in enumerate(stores):
        place = tf.where(tf.equal(run, k))[:, 0]
        local = tf.gather(index, place) - int(offsets[k])
        records, _ = store.read_checked(local, for_service=for_service)
        places.append(tf.cast(place, tf.int32))
        parts.append(records)
    return tf.dynamic_stitch(places, parts)
