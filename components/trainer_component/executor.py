"""Executor of the trainer component: inputs from artifacts, the user's `run_fn`, metrics out."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import import_utils, io_utils, path_utils

from components import component_keys as keys
from components import layout
from components.index_component.executor import LABEL_FEATURE_PROPERTY
from components.inputs import PairCoverage, PairCoverageCallback
from components.trainer_component import input_options, training_inputs
from components.trainer_component.checkpoints import TrainingCheckpoints, checkpoint_dir
from components.trainer_component.fn_args import FnArgs

if TYPE_CHECKING:
    from tensorflow_transform import TFTransformOutput

RUN_FN = "run_fn"
METRICS_FILE = "metrics.json"
# Written by ExampleValidator into each split folder of its ExampleAnomalies artifact.
SCHEMA_DIFF_FILE = "SchemaDiff.pb"


class AnomaliesFoundError(ValueError):
    """ExampleValidator found anomalies in a split the trainer would read."""


class Executor(base_executor.BaseExecutor):
    """Builds the re-sampled inputs, calls `run_fn(FnArgs)`, records the returned metrics."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        input_kind = exec_properties[keys.INPUT_KIND_KEY]
        if input_kind not in keys.INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {keys.INPUT_KINDS}, got {input_kind!r}")
        train_split = exec_properties.get(keys.TRAIN_SPLIT_KEY) or _default_train_split(input_kind)
        eval_split = exec_properties.get(keys.EVAL_SPLIT_KEY)
        run_fn = _load_run_fn(exec_properties)

        if input_dict.get(keys.ANOMALIES_KEY):
            check_no_anomalies(
                artifact_utils.get_single_instance(input_dict[keys.ANOMALIES_KEY]),
                [s for s in (train_split, eval_split) if s]
                if input_kind == keys.CLASS_BALANCED
                else [layout.X_RECORD_SET, layout.Y_RECORD_SET],
            )

        model = artifact_utils.get_single_instance(output_dict[keys.MODEL_KEY])
        model_run = artifact_utils.get_single_instance(output_dict[keys.MODEL_RUN_KEY])
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
            save_every_steps=int(exec_properties.get(keys.CHECKPOINT_EVERY_STEPS_KEY) or 0),
        )
        fn_args, coverage = self._fn_args(
            input_dict,
            exec_properties,
            input_kind,
            train_split,
            eval_split,
            checkpoints,
            serving_model_dir=serving_model_dir,
            model_run_dir=model_run.uri,
        )
        metrics = checked_metrics(run_fn(fn_args))
        if coverage is not None:
            # What the input pipeline served, whatever run_fn chose to report.
            metrics.update({k: float(v) for k, v in coverage.result().items()})

        if not tf.io.gfile.exists(fn_args.serving_model_dir) or not tf.io.gfile.listdir(
            fn_args.serving_model_dir
        ):
            raise RuntimeError(f"run_fn exported nothing to {fn_args.serving_model_dir}")
        with tf.io.gfile.GFile(os.path.join(model_run.uri, METRICS_FILE), "w") as f:
            f.write(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        for artifact in (model, model_run):
            for name, value in metrics.items():
                artifact.set_float_custom_property(name, value)

    def _fn_args(
        self,
        input_dict: Mapping[str, list[types.Artifact]],
        exec_properties: Mapping[str, Any],
        input_kind: str,
        train_split: str,
        eval_split: str | None,
        checkpoints: TrainingCheckpoints,
        *,
        serving_model_dir: str,
        model_run_dir: str,
    ) -> tuple[FnArgs, PairCoverage | None]:
        """`run_fn`'s arguments, resumed from `checkpoints`, and the pair coverage tracker for
        dynamic pairs."""
        offset_index = artifact_utils.get_single_uri(input_dict[keys.OFFSET_INDEX_KEY])
        schema_path = (
            io_utils.get_only_uri_in_dir(artifact_utils.get_single_uri(input_dict[keys.SCHEMA_KEY]))
            if input_dict.get(keys.SCHEMA_KEY)
            else None
        )
        tf_transform_output = _transform_output(input_dict)
        sent_options = _json_dict(exec_properties, keys.INPUT_OPTIONS_KEY)
        custom_config = _json_dict(exec_properties, keys.CUSTOM_CONFIG_KEY)
        seed = int(exec_properties.get(keys.SEED_KEY) or 0)
        callbacks: list = []
        eval_dataset = None
        coverage = None
        if input_kind == keys.CLASS_BALANCED:
            class_index = _required_uri(input_dict, keys.CLASS_INDEX_KEY, input_kind)
            n_c = _required_int(exec_properties, keys.N_CLASSES_PER_BATCH_KEY)
            n_p = _required_int(exec_properties, keys.N_SAMPLES_PER_CLASS_KEY)
            options = _checked_options(input_kind, sent_options)
            eval_batch_size = int(options.pop("eval_batch_size", n_c * n_p))
            parser = training_inputs.example_parser(
                options,
                schema_path=schema_path,
                tf_transform_output=tf_transform_output,
                label_feature=artifact_utils.get_single_instance(
                    input_dict[keys.CLASS_INDEX_KEY]
                ).get_string_custom_property(LABEL_FEATURE_PROPERTY),
            )
            if parser is None:
                parser = training_inputs.audio_feature_config(options.pop("features", None))
                custom_config.update(
                    num_mel_bins=parser.num_mel_bins, sample_rate=parser.sample_rate
                )
            train_dataset = training_inputs.class_balanced_train_dataset(
                offset_index,
                class_index,
                train_split,
                n_classes_per_batch=n_c,
                n_samples_per_class=n_p,
                seed=seed,
                parser=parser,
                options=options,
                resume=checkpoints.resume,
            )
            if eval_split:
                eval_dataset = training_inputs.class_balanced_eval_dataset(
                    offset_index,
                    class_index,
                    eval_split,
                    batch_size=eval_batch_size,
                    parser=parser,
                    backend=options.get("backend", "auto"),
                )
            custom_config.update(
                n_classes_per_batch=n_c,
                n_samples_per_class=n_p,
                num_classes=training_inputs.num_classes(class_index, train_split),
            )
        else:
            pair_index = _required_uri(input_dict, keys.PAIR_INDEX_KEY, input_kind)
            batch_size = _required_int(exec_properties, keys.BATCH_SIZE_KEY)
            options = _checked_options(input_kind, sent_options)
            train_dataset, coverage, eval_dataset = training_inputs.pairs_train_dataset(
                offset_index,
                pair_index,
                batch_size=batch_size,
                seed=seed,
                options=options,
                resume=checkpoints.resume,
            )
            callbacks.append(PairCoverageCallback(coverage, log_dir=model_run_dir))
            custom_config.update(batch_size=batch_size, num_valid_pairs=coverage.num_pairs)
        # Last, so that the epoch logs it records hold what the other callbacks added.
        callbacks.append(checkpoints.callback())
        custom_config["seed"] = seed
        fn_args = FnArgs(
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            callbacks=callbacks,
            num_epochs=_required_int(exec_properties, keys.NUM_EPOCHS_KEY),
            serving_model_dir=serving_model_dir,
            model_run_dir=model_run_dir,
            custom_config=custom_config,
            initial_epoch=checkpoints.resume_point().epoch,
            trained_history=checkpoints.history(),
            schema_path=schema_path,
            tf_transform_output=tf_transform_output,
        )
        return fn_args, coverage


def check_no_anomalies(anomalies: types.Artifact, splits: list[str]) -> None:
    """Raises `AnomaliesFoundError` listing every anomaly ExampleValidator found in `splits`."""
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
    """`run_fn`'s result as {name: float}; anything else is an error naming the culprit."""
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


def _transform_output(input_dict: Mapping[str, list[types.Artifact]]) -> TFTransformOutput | None:
    """Transform's output (the `transform_graph` input), or None without one."""
    if not input_dict.get(keys.TRANSFORM_GRAPH_KEY):
        return None
    # On use: tensorflow_transform takes seconds to import, and most runs have no transform.
    import tensorflow_transform as tft

    return tft.TFTransformOutput(
        artifact_utils.get_single_uri(input_dict[keys.TRANSFORM_GRAPH_KEY])
    )


def _default_train_split(input_kind: str) -> str:
    return "train" if input_kind == keys.CLASS_BALANCED else layout.X_RECORD_SET


def _load_run_fn(exec_properties: Mapping[str, Any]) -> Callable[[FnArgs], object]:
    module_path = exec_properties.get(keys.MODULE_PATH_KEY)
    module_file = exec_properties.get(keys.MODULE_FILE_KEY)
    if bool(module_path) == bool(module_file):
        raise ValueError("set exactly one of module_path (importable) and module_file (a path)")
    if module_path:
        return import_utils.import_func_from_module(module_path, RUN_FN)
    return import_utils.import_func_from_source(module_file, RUN_FN)


def _checked_options(input_kind: str, sent: dict) -> dict[str, Any]:
    """The input options read back through the typed options the component checked (the same
    checks again, for an execution built without the component: a compiled spec edited by
    hand), as the dict of what differs from the defaults that the input functions take."""
    return input_options.as_dict(input_options.input_options(input_kind, sent))


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
        raise ValueError(f"the trainer needs {key} for this input kind")
    if int(value) < 1:
        raise ValueError(f"{key} must be >= 1, got {value}")
    return int(value)


def _required_uri(input_dict: Mapping[str, list[types.Artifact]], key: str, kind: str) -> str:
    if not input_dict.get(key):
        raise ValueError(f"input_kind={kind!r} needs the {key!r} input")
    return artifact_utils.get_single_uri(input_dict[key])
