"""Class-balanced batches over several runs mixed by weight: `MixedClassBalancedSampler`.

The sampler reads a `run_mix.RunMix`: each run's labelled record set and class index, its
classes namespaced (global class id = the run's offset + its class id, names
``"<run name>/<class>"``) and its records too (global record number = the run's record offset +
its record number). `mix_plan.MixedClassPlan` plans the batches; batches are read from each
sample's own run.

**Weights at a resume.** The state (`MixState`) records the weights in force. The stream a
checkpoint binds names the runs (by run id, in mix order), the global batch and the weighting,
not the weights: a sampler built with new weights resumes a checkpoint at the next epoch
boundary (`dataset()` with `initial_step=0` plans `state.epoch` with the new weights, which the
state then records). Resuming the epoch in progress (`initial_step > 0`) with other weights than
those it was planned with is refused in one line: its batches would not be the ones already
trained on.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs import data_service, labelled_sources
from tfx_dynamic_inputs.inputs.arguments import int_argument
from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.audio_features import audio_features, parse_audio_examples
from tfx_dynamic_inputs.inputs.class_report import ClassReport
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler
from tfx_dynamic_inputs.inputs.epoch_state import (
    EpochState,
    StateRunError,
    array_digest,
    plan_key,
)
from tfx_dynamic_inputs.inputs.mix_plan import MixedClassPlan
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import StoreOptions
from tfx_dynamic_inputs.inputs.run_mix import RunMix, read_by_run
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmentConfig, SpeakerAugmenter
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.inputs.worker_slices import replicas_per_worker, worker_slice
from tfx_dynamic_inputs.plans.run_mix import (
    check_mix_augment,
    check_mix_on_damaged,
    one_sample_rate,
)

DEFAULT_FEATURES = AudioFeatureConfig()


class MixState(EpochState):
    """An `EpochState` that also records the weights in force (`weights`, a JSON string
    variable: name -> weight), checkpointed with the rest.

    Args:
      initial_epoch: the first epoch to plan (>= 0).
      name: the `tf.Module` name.

    Example:

        state = MixState()
        checkpoint = tf.train.Checkpoint(sampler=state)
    """

    def __init__(self, initial_epoch: int = 0, name: str | None = None):
        super().__init__(initial_epoch, name=name)
        self.weights = tf.Variable("", dtype=tf.string, trainable=False, name="weights")


class MixedClassBalancedSampler(EpochSampler):
    """Class-balanced `n_c x n_p` batches over the runs of a `RunMix` (see the module docstring).

    Args:
      mix: the runs, their weights and the weighting (`RunMix`).
      n_classes_per_batch: `n_c`, distinct (namespaced) classes per batch.
      n_samples_per_class: `n_p`, samples per class in a batch.
      seed: the plan and the crops/masks are pure functions of (seed, epoch).
      input_context, worker_index, num_workers: this input pipeline's slice of whole batches.
      small_classes: ``"replace"`` or ``"skip"``, per run (`class_report.class_report`).
      features: the audio front end (at the rate the runs stored, which must agree), or None
        for the serialized records.
      record_set: each run's labelled record set (optional when a run has only one).
      store_options: how the runs' records are read; `on_damaged` must be ``"fail"``.
      state: a `MixState` to track in a `tf.train.Checkpoint`.
      augment: noise and reverberation (`speaker_augment.SpeakerAugmentConfig`, drawn per
        sample as for one run), or None; its clips are held in memory within
        `store_options.memory_budget_bytes`, else read from disk. Speed perturbation is
        refused: its derived classes are not planned over a mix.

    Raises:
      ValueError: runs that stored other sample rates, `on_damaged="skip"`, an `augment` with
        speed factors or without the audio front end, and the plan's errors
        (`MixedClassPlan`: a run whose weight asks for more classes than it has).
      TypeError: `mix` not a `RunMix`, or `state` not a `MixState`.

    Attributes:
      reports: run name -> `ClassReport` (in the run's own class ids).
      classes: the global class names, ``"<run name>/<class>"``.
      num_classes: the global class count (what a model's classifier needs).
      record_offsets: int64 [K + 1]: run `k`'s records are global numbers
        `[offsets[k], offsets[k + 1])`.

    Example:

        sampler = MixedClassBalancedSampler(mix, n_classes_per_batch=8, n_samples_per_class=4)
        model.fit(sampler.dataset(), epochs=10)
    """

    # `MixedClassPlan.plan_batches`: every part of a mix's plan is keyed or a closed form.
    plans_batches_alone = True

    def __init__(
        self,
        mix: RunMix,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        worker_index: int | None = None,
        num_workers: int | None = None,
        small_classes: str = "replace",
        features: AudioFeatureConfig | None = DEFAULT_FEATURES,
        record_set: str | None = None,
        store_options: StoreOptions | None = None,
        state: MixState | None = None,
        augment: SpeakerAugmentConfig | None = None,
    ):
        if not isinstance(mix, RunMix):
            raise TypeError(f"mix must be a RunMix, got {type(mix).__name__}")
        if state is not None and not isinstance(state, MixState):
            raise TypeError(f"state must be a MixState, got {type(state).__name__}")
        store_options = store_options or StoreOptions()
        check_mix_on_damaged(store_options.on_damaged)
        self.mix = mix
        self.worker_index, self.num_workers = worker_slice(
            input_context, worker_index=worker_index, num_workers=num_workers
        )
        if features is not None:
            recorded = one_sample_rate({run.name: run.run.sample_rate for run in mix.runs})
            if features is DEFAULT_FEATURES and recorded is not None:
                features = dataclasses.replace(features, sample_rate=recorded)
        self.features = features
        labelled = [
            labelled_sources.labelled_records(
                run.run, record_set=record_set, store_options=store_options
            )
            for run in mix.runs
        ]
        self.stores: list[RecordStore] = [item.store for item in labelled]
        self.plan = MixedClassPlan(
            [item.row_splits for item in labelled],
            shares=mix.shares,
            run_names=mix.names,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            weighting=mix.weighting,
            seed=seed,
            small_classes=small_classes,
            num_workers=self.num_workers,
            replicas_per_worker=replicas_per_worker(input_context),
        )
        self.num_batches = self.plan.num_batches
        self.num_classes = self.plan.num_classes
        self.augmenter = None
        if augment is not None:
            if features is None:
                raise ValueError("augment needs the audio front end (features)")
            check_mix_augment(augment)
            self.augmenter = SpeakerAugmenter(
                augment, self.features, self.num_classes, store_options.memory_budget_bytes
            )
        self.reports: dict[str, ClassReport] = dict(zip(mix.names, self.plan.reports, strict=True))
        self.classes = [
            f"{run.name}/{name}"
            for run, item, report in zip(mix.runs, labelled, self.plan.reports, strict=True)
            for name in (item.classes or [str(c) for c in range(report.num_classes)])
        ]
        sizes = [store.num_records for store in self.stores]
        self.record_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        values = np.concatenate(
            [
                np.asarray(item.values, np.int64) + off
                for item, off in zip(labelled, self.record_offsets[:-1], strict=True)
            ]
        )
        self._values = index_variable(values, tf.int64, "mixed_record_numbers")
        self._record_offsets = index_variable(self.record_offsets, tf.int64, "record_offsets")
        self._class_offsets = index_variable(self.plan.class_offsets, tf.int64, "class_offsets")
        self._labels_in_records = all(item.labels_in_records for item in labelled)
        self.state = state if state is not None else MixState()

    @property
    def stream(self) -> str:
        run_ids = ", ".join(run.run.run_id for run in self.mix.runs)
        return f"{self.plan.stream} over runs [{run_ids}]"

    @property
    def plan_key(self) -> str:
        """The seed, the small-class policy and each run's class sizes; `stream` names the rest
        (the runs, the global batch, the weighting) and `MixState.weights` the weights."""
        sizes = [report.class_sizes for report in self.plan.reports]
        return plan_key(
            {
                "seed": self.plan.seed,
                "small_classes": self.plan.reports[0].policy,
                "classes": self.num_classes,
                "class_sizes": array_digest(np.concatenate([self.plan.class_offsets, *sizes])),
            }
        )

    @property
    def weights_key(self) -> str:
        """The weights in words, as `MixState.weights` records them (JSON, name -> weight)."""
        return json.dumps(dict(zip(self.mix.names, self.mix.weights, strict=True)))

    def dataset(
        self,
        *,
        initial_step: int = 0,
        num_parallel_calls: int = tf.data.AUTOTUNE,
        deterministic: bool = True,
    ) -> tf.data.Dataset:
        """`EpochSampler.dataset`, with the weights checked and recorded in the state.

        Args:
          initial_step: resumes the epoch in progress at this batch of this worker; with
            other weights than the state's, only 0 (the next epoch) is accepted.
          num_parallel_calls, deterministic: as `EpochSampler.dataset`.

        Returns:
          The dataset of batches (``index`` global record numbers, ``label`` global class ids,
          ``run`` each sample's run, and the features or records).

        Raises:
          epoch_state.StateRunError: another mix's or plan's state, or new weights mid-epoch.
          TypeError, ValueError: a bad `initial_step` (`EpochSampler.dataset`).
        """
        initial_step = int_argument("initial_step", initial_step, 0)
        # Another mix or plan: refused first, naming it.
        self.state.bind_run(self.run_key, self.stream, self.plan_key)
        held = self.state.weights.numpy().decode()
        if initial_step > 0 and held and held != self.weights_key:
            raise StateRunError(
                f"the epoch in progress was planned with weights {held}, this sampler has "
                f"{self.weights_key}: new weights take effect at an epoch boundary; resume "
                "with initial_step=0 (the next epoch) or with the checkpoint's weights"
            )
        dataset = super().dataset(
            initial_step=initial_step,
            num_parallel_calls=num_parallel_calls,
            deterministic=deterministic,
        )
        self.state.weights.assign(self.weights_key)
        return dataset

    def epoch_plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of `epoch`: ``index`` (global record numbers), ``label`` (global
        class ids) and ``run`` [num_batches, n_c * n_p], ``seed``, ``slice_start``.

        Args:
          epoch: int64 scalar.

        Returns:
          A dict of int64 tensors (`mix_plan.MixedClassPlan.plan`, positions as records).
        """
        return self._in_records(self.plan.plan(epoch))

    def draws_per_run(self, epoch) -> dict[str, np.ndarray]:
        """How often each record of each run is drawn in `epoch`'s plan.

        Args:
          epoch: the epoch.

        Returns:
          run name -> int64 [records of the run], in the run's own record numbers.
        """
        index = self.epoch_plan(epoch)["index"].numpy().ravel()
        counts = np.bincount(index, minlength=int(self.record_offsets[-1]))
        return {
            name: counts[self.record_offsets[k] : self.record_offsets[k + 1]]
            for k, name in enumerate(self.mix.names)
        }

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.epoch_plan(epoch)

    def _plan_batches(self, epoch: tf.Tensor, batch_numbers: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._in_records(self.plan.plan_batches(epoch, batch_numbers))

    def _in_records(self, planned: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Plan rows with global record numbers (``index``) in place of CSR positions."""
        index = tf.gather(self._values, planned.pop("position"))
        return {"index": index, **planned}

    def _stores(self) -> list[RecordStore]:
        return list(self.stores)

    def _service_problems(self) -> list[str]:
        return data_service.problems_of(*self._stores(), self.augmenter)

    def _load_batch(
        self, row: dict[str, tf.Tensor], *, for_service: bool = False
    ) -> dict[str, tf.Tensor]:
        batch_size = self.plan.batch_size
        index = tf.ensure_shape(row["index"], [batch_size])
        label = tf.ensure_shape(row["label"], [batch_size])
        run = tf.ensure_shape(row["run"], [batch_size])
        positions = row["slice_start"] + tf.range(batch_size, dtype=tf.int64)
        records = read_by_run(self.stores, self.record_offsets, index, run, for_service)
        records = tf.ensure_shape(records, [batch_size])
        batch = {"index": index, "label": label, "run": run}
        if self.features is None:
            return {**batch, "record": records}
        parsed = parse_audio_examples(records, self.features.sample_rate)
        checks = []
        if self._labels_in_records:
            local_label = label - tf.gather(self._class_offsets, run)
            mismatch = tf.not_equal(parsed["label"], local_label)
            checks.append(
                tf.debugging.Assert(
                    tf.logical_not(tf.reduce_any(mismatch)),
                    ["records whose label differs from their run's class index:", index],
                    summarize=16,
                )
            )
        with tf.control_dependencies(checks):
            if self.augmenter is not None:
                computed = self.augmenter.features_of(
                    parsed["audio"], label, row["seed"], positions, parsed["sample_rate"]
                )
            else:
                computed = audio_features(
                    parsed["audio"],
                    self.features,
                    row["seed"],
                    index=index,
                    sample_rate=parsed["sample_rate"],
                    positions=positions,
                )
        return {**batch, **computed}
