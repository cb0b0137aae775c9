"""The standard-TFX composition end to end on LocalDagRunner (sqlite ML Metadata, Beam
DirectRunner), from a CSV input (`StandardConfig.input_format="csv"`): CsvExampleGen ->
StatisticsGen -> SchemaGen -> Transform -> IndexExamples -> ClassBalancedTrainer -> ModelGate ->
Pusher, and TFX's Evaluator on the trained model (`standard_evaluator`), on `standard_data`'s
examples (a 4-float vector in 4 columns, an int64 class label, an empty label cell in some rows).
One run serves every test of the module; the second-run case of the gate (the resolver's
baseline) is the demo pipelines' test's, the TFRecord input the Kubeflow test's
(`tests/kubeflow/test_compiled_standard_pipeline.py`), and the other formats' ExampleGen
`test_example_gen.py`'s. The serving export (`export_transform_model`) is tested here too, on the
run's Transform output.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
import tensorflow_transform as tft
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import path_utils

from tests.components.conftest import make_artifact
from tests.pipeline import standard_data, standard_modules
from tests.pipeline.standard_data import (
    N_CLASSES_PER_BATCH,
    N_SAMPLES_PER_CLASS,
    NUM_CLASSES,
    NUM_EXAMPLES,
)
from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.index_component import executor as index_executor
from tfx_dynamic_inputs.inputs import RecordStore
from tfx_dynamic_inputs.models import transform_serving
from tfx_dynamic_inputs.pipeline import common, example_gen, report, run_local, standard_pipeline
from tfx_dynamic_inputs.pipeline.config import RunConfig
from tfx_dynamic_inputs.pipeline.standard_evaluator import (
    EvaluatorConfig,
    eval_config,
    standard_evaluator,
)
from tfx_dynamic_inputs.trainer_component import training_inputs
from tfx_dynamic_inputs.trainer_component.input_options import ClassBalancedInputOptions

pytestmark = pytest.mark.slow

INPUT_FORMAT = example_gen.CSV
EXAMPLE_GEN = example_gen.node_id(INPUT_FORMAT)  # CsvExampleGen
NODES = (EXAMPLE_GEN, "StatisticsGen", "SchemaGen", "Transform", "IndexExamples")
TRAINER = "ClassBalancedTrainer"
GATE_NODES = (common.BASELINE_RESOLVER_ID, "ModelGate", "Pusher")
EVALUATOR = "Evaluator"


class StandardRun(NamedTuple):
    results: dict[str, run_local.NodeResult]
    labels: list[int | None]  # of each input example (None: none)
    config: standard_pipeline.StandardConfig
    run: RunConfig


@pytest.fixture(scope="module")
def standard_run(tmp_path_factory) -> StandardRun:
    work_dir = str(tmp_path_factory.mktemp("standard"))
    input_base = os.path.join(work_dir, "input")
    labels = standard_data.write_examples(input_base, INPUT_FORMAT)
    config = standard_data.config(input_base, input_format=INPUT_FORMAT)
    run = run_local.run_config(work_dir, enable_cache=False)
    components = standard_pipeline.standard_components(config, run)
    evaluator = standard_evaluator(
        components,
        EvaluatorConfig(
            label_key=standard_modules.LABEL_KEY, prediction_key=standard_modules.PROBABILITIES_KEY
        ),
    )
    run_local.run(standard_pipeline.create_pipeline(config, run, [evaluator], components))
    return StandardRun(
        run_local.latest_run(run.metadata_path, config.pipeline_name), labels, config, run
    )


def test_every_node_ran(standard_run):
    results = standard_run.results
    assert {node: result.state for node, result in results.items()} == dict.fromkeys(
        (*NODES, TRAINER, *GATE_NODES, EVALUATOR), "COMPLETE"
    )


def test_index_examples_read_gzip_input_and_recorded_the_unlabelled_as_rejects(standard_run):
    results, labels = standard_run.results, standard_run.labels
    index = results["IndexExamples"]
    with open(os.path.join(index.uri(keys.OFFSET_INDEX_KEY), layout.SUMMARY_FILE)) as f:
        summary = json.load(f)
    inputs = summary["input_records"]
    assert set(inputs) == {"train", "eval"}
    # Transform writes GZIP-compressed TFRecord files: every one was read as such.
    assert all(entry["files"] == entry["gzip"] > 0 for entry in inputs.values())
    assert sum(entry["records"] for entry in inputs.values()) == NUM_EXAMPLES
    unlabelled = labels.count(None)
    assert summary["rejects"]["by_reason"] == {"missing_label": unlabelled}
    [offset_index] = index.outputs[keys.OFFSET_INDEX_KEY]
    assert offset_index.properties["num_rejects"] == unlabelled
    kept = sum(stats["num_records"] for stats in summary["record_sets"].values())
    assert kept == NUM_EXAMPLES - unlabelled


def test_class_index_classes_are_the_label_set(standard_run):
    results, labels = standard_run.results, standard_run.labels
    class_index = results["IndexExamples"].uri(keys.CLASS_INDEX_KEY)
    label_set = sorted({str(label) for label in labels if label is not None})
    for split in ("train", "eval"):
        classes = layout.load_lines(
            os.path.join(layout.index_dir(class_index, split), layout.CLASSES_FILE)
        )
        assert classes == label_set


def test_trainer_saw_exact_class_balanced_batches(standard_run):
    results = standard_run.results
    trainer = results[TRAINER]
    with open(
        os.path.join(trainer.uri(keys.MODEL_RUN_KEY), standard_modules.BATCH_LABELS_FILE)
    ) as f:
        batches = json.load(f)
    assert batches
    for labels in batches:
        groups = np.asarray(labels).reshape(N_CLASSES_PER_BATCH, N_SAMPLES_PER_CLASS)
        assert (groups == groups[:, :1]).all()  # n_p consecutive samples of one class
        assert len(set(groups[:, 0])) == N_CLASSES_PER_BATCH  # n_c distinct classes
    assert {label for labels in batches for label in labels} == set(range(NUM_CLASSES))
    [model_run] = trainer.outputs[keys.MODEL_RUN_KEY]
    metrics = model_run.properties
    assert metrics["batches_checked"] == len(batches)
    assert (
        metrics["min_classes_per_batch"] == metrics["max_classes_per_batch"] == N_CLASSES_PER_BATCH
    )
    assert (
        metrics["min_samples_per_class"] == metrics["max_samples_per_class"] == N_SAMPLES_PER_CLASS
    )
    assert metrics["eval_accuracy"] > 0.8  # the classes are far apart
    assert metrics["schema_file_found"] == 1.0  # FnArgs.schema_path: SchemaGen's schema


def test_the_gate_blessed_the_model_by_its_held_out_accuracy_and_pusher_pushed_it(standard_run):
    results, config, run = standard_run.results, standard_run.config, standard_run.run
    [model] = results[TRAINER].outputs[keys.MODEL_KEY]
    # As ML Metadata holds it, which is what the gate read.
    accuracy = model.properties[standard_data.BLESSING_METRIC]
    # Nothing blessed before (the resolver found nothing): the threshold alone decides.
    [blessing] = results["ModelGate"].outputs[keys.BLESSING_KEY]
    assert blessing.properties["blessed"] == 1
    assert blessing.properties["current_model"] == model.uri
    assert "baseline_model" not in blessing.properties
    assert blessing.properties["metric"] == standard_data.BLESSING_METRIC
    assert blessing.properties["metric_value"] == pytest.approx(accuracy, 1e-5)
    assert blessing.properties["blessing_message"] == (
        f"blessed (eval_accuracy {accuracy:.4g}, no baseline: the first blessed model; within "
        f"the threshold {standard_data.BLESSING_THRESHOLD})"
    )
    assert os.path.exists(os.path.join(blessing.uri, "BLESSED"))
    [pushed] = results["Pusher"].outputs[standard_component_specs.PUSHED_MODEL_KEY]
    assert pushed.properties["pushed"] == 1
    destination = pushed.properties["pushed_destination"]
    assert os.path.dirname(destination) == common.serving_dir(config, run)
    assert common.serving_dir(config, run) == os.path.join(
        run.pipeline_root, "serving", config.pipeline_name
    )


def test_the_end_of_run_report_is_read_from_ml_metadata(standard_run):
    config, run = standard_run.config, standard_run.run
    text = report.describe_run(run.metadata_path, config.pipeline_name)
    lines = text.splitlines()
    assert lines[0] == f"== {config.pipeline_name} ({run.metadata_path})"
    for node in (*NODES, TRAINER, "ModelGate", "Pusher", EVALUATOR):
        assert f"  {node} [ran]" in lines, node
    assert "== model gate and push" in lines
    [blessing] = standard_run.results["ModelGate"].outputs[keys.BLESSING_KEY]
    assert any(blessing.properties["blessing_message"] in line for line in lines)
    assert any(standard_data.BLESSING_METRIC in line for line in lines)
    with pytest.raises(LookupError, match="no run of pipeline 'elsewhere'"):
        report.describe_run(run.metadata_path, "elsewhere")


def _eval_records(standard_run) -> list[bytes]:
    """ExampleGen's serialized raw Examples of the eval split (the Evaluator's input)."""
    uri = standard_run.results[EXAMPLE_GEN].uri(standard_component_specs.EXAMPLES_KEY)
    files = tf.io.gfile.glob(os.path.join(uri, "Split-eval", "*"))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _transform_output(standard_run) -> tft.TFTransformOutput:
    return tft.TFTransformOutput(
        standard_run.results["Transform"].uri(standard_component_specs.TRANSFORM_GRAPH_KEY)
    )


def _center_examples() -> list[bytes]:
    """A raw example at each class centre as the input has them: the CSV's columns, no label."""
    return [
        standard_data.raw_example(center, None, INPUT_FORMAT).SerializeToString()
        for center in standard_data.class_centers()
    ]


