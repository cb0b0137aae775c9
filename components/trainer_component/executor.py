"""Executors of the trainer components: inputs from artifacts, the user's `run_fn`, metrics out.

`TrainerExecutor` is the shared `Do` (run_fn, anomalies, output folders, checkpoints, metrics);
`PairsExecutor` and `ClassBalancedExecutor` build their kind's inputs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.types import artifact_utils
from tfx.utils import import_utils, io_utils, path_utils

from tfx_dynamic_inputs import artifacts, execution, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, PairCoverage, PairCoverageCallback
from tfx_dynamic_inputs.inputs.augment_images import AugmentationImagesCallback
from tfx_dynamic_inputs.inputs.draw_counts import DrawCounts, DrawCountsCallback
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmenter
from tfx_dynamic_inputs.trainer_component import input_options, mixed_runs, training_inputs
from tfx_dynamic_inputs.trainer_component.checkpoints import TrainingCheckpoints, checkpoint_dir
from tfx_dynamic_inputs.trainer_component.distribution import (
    check_split,
    checked_distribution,
    training_strategy,
    with_batch_size,
)
from tfx_dynamic_inputs.trainer_component.fn_args import FnArgs

if TYPE_CHECKING:
    from tensorflow_transform import TFTransformOutput

RUN_FN = "run_fn"
METRICS_FILE = "metrics.json"
# Written by ExampleValidator into each split folder of its ExampleAnomalies artifact.
SCHEMA_DIFF_FILE = "SchemaDiff.pb"


class AnomaliesFoundError(ValueError):
    """ExampleValidator found anomalies in a split the trainer would read."""


@dataclasses.dataclass(frozen=True)
class InputRequest:
    """What a trainer kind builds its inputs from (`TrainerExecutor._training_inputs`).

    Attributes:
      run: the execution (its index input and batch parameters).
      offset_index: the `OffsetIndex` URI.
      train_split: the record set to train on.
      eval_split: the record set to evaluate on, or None.
      seed: the samplers' seed.
      sent_options: the input options the component sent, not yet checked.
      schema_path: the schema file of the `schema` input, or None.
      tf_transform_output: Transform's output of the `transform_graph` input, or None.
      checkpoints: the training checkpoints the datasets resume from.
      model_run_dir: the ModelRun folder (logs).
      num_replicas: the replicas each global batch is split over (`distribution`).
    """

    run: execution.Execution
    offset_index: str
    train_split: str
    eval_split: str | None
    seed: int
    sent_options: dict[str, Any]
    schema_path: str | None
    tf_transform_output: TFTransformOutput | None
    checkpoints: TrainingCheckpoints
    model_run_dir: str
    num_replicas: int = 1


@dataclasses.dataclass(frozen=True)
class TrainingInputs:
    """A trainer kind's inputs for `run_fn`.

    Attributes:
      train_dataset: `FnArgs.train_dataset`.
      eval_dataset: `FnArgs.eval_dataset`, or None.
      callbacks: the kind's Keras callbacks (the checkpoints' is added after them).
      settings: what the kind adds to `run_fn`'s `custom_config` (batch geometry, ...).
      reports: what observes the dataset (pair coverage, draw counts); their `result()` joins
        the metrics.
      batch_size: the rows of a global batch, which the replicas split.
    """

    train_dataset: tf.data.Dataset
    eval_dataset: tf.data.Dataset | None
    callbacks: list
    settings: dict[str, Any]
    reports: list[PairCoverage | DrawCounts] = dataclasses.field(default_factory=list)
    batch_size: int = 0


class TrainerExecutor(execution.LoggedExecutor):
    """The trainers' shared executor: loads `run_fn`, checks the anomalies, prepares the output
    folders and checkpoints, builds the kind's inputs (`_training_inputs`), calls
    `run_fn(FnArgs)` and records the metrics it returns.

    A subclass per trainer kind sets `_OPTIONS_CLASS` and `_DEFAULT_TRAIN_SPLIT` and supplies
    `_anomaly_splits` and `_training_inputs`.
    """

    _OPTIONS_CLASS: type[input_options.InputOptions]
    _DEFAULT_TRAIN_SPLIT: str

    def _anomaly_splits(self, train_split: str, eval_split: str | None) -> list[str]:
        """The splits of ExampleValidator's anomalies this kind refuses to train with."""
        raise NotImplementedError

    def _training_inputs(self, request: InputRequest) -> TrainingInputs:
        """This kind's datasets, callbacks and `custom_config` settings."""
        raise NotImplementedError

    def _checked_options(self, sent: dict[str, Any]) -> input_options.InputOptions:
        """The input options read back through the typed options the component checked (the
        same checks again, for an execution built without the component: a compiled spec edited
        by hand)."""
        return input_options.input_options(self._OPTIONS_CLASS, sent)

    def execute(self, run: execution.Execution) -> None:
        """Trains `run_fn` on the execution's inputs and records its metrics on both outputs.

        Args:
          run: the execution's artifacts and properties.

        Raises:
          AnomaliesFoundError: ExampleValidator found anomalies in a split the kind reads.
          ValueError: a missing input or parameter, or a bad one, named.
          RuntimeError: `run_fn` exported nothing.
        """
        properties = run.properties
        train_split = properties.get(keys.TRAIN_SPLIT_KEY) or self._DEFAULT_TRAIN_SPLIT
        eval_split = properties.get(keys.EVAL_SPLIT_KEY)
        run_fn = _load_run_fn(properties)

        anomalies = run.optional_input(keys.ANOMALIES_KEY)
        if anomalies is not None:
            check_no_anomalies(anomalies, self._anomaly_splits(train_split, eval_split))

        model = run.output(keys.MODEL_KEY)
        model_run = run.output(keys.MODEL_RUN_KEY)
        serving_model_dir = path_utils.serving_model_dir(model.uri)
        # A retried execution gets the same output folders. An export an earlier attempt left
        # may be partial, and would hide a run_fn that exports nothing; the checkpoints under
        # model_run are what the retry resumes from, and stay.
        if tf.io.gfile.exists(serving_model_dir):
            tf.io.gfile.rmtree(serving_model_dir)
        # The Kubeflow v2 entrypoint does not create output folders; LocalDagRunner does.
        tf.io.gfile.makedirs(model.uri)
        tf.io.gfile.makedirs(model_run.uri)

        checkpoints = TrainingCheckpoints(
            checkpoint_dir(model_run.uri),
            save_every_steps=int(properties.get(keys.CHECKPOINT_EVERY_STEPS_KEY) or 0),
        )
        schema = run.optional_input(keys.SCHEMA_KEY)
        # Before the inputs: a MirroredStrategy fixes the replicas the batches split over.
        strategy = training_strategy(checked_distribution(properties.get(keys.DISTRIBUTION_KEY)))
        request = InputRequest(
            run=run,
            offset_index=run.input(keys.OFFSET_INDEX_KEY).uri,
            train_split=train_split,
            eval_split=eval_split,
            seed=int(properties.get(keys.SEED_KEY) or 0),
            sent_options=_json_dict(properties, keys.INPUT_OPTIONS_KEY),
            schema_path=io_utils.get_only_uri_in_dir(schema.uri) if schema else None,
            tf_transform_output=_transform_output(run.optional_input(keys.TRANSFORM_GRAPH_KEY)),
            checkpoints=checkpoints,
            model_run_dir=model_run.uri,
            num_replicas=strategy.num_replicas_in_sync,
        )
        custom_config = _json_dict(properties, keys.CUSTOM_CONFIG_KEY)
        inputs = self._training_inputs(request)
        custom_config.update(inputs.settings)
        custom_config["seed"] = request.seed
        custom_config["num_replicas"] = request.num_replicas
        train_dataset = inputs.train_dataset
        if request.num_replicas > 1:
            train_dataset = with_batch_size(train_dataset, inputs.batch_size)
        fn_args = FnArgs(
            train_dataset=train_dataset,
            eval_dataset=inputs.eval_dataset,
            # Last, so that the epoch logs it records hold what the other callbacks added.
            callbacks=[*inputs.callbacks, checkpoints.callback()],
            num_epochs=_required_int(properties, keys.NUM_EPOCHS_KEY),
            serving_model_dir=serving_model_dir,
            model_run_dir=model_run.uri,
            custom_config=custom_config,
            initial_epoch=checkpoints.resume_point().epoch,
            trained_history=checkpoints.history(),
            schema_path=request.schema_path,
            tf_transform_output=request.tf_transform_output,
            strategy=strategy,
        )
        metrics = checked_metrics(run_fn(fn_args))
        for report in inputs.reports:
            # What the input pipeline served, whatever run_fn chose to report.
            metrics.update({k: float(v) for k, v in report.result().items()})

        if not tf.io.gfile.exists(serving_model_dir) or not tf.io.gfile.listdir(serving_model_dir):
            raise RuntimeError(f"run_fn exported nothing to {serving_model_dir}")
        with tf.io.gfile.GFile(os.path.join(model_run.uri, METRICS_FILE), "w") as f:
            f.write(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        for artifact in (model, model_run):
            for name, value in metrics.items():
                artifact.set_float_custom_property(name, value)


class PairsExecutor(TrainerExecutor):
    """`PairsTrainer`'s executor: dynamic pairs of `x` and `y`, with their coverage."""

    _OPTIONS_CLASS = input_options.PairsInputOptions
    _DEFAULT_TRAIN_SPLIT = layout.X_RECORD_SET

    def _anomaly_splits(self, train_split: str, eval_split: str | None) -> list[str]:
        # Both record sets feed every batch, whatever the splits say.
        return [layout.X_RECORD_SET, layout.Y_RECORD_SET]

    def _training_inputs(self, request: InputRequest) -> TrainingInputs:
        pair_index = _required_uri(request.run, keys.PAIR_INDEX_KEY)
        batch_size = _required_int(request.run.properties, keys.BATCH_SIZE_KEY)
        check_split(batch_size, request.num_replicas, keys.BATCH_SIZE_KEY)
        train_dataset, coverage, eval_dataset = training_inputs.pairs_train_dataset(
            request.offset_index,
            pair_index,
            batch_size=batch_size,
            seed=request.seed,
            options=self._checked_options(request.sent_options),
            resume=request.checkpoints.resume,
        )
        return TrainingInputs(
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            callbacks=[PairCoverageCallback(coverage, log_dir=request.model_run_dir)],
            settings={"batch_size": batch_size, "num_valid_pairs": coverage.num_pairs},
            reports=[coverage],
            batch_size=batch_size,
        )


class ClassBalancedExecutor(TrainerExecutor):
    """`ClassBalancedTrainer`'s executor: class-balanced batches of audio (log-mel features) or
    of records parsed with a feature spec, and the eval split in record order."""

    _OPTIONS_CLASS = input_options.ClassBalancedInputOptions
    _DEFAULT_TRAIN_SPLIT = "train"

    def _anomaly_splits(self, train_split: str, eval_split: str | None) -> list[str]:
        return [s for s in (train_split, eval_split) if s]

    def _training_inputs(self, request: InputRequest) -> TrainingInputs:
        run = request.run
        class_index = _required_uri(run, keys.CLASS_INDEX_KEY)
        n_c = _required_int(run.properties, keys.N_CLASSES_PER_BATCH_KEY)
        n_p = _required_int(run.properties, keys.N_SAMPLES_PER_CLASS_KEY)
        # Whole classes on each replica: a batch holds each class's n_p samples consecutively.
        check_split(n_c, request.num_replicas, keys.N_CLASSES_PER_BATCH_KEY)
        options = self._checked_options(request.sent_options)
        eval_batch_size = options.eval_batch_size or n_c * n_p
        settings: dict[str, Any] = {}
        parser = training_inputs.example_parser(
            options,
            schema_path=request.schema_path,
            tf_transform_output=request.tf_transform_output,
            label_feature=run.input(keys.CLASS_INDEX_KEY).get_string_custom_property(
                artifacts.LABEL_FEATURE_PROPERTY
            ),
        )
        if parser is None:
            parser = options.audio_features()
            settings.update(num_mel_bins=parser.num_mel_bins, sample_rate=parser.sample_rate)
        augment = options.speaker_augment(
            *(_optional_uri(run, k) for k in (keys.NOISE_EXAMPLES_KEY, keys.RIR_EXAMPLES_KEY))
        )
        mixed = run.inputs.get(keys.MIXED_CLASS_INDEX_KEY) or []
        if mixed and not isinstance(parser, AudioFeatureConfig):
            raise ValueError("mixed_class_index mixes audio runs; drop feature_spec")
        eval_dataset = None
        if request.eval_split:
            eval_dataset = training_inputs.class_balanced_eval_dataset(
                request.offset_index,
                class_index,
                request.eval_split,
                batch_size=eval_batch_size,
                parser=parser,
                store_options=options.store_options(),
            )
        settings.update(n_classes_per_batch=n_c, n_samples_per_class=n_p)
        if mixed:
            mix = mixed_runs.run_mix([class_index, *(a.uri for a in mixed)], options)
            train_dataset, sampler, draw_counts = mixed_runs.mixed_train_dataset(
                mix,
                request.train_split,
                n_classes_per_batch=n_c,
                n_samples_per_class=n_p,
                seed=request.seed,
                features=parser,
                options=options,
                resume=request.checkpoints.resume,
                augment=augment,
            )
            # The eval split stays the trainer's own run's; the classes are all runs'.
            return TrainingInputs(
                train_dataset,
                eval_dataset,
                callbacks=[DrawCountsCallback(draw_counts, log_dir=request.model_run_dir)],
                settings={**settings, **mixed_runs.mix_settings(sampler)},
                reports=[draw_counts],
                batch_size=n_c * n_p,
            )
        # One count per training record: the class index lists each record once.
        num_records = len(training_inputs.class_ids(class_index, request.train_split))
        draw_counts = DrawCounts(num_records)
        train_dataset = training_inputs.class_balanced_train_dataset(
            request.offset_index,
            class_index,
            request.train_split,
            n_classes_per_batch=n_c,
            n_samples_per_class=n_p,
            seed=request.seed,
            parser=parser,
            options=options,
            resume=request.checkpoints.resume,
            draw_counts=draw_counts,
            augment=augment,
        )
        num_classes = training_inputs.num_classes(class_index, request.train_split)
        # Speed perturbation's derived classes are classes the model tells apart.
        settings.update(num_classes=num_classes * (augment.num_speeds if augment else 1))
        callbacks = [DrawCountsCallback(draw_counts, log_dir=request.model_run_dir)]
        if augment is not None and isinstance(parser, AudioFeatureConfig):
            # A few clean and augmented log-mels in the ModelRun's TensorBoard, every epoch.
            callbacks.append(
                AugmentationImagesCallback(
                    options.store_options().open_store(request.offset_index, request.train_split),
                    training_inputs.class_ids(class_index, request.train_split),
                    SpeakerAugmenter(augment, parser, num_classes, options.memory_budget_bytes),
                    request.model_run_dir,
                )
            )
        return TrainingInputs(
            train_dataset,
            eval_dataset,
            callbacks=callbacks,
            settings=settings,
            reports=[draw_counts],
            batch_size=n_c * n_p,
        )


def check_no_anomalies(anomalies: types.Artifact, splits: list[str]) -> None:
    """Refuses anomalies ExampleValidator found in `splits` (splits it did not validate pass).

    Args:
      anomalies: ExampleValidator's `ExampleAnomalies` artifact.
      splits: the splits the trainer reads.

    Raises:
      AnomaliesFoundError: listing every anomaly found in `splits`.
    """
    validated = set(artifact_utils.decode_split_names(anomalies.split_names))
    problems = []
    for split in splits:
        if split not in validated:
            continue
        path = os.path.join(artifact_utils.get_split_uri([anomalies], split), SCHEMA_DIFF_FILE)
        with tf.io.gfile.GFile(path, "rb") as f:
            found = anomalies_pb2.Anomalies.FromString(f.read())
        for feature, info in sorted(found.anomaly_info.items()):
            problems.append(f"split {split!r}, feature {feature!r}: {_describe(info)}")
        if found.HasField("dataset_anomaly_info"):
            problems.append(f"split {split!r}: {_describe(found.dataset_anomaly_info)}")
    if problems:
        raise AnomaliesFoundError(
            "ExampleValidator found anomalies; not training on them:\n  " + "\n  ".join(problems)
        )


def checked_metrics(metrics: object) -> dict[str, float]:
    """`run_fn`'s result as {name: float}.

    Args:
      metrics: what `run_fn` returned.

    Returns:
      The metrics by name, as finite floats.

    Raises:
      TypeError: not a dict, or a metric that is not a number (named).
      ValueError: a metric that is not finite (named).

    Example:

        checked_metrics({"loss": np.float32(0.5)})  # {"loss": 0.5}
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(f"run_fn must return a dict of metrics, got {type(metrics).__name__}")
    checked = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"metric {name!r} is not a number: {value!r}") from error
        if not math.isfinite(number):
            raise ValueError(f"metric {name!r} is not finite: {number}")
        checked[str(name)] = number
    return checked


def _describe(info: anomalies_pb2.AnomalyInfo) -> str:
    return info.short_description or "; ".join(r.short_description for r in info.reason)


def _transform_output(transform_graph: types.Artifact | None) -> TFTransformOutput | None:
    """Transform's output (the `transform_graph` input), or None without one."""
    if transform_graph is None:
        return None
    # On use: tensorflow_transform takes seconds to import, and most runs have no transform.
    import tensorflow_transform as tft

    return tft.TFTransformOutput(transform_graph.uri)


def _load_run_fn(exec_properties: Mapping[str, Any]) -> Callable[[FnArgs], object]:
    module_path = exec_properties.get(keys.MODULE_PATH_KEY)
    module_file = exec_properties.get(keys.MODULE_FILE_KEY)
    if bool(module_path) == bool(module_file):
        raise ValueError("set exactly one of module_path (importable) and module_file (a path)")
    if module_path:
        return import_utils.import_func_from_module(module_path, RUN_FN)
    return import_utils.import_func_from_source(module_file, RUN_FN)


def _json_dict(exec_properties: Mapping[str, Any], key: str) -> dict[str, Any]:
    text = exec_properties.get(key)
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a JSON object, got {text!r}")
    return value


def _required_int(exec_properties: Mapping[str, Any], key: str) -> int:
    value = exec_properties.get(key)
    if value is None:
        raise ValueError(f"this trainer needs {key}")
    if int(value) < 1:
        raise ValueError(f"{key} must be >= 1, got {value}")
    return int(value)


def _optional_uri(run: execution.Execution, key: str) -> str | None:
    artifact = run.optional_input(key)
    return None if artifact is None else artifact.uri


def _required_uri(run: execution.Execution, key: str) -> str:
    if not run.inputs.get(key):
        raise ValueError(f"this trainer needs the {key!r} input")
    return run.input(key).uri
