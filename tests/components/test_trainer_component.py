"""The trainer component's executor on real materialized artifacts, with a real Keras run_fn."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.types import standard_artifacts

from tests.components import contract_trainer
from tests.components.conftest import DIGIT_IMAGE_SIZE, make_artifact
from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import ValidPairs
from tfx_dynamic_inputs.inputs.draw_counts import SUMMARY_KEYS as DRAW_SUMMARY_KEYS
from tfx_dynamic_inputs.trainer_component import (
    ClassBalancedInputOptions,
    ClassBalancedTrainer,
    PairsInputOptions,
    PairsTrainer,
    input_options,
)
from tfx_dynamic_inputs.trainer_component import executor as trainer_executor
from tfx_dynamic_inputs.trainer_component.distribution import (
    check_split,
    training_strategy,
    with_batch_size,
)

CONTRACT_MODULE = "tests.components.contract_trainer"
N_CLASSES_PER_BATCH = 3
N_SAMPLES_PER_CLASS = 2
SMALL_IMAGE = {"height": 8, "width": 8, "channels": 1}


def _train(executor, run, index_key, tmp_path, extra_inputs=None, **exec_properties):
    """Runs `executor` (a trainer executor class) on `run`'s artifacts and `index_key` with
    `exec_properties` over the contract module's 2 epochs; returns the model and model run."""
    model = make_artifact(standard_artifacts.Model, str(tmp_path / keys.MODEL_KEY))
    model_run = make_artifact(standard_artifacts.ModelRun, str(tmp_path / keys.MODEL_RUN_KEY))
    inputs = {
        keys.EXAMPLES_KEY: [run[keys.EXAMPLES_KEY]],
        keys.OFFSET_INDEX_KEY: [run[keys.OFFSET_INDEX_KEY]],
        index_key: [run[index_key]],
        **(extra_inputs or {}),
    }
    properties = {keys.MODULE_PATH_KEY: CONTRACT_MODULE, keys.NUM_EPOCHS_KEY: 2, **exec_properties}
    outputs = {keys.MODEL_KEY: [model], keys.MODEL_RUN_KEY: [model_run]}
    executor().Do(inputs, outputs, properties)
    return model, model_run


def _train_pairs(pairs_run, tmp_path, image, **exec_properties):
    """`_train` of the pairs executor on `pairs_run`, its images decoded to `image`."""
    return _train(
        trainer_executor.PairsExecutor,
        pairs_run,
        keys.PAIR_INDEX_KEY,
        tmp_path,
        input_options=input_options.to_json(PairsInputOptions(image=image)),
        **exec_properties,
    )


@pytest.fixture(scope="module")
def pairs_training(pairs_run, tmp_path_factory):
    model, model_run = _train_pairs(
        pairs_run,
        tmp_path_factory.mktemp("pairs_training"),
        {"height": DIGIT_IMAGE_SIZE, "width": DIGIT_IMAGE_SIZE, "channels": 1},
        batch_size=64,
        seed=3,
        custom_config=json.dumps({"learning_rate": 0.5}),
    )
    return model, model_run, contract_trainer.received["fn_args"]


@pytest.fixture(scope="module")
def speaker_training(audio_run, tmp_path_factory):
    features = {"sample_rate": 16000, "crop_seconds": 0.5, "num_mel_bins": 24}
    model, model_run = _train(
        trainer_executor.ClassBalancedExecutor,
        audio_run,
        keys.CLASS_INDEX_KEY,
        tmp_path_factory.mktemp("speaker_training"),
        n_classes_per_batch=N_CLASSES_PER_BATCH,
        n_samples_per_class=N_SAMPLES_PER_CLASS,
        train_split="train",
        eval_split="eval",
        input_options=input_options.to_json(ClassBalancedInputOptions(features=features)),
    )
    return model, model_run, contract_trainer.received["fn_args"]