@pytest.mark.parametrize("copy", ["trained", "pushed"])
def test_the_model_serves_raw_examples_through_the_transform_graph(standard_run, copy):
    results = standard_run.results
    if copy == "trained":
        model_dir = path_utils.serving_model_dir(results[TRAINER].uri(keys.MODEL_KEY))
    else:
        # The copy in the serving folder, the transform graph's assets included.
        [pushed] = results["Pusher"].outputs[standard_component_specs.PUSHED_MODEL_KEY]
        model_dir = pushed.properties["pushed_destination"]
    signatures = tf.saved_model.load(model_dir).signatures
    assert set(signatures) == {
        transform_serving.SERVING_SIGNATURE,
        transform_serving.TRANSFORM_FEATURES_SIGNATURE,
    }
    probabilities = signatures["serving_default"](examples=tf.constant(_center_examples()))[
        standard_modules.PROBABILITIES_KEY
    ].numpy()
    assert probabilities.shape == (NUM_CLASSES, NUM_CLASSES)
    np.testing.assert_array_equal(np.argmax(probabilities, axis=1), np.arange(NUM_CLASSES))
    # What TFMA runs on raw eval Examples: every transformed feature, the label's included.
    records = _eval_records(standard_run)[:5]
    transformed = signatures["transform_features"](examples=tf.constant(records))
    assert set(transformed) == set(_transform_output(standard_run).transformed_feature_spec())
    labels = tf.io.parse_example(records, _transform_output(standard_run).raw_feature_spec())
    np.testing.assert_array_equal(
        tf.sparse.to_dense(transformed[standard_modules.LABEL_KEY]).numpy(),
        tf.sparse.to_dense(labels[standard_modules.LABEL_KEY]).numpy(),
    )


