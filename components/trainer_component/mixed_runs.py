"""`ClassBalancedTrainer` over several runs: its own run plus its `mixed_class_index` runs.

The runs are opened from their `ClassIndex` artifacts (`open_run` finds each execution's
examples and offset index), named ``run0`` (the trainer's own) to ``run<K-1>`` in channel order,
and mixed by the input options' `run_weights` and `mix_weighting`
(`tfx_dynamic_inputs.inputs.MixedClassBalancedSampler`). The trainer's own run is run 0, so its
class ids are the global ids of its classes and its eval split keeps its labels; the model sees
the global class count, all classes of all runs.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfx_dynamic_inputs.inputs import AudioFeatureConfig, open_run
from tfx_dynamic_inputs.inputs.draw_counts import DrawCounts
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting, RunMix, WeightedRun
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmentConfig
from tfx_dynamic_inputs.trainer_component import training_inputs
from tfx_dynamic_inputs.trainer_component.input_options import ClassBalancedInputOptions


def run_mix(class_index_uris: list[str], options: ClassBalancedInputOptions) -> RunMix:
    """The `RunMix` of the runs whose `ClassIndex` artifacts are `class_index_uris` (the
    trainer's own first), weighted by `options.run_weights` (None: all 1.0).

    Args:
      class_index_uris: the ClassIndex artifacts' URIs.
      options: the trainer's input options.

    Returns:
      The `RunMix`, runs named ``run0``, ``run1``, ...

    Raises:
      ValueError: not one weight per run (naming both counts), or the same run twice.

    Example:

        run_mix(["root/MaterializeAudio/class_index/3", "root/Mine/class_index/5"], options)
    """
    weights = options.run_weights or (1.0,) * len(class_index_uris)
    if len(weights) != len(class_index_uris):
        raise ValueError(
            f"input option run_weights lists {len(weights)} weights but the trainer mixes "
            f"{len(class_index_uris)} runs (its own, then mixed_class_index in channel order)"
        )
    return RunMix(
        tuple(
            WeightedRun(open_run(uri), weight, f"run{k}")
            for k, (uri, weight) in enumerate(zip(class_index_uris, weights, strict=True))
        ),
        MixWeighting(options.mix_weighting),
    )


def mixed_train_dataset(
    mix: RunMix,
    record_set: str,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int,
    features: AudioFeatureConfig,
    options: ClassBalancedInputOptions,
    resume: training_inputs.Resume | None = None,
    augment: SpeakerAugmentConfig | None = None,
) -> tuple[tf.data.Dataset, MixedClassBalancedSampler, DrawCounts]:
    """Class-balanced batches of `record_set` over the runs of `mix`, with the `FnArgs` keys.

    Args:
      mix: the runs (`run_mix`).
      record_set: the split to train on, in every run.
      n_classes_per_batch, n_samples_per_class: the batch geometry.
      seed: the plans' seed.
      features: the audio front end.
      options: the trainer's input options (`small_classes`, how the stores open).
      resume: the resume point finder (`training_inputs.Resume`), or None.
      augment: noise and reverberation over the mix (no speed perturbation), or None.

    Returns:
      `(dataset, sampler, draw_counts)`: the batches (``features``, ``lengths``, ``label``
      global class ids, ``index`` global record numbers), the sampler, and the draw counts of
      every record of every run, counted from each epoch's plan.

    Raises:
      ValueError: `epoch_mode="samples"` or `max_draws_per_record` (not planned for mixes),
        and the sampler's errors.
    """
    if options.epoch_mode != "classes" or options.max_draws_per_record is not None:
        raise ValueError(
            "a mix of runs plans epoch_mode='classes' without max_draws_per_record; set "
            "those input options so"
        )
    sampler = MixedClassBalancedSampler(
        mix,
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        small_classes=options.small_classes,
        features=features,
        record_set=record_set,
        store_options=options.store_options(),
        augment=augment,
    )
    draw_counts = DrawCounts(int(sampler.record_offsets[-1]))
    draw_counts.track_plan(lambda epoch: sampler.epoch_plan(epoch)["index"])
    batches = training_inputs._training_batches(sampler, resume, {"draw_counts": draw_counts})
    return batches.map(training_inputs._speaker_batch), sampler, draw_counts


def mix_settings(sampler: MixedClassBalancedSampler) -> dict[str, Any]:
    """What the trainer adds to `run_fn`'s `custom_config` about the mix: the global class
    count, and each run's weight and class count."""
    return {
        "num_classes": sampler.num_classes,
        "mixed_runs": {
            run.name: {
                "run_id": run.run.run_id,
                "weight": run.weight,
                "num_classes": report.num_classes,
            }
            for run, report in zip(sampler.mix.runs, sampler.reports.values(), strict=True)
        },
    }
