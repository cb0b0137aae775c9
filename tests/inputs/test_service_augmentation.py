"""Speaker augmentation under tf.data service (issue 46): noise clips over the memory budget are
read from disk in Python, which a worker cannot run, so asking for the service refuses them at
once, naming the clips and the budget; within the budget the dataset is accepted and runs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.class_balanced.runs import write_audio_run, write_clip_run
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, ClassBalancedSampler, StoreOptions
from tfx_dynamic_inputs.inputs.data_service import ServiceUnsupportedError
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler
from tfx_dynamic_inputs.inputs.run_mix import RunMix, WeightedRun
from tfx_dynamic_inputs.inputs.speaker_augment import AdditiveNoise, SpeakerAugmentConfig

FEATURES = AudioFeatureConfig(crop_seconds=0.05, num_mel_bins=16)
CLASS_SIZES = [4, 3, 5, 2]
N_C, N_P = 2, 2
NOWHERE = "grpc://localhost:1"  # the refusal comes before any connection
CLIP_SAMPLES = 3000  # 5 clips of 6000 bytes: 30 kB of noise
# Over the class index (8 bytes a record, held in the graph) but under the noise clips.
TINY_BUDGET = 4096


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("service_augmentation")
    paths = {name: str(root / name) for name in ("speech", "noise")}
    write_audio_run(paths["speech"], CLASS_SIZES, seed=4, min_samples=1600, max_samples=2400)
    rng = np.random.default_rng(11)
    clips = [(rng.standard_normal(CLIP_SAMPLES) * 8000).astype(np.int16) for _ in range(5)]
    write_clip_run(paths["noise"], clips)
    return paths


def _augment(runs: dict[str, str]) -> SpeakerAugmentConfig:
    return SpeakerAugmentConfig(noise=AdditiveNoise(runs["noise"], probability=1.0))


def _class_balanced(runs: dict[str, str], memory_budget_bytes: int) -> ClassBalancedSampler:
    return ClassBalancedSampler(
        runs["speech"],
        n_classes_per_batch=N_C,
        n_samples_per_class=N_P,
        features=FEATURES,
        augment=_augment(runs),
        memory_budget_bytes=memory_budget_bytes,
    )


def _mixed(runs: dict[str, str], memory_budget_bytes: int) -> MixedClassBalancedSampler:
    return MixedClassBalancedSampler(
        RunMix((WeightedRun(runs["speech"], 1.0, "speech"),)),
        n_classes_per_batch=N_C,
        n_samples_per_class=N_P,
        features=FEATURES,
        augment=_augment(runs),
        store_options=StoreOptions(backend="disk", memory_budget_bytes=memory_budget_bytes),
    )


@pytest.mark.parametrize("build", [_class_balanced, _mixed], ids=["class_balanced", "mixed"])
def test_noise_over_the_memory_budget_is_refused_when_the_service_is_asked_for(runs, build):
    sampler = build(runs, TINY_BUDGET)
    assert sampler.augmenter.noise_report.backend == "disk"
    with pytest.raises(ServiceUnsupportedError) as error:
        sampler.distributed_dataset(NOWHERE)
    reasons = str(error.value).splitlines()[1:]
    # Refused by what the sampler knows, before its graph is built: one reason, the noise run's.
    assert len(reasons) == 1, reasons
    assert f"noise clips of {runs['noise']}" in reasons[0]
    assert "memory_budget_bytes" in reasons[0]


@pytest.mark.parametrize("build", [_class_balanced, _mixed], ids=["class_balanced", "mixed"])
def test_noise_within_the_memory_budget_is_accepted_and_runs(runs, build):
    sampler = build(runs, 1 << 30)
    assert sampler.augmenter.noise_report.backend == "memory"
    batch = next(iter(sampler.epochs_dataset(num_epochs=1)))
    assert batch["label"].shape == (N_C * N_P,)
    assert int(batch["epoch"]) == 0