def test_pairs_training_writes_model_metrics_and_coverage(pairs_training):
    model, model_run, fn_args = pairs_training
    assert tf.saved_model.load(fn_args.serving_model_dir) is not None
    assert fn_args.serving_model_dir.startswith(model.uri)
    with open(os.path.join(model_run.uri, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["epochs_run"] == 2
    assert 0 < metrics["pair_coverage_epoch"] <= metrics["pair_coverage_total"] <= 1
    assert metrics["invalid_pairs"] == 0
    for artifact in (model, model_run):
        assert artifact.get_float_custom_property("loss") == pytest.approx(metrics["loss"])
    assert fn_args.custom_config == {
        "learning_rate": 0.5,
        "batch_size": 64,
        "seed": 3,
        "num_valid_pairs": fn_args.custom_config["num_valid_pairs"],
        "num_replicas": 1,
    }
    assert tf.io.gfile.exists(os.path.join(model_run.uri, "pair_coverage"))


def test_pairs_batches_follow_the_contract_and_change_every_epoch(pairs_training, pairs_run):
    _, _, fn_args = pairs_training
    spec = fn_args.train_dataset.element_spec
    image = tf.TensorSpec([64, DIGIT_IMAGE_SIZE, DIGIT_IMAGE_SIZE, 1], tf.float32)
    assert spec == {
        "x": image,
        "y": image,
        "x_index": tf.TensorSpec([64], tf.int64),
        "y_index": tf.TensorSpec([64], tf.int64),
    }
    steps = int(fn_args.train_dataset.cardinality())
    valid = ValidPairs.load(pairs_run[keys.PAIR_INDEX_KEY].uri)
    row_splits, values = valid.row_splits, valid.values
    epochs = []
    for _ in range(2):
        batches = list(fn_args.train_dataset)
        assert len(batches) == steps
        x_index = np.concatenate([b["x_index"].numpy() for b in batches])
        y_index = np.concatenate([b["y_index"].numpy() for b in batches])
        assert set(x_index) == set(range(valid.num_x))  # every x, every epoch
        for x, y in zip(x_index, y_index, strict=True):
            assert y in values[row_splits[x] : row_splits[x + 1]]
        for batch in batches[:2]:
            pixels = batch["x"].numpy()
            assert pixels.min() >= 0.0 and pixels.max() <= 1.0 and pixels.max() > 0.0
        epochs.append(dict(zip(x_index, y_index, strict=True)))
    assert epochs[0] != epochs[1]


def test_speaker_batches_are_class_balanced_and_eval_covers_held_out_speakers(
    speaker_training, audio_run
):
    model, model_run, fn_args = speaker_training
    batch_size = N_CLASSES_PER_BATCH * N_SAMPLES_PER_CLASS
    spec = fn_args.train_dataset.element_spec
    assert spec["features"].shape.as_list() == [batch_size, spec["features"].shape[1], 24]
    assert spec["lengths"] == tf.TensorSpec([batch_size], tf.int32)
    assert spec["label"] == tf.TensorSpec([batch_size], tf.int64)
    assert spec["index"] == tf.TensorSpec([batch_size], tf.int64)
    train_ids = layout.load_npy(
        os.path.join(
            layout.index_dir(audio_run[keys.CLASS_INDEX_KEY].uri, "train"), "class_ids.npy"
        )
    )
    plans = []
    for _ in range(2):
        seen_classes = set()
        indices = []
        for batch in fn_args.train_dataset:
            groups = batch["label"].numpy().reshape(N_CLASSES_PER_BATCH, N_SAMPLES_PER_CLASS)
            assert (groups == groups[:, :1]).all()
            assert len(set(groups[:, 0])) == N_CLASSES_PER_BATCH
            np.testing.assert_array_equal(train_ids[batch["index"].numpy()], batch["label"])
            seen_classes.update(groups[:, 0])
            indices.append(batch["index"].numpy())
        assert seen_classes == set(train_ids)  # every training speaker, every epoch
        plans.append(np.concatenate(indices))
    assert not np.array_equal(plans[0], plans[1])

    eval_ids = layout.load_npy(
        os.path.join(layout.index_dir(audio_run[keys.CLASS_INDEX_KEY].uri, "eval"), "class_ids.npy")
    )
    eval_batches = list(fn_args.eval_dataset)
    np.testing.assert_array_equal(
        np.concatenate([b["index"].numpy() for b in eval_batches]), np.arange(len(eval_ids))
    )
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in eval_batches]), eval_ids)
    for batch in eval_batches:
        assert int(tf.reduce_max(batch["lengths"])) == batch["features"].shape[1]
    assert fn_args.custom_config["n_classes_per_batch"] == N_CLASSES_PER_BATCH
    assert model.get_float_custom_property("epochs_run") == 2.0
    # The draws per training record the input pipeline served, in the metrics and TensorBoard.
    draws = {k: model.get_float_custom_property(k) for k in DRAW_SUMMARY_KEYS}
    assert 0 <= draws["draws_epoch_min"] <= draws["draws_epoch_median"] <= draws["draws_epoch_max"]
    assert draws["draws_epoch_max"] <= draws["draws_total_max"]
    assert draws["draws_total_median"] >= 1 and draws["records_never_drawn"] < len(train_ids)
    assert tf.io.gfile.glob(os.path.join(model_run.uri, "draw_counts", "events.out.tfevents.*"))


