"""Class-balanced batches: exactly `n_c` distinct classes x `n_p` samples, every class every epoch.

`class_balanced` (and `ClassBalancedSampler`, which it wraps) reads the records that
`class_plan.ClassBalancedPlan` plans for each epoch from a `RecordStore` and computes log-mel
features in the graph (`audio_features`). What a user has (run directory, store + labels,
dataset, ids + loader) becomes a store and class index in `labelled_sources.labelled_records`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import data_service, labelled_sources
from tfx_dynamic_inputs.inputs.arguments import int_argument, seed_argument
from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.audio_features import audio_features, parse_audio_examples
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan
from tfx_dynamic_inputs.inputs.class_report import ClassReport
from tfx_dynamic_inputs.inputs.damaged_records import describe_damaged
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler
from tfx_dynamic_inputs.inputs.epoch_state import EpochState, array_digest, plan_key
from tfx_dynamic_inputs.inputs.graph_functions import as_given, as_written
from tfx_dynamic_inputs.inputs.parsing import AUDIO_EXAMPLE_SPEC, ExampleGuard, ParseFn
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions, open_run
from tfx_dynamic_inputs.inputs.skip_log import SkipLog
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmentConfig, SpeakerAugmenter
from tfx_dynamic_inputs.inputs.variables import index_variable
from tfx_dynamic_inputs.inputs.worker_slices import replicas_per_worker, worker_slice

DEFAULT_FEATURES = AudioFeatureConfig()

_log = logging.getLogger(__name__)


class ClassBalancedSampler(EpochSampler):
    """A class-balanced input over one source: its record store, class index, plan and state.

    `dataset()` is the `tf.data.Dataset` that `class_balanced` returns; the sampler also exposes
    what the dataset is built from:

    * `report` (`ClassReport`): usable, small, skipped and empty classes (also logged once as a
      warning when any class is small or empty);
    * `state` (`epoch_state.EpochState`): track it in a `tf.train.Checkpoint` to resume; its
      `skipped_samples` (also `sampler.skipped_samples`) counts the samples left out of batches
      because their records are damaged (`on_damaged="skip"`), logged once per epoch that skips;
      a record that is not an Example the sampler's parser reads (the audio front end, a
      `feature_spec`) is damaged too (`parsing.ExampleGuard`: each record checked once);
    * `plan` (`ClassBalancedPlan`), `store` (`RecordStore`), `classes` (class names when the
      labels were strings or the run has a `classes.txt`, else None).

    See `class_balanced` for the arguments.

    Example:

        sampler = ClassBalancedSampler(run, n_classes_per_batch=8, n_samples_per_class=4)
        print(sampler.report.summary())
        model.fit(sampler.dataset(), epochs=10)
    """

    def __init__(
        self,
        source,
        labels=None,
        *,
        n_classes_per_batch: int,
        n_samples_per_class: int,
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        worker_index: int | None = None,
        num_workers: int | None = None,
        epoch_mode: str = "classes",
        small_classes: str = "replace",
        max_draws_per_record: int | None = None,
        features: AudioFeatureConfig | None = DEFAULT_FEATURES,
        parse_fn: ParseFn | None = None,
        feature_spec: Mapping[str, object] | None = None,
        record_set: str | None = None,
        load_fn: Callable[[object], object] | None = None,
        store_options: StoreOptions | None = None,
        memory_budget_bytes: int = 1 << 30,
        cache_dir: str | None = None,
        state: EpochState | None = None,
        augment: SpeakerAugmentConfig | None = None,
    ):
        # Checked before the source is opened: a bad argument is one line, at once.
        n_classes_per_batch = int_argument("n_classes_per_batch", n_classes_per_batch, 1)
        n_samples_per_class = int_argument("n_samples_per_class", n_samples_per_class, 1)
        seed = seed_argument(seed)
        self.worker_index, self.num_workers = worker_slice(
            input_context, worker_index=worker_index, num_workers=num_workers
        )
        self._parse = record_parser(parse_fn, feature_spec)
        if self._parse is not None:
            if features is not None and features is not DEFAULT_FEATURES:
                raise ValueError(
                    "pass features (the audio front end) or parse_fn / feature_spec, not both"
                )
            features = None
        elif features is DEFAULT_FEATURES and isinstance(source, (str, os.PathLike, Run)):
            # The front end featurizes at the rate the run stored, never a default of its own.
            recorded = _recorded_sample_rate(source)
            if recorded is not None:
                features = dataclasses.replace(features, sample_rate=recorded)
        self.features = features
        sample_rate = features.sample_rate if features is not None else None
        resolved = labelled_sources.labelled_records(
            source,
            labels,
            record_set=record_set,
            load_fn=load_fn,
            store_options=store_options,
            memory_budget_bytes=memory_budget_bytes,
            cache_dir=cache_dir,
            sample_rate=sample_rate,
        )
        self.store: RecordStore = resolved.store
        self.classes = resolved.classes
        self._labels_in_records = resolved.labels_in_records
        if resolved.values.shape[0] != self.store.num_records:
            raise ValueError(
                f"the class index lists {resolved.values.shape[0]} records but the record store "
                f"holds {self.store.num_records}"
            )
        # Speed perturbation makes each class K derived classes (`speaker_augment`).
        self.augmenter = None
        self._num_source_classes = len(resolved.row_splits) - 1
        row_splits = resolved.row_splits
        if augment is not None:
            if features is None:
                raise ValueError("augment needs the audio front end (features), not parse_fn")
            self.augmenter = SpeakerAugmenter(
                augment, features, self._num_source_classes, memory_budget_bytes
            )
            row_splits, self.classes = self.augmenter.derived_classes(row_splits, self.classes)
        self.plan = ClassBalancedPlan(
            row_splits,
            n_classes_per_batch=n_classes_per_batch,
            n_samples_per_class=n_samples_per_class,
            seed=seed,
            epoch_mode=epoch_mode,
            small_classes=small_classes,
            max_draws_per_record=max_draws_per_record,
            num_workers=self.num_workers,
            replicas_per_worker=replicas_per_worker(input_context),
        )
        self.num_batches = self.plan.num_batches
        self.report = self.plan.report
        _log_report(self.report)
        self.state = state if state is not None else EpochState()
        self._num_positions = int(resolved.values.shape[0])
        self._record_numbers, self._record_numbers_in_python = _record_number_lookup(
            resolved.values, memory_budget_bytes
        )
        # Records the sampler's own parser reads (the audio front end, a feature spec) are checked
        # to be such Examples before a batch is parsed; a parse_fn's records may be anything.
        spec = AUDIO_EXAMPLE_SPEC if self._parse is None and features is not None else feature_spec
        self._guard = ExampleGuard(self.store, spec) if spec is not None else None
        damaged = self._guard if self._guard is not None else self.store
        self._skip_log = SkipLog(
            "class_balanced", self.state, lambda: describe_damaged({"": damaged})
        )

    def epoch_plan(self, epoch) -> dict[str, tf.Tensor]:
        """The global plan of `epoch` in record numbers: ``index`` and ``label`` [num_batches,
        n_c * n_p], ``seed`` [num_batches, 2], ``slice_start`` [num_batches].

        Args:
          epoch: int64 scalar, a Python int or a tensor.

        Returns:
          A dict of int64 tensors: ``index`` (the record numbers of each batch), ``label`` (the
          class id of each sample), ``seed`` (the stateless seed of each batch's global batch)
          and ``slice_start`` (where the batch starts in its global batch), as above
          (`class_plan.ClassBalancedPlan.plan`).

        Example:

            first_batch = sampler.epoch_plan(0)["index"][0]   # int64 [n_c * n_p]
        """
        return self._in_records(self.plan.plan(epoch))

    @property
    def stream(self) -> str:
        return self.plan.stream

    @property
    def plan_key(self) -> str:
        """The seed, the small-class policy and the class sizes planned (speed perturbation's
        derived classes included); `stream` names the rest (global batch, epoch mode, draw
        cap)."""
        report = self.plan.report
        return plan_key(
            {
                "seed": self.plan.seed,
                "small_classes": report.policy,
                "classes": report.num_classes,
                "class_sizes": array_digest(report.class_sizes),
            }
        )

    @property
    def plans_batches_alone(self) -> bool:
        return self.plan.plans_batches_alone

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.epoch_plan(epoch)

    def _plan_batches(self, epoch: tf.Tensor, batch_numbers: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._in_records(self.plan.plan_batches(epoch, batch_numbers))

    def _in_records(self, planned: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Plan rows with record numbers (``index``) in place of CSR positions."""
        # A derived class's positions are its source class's, shifted by k * N.
        position = planned["position"] % self._num_positions
        return {
            "index": self._record_numbers(position),
            "label": planned["label"],
            "seed": planned["seed"],
            "slice_start": planned["slice_start"],
        }

    def _stores(self) -> list[RecordStore]:
        return [self.store]

    def _service_problems(self) -> list[str]:
        problems = data_service.problems_of(*self._stores(), self.augmenter)
        if self._record_numbers_in_python:
            problems.append(
                "the class index is larger than memory_budget_bytes and is read from its "
                "memory-mapped file in a tf.numpy_function; raise memory_budget_bytes above its "
                "size (8 bytes a record) to hold it in the graph"
            )
        return problems

    def _load_batch(
        self, row: dict[str, tf.Tensor], *, for_service: bool = False
    ) -> dict[str, tf.Tensor]:
        batch_size = self.plan.batch_size
        index = tf.ensure_shape(row["index"], [batch_size])
        label = tf.ensure_shape(row["label"], [batch_size])
        # Each sample's place in its global batch keys its crop and masks.
        positions = row["slice_start"] + tf.range(batch_size, dtype=tf.int64)
        records, ok = self.store.read_checked(index, for_service=for_service)
        if self._guard is not None and not for_service:
            records, ok = self._guard.check(index, records, ok)
        if self.store.on_damaged == "skip":
            # A damaged record comes back empty: leave its sample out (the batch is then short of
            # the exact n_c x n_p) rather than train on a record that is not there.
            with tf.control_dependencies([self._skip_log.record(row["epoch"], ok)]):
                ok = tf.identity(ok)
            index, label, records, positions = (
                tf.boolean_mask(t, ok) for t in (index, label, records, positions)
            )
        if self._parse is not None:
            return _with_parsed({"index": index, "label": label}, self._parse(records))
        if self.features is None:
            return {"index": index, "label": label, "record": records}
        parsed = parse_audio_examples(records, self.features.sample_rate)
        checks = []
        if self._labels_in_records:
            mismatch = tf.not_equal(parsed["label"], label % self._num_source_classes)
            checks.append(
                tf.debugging.Assert(
                    tf.logical_not(tf.reduce_any(mismatch)),
                    [
                        "records whose label differs from the class index:",
                        tf.boolean_mask(index, mismatch),
                    ],
                    summarize=16,
                )
            )
        if self.augmenter is not None:
            with tf.control_dependencies(checks):
                computed = self.augmenter.features_of(
                    parsed["audio"], label, row["seed"], positions, parsed["sample_rate"]
                )
            return {"index": index, "label": label, **computed}
        with tf.control_dependencies(checks):
            computed = audio_features(
                parsed["audio"],
                self.features,
                row["seed"],
                index=index,
                sample_rate=parsed["sample_rate"],
                positions=positions,
            )
        return {"index": index, "label": label, **computed}


def _recorded_sample_rate(source) -> int | None:
    """The sample rate the run `source` (a `Run` or its folder) stored its audio at, or None.

    A folder that does not open as a committed run gives None here:
    `labelled_sources.labelled_records` opens it next and names what is wrong with it."""
    if isinstance(source, Run):
        return source.sample_rate
    try:
        return open_run(os.fspath(source)).sample_rate
    except (FileNotFoundError, layout.IndexFileError):
        return None


def class_balanced(
    source,
    labels=None,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    worker_index: int | None = None,
    num_workers: int | None = None,
    epoch_mode: str = "classes",
    small_classes: str = "replace",
    max_draws_per_record: int | None = None,
    features: AudioFeatureConfig | None = DEFAULT_FEATURES,
    parse_fn: ParseFn | None = None,
    feature_spec: Mapping[str, object] | None = None,
    record_set: str | None = None,
    load_fn: Callable[[object], object] | None = None,
    store_options: StoreOptions | None = None,
    memory_budget_bytes: int = 1 << 30,
    cache_dir: str | None = None,
    state: EpochState | None = None,
    initial_step: int = 0,
    num_parallel_calls: int = tf.data.AUTOTUNE,
    augment: SpeakerAugmentConfig | None = None,
) -> tf.data.Dataset:
    """Class-balanced batches of `n_c` distinct classes x `n_p` samples, re-planned every epoch.

    `ClassBalancedSampler` takes the same arguments (but `initial_step` and
    `num_parallel_calls`, which go to its `dataset()`) and also exposes the class report, the
    plan, the store and the state.

    Args:
      source: where the records are:
        * a materialized run: a `Run` (`open_run`: a run folder, or a pipeline's artifacts of
          it) or its folder, with `record_set` naming the labelled record set (optional when
          the run has only one); its class index is the run's;
        * a `RecordStore` of audio Examples, with `labels`;
        * a sequence of sample ids, with `labels` and `load_fn` (what a Keras `Sequence`
          holds): `load_fn(id)` returns the waveform (int16, or float in [-1, 1]; [n] or
          [n, 1]) at `features.sample_rate`;
        * a `tf.data.Dataset` of `(waveform, label)` pairs (a finite one).
        Ids and datasets are read once into a `RecordStore` (memory, or indexed shards under
        `cache_dir` when larger than `memory_budget_bytes`).
      labels: int [N] class ids (>= 0) or strings [N] (class names, numbered in sorted order),
        one per record or id.
      n_classes_per_batch: `n_c`, distinct classes per batch.
      n_samples_per_class: `n_p`, samples per class in a batch.
      seed: the plan and the random crops/masks are pure functions of (seed, epoch).
      input_context: `tf.distribute.InputContext`; this input pipeline takes a disjoint share
        of whole batches (or pass `worker_index` and `num_workers`).
      worker_index, num_workers: this input pipeline's slice, without an `input_context`.
      epoch_mode: "classes" (every usable class at least once an epoch, `ceil(classes / n_c)`
        batches) or "samples" (every record of every usable class at least once an epoch); see
        `class_plan`.
      small_classes: a class with fewer than `n_p` records: "replace" (drawn with repeats) or
        "skip" (left out, reported).
      max_draws_per_record: no record drawn more often in an epoch (the short batches are
        completed with the least-drawn classes under the cap, `class_fillers`); the least
        accepted is named when it is too low. None: no cap.
      features: the audio front end (`AudioFeatureConfig`; over a run, at the rate it stored),
        or None for the serialized records.
      parse_fn, feature_spec: for records of any kind (image, text, embedding Examples) instead
        of the audio front end: tf.string [B] -> a dict of batched tensors (or a tensor), or a
        spec for `tf.io.parse_example` (e.g. `parsing.feature_spec_from_schema(schema)`).
      record_set: the run's labelled record set.
      load_fn: id -> waveform, for sample ids.
      store_options: how a run's records are read (`StoreOptions`: backend, reader, CRC checks,
        `on_damaged` "fail" | "skip": damaged records fail the read, or their samples are left
        out, counted in `state.skipped_samples` and logged once per epoch). Default
        `StoreOptions(memory_budget_bytes=memory_budget_bytes)`.
      memory_budget_bytes, cache_dir: for ids and datasets; also the budget of the class index
        held in the graph.
      state: an `EpochState` to track in a `tf.train.Checkpoint` (resume: restore it, then pass
        `initial_step`).
      initial_step: resume point in this worker's batches of the epoch in progress.
      num_parallel_calls: parallelism of the read + features `map`.
      augment: speaker augmentation (`speaker_augment.SpeakerAugmentConfig`: noise, RIRs, speed
        perturbation; crop mode only), drawn per (seed, epoch, global batch, position) so a
        resume replays it; with `K` speed factors the plan's classes are `K x C` (class `c` at
        factor `k` is `k * C + c`) and `label` holds the derived class. None: none.

    Returns:
      A dataset of dicts, one per batch of `B = n_c * n_p` samples, grouped by class (sample `i`
      is of the batch's `i // n_p`-th class):
        ``index`` int64 [B] record numbers, ``label`` int64 [B] class ids,
        ``features`` float32 [B, T, num_mel_bins], ``lengths`` int64 [B] valid frames,
        ``mask`` bool [B, T]; with `features=None`, ``record`` tf.string [B] instead of the last
        three; with `parse_fn` / `feature_spec`, what they return (a dict's keys, else
        ``features``) instead. Its cardinality is the batches per epoch of this worker;
        iterating it again yields the next epoch, so `model.fit(dataset, epochs=N)` sees N
        different epochs.

    Raises:
      ValueError: a bad argument (named, with "did you mean" for a misspelt choice), or `n_c`
        larger than the usable classes.
      TypeError: a source of no kind above.
      layout.IndexFileError, layout.RunCommitError: a damaged or uncommitted run.

    Example:

        dataset = class_balanced(open_run("runs/speakers"), record_set="train",
                                 n_classes_per_batch=8, n_samples_per_class=4)
    """
    initial_step = int_argument("initial_step", initial_step, 0)
    sampler = ClassBalancedSampler(
        source,
        labels,
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        input_context=input_context,
        worker_index=worker_index,
        num_workers=num_workers,
        epoch_mode=epoch_mode,
        small_classes=small_classes,
        max_draws_per_record=max_draws_per_record,
        features=features,
        parse_fn=parse_fn,
        feature_spec=feature_spec,
        record_set=record_set,
        load_fn=load_fn,
        store_options=store_options,
        memory_budget_bytes=memory_budget_bytes,
        cache_dir=cache_dir,
        state=state,
        augment=augment,
    )
    return sampler.dataset(initial_step=initial_step, num_parallel_calls=num_parallel_calls)


def record_parser(
    parse_fn: ParseFn | None, feature_spec: Mapping[str, object] | None
) -> ParseFn | None:
    """The batched parser of non-audio records: `parse_fn` itself, or `tf.io.parse_example`
    with `feature_spec` (e.g. `parsing.feature_spec_from_schema(...)`); None for neither.

    Args:
      parse_fn: tf.string [B] -> tensors, or None.
      feature_spec: feature name -> `tf.io.FixedLenFeature` / `VarLenFeature` / ..., or None.

    Returns:
      tf.string [B] -> the parsed batch, or None when neither is given.

    Raises:
      ValueError: both are given.
    """
    if parse_fn is not None and feature_spec is not None:
        raise ValueError("pass parse_fn or feature_spec, not both")
    if feature_spec is not None:
        spec = dict(feature_spec)
        return as_written(lambda records: tf.io.parse_example(records, spec))
    return as_given(parse_fn)


def _with_parsed(batch: dict[str, tf.Tensor], parsed) -> dict:
    """The batch with the parsed records: a dict's keys beside `index` and `label`, anything
    else under ``features``."""
    if not isinstance(parsed, Mapping):
        return {**batch, "features": parsed}
    clash = sorted(set(parsed) & set(batch))
    if clash:
        raise ValueError(
            f"the parsed records have keys {clash}, which the batch uses for the plan; rename "
            "them in parse_fn"
        )
    return {**batch, **parsed}


def _record_number_lookup(values: np.ndarray, memory_budget_bytes: int) -> tuple[Callable, bool]:
    """positions (int64 tensor) -> `values[positions]`: in the graph when `values` fits the
    budget, else from the memory-mapped index file (one `numpy_function` per plan: a block of
    batches, or an epoch). Also returns whether the lookup runs in Python."""
    if not isinstance(values, np.memmap) or values.nbytes <= memory_budget_bytes:
        table = index_variable(np.asarray(values, np.int64), tf.int64, "record_numbers")
        return (lambda positions: tf.gather(table, positions)), False

    def lookup(positions: tf.Tensor) -> tf.Tensor:
        found = tf.numpy_function(
            lambda p: np.asarray(values[p], np.int64), [positions], tf.int64, stateful=False
        )
        return tf.ensure_shape(found, positions.shape)

    return lookup, True


def _log_report(report: ClassReport) -> None:
    if len(report.small_classes) or len(report.empty_classes):
        _log.warning("class_balanced: %s", report.summary())
