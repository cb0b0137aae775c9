"""Class-balanced batches over several runs mixed by weight, as Grain datasets: the batches of
`inputs.mixed_class_balanced.MixedClassBalancedSampler` without TensorFlow.

The mix is a `plans.run_mix.FolderMix` (run folders, their weights and the weighting). Each run's
labelled record set and class index are opened (`records.RunRecordSource`, `layout`), their
classes namespaced (global class id = the run's class offset + its class id, names
``"<run name>/<class>"``) and their records too (global record number = the run's record offset +
its record number). `plans.mix_plan.MixedClassPlan` plans the batches (tf.data's plan bit for
bit) and each sample is read from its own run (`mixed_runs.ConcatenatedRecords`). A batch is
``index`` (global record numbers), ``label`` (global class ids) and ``run``, int64 [n_c * n_p],
and the records (``record``, the serialized Examples with `decode="bytes"`, as tf.data's
`features=None`) or the audio front end's ``features``, ``lengths`` and ``mask``
(`audio_batches.AudioBatches`: `plans.audio_front`, within float32 rounding of the graph's), with
noise and reverberation drawn per sample as for one run where `augment` asks (speed perturbation
is refused over a mix, as tf.data's refuses it).

A Grain state holds no weights of its own: the plan key names the weights and the weighting, so
a checkpoint of one mix is refused by a stream of other weights (tf.data's sampler resumes new
weights at an epoch boundary; here, start the new weights' stream at the next epoch:
`stream(first_epoch=...)`).

Example:

    mix = FolderMix((WeightedFolder("runs/vox1", 1.0, "vox1"),
                     WeightedFolder("runs/mine", 3.0, "mine")))
    stream = mixed_class_balanced(mix, record_set="train", decode="bytes",
                                  n_classes_per_batch=8, n_samples_per_class=4)
    next(iter(stream))["run"]   # the run of each sample
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.grain.audio_batches import AudioBatches, check_front_options
from tfx_dynamic_inputs.grain.batch_reads import BatchReader
from tfx_dynamic_inputs.grain.class_balanced import class_index
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, PlannedBatches
from tfx_dynamic_inputs.grain.mixed_runs import ConcatenatedRecords, refuse_repeated_runs
from tfx_dynamic_inputs.layout.filesystem import without_tensorflow
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.mix_plan import MixedClassPlan
from tfx_dynamic_inputs.plans.run_mix import (
    FolderMix,
    check_mix_augment,
    check_mix_on_damaged,
    one_sample_rate,
)
from tfx_dynamic_inputs.records.features import AudioDecoder, ExampleDecoder, ImageDecoder

Decode = str | AudioDecoder | ImageDecoder | ExampleDecoder


def _class_names(run_dir: str, record_set: str, num_classes: int) -> list[str]:
    """A run's class names (its `classes.txt`), else its class ids as strings."""
    path = os.path.join(layout.index_dir(run_dir, record_set), layout.CLASSES_FILE)
    with without_tensorflow():
        names = layout.load_lines(path) if os.path.exists(path) else None
    if names is None:
        return [str(number) for number in range(num_classes)]
    if len(names) != num_classes:
        raise layout.IndexFileError(
            f"{path} lists {len(names)} classes but the class index has {num_classes}"
        )
    return names


