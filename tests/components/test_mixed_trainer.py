"""ClassBalancedTrainer's executor over two real materialized audio runs mixed by weight."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tfx.types import standard_artifacts

from tests.components import contract_trainer
from tests.components.conftest import make_artifact, materialize
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import open_run
from tfx_dynamic_inputs.materialize_component import MaterializeAudio
from tfx_dynamic_inputs.pipeline import config
from tfx_dynamic_inputs.trainer_component import ClassBalancedInputOptions, input_options
from tfx_dynamic_inputs.trainer_component import executor as trainer_executor

N_C, N_P = 4, 2
FEATURES = {"sample_rate": 16000, "crop_seconds": 0.3, "num_mel_bins": 16}


@pytest.fixture(scope="module")
def second_run(speaker_manifest, tmp_path_factory):
    """The same speakers materialized again: another run, whose speakers stay other classes."""
    return materialize(
        MaterializeAudio,
        str(tmp_path_factory.mktemp("second_audio_run")),
        {
            keys.MANIFEST_KEY: speaker_manifest,
            keys.ROOT_KEY: config.SPEAKER_CORPUS_DIR,
            keys.SAMPLE_RATE_KEY: 16000,
            keys.SPLIT_MODE_KEY: "speaker",
            keys.EVAL_FRACTION_KEY: 0.3,
            keys.NUM_SHARDS_KEY: 1,
        },
    )


def _train(audio_run, second_run, tmp_path, options: ClassBalancedInputOptions):
    inputs = {
        keys.EXAMPLES_KEY: [audio_run[keys.EXAMPLES_KEY]],
        keys.OFFSET_INDEX_KEY: [audio_run[keys.OFFSET_INDEX_KEY]],
        keys.CLASS_INDEX_KEY: [audio_run[keys.CLASS_INDEX_KEY]],
        keys.MIXED_CLASS_INDEX_KEY: [second_run[keys.CLASS_INDEX_KEY]],
    }
    model = make_artifact(standard_artifacts.Model, str(tmp_path / keys.MODEL_KEY))
    model_run = make_artifact(standard_artifacts.ModelRun, str(tmp_path / keys.MODEL_RUN_KEY))
    properties = {
        keys.MODULE_PATH_KEY: "tests.components.contract_trainer",
        keys.NUM_EPOCHS_KEY: 2,
        keys.N_CLASSES_PER_BATCH_KEY: N_C,
        keys.N_SAMPLES_PER_CLASS_KEY: N_P,
        keys.TRAIN_SPLIT_KEY: "train",
        keys.EVAL_SPLIT_KEY: "eval",
        keys.INPUT_OPTIONS_KEY: input_options.to_json(options),
    }
    outputs = {keys.MODEL_KEY: [model], keys.MODEL_RUN_KEY: [model_run]}
    trainer_executor.ClassBalancedExecutor().Do(inputs, outputs, properties)
    return model, contract_trainer.received["fn_args"]


def test_the_trainer_mixes_its_run_with_more_runs_and_the_model_sees_all_classes(
    audio_run, second_run, tmp_path
):
    options = ClassBalancedInputOptions(features=FEATURES, run_weights=(1.0, 3.0))
    model, fn_args = _train(audio_run, second_run, tmp_path, options)
    own = open_run(audio_run[keys.CLASS_INDEX_KEY].uri)
    other = open_run(second_run[keys.CLASS_INDEX_KEY].uri)
    mixed = fn_args.custom_config["mixed_runs"]
    assert [r["run_id"] for r in mixed.values()] == [own.run_id, other.run_id]
    assert [r["weight"] for r in mixed.values()] == [1.0, 3.0]
    own_classes = mixed["run0"]["num_classes"]
    assert fn_args.custom_config["num_classes"] == own_classes + mixed["run1"]["num_classes"]
    labels = []
    for batch in fn_args.train_dataset:
        groups = batch["label"].numpy().reshape(N_C, N_P)
        assert (groups == groups[:, :1]).all() and len(set(groups[:, 0])) == N_C
        labels.append(groups[:, 0])
    labels = np.concatenate(labels)
    assert labels.max() < fn_args.custom_config["num_classes"]
    assert (labels >= own_classes).any() and (labels < own_classes).any()  # both runs
    # The eval split is the trainer's own run's, its labels its own (run 0's ids are global).
    eval_labels = np.concatenate([b["label"].numpy() for b in fn_args.eval_dataset])
    assert eval_labels.max() < own_classes
    assert model.get_float_custom_property("epochs_run") == 2.0


def test_run_weights_must_be_one_per_run(audio_run, second_run, tmp_path):
    options = ClassBalancedInputOptions(features=FEATURES, run_weights=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="lists 3 weights but the trainer mixes 2 runs") as bad:
        _train(audio_run, second_run, tmp_path, options)
    assert "\n" not in str(bad.value)


@pytest.mark.parametrize(
    "fields, error, message",
    [
        ({"run_weights": [1.0, 0.0]}, ValueError, "run_weights must be > 0"),
        ({"run_weights": "1,2"}, TypeError, "run_weights must be a list"),
        ({"run_weights": [1, "2"]}, TypeError, "run_weights must be numbers"),
        ({"mix_weighting": "batch"}, ValueError, "did you mean 'batches'"),
    ],
)
def test_mix_options_are_checked_when_built(fields, error, message):
    with pytest.raises(error, match=message):
        input_options.input_options(ClassBalancedInputOptions, fields)


def test_mix_options_travel_as_json():
    options = ClassBalancedInputOptions(run_weights=[2, 1], mix_weighting="batches")
    sent = input_options.to_json(options)
    received = input_options.input_options(ClassBalancedInputOptions, json.loads(sent))
    assert received == options and received.run_weights == (2.0, 1.0)
