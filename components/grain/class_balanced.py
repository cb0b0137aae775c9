"""Class-balanced batches as Grain datasets: the batches of `inputs.class_balanced` without
TensorFlow: the records themselves, their decoded features, or (`features`) the audio front end's
log-mels, computed by `plans.audio_front` (within float32 rounding of the graph's).

`GrainClassBalanced` plans with `plans.class_plan.ClassBalancedPlan` (the tf.data plan's
positions and labels bit for bit, for the same arguments) over the class index of the labels
(`layout.class_records`, the one tf.data builds) or of a run, and reads the planned records with
`batch_reads.BatchReader`. A batch is a dict of ``index`` (record numbers) and ``label`` (class
ids), int64 [n_c * n_p], and the records: a dict source's (or decoder's) entries by their
keys, bytes as ``record`` (tf.data's `features=None`), an array as ``features``; with the front
end, ``features``, ``lengths`` and ``mask`` of the records' audio, as tf.data's.

Example:

    stream = class_balanced(waveforms, labels, n_classes_per_batch=8, n_samples_per_class=4)
    next(iter(stream))["label"]   # 8 classes x 4, grouped by class
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.grain.audio_batches import AudioBatches, check_front_options
from tfx_dynamic_inputs.grain.batch_reads import BatchReader
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, PlannedBatches
from tfx_dynamic_inputs.grain.skipped import SkippedSamples
from tfx_dynamic_inputs.layout.filesystem import without_tensorflow
from tfx_dynamic_inputs.plans.audio_options import AudioFeatureConfig
from tfx_dynamic_inputs.plans.augment_options import SpeakerAugmentConfig
from tfx_dynamic_inputs.plans.class_plan import ClassBalancedPlan
from tfx_dynamic_inputs.plans.speed_classes import derived_row_splits
from tfx_dynamic_inputs.records.source import RunRecordSource


def class_index(
    source: object, labels: object, record_set: str | None, decode: object, on_damaged: str
) -> tuple[object, np.ndarray, np.ndarray]:
    """The records of a labelled source and their class index (CSR), for the Grain samplers.

    Args:
      source: a run folder, or records (arrays, a dict of arrays, a random-access source).
      labels: None for a run (it holds its own); else int class ids (>= 0) or names [N].
      record_set, decode, on_damaged: the run's labelled record set and how it is read
        (`records.RunRecordSource`); `on_damaged` other than "fail" only for a run.

    Returns:
      `(records, row_splits, values)`: the records, and the record numbers of each class.

    Raises:
      ValueError, TypeError: labels given with a run or missing without one, labels that are
        not class ids, or a class index that does not cover the record set (one line).
    """
    if isinstance(source, str | os.PathLike):
        if labels is not None or record_set is None:
            raise ValueError("a run holds its own labels: pass the run with record_set alone")
        run_dir = os.fspath(source)
        records = RunRecordSource(run_dir, record_set, decode=decode, on_damaged=on_damaged)
        with without_tensorflow():
            row_splits, values = layout.load_csr(layout.class_records_dir(run_dir, record_set))
        if len(values) != len(records):
            raise ValueError(
                f"{run_dir}: the class index of {record_set!r} covers {len(values)} records, "
                f"the record set holds {len(records)}"
            )
        return records, row_splits, values
    if labels is None:
        raise TypeError("pass labels (int class ids, one per record) with arrays or a source")
    if on_damaged != "fail":
        raise ValueError(
            f"on_damaged={on_damaged!r:.50} is for a run folder; a source given is read with "
            "its own policy (RunRecordSource(..., on_damaged=...))"
        )
    labels = np.asarray(labels)
    if labels.dtype.kind in "USO":
        labels = np.unique(labels, return_inverse=True)[1].reshape(-1)
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or (len(labels) and labels.min() < 0):
        raise ValueError(f"labels must be int class ids >= 0 (or names) [N], got {labels.dtype}")
    num_classes = int(labels.max()) + 1 if len(labels) else 0
    row_splits, values = layout.class_records(labels, num_classes)
    return source, row_splits, values


class GrainClassBalanced(PlannedBatches):
    """Class-balanced batches for Grain: the plan, the records and the datasets of its epochs.

    Args:
      source: an array (a record a row), a dict of arrays, a random-access source, or a run
        folder (with `record_set`: its records and class index).
      labels: int [N] class ids (>= 0) or names [N] (numbered in sorted order); None for a run.
      n_classes_per_batch, n_samples_per_class, seed, epoch_mode, small_classes,
        max_draws_per_record, worker_index, num_workers: as tf.data's `class_balanced`.
      record_set: the run's labelled record set.
      decode: how a run's records are decoded (`records.RunRecordSource`: "bytes" gives tf.data's
        `features=None` records).
      on_damaged: for a run folder, "fail" (a damaged record raises, naming it) or "skip": its
        samples are left out of the batch (short of `n_c x n_p`, as tf.data's), counted in
        `skipped.total` and warned once an epoch (`skipped.SkippedSamples`). A source given is
        read with its own policy; one that reads a record as None skips it.
      features: the audio front end (`plans.audio_options.AudioFeatureConfig`, as given: a
        record at another rate is refused naming it, as tf.data's) over records of ``audio``
        (int16 [n]) and ``sample_rate`` (`records.AudioDecoder`'s); None (the default, unlike
        tf.data's, as arrays need none): the records as they are.
      augment: the speaker augmentation (`plans.augment_options.SpeakerAugmentConfig`: noise,
        RIRs, speed perturbation; needs `features`, in crop mode), drawn as tf.data's `augment`
        draws it (`plans.speaker_front`); with `K` speed factors the plan's classes are `K x C`
        (`plans.speed_classes`: class `c` at factor `k` is `k * C + c`) and ``label`` holds the
        derived class. None: none.

    Raises:
      ValueError, TypeError: a bad argument in one line (`ClassBalancedPlan`'s, or labels that
        do not fit the records).

    Example:

        balanced = GrainClassBalanced("runs/speakers", record_set="train", decode="bytes",
                                      n_classes_per_batch=8, n_samples_per_class=4)
        balanced.epoch(0)[0]["record"]   # object [32], the serialized Examples
    """

    def __init__(
        self,
        source: object,
        labels: object = None,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        seed: int = 0,
        epoch_mode: str = "classes",
        small_classes: str = "replace",
        max_draws_per_record: int | None = None,
        worker_index: int = 0,
        num_workers: int = 1,
        record_set: str | None = None,
        decode: object = "auto",
        on_damaged: str = "fail",
        features: AudioFeatureConfig | None = None,
        augment: SpeakerAugmentConfig | None = None,
    ):
        check_front_options(features, augment)
        records, row_splits, self._values = class_index(
            source, labels, record_set, decode, on_damaged
        )
        # A run's records carry their class (tf.data checks them against the class index).
        self._labels_in_records = isinstance(source, str | os.PathLike)
        self._num_source_classes = len(row_splits) - 1
        if augment is not None:
            # Speed perturbation: each class is K derived classes, planned like any other.
            row_splits = derived_row_splits(row_splits, augment.num_speeds)
        self.skipped = SkippedSamples("class_balanced", {"records": records})
        self.features, self.augment = features, augment
        self._records = BatchReader(records, "source")
        if len(self._values) != self._records.num_records:
            raise ValueError(
                f"labels name {len(self._values)} records, the source holds "
                f"{self._records.num_records}"
            )
        self.plan = ClassBalancedPlan(
            row_splits,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            seed=seed,
            epoch_mode=epoch_mode,
            small_classes=small_classes,
            num_workers=num_workers,
            max_draws_per_record=max_draws_per_record,
        )
        self._take_split(self.plan, num_workers, worker_index)
        # Opened once the plan is checked: an augmentation reads its noise and RIR clips.
        self._audio = None
        if features is not None:
            self._audio = AudioBatches(features, augment, self._num_source_classes)
        self.plan_key = json.dumps(
            {
                "kind": "class_balanced",
                "seed": self.plan.seed,
                "epoch_mode": epoch_mode,
                "small_classes": small_classes,
                "max_draws_per_record": max_draws_per_record,
                "class_sizes": [int(size) for size in np.diff(row_splits)],
                "n_samples_per_class": n_samples_per_class,
                "features": None if features is None else repr(features),
                "augment": None if augment is None else repr(augment),
                "global_batch": num_workers * self.batch_size,
                # A plan of fixed units keeps its batches on one split only.
                "split": None if self.plan.elastic else num_workers,
            },
            sort_keys=True,
        )

    def plan_rows(self, epoch: int, batch_numbers: np.ndarray) -> dict[str, np.ndarray]:
        """The plan's rows of global batches `batch_numbers` (`ClassBalancedPlan.plan_batches`)."""
        return self.plan.plan_batches(epoch, batch_numbers)

    def load(self, epoch: int, row: dict[str, np.ndarray]) -> dict[str, Any]:
        """A planned batch: ``index``, ``label`` and the records (or their features)."""
        index = self._values[row["position"] % len(self._values)].astype(np.int64)
        label = row["label"]
        # Each sample's place in its global batch keys its crop and masks.
        positions = row["slice_start"] + np.arange(len(index), dtype=np.int64)
        records, kept = self._records.read_checked(index)
        if not kept.all():
            self.skipped.record(epoch, kept)
            index, label, positions = index[kept], label[kept], positions[kept]
        if self._audio is not None:
            computed = self._audio.features_of(
                records,
                index=index,
                label=label,
                seed=row["seed"],
                positions=positions,
                record_labels=label % self._num_source_classes if self._labels_in_records else None,
            )
            return {"index": index, "label": label, **computed}
        if isinstance(records, dict):
            return {"index": index, "label": label, **records}
        name = "record" if records.dtype == object else "features"
        return {"index": index, "label": label, name: records}


def class_balanced(
    source: object,
    labels: object = None,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int = 0,
    epoch_mode: str = "classes",
    small_classes: str = "replace",
    max_draws_per_record: int | None = None,
    worker_index: int = 0,
    num_workers: int = 1,
    record_set: str | None = None,
    decode: object = "auto",
    on_damaged: str = "fail",
    features: AudioFeatureConfig | None = None,
    augment: SpeakerAugmentConfig | None = None,
    first_epoch: int = 0,
    num_epochs: int | None = None,
) -> EpochStream:
    """Class-balanced batches re-planned every epoch, as a Grain `IterDataset`.

    Args:
      source, labels, n_classes_per_batch, n_samples_per_class, seed, epoch_mode,
        small_classes, max_draws_per_record, worker_index, num_workers, record_set, decode,
        on_damaged, features, augment: as `GrainClassBalanced`.
      first_epoch, num_epochs: the epochs streamed (None: without end).

    Returns:
      The stream of batches (`GrainClassBalanced.batch`); its iterator's `get_state` /
      `set_state` resume exactly.

    Example:

        stream = class_balanced(x, labels, n_classes_per_batch=4, n_samples_per_class=2)
    """
    balanced = GrainClassBalanced(
        source,
        labels,
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        epoch_mode=epoch_mode,
        small_classes=small_classes,
        max_draws_per_record=max_draws_per_record,
        worker_index=worker_index,
        num_workers=num_workers,
        record_set=record_set,
        decode=decode,
        on_damaged=on_damaged,
        features=features,
        augment=augment,
    )
    return balanced.stream(first_epoch, num_epochs)