def _vector_model(input_name: str) -> keras.Model:
    """An untrained 4 -> 3 dense net on an input named `input_name` (random weights: a wrong
    feed or a missing transform moves its outputs far past the tolerance)."""
    vector = keras.Input(shape=(NUM_CLASSES,), name=input_name)
    return keras.Model(vector, keras.layers.Dense(3)(vector))


def test_export_transform_model_serves_the_model_on_transformed_raw_examples(
    standard_run, tmp_path
):
    transform_output = _transform_output(standard_run)
    model = _vector_model(standard_modules.TRANSFORMED_VECTOR_KEY)
    transform_serving.export_transform_model(
        model, transform_output, str(tmp_path), label_feature=standard_modules.LABEL_KEY
    )
    loaded = tf.saved_model.load(str(tmp_path))
    serve = loaded.signatures[transform_serving.SERVING_SIGNATURE]
    transform_fn = loaded.signatures[transform_serving.TRANSFORM_FEATURES_SIGNATURE]
    for signature in (serve, transform_fn):
        _, inputs = signature.structured_input_signature
        assert {k: (s.dtype, s.shape.as_list()) for k, s in inputs.items()} == {
            transform_serving.EXAMPLES_KEY: (tf.string, [None])
        }
    records = _eval_records(standard_run)
    raw = tf.io.parse_example(records, transform_output.raw_feature_spec())
    expected_features = transform_output.transform_features_layer()(raw)
    expected = model(expected_features[standard_modules.TRANSFORMED_VECTOR_KEY]).numpy()
    # Serving clients send no label: the label-less centre examples are served too.
    served = serve(examples=tf.constant(records))
    assert set(served) == {transform_serving.DEFAULT_OUTPUT_KEY}
    np.testing.assert_allclose(served["outputs"].numpy(), expected, atol=1e-5)
    assert serve(examples=tf.constant(_center_examples()))["outputs"].shape == (NUM_CLASSES, 3)
    transformed = transform_fn(examples=tf.constant(records))
    np.testing.assert_allclose(
        transformed[standard_modules.TRANSFORMED_VECTOR_KEY].numpy(),
        expected_features[standard_modules.TRANSFORMED_VECTOR_KEY].numpy(),
        atol=1e-6,
    )