def _anomalies_artifact(directory, split_anomalies: dict[str, bool]):
    anomalies = make_artifact(
        standard_artifacts.ExampleAnomalies, str(directory), list(split_anomalies)
    )
    for split, broken in split_anomalies.items():
        found = anomalies_pb2.Anomalies()
        if broken:
            found.anomaly_info["image"].short_description = "Column dropped"
        os.makedirs(directory / f"{layout.SPLIT_PREFIX}{split}")
        (directory / f"{layout.SPLIT_PREFIX}{split}" / "SchemaDiff.pb").write_bytes(
            found.SerializeToString()
        )
    return anomalies


def test_anomalies_in_a_training_split_stop_training(pairs_run, tmp_path):
    anomalies = _anomalies_artifact(
        tmp_path / "anomalies", {layout.X_RECORD_SET: False, layout.Y_RECORD_SET: True}
    )
    with pytest.raises(trainer_executor.AnomaliesFoundError, match="split 'y'.*image.*dropped"):
        _train_pairs(
            pairs_run,
            tmp_path,
            SMALL_IMAGE,
            extra_inputs={keys.ANOMALIES_KEY: [anomalies]},
            batch_size=8,
        )
    assert not (tmp_path / keys.MODEL_KEY).exists()


def test_clean_anomalies_let_training_run(pairs_run, tmp_path):
    anomalies = _anomalies_artifact(
        tmp_path / "anomalies", {layout.X_RECORD_SET: False, layout.Y_RECORD_SET: False}
    )
    trainer_executor.check_no_anomalies(anomalies, [layout.X_RECORD_SET, layout.Y_RECORD_SET])


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ([1.0], "dict of metrics"),
        ({"loss": "low"}, "not a number"),
        ({"loss": float("nan")}, "not finite"),
    ],
)
def test_bad_run_fn_results_are_named(result, error):
    with pytest.raises((TypeError, ValueError), match=error):
        trainer_executor.checked_metrics(result)


def test_a_run_fn_that_exports_nothing_fails(pairs_run, tmp_path):
    module_file = tmp_path / "lazy_trainer.py"
    module_file.write_text("def run_fn(fn_args):\n    return {'loss': 0.0}\n")
    with pytest.raises(RuntimeError, match="exported nothing"):
        _train_pairs(
            pairs_run,
            tmp_path,
            SMALL_IMAGE,
            module_path=None,
            module_file=str(module_file),
            batch_size=8,
        )


def test_missing_inputs_and_settings_are_named(pairs_run, tmp_path):
    with pytest.raises(ValueError, match="class_index"):
        _train(
            trainer_executor.ClassBalancedExecutor,
            {**pairs_run, keys.CLASS_INDEX_KEY: pairs_run[keys.PAIR_INDEX_KEY]},
            keys.PAIR_INDEX_KEY,
            tmp_path,
            n_classes_per_batch=2,
            n_samples_per_class=2,
        )
    with pytest.raises(ValueError, match="batch_size"):
        _train(trainer_executor.PairsExecutor, pairs_run, keys.PAIR_INDEX_KEY, tmp_path)
    # An execution of one kind sent the other kind's options (a spec edited by hand).
    with pytest.raises(ValueError, match="no option 'epoch_mode'"):
        _train(
            trainer_executor.PairsExecutor,
            pairs_run,
            keys.PAIR_INDEX_KEY,
            tmp_path,
            batch_size=8,
            input_options=json.dumps({"image": SMALL_IMAGE, "epoch_mode": "samples"}),
        )


def _trainer(trainer, options, **changes):
    """`trainer` (`PairsTrainer` or `ClassBalancedTrainer`) built with input `options` over new
    channels, small batches and the contract module; `changes` replace its arguments."""
    from tfx.types import channel

    if trainer is PairsTrainer:
        kind = {"pair_index": channel.Channel(type=artifacts.PairIndex), "batch_size": 4}
    else:
        kind = {
            "class_index": channel.Channel(type=artifacts.ClassIndex),
            "n_classes_per_batch": 2,
            "n_samples_per_class": 2,
        }
    arguments = {
        "examples": channel.Channel(type=standard_artifacts.Examples),
        "offset_index": channel.Channel(type=artifacts.OffsetIndex),
        **kind,
        "num_epochs": 1,
        "module_path": CONTRACT_MODULE,
        "input_options": options,
        **changes,
    }
    return trainer(**arguments)


