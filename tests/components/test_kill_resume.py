"""Preemption: a trainer executor SIGKILLed mid-epoch and run again on the same output folders
resumes from its checkpoint with exactly the rest of an uninterrupted run's batch stream, and
ends with its step count and weights, on another number of replicas too.

Per trainer (pairs, class-balanced), three runs of its real executor with
`killable_trainer.run_fn` and `distribution="mirrored"`: an uninterrupted one (in this process,
one replica), one SIGKILLed in epoch 1 a few batches after a mid-epoch checkpoint (a
subprocess), and its retry on the same outputs (a subprocess) on another replica count: the
pairs trainer is killed on 2 replicas and retried on 1, the class-balanced one killed on 1 and
retried on 2 (logical CPU devices, as a retried pod may land on a machine with another number of
GPUs). The batches the killed attempt trained after its last checkpoint are trained again by the
retry.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import path_utils

from tests.components import killable_trainer
from tests.components.conftest import DIGIT_IMAGE_SIZE, make_artifact
from tests.helpers.keras_callbacks import BatchesPerEpoch
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.trainer_component import executor as trainer_executor
from tfx_dynamic_inputs.trainer_component import input_options, training_inputs
from tfx_dynamic_inputs.trainer_component.checkpoints import HISTORY_FILE, checkpoint_dir

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_EPOCHS = 3
SEED = 5
# The batches after the last checkpoint that the killed attempt trains and the retry redoes.
REDONE = 2
# Where in epoch 1 the retry resumes: past its first batch, so that the partial epoch is
# shorter than a whole one by more than the step Keras finds the end of the data with.
RESUMED_AT = 2
TRAINED_STEPS = "trained_steps/.ATTRIBUTES/VARIABLE_VALUE"
# Replicas of each case's killed attempt and of its retry.
KILLED_REPLICAS = {"pairs": 2, "speakers": 1}
RETRIED_REPLICAS = {"pairs": 1, "speakers": 2}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    run: dict
    index_key: str
    executor: type[trainer_executor.TrainerExecutor]
    properties: dict
    # The replicas (logical CPU devices) of the killed attempt and of its retry.
    killed_replicas: int = 1
    retried_replicas: int = 1

    def inputs(self) -> dict:
        return {
            key: [self.run[key]]
            for key in (keys.EXAMPLES_KEY, keys.OFFSET_INDEX_KEY, self.index_key)
        }

    def train_dataset(self, resume: training_inputs.Resume | None = None) -> tf.data.Dataset:
        """The executor's training dataset of this case, built the way it builds it."""
        offset_index = self.run[keys.OFFSET_INDEX_KEY].uri
        index = self.run[self.index_key].uri
        sent = json.loads(self.properties[keys.INPUT_OPTIONS_KEY])
        if self.index_key == keys.PAIR_INDEX_KEY:
            dataset, _, _ = training_inputs.pairs_train_dataset(
                offset_index,
                index,
                batch_size=self.properties[keys.BATCH_SIZE_KEY],
                seed=SEED,
                options=input_options.input_options(input_options.PairsInputOptions, sent),
                resume=resume,
            )
            return dataset
        options = input_options.input_options(input_options.ClassBalancedInputOptions, sent)
        return training_inputs.class_balanced_train_dataset(
            offset_index,
            index,
            self.properties[keys.TRAIN_SPLIT_KEY],
            n_classes_per_batch=self.properties[keys.N_CLASSES_PER_BATCH_KEY],
            n_samples_per_class=self.properties[keys.N_SAMPLES_PER_CLASS_KEY],
            seed=SEED,
            parser=options.audio_features(),
            options=options,
            resume=resume,
            augment=options.speaker_augment(None, None),
        )


def _outputs(root: str) -> dict:
    return {
        keys.MODEL_KEY: [make_artifact(standard_artifacts.Model, f"{root}/{keys.MODEL_KEY}")],
        keys.MODEL_RUN_KEY: [
            make_artifact(standard_artifacts.ModelRun, f"{root}/{keys.MODEL_RUN_KEY}")
        ],
    }