def test_export_transform_model_names_a_bad_feature_label_or_model(standard_run, tmp_path):
    transform_output = _transform_output(standard_run)
    export = transform_serving.export_transform_model
    with pytest.raises(ValueError, match=r"\['vector'\] are not; the transformed features are"):
        export(_vector_model("vector"), transform_output, str(tmp_path), label_feature="label")
    with pytest.raises(ValueError, match="label_feature 'target' is not a raw feature"):
        export(_vector_model("vector_xf"), transform_output, str(tmp_path), label_feature="target")

    class Subclassed(keras.Model):
        def call(self, features):
            return features[standard_modules.TRANSFORMED_VECTOR_KEY]

    with pytest.raises(ValueError, match="has no symbolic inputs .* pass feature_keys"):
        export(Subclassed(), transform_output, str(tmp_path), label_feature="label")
    # Named in feature_keys, a subclassed model is called with the dict of them.
    export(
        Subclassed(),
        transform_output,
        str(tmp_path),
        label_feature="label",
        feature_keys=[standard_modules.TRANSFORMED_VECTOR_KEY],
    )
    assert tf.saved_model.load(str(tmp_path)).signatures["serving_default"](
        examples=tf.constant(_center_examples())
    )["outputs"].shape == (NUM_CLASSES, NUM_CLASSES)


def test_the_evaluator_config_is_checked_when_written():
    config = EvaluatorConfig(label_key="label", prediction_key="probabilities")
    [spec] = eval_config(config).model_specs
    assert (spec.signature_name, list(spec.preprocessing_function_names)) == (
        "serving_default",
        ["transform_features"],
    )
    with pytest.raises(ValueError, match="'SparseCategoricalAcuracy' is not a TFMA or Keras"):
        EvaluatorConfig(label_key="label", metrics=("SparseCategoricalAcuracy",))
    with pytest.raises(ValueError, match="label_key must name"):
        EvaluatorConfig(label_key="")


def test_the_evaluator_computed_the_serving_models_accuracy_on_the_raw_eval_split(standard_run):
    results = standard_run.results
    [evaluation] = results[EVALUATOR].outputs[standard_component_specs.EVALUATION_KEY]
    [overall] = tfma.load_eval_result(evaluation.uri).slicing_metrics
    slice_key, metrics = overall
    assert slice_key == ()
    metrics = {name: value["doubleValue"] for name, value in metrics[""][""].items()}
    records = _eval_records(standard_run)
    assert metrics["example_count"] == len(records)
    # The recomputation: the serving signature's predictions, the label from
    # `transform_features` as TFMA reads it (an Example without a label value is class 0).
    signatures = tf.saved_model.load(
        path_utils.serving_model_dir(results[TRAINER].uri(keys.MODEL_KEY))
    ).signatures
    predicted = np.argmax(
        signatures["serving_default"](examples=tf.constant(records))["probabilities"], axis=1
    )
    label = signatures["transform_features"](examples=tf.constant(records))["label"]
    labels = tf.sparse.to_dense(label).numpy()[:, 0]
    assert 0.0 <= metrics["sparse_categorical_accuracy"] <= 1.0
    assert metrics["sparse_categorical_accuracy"] == pytest.approx(np.mean(predicted == labels))
    # On the labelled Examples, the recomputation is run_fn's held-out accuracy (IndexExamples'
    # eval set: the same Examples, transformed, the unlabelled rejected).
    labelled = tf.sparse.to_dense(label, default_value=-1).numpy()[:, 0] >= 0
    assert not labelled.all()  # so TFMA's class 0 for them shows in its accuracy
    [model] = results[TRAINER].outputs[keys.MODEL_KEY]
    assert np.mean(predicted[labelled] == labels[labelled]) == pytest.approx(
        model.properties[standard_data.BLESSING_METRIC], 1e-5
    )
    # No thresholds in the config: the Evaluator validated nothing and blessed nothing.
    [blessing] = results[EVALUATOR].outputs[standard_component_specs.BLESSING_KEY]
    assert not tf.io.gfile.listdir(blessing.uri)