class GrainMixedClassBalanced(PlannedBatches):
    """Class-balanced `n_c x n_p` batches over a mix of runs, for Grain (module docstring).

    Args:
      mix: the run folders, their weights and the weighting (`plans.run_mix.FolderMix`).
      n_classes_per_batch: `n_c`, distinct (namespaced) classes per batch of this worker.
      n_samples_per_class: `n_p`, samples per class in a batch.
      record_set: each run's labelled record set (e.g. "train").
      seed: the plan and the crops/masks are pure functions of (seed, epoch).
      small_classes: ``"replace"`` or ``"skip"``, per run.
      worker_index, num_workers: this input pipeline's share of whole batches.
      decode: how the runs' records are decoded (`records.RunRecordSource`: "bytes" gives
        tf.data's `features=None` records; the front end needs "audio" or "auto").
      on_damaged: "fail", as tf.data's mix requires (a damaged record raises, naming it).
      features: the audio front end (`plans.audio_options.AudioFeatureConfig`, as given), over
        runs that stored one sample rate (others are refused, as tf.data's); None: the records.
      augment: noise and reverberation (`plans.augment_options.SpeakerAugmentConfig`, needs
        `features` in crop mode), drawn per sample as tf.data's mix draws them; speed factors
        are refused. None: none.

    Raises:
      ValueError, TypeError: a bad argument in one line: `plans.run_mix`'s checks (and a run id
        twice), `MixedClassPlan`'s (a run whose weight asks for more classes than it has), runs
        of several rates with `features`, `audio_batches.check_front_options`' and an `augment`
        with speed factors.

    Attributes:
      names: the runs' names; classes: the global class names ``"<run name>/<class>"``;
      num_classes: the global class count (what a model's classifier needs);
      record_offsets: int64 [K + 1]: run `k`'s records are global numbers
        `[offsets[k], offsets[k + 1])`; reports: run name -> its `ClassReport`.

    Example:

        mixed = GrainMixedClassBalanced(mix, record_set="train", decode="bytes",
                                        n_classes_per_batch=4, n_samples_per_class=2)
        mixed.epoch(0)[0]["record"]   # object [8], the serialized Examples
    """

    def __init__(
        self,
        mix: FolderMix,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        record_set: str,
        seed: int = 0,
        small_classes: str = "replace",
        worker_index: int = 0,
        num_workers: int = 1,
        decode: Decode = "auto",
        on_damaged: str = "fail",
        features: AudioFeatureConfig | None = None,
        augment: SpeakerAugmentConfig | None = None,
    ):
        if not isinstance(mix, FolderMix):
            raise TypeError(f"mix must be a FolderMix, got {type(mix).__name__}")
        if not isinstance(record_set, str):
            raise TypeError(f"record_set must be a record set's name, got {record_set!r:.50}")
        check_front_options(features, augment)
        check_mix_augment(augment)
        check_mix_on_damaged(on_damaged)
        opened = [class_index(folder, None, record_set, decode, "fail") for folder in mix.folders]
        sources = [records for records, _, _ in opened]
        refuse_repeated_runs(sources)
        if features is not None:
            one_sample_rate(
                {
                    name: (source.records.summary.get("config") or {}).get("sample_rate")
                    for name, source in zip(mix.names, sources, strict=True)
                }
            )
        self.mix, self.names = mix, mix.names
        self.features, self.augment = features, augment
        self.plan = MixedClassPlan(
            [row_splits for _, row_splits, _ in opened],
            shares=mix.shares,
            run_names=mix.names,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            weighting=mix.weighting,
            seed=seed,
            small_classes=small_classes,
            num_workers=num_workers,
        )
        concatenated = ConcatenatedRecords(sources)
        self._records = BatchReader(concatenated, "records")
        self.record_offsets = concatenated.offsets
        self._values = np.concatenate(
            [
                np.asarray(values, np.int64) + offset
                for (_, _, values), offset in zip(opened, self.record_offsets[:-1], strict=True)
            ]
        )
        plan_layout = self.plan.layout
        self._class_offsets = plan_layout.class_offsets
        self.num_classes = int(plan_layout.class_offsets[-1])
        # Opened once the plan is checked: an augmentation reads its noise and RIR clips.
        self._audio = None
        if features is not None:
            self._audio = AudioBatches(features, augment, self.num_classes)
        self.reports = dict(zip(mix.names, plan_layout.reports, strict=True))
        self.classes = [
            f"{name}/{class_name}"
            for name, folder, report in zip(
                mix.names, mix.folders, plan_layout.reports, strict=True
            )
            for class_name in _class_names(folder, record_set, report.num_classes)
        ]
        self._take_split(self.plan, num_workers, worker_index)
        self.plan_key = json.dumps(
            {
                "kind": "mixed_class_balanced",
                "seed": self.plan.seed,
                "small_classes": small_classes,
                "weighting": mix.weighting.value,
                "runs": [
                    {
                        "name": name,
                        "run_id": source.records.run_id,
                        "weight": weight,
                        "class_sizes": [int(size) for size in report.class_sizes],
                    }
                    for name, source, weight, report in zip(
                        mix.names, sources, mix.weights, plan_layout.reports, strict=True
                    )
                ],
                "n_samples_per_class": n_samples_per_class,
                "features": None if features is None else repr(features),
                "augment": None if augment is None else repr(augment),
                "global_batch": num_workers * self.batch_size,
            },
            sort_keys=True,
        )

    def plan_rows(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """The plan's rows of global batches `batch_numbers` (`MixedClassPlan.plan_batches`)."""
        return self.plan.plan_batches(epoch, batch_numbers)

    def load(self, epoch: int, row: dict[str, np.ndarray]) -> dict[str, Any]:
        """A planned batch: ``index``, ``label``, ``run`` and the records (or their features)."""
        index = self._values[row["position"]]
        batch = {"index": index, "label": row["label"], "run": row["run"]}
        records = self._records.read(index)
        if self._audio is None:
            if isinstance(records, dict):
                return {**batch, **records}
            return {**batch, "record" if records.dtype == object else "features": records}
        computed = self._audio.features_of(
            records,
            index=index,
            label=row["label"],
            seed=row["seed"],
            # Each sample's place in its global batch keys its crop, masks and augmentation.
            positions=row["slice_start"] + np.arange(len(index), dtype=np.int64),
            # A run's records carry their own class id (tf.data checks them too).
            record_labels=row["label"] - self._class_offsets[row["run"]],
        )
        return {**batch, **computed}


def mixed_class_balanced(
    mix: FolderMix,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    record_set: str,
    seed: int = 0,
    small_classes: str = "replace",
    worker_index: int = 0,
    num_workers: int = 1,
    decode: Decode = "auto",
    on_damaged: str = "fail",
    features: AudioFeatureConfig | None = None,
    augment: SpeakerAugmentConfig | None = None,
    first_epoch: int = 0,
    num_epochs: int | None = None,
) -> EpochStream:
    """Class-balanced batches over a mix of runs, re-planned every epoch, as a Grain
    `IterDataset`.

    Args:
      mix, n_classes_per_batch, n_samples_per_class, record_set, seed, small_classes,
        worker_index, num_workers, decode, on_damaged, features, augment: as
        `GrainMixedClassBalanced`.
      first_epoch, num_epochs: the epochs streamed (None: without end).

    Returns:
      The stream of batches (``index``, ``label``, ``run`` and the records or features); its
      iterator's `get_state` / `set_state` resume exactly.

    Example:

        stream = mixed_class_balanced(mix, record_set="train", n_classes_per_batch=8,
                                      n_samples_per_class=4, num_epochs=10)
    """
    mixed = GrainMixedClassBalanced(
        mix,
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        record_set=record_set,
        seed=seed,
        small_classes=small_classes,
        worker_index=worker_index,
        num_workers=num_workers,
        decode=decode,
        on_damaged=on_damaged,
        features=features,
        augment=augment,
    )
    return mixed.stream(first_epoch, num_epochs)