def _write_spec(path: str, case: Case, outputs: dict, batch_log: str, kill_at_step: int = 0):
    spec = {
        "inputs": artifact_utils.jsonify_artifact_dict(case.inputs()),
        "outputs": artifact_utils.jsonify_artifact_dict(outputs),
        "exec_properties": case.properties,
        "executor": f"{case.executor.__module__}.{case.executor.__name__}",
        "batch_log": batch_log,
        "kill_at_step": kill_at_step,
    }
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def _launch(spec_paths: list[str], log_path: str, replicas: int) -> subprocess.Popen:
    env = {**os.environ, killable_trainer.LOGICAL_CPUS_ENV: str(replicas)}
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.components.killable_trainer", *spec_paths],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait(process: subprocess.Popen, log_path: str, returncode: int) -> None:
    process.wait(timeout=600)
    with open(log_path) as f:
        assert process.returncode == returncode, f.read()[-4000:]


def _batches(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _stream(batches: list[dict]) -> list[tuple[int, list]]:
    """(epoch, ids) of each batch: the batch numbers restart at 0 in a resumed epoch."""
    return [(batch["epoch"], batch["ids"]) for batch in batches]


def _results(model_run_uri: str, model_uri: str) -> dict:
    with open(os.path.join(model_run_uri, trainer_executor.METRICS_FILE)) as f:
        metrics = json.load(f)
    directory = checkpoint_dir(model_run_uri)
    with open(os.path.join(directory, HISTORY_FILE)) as f:
        history = json.load(f)
    weights_path = os.path.join(
        path_utils.serving_model_dir(model_uri), killable_trainer.WEIGHTS_FILE
    )
    with np.load(weights_path) as weights:
        arrays = [weights[f"arr_{i}"] for i in range(len(weights.files))]
    return {
        "metrics": metrics,
        "history": history,
        "weights": arrays,
        "trained_steps": int(
            tf.train.load_variable(tf.train.latest_checkpoint(directory), TRAINED_STEPS)
        ),
    }


COMMON_PROPERTIES = {
    keys.MODULE_PATH_KEY: "tests.components.killable_trainer",
    keys.NUM_EPOCHS_KEY: NUM_EPOCHS,
    keys.SEED_KEY: SEED,
    keys.DISTRIBUTION_KEY: "mirrored",
}


def _case(
    name: str,
    run: dict,
    index_key: str,
    executor: type[trainer_executor.TrainerExecutor],
    properties: dict,
    sent_options: dict,
    replicas: tuple[int, int],
) -> Case:
    """A case whose exec properties are `COMMON_PROPERTIES`, its own `properties` and the input
    options it sends (as the component sends them: JSON), killed and retried on `replicas`."""
    return Case(
        name,
        run,
        index_key,
        executor,
        {
            **COMMON_PROPERTIES,
            **properties,
            keys.INPUT_OPTIONS_KEY: json.dumps(sent_options),
        },
        *replicas,
    )


def pairs_case(pairs_run: dict) -> Case:
    image = {"height": DIGIT_IMAGE_SIZE, "width": DIGIT_IMAGE_SIZE, "channels": 1}
    return _case(
        "pairs",
        pairs_run,
        keys.PAIR_INDEX_KEY,
        trainer_executor.PairsExecutor,
        {keys.BATCH_SIZE_KEY: 256},
        {"image": image},
        replicas=(KILLED_REPLICAS["pairs"], RETRIED_REPLICAS["pairs"]),
    )


def speakers_case(audio_run: dict) -> Case:
    properties = {
        keys.N_CLASSES_PER_BATCH_KEY: 4,
        keys.N_SAMPLES_PER_CLASS_KEY: 2,
        keys.TRAIN_SPLIT_KEY: "train",
    }
    sent_options = {
        # Epochs of every utterance: enough batches to kill one mid-epoch.
        "epoch_mode": "samples",
        "features": {
            "sample_rate": 16000,
            "crop_seconds": 0.5,
            "num_mel_bins": 24,
            "spec_augment": {"freq_mask_param": 4, "time_mask_param": 5},
        },
        # Speed perturbation (speakers at 1.1 are new classes): the retry replays the
        # augmented features bit for bit (the batch log hashes each sample's).
        "augment": {"speed_factors": [1.0, 1.1]},
    }
    return _case(
        "speakers",
        audio_run,
        keys.CLASS_INDEX_KEY,
        trainer_executor.ClassBalancedExecutor,
        properties,
        sent_options,
        replicas=(KILLED_REPLICAS["speakers"], RETRIED_REPLICAS["speakers"]),
    )


@pytest.fixture(scope="module")
def runs(pairs_run, audio_run, tmp_path_factory) -> dict:
    """Per case: the steps of an epoch, the trained steps of the checkpoint the retry resumes
    from and of the kill, the batches of each run, and the results of the uninterrupted run and
    of the retry."""
    root = str(tmp_path_factory.mktemp("kill_resume"))
    plans = {}
    cases = []
    for case in (pairs_case(pairs_run), speakers_case(audio_run)):
        steps = int(case.train_dataset().cardinality())
        saved = steps + RESUMED_AT
        assert saved + REDONE < 2 * steps, (case.name, steps)
        plans[case.name] = {"steps": steps, "saved": saved, "kill_at": saved + REDONE}
        # Checkpoints at each epoch's end and every `saved` steps: the first one within an
        # epoch is at batch RESUMED_AT of epoch 1; the kill comes REDONE batches later.
        properties = {**case.properties, keys.CHECKPOINT_EVERY_STEPS_KEY: saved}
        cases.append(dataclasses.replace(case, properties=properties))

    def path(*parts: str) -> str:
        return os.path.join(root, "_".join(parts))

    killed = [
        _launch(
            [
                _write_spec(
                    path(case.name, "killed.json"),
                    case,
                    _outputs(path(case.name, "retried")),
                    path(case.name, "killed.jsonl"),
                    kill_at_step=plans[case.name]["kill_at"],
                )
            ],
            path(case.name, "killed.log"),
            case.killed_replicas,
        )
        for case in cases
    ]
    try:
        # The uninterrupted runs train here while the killed ones start.
        for case in cases:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(killable_trainer.BATCH_LOG_ENV, path(case.name, "reference.jsonl"))
                patch.delenv(killable_trainer.KILL_AT_STEP_ENV, raising=False)
                case.executor().Do(
                    case.inputs(), _outputs(path(case.name, "reference")), case.properties
                )
        for case, process in zip(cases, killed, strict=True):
            _wait(process, path(case.name, "killed.log"), -signal.SIGKILL)
    finally:
        for process in killed:
            if process.poll() is None:
                process.kill()

    retries = [
        _launch(
            [
                _write_spec(
                    path(case.name, "retry.json"),
                    case,
                    _outputs(path(case.name, "retried")),
                    path(case.name, "retried.jsonl"),
                )
            ],
            path(case.name, "retry.log"),
            case.retried_replicas,
        )
        for case in cases
    ]
    for case, retry in zip(cases, retries, strict=True):
        _wait(retry, path(case.name, "retry.log"), 0)

    for case in cases:
        plan = plans[case.name]
        for run in ("reference", "killed", "retried"):
            plan[f"{run}_batches"] = _batches(path(case.name, f"{run}.jsonl"))
        for run in ("reference", "retried"):
            outputs = path(case.name, run)
            plan[run] = _results(
                os.path.join(outputs, keys.MODEL_RUN_KEY), os.path.join(outputs, keys.MODEL_KEY)
            )
    return plans


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pairs", "speakers"])
def test_a_killed_trainer_resumes_with_the_rest_of_the_stream(runs, name):
    run = runs[name]
    steps, saved, kill_at = run["steps"], run["saved"], run["kill_at"]
    reference = _stream(run["reference_batches"])
    assert len(reference) == NUM_EPOCHS * steps
    # Killed in epoch 1, REDONE batches after its checkpoint at `saved` trained steps.
    assert _stream(run["killed_batches"]) == reference[:kill_at]
    assert reference[saved][0] == reference[kill_at - 1][0] == 1
    # The retry trains on the rest of the stream from that checkpoint: first the batches the
    # killed attempt trained after it, again, then those it never reached; every epoch after
    # the resumed one whole.
    assert _stream(run["retried_batches"]) == reference[saved:]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pairs", "speakers"])
def test_the_retry_ends_with_the_step_count_and_weights_of_an_uninterrupted_run(runs, name):
    run = runs[name]
    reference, retried = run["reference"], run["retried"]
    total = NUM_EPOCHS * run["steps"]
    # The retry ran on another replica count than the killed attempt, the reference on one.
    assert reference["metrics"]["num_replicas"] == 1
    assert retried["metrics"]["num_replicas"] == RETRIED_REPLICAS[name]
    assert retried["trained_steps"] == reference["trained_steps"] == total
    assert (
        retried["metrics"]["optimizer_iterations"]
        == reference["metrics"]["optimizer_iterations"]
        == total
    )
    assert len(retried["weights"]) == len(reference["weights"]) > 0
    # The retry runs on another replica count, which sums the replicas' gradients (and the
    # epoch means) in another order: equal to float rounding.
    for got, want in zip(retried["weights"], reference["weights"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Every epoch's logs but the resumed epoch's, whose means cover the batches trained after
    # the resume.
    assert len(retried["history"]) == len(reference["history"]) == NUM_EPOCHS
    for epoch in (0, 2):
        got, want = retried["history"][epoch], reference["history"][epoch]
        assert sorted(got) == sorted(want)
        for metric, value in want.items():
            assert got[metric] == pytest.approx(value, rel=1e-6, abs=1e-6), (epoch, metric)


@pytest.mark.slow
def test_the_retry_reports_the_pair_coverage_of_an_uninterrupted_run(runs):
    reference, retried = runs["pairs"]["reference"]["metrics"], runs["pairs"]["retried"]["metrics"]
    # The last epoch is a whole one in both runs.
    for name in ("pair_coverage_total", "pair_coverage_epoch", "invalid_pairs"):
        assert retried[name] == reference[name], name


def test_keras_trains_whole_epochs_after_a_partial_resumed_one(pairs_run):
    """A dataset resumed mid-epoch reports a whole epoch's length, so `fit` does not take the
    partial first epoch's length for the later ones."""
    pairs = pairs_case(pairs_run)

    def resume(sampler, other_inputs) -> int:
        sampler.state.epoch.assign(1)  # as restored from a checkpoint written in epoch 0
        return RESUMED_AT

    fresh = pairs.train_dataset()
    steps = int(fresh.cardinality())
    expected = [len(list(fresh)) for _ in range(NUM_EPOCHS)]
    resumed = pairs.train_dataset(resume)
    assert int(resumed.cardinality()) == steps
    model = keras.Sequential(
        [
            keras.Input((DIGIT_IMAGE_SIZE, DIGIT_IMAGE_SIZE, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    counter = BatchesPerEpoch()
    model.fit(
        resumed.map(lambda batch: (batch["x"], tf.reduce_mean(batch["y"], axis=[1, 2, 3]))),
        epochs=NUM_EPOCHS,
        callbacks=[counter],
        verbose=0,
    )
    assert expected == [steps] * NUM_EPOCHS
    assert counter.counts == [steps - RESUMED_AT] + [steps] * (NUM_EPOCHS - 1)