def test_components_declare_their_required_channels_and_parameters():
    pairs_options = {"image": SMALL_IMAGE}
    with pytest.raises(TypeError, match="pair_index"):
        _trainer(PairsTrainer, pairs_options, pair_index=None)
    with pytest.raises(TypeError, match="'batch_size'"):
        _trainer(PairsTrainer, pairs_options, batch_size=None)
    with pytest.raises(TypeError, match="class_index"):
        _trainer(ClassBalancedTrainer, None, class_index=None)
    with pytest.raises(TypeError, match="'n_samples_per_class'"):
        _trainer(ClassBalancedTrainer, None, n_samples_per_class=None)
    with pytest.raises(ValueError, match="exactly one"):
        _trainer(ClassBalancedTrainer, None, module_file="trainer.py")
    assert not PairsTrainer.SPEC_CLASS.is_optional_input(keys.PAIR_INDEX_KEY)
    assert not ClassBalancedTrainer.SPEC_CLASS.is_optional_input(keys.CLASS_INDEX_KEY)
    assert keys.CLASS_INDEX_KEY not in PairsTrainer.SPEC_CLASS.INPUTS
    assert keys.PAIR_INDEX_KEY not in ClassBalancedTrainer.SPEC_CLASS.INPUTS


@pytest.mark.parametrize(
    "trainer, options, error, message",
    [
        (
            PairsTrainer,
            {"image": SMALL_IMAGE, "stratgy": "uniform"},
            ValueError,
            "no option 'stratgy'; did you mean 'strategy'",
        ),
        (
            PairsTrainer,
            {"image": SMALL_IMAGE, "strategy": "least_sampeld"},
            ValueError,
            "did you mean 'least_sampled'",
        ),
        (PairsTrainer, {"held_out": 2}, ValueError, "needs image"),
        (
            PairsTrainer,
            {"image": {"height": 8, "width": 8.5, "channels": 1}},
            TypeError,
            "image width must be an int",
        ),
        (ClassBalancedTrainer, {"epoch_mod": "samples"}, ValueError, "did you mean 'epoch_mode'"),
        (ClassBalancedTrainer, {"eval_batch_size": True}, TypeError, "eval_batch_size must be"),
        (ClassBalancedTrainer, {"max_draws_per_record": 0}, ValueError, "max_draws_per_record"),
        (ClassBalancedTrainer, {"features": {"num_mel_bin": 40}}, TypeError, "num_mel_bin"),
        (
            ClassBalancedTrainer,
            PairsInputOptions(image=SMALL_IMAGE),
            TypeError,
            "takes ClassBalancedInputOptions",
        ),
        (PairsTrainer, ClassBalancedInputOptions(), TypeError, "takes PairsInputOptions"),
    ],
)
def test_input_options_are_checked_in_the_pipeline_file(trainer, options, error, message):
    """A misspelt option fails where the pipeline is written, naming itself (issue 21.3)."""
    with pytest.raises(error, match=message):
        _trainer(trainer, options)


def test_distribution_is_checked_in_the_pipeline_file_and_batches_must_split():
    with pytest.raises(ValueError, match="did you mean 'mirrored'"):
        _trainer(ClassBalancedTrainer, None, distribution="mirored")
    trainer = _trainer(PairsTrainer, {"image": SMALL_IMAGE}, distribution="mirrored")
    assert trainer.exec_properties[keys.DISTRIBUTION_KEY] == "mirrored"
    assert (
        _trainer(PairsTrainer, {"image": SMALL_IMAGE}).exec_properties[keys.DISTRIBUTION_KEY]
        is None
    )
    assert check_split(8, 4, "n_classes_per_batch") == 2
    with pytest.raises(ValueError, match="n_classes_per_batch=6 does not split over the 4"):
        check_split(6, 4, "n_classes_per_batch")
    # One replica on this machine: the default strategy, or a mirrored one of one CPU.
    assert training_strategy("none").num_replicas_in_sync == 1
    assert training_strategy("mirrored").num_replicas_in_sync == 1


def test_a_batch_split_over_replicas_must_be_dense():
    dense = tf.data.Dataset.from_tensors({"x": tf.zeros([4, 2]), "index": tf.range(4)})
    fixed = with_batch_size(dense.map(lambda b: b), 4)
    assert fixed.element_spec["x"].shape == [4, 2]
    assert int(fixed.cardinality()) == 1
    sparse = dense.map(lambda b: {**b, "tags": tf.sparse.from_dense(b["x"])})
    with pytest.raises(ValueError, match="batch key 'tags' is a SparseTensorSpec"):
        with_batch_size(sparse, 4)


def test_typed_input_options_travel_as_the_json_of_what_differs_from_the_defaults():
    options = PairsInputOptions(image=SMALL_IMAGE, held_out=2)
    trainer = _trainer(PairsTrainer, options)
    sent = trainer.exec_properties[keys.INPUT_OPTIONS_KEY]
    assert json.loads(sent) == {"held_out": 2, "image": {"channels": 1, "height": 8, "width": 8}}
    assert input_options.input_options(PairsInputOptions, json.loads(sent)) == options
    with pytest.raises(TypeError, match="takes ClassBalancedInputOptions"):
        input_options.input_options(ClassBalancedInputOptions, options)
    assert _trainer(ClassBalancedTrainer, None).exec_properties[keys.INPUT_OPTIONS_KEY] is None