def _vectors(records: list[bytes], transform_output: tft.TFTransformOutput) -> np.ndarray:
    """The raw vectors of serialized raw `records`, parsed with Transform's raw feature spec."""
    features = tf.io.parse_example(records, transform_output.raw_feature_spec())
    return standard_modules.raw_vector(features).numpy()


def test_apply_transform_runs_transforms_graph_over_raw_records(standard_run, tmp_path):
    """The other way to train on Transform's features: index ExampleGen's raw Examples and let
    the input pipeline apply the transform graph (input option `apply_transform`)."""
    results = standard_run.results
    raw_uri = results[EXAMPLE_GEN].uri(standard_component_specs.EXAMPLES_KEY)
    raw = make_artifact(standard_artifacts.Examples, raw_uri, ["train", "eval"])
    outputs = {
        key: [make_artifact(artifact_type, str(tmp_path / key))]
        for key, artifact_type in (
            (keys.INDEXED_EXAMPLES_KEY, standard_artifacts.Examples),
            (keys.OFFSET_INDEX_KEY, artifacts.OffsetIndex),
            (keys.CLASS_INDEX_KEY, artifacts.ClassIndex),
        )
    }
    executor = index_executor.Executor(index_executor.Executor.Context(beam_pipeline_args=[]))
    executor.Do(
        {keys.EXAMPLES_KEY: [raw]},
        outputs,
        {keys.LABEL_FEATURE_KEY: standard_modules.LABEL_KEY, keys.MAX_REJECT_FRACTION_KEY: 0.1},
    )
    transform_output = tft.TFTransformOutput(
        results["Transform"].uri(standard_component_specs.TRANSFORM_GRAPH_KEY)
    )
    parse = training_inputs.example_parser(
        ClassBalancedInputOptions(apply_transform=True),
        schema_path=None,
        tf_transform_output=transform_output,
        label_feature=standard_modules.LABEL_KEY,
    )
    offset_index = outputs[keys.OFFSET_INDEX_KEY][0].uri
    batch = next(
        iter(
            training_inputs.class_balanced_train_dataset(
                offset_index,
                outputs[keys.CLASS_INDEX_KEY][0].uri,
                "train",
                n_classes_per_batch=N_CLASSES_PER_BATCH,
                n_samples_per_class=N_SAMPLES_PER_CLASS,
                seed=0,
                parser=parse,
            )
        )
    )
    assert set(batch) == {"index", "label", standard_modules.TRANSFORMED_VECTOR_KEY}
    # z-scores over every value of the split Transform analyzed (train, unlabelled examples
    # included): `scale_to_z_score` is not elementwise by default.
    train_files = tf.io.gfile.glob(os.path.join(raw_uri, "Split-train", "*"))
    train_records = [
        record.numpy() for record in tf.data.TFRecordDataset(train_files, compression_type="GZIP")
    ]
    train_vectors = _vectors(train_records, transform_output)
    assert train_vectors.shape[1] == NUM_CLASSES
    store = RecordStore.open(offset_index, "train")
    raw_vectors = _vectors(store.read(batch["index"]), transform_output)
    np.testing.assert_allclose(
        batch[standard_modules.TRANSFORMED_VECTOR_KEY],
        (raw_vectors - train_vectors.mean()) / train_vectors.std(),
        rtol=1e-4,
        atol=1e-4,
    )
