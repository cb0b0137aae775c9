"""Sampler arguments are checked when the sampler is built: an int that is not an int (2.5, True,
"3") or out of range (a seed past int64) is one line naming the argument, not a silent
truncation or a failure at the first iteration."""

from __future__ import annotations

import numpy as np
import pytest

from tests.class_balanced.runs import write_audio_run
from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    ValidPairs,
    class_balanced,
    dynamic_pairs,
)
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan
from tfx_dynamic_inputs.inputs.class_report import class_report
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner

CROP = AudioFeatureConfig(mode="crop", crop_seconds=0.05, num_mel_bins=8)
IMAGES = np.zeros([4, 2, 2, 3], np.uint8)
VALID = [[0], [1], [0, 1], [1]]

# (argument, value, error, message): what each sampler refuses.
BAD_INTS = [
    (2.5, TypeError, "must be an int, got float 2.5"),
    (True, TypeError, "must be an int, got the bool True"),
    (np.bool_(True), TypeError, "must be an int, got the bool True"),
    ("3", TypeError, "must be an int, got str '3'"),
    (np.float32(2.0), TypeError, "must be an int, got float32 2.0"),
    (0, ValueError, "must be >= 1, got 0"),
    (2**70, ValueError, r"must fit in int64 \[-2\*\*63, 2\*\*63 - 1\], got 1180591620717411303424"),
]
BAD_SEEDS = [
    (1.5, TypeError, "seed must be an int, got float 1.5"),
    (False, TypeError, "seed must be an int, got the bool False"),
    (2**70, ValueError, "seed must fit in int64"),
    (2**63, ValueError, "seed must fit in int64"),
    (-(2**63) - 1, ValueError, "seed must fit in int64"),
]


@pytest.fixture(scope="module")
def audio_run(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("run"))
    write_audio_run(output_dir, [3, 3, 4], seed=1)
    return output_dir


def _raises(error, message, build, *args, **kwargs):
    """`build(*args, **kwargs)` raises `error` matching `message`, in one line."""
    with pytest.raises(error, match=message) as caught:
        build(*args, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("argument", ["n_classes_per_batch", "n_samples_per_class"])
@pytest.mark.parametrize("value, error, message", BAD_INTS)
def test_class_balanced_counts_must_be_ints(audio_run, argument, value, error, message):
    arguments = {"n_classes_per_batch": 2, "n_samples_per_class": 2, argument: value}
    expected = f"{argument} {message}"
    for build in (ClassBalancedSampler, class_balanced):
        _raises(error, expected, build, audio_run, features=CROP, **arguments)
    # The plan checks them too, for callers that build it alone.
    _raises(error, expected, ClassBalancedPlan, np.array([0, 3, 6, 10]), **arguments)


@pytest.mark.parametrize("value, error, message", BAD_SEEDS)
def test_class_balanced_seed_must_fit_the_stateless_rng(audio_run, value, error, message):
    counts = {"n_classes_per_batch": 2, "n_samples_per_class": 2}
    for build in (ClassBalancedSampler, class_balanced):
        _raises(error, message, build, audio_run, features=CROP, seed=value, **counts)
    _raises(error, message, ClassBalancedPlan, np.array([0, 3, 6]), seed=value, **counts)


def test_class_report_checks_n_samples_per_class():
    _raises(TypeError, "n_samples_per_class must be an int", class_report, [0, 3], 1.5)


@pytest.mark.parametrize("value, error, message", BAD_INTS)
def test_dynamic_pairs_batch_size_must_be_an_int(value, error, message):
    expected = f"batch_size {message}"
    for build in (DynamicPairsSampler, dynamic_pairs):
        _raises(error, expected, build, IMAGES, IMAGES, VALID, batch_size=value)
    valid = ValidPairs.build(VALID, num_y=4)
    _raises(error, expected, PairPlanner, valid, strategy="uniform", seed=0, batch_size=value)


@pytest.mark.parametrize("value, error, message", BAD_SEEDS)
def test_dynamic_pairs_seed_must_fit_the_stateless_rng(value, error, message):
    for build in (DynamicPairsSampler, dynamic_pairs):
        _raises(error, message, build, IMAGES, IMAGES, VALID, batch_size=2, seed=value)
    valid = ValidPairs.build(VALID, num_y=4)
    _raises(error, message, PairPlanner, valid, strategy="uniform", seed=value, batch_size=2)


def test_a_pairs_run_is_not_opened_with_bad_arguments(tmp_path):
    # Nothing at tmp_path: the arguments are refused before the run is looked at.
    empty = str(tmp_path)
    _raises(TypeError, "batch_size must be an int", dynamic_pairs, empty, batch_size=2.5)
    _raises(
        ValueError,
        "seed must fit in int64",
        DynamicPairsSampler,
        empty,
        batch_size=2,
        seed=2**70,
    )


def test_initial_step_must_be_a_non_negative_int(audio_run):
    _raises(
        TypeError,
        "initial_step must be an int, got float 1.5",
        dynamic_pairs,
        IMAGES,
        IMAGES,
        VALID,
        batch_size=2,
        initial_step=1.5,
    )
    _raises(
        ValueError,
        "initial_step must be >= 0, got -1",
        class_balanced,
        audio_run,
        n_classes_per_batch=2,
        n_samples_per_class=2,
        features=CROP,
        initial_step=-1,
    )


def test_numpy_ints_and_every_int64_seed_are_taken_and_iterate(audio_run):
    for seed in (np.int64(3), -1, 2**63 - 1, -(2**63)):
        sampler = ClassBalancedSampler(
            audio_run,
            n_classes_per_batch=np.int32(2),
            n_samples_per_class=np.int64(2),
            features=CROP,
            seed=seed,
        )
        assert (sampler.plan.n_classes_per_batch, sampler.plan.n_samples_per_class) == (2, 2)
        batches = list(sampler.dataset().as_numpy_iterator())
        assert batches and all(len(batch["index"]) == 4 for batch in batches)
    for strategy in ("uniform", "least_sampled"):
        for valid in (VALID, ValidPairs.from_groups([0, 0, 1, 1], [0, 1, 0, 1])):
            pairs = dynamic_pairs(
                IMAGES, IMAGES, valid, batch_size=np.int64(2), strategy=strategy, seed=-(2**63)
            )
            assert [len(batch["x_index"]) for batch in pairs.as_numpy_iterator()] == [2, 2]
