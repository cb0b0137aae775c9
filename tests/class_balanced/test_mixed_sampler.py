"""Class-balanced batches over several real runs mixed by weight: namespacing, reads, resume,
weights changed at a resume, refusals."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run, write_clip_run
from tests.inputs.test_elastic_resume import _contexts, _interrupted_and_resumed
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, StoreOptions, open_run
from tfx_dynamic_inputs.inputs.epoch_state import StateRunError
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler, MixState
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting, RunMix, WeightedRun
from tfx_dynamic_inputs.inputs.speaker_augment import AdditiveNoise, SpeakerAugmentConfig

# Both runs name their speakers spk00000, spk00001, ...: equal names, other speakers.
SIZES = {"vox": [4, 3, 5, 2, 6, 3, 4], "mine": [3, 5, 2, 4, 3, 0, 4, 5, 3]}
FEATURES = AudioFeatureConfig(crop_seconds=0.05, num_mel_bins=8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    folders = {}
    for seed, (name, sizes) in enumerate(SIZES.items()):
        folder = str(tmp_path_factory.mktemp(name))
        write_audio_run(folder, sizes, seed=seed, min_samples=400, max_samples=1200, num_shards=2)
        folders[name] = folder
    return folders


def make_mix(runs, weights=(1.0, 2.0), weighting=MixWeighting.CLASSES) -> RunMix:
    return RunMix(
        tuple(
            WeightedRun(runs[name], weight, name)
            for name, weight in zip(SIZES, weights, strict=True)
        ),
        weighting,
    )


def make_sampler(runs, context=None, *, weights=(1.0, 2.0), n_c=2, features=None, state=None):
    replicas = context.num_replicas_in_sync if context is not None else 1
    return MixedClassBalancedSampler(
        make_mix(runs, weights),
        n_classes_per_batch=n_c // replicas if context is not None else n_c,
        n_samples_per_class=2,
        seed=3,
        features=features,
        input_context=context,
        state=state,
    )


def batches(dataset) -> list[dict[str, np.ndarray]]:
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def test_classes_are_namespaced_by_run_and_read_from_their_own_run(runs):
    sampler = make_sampler(runs)
    assert sampler.num_classes == sum(len(s) for s in SIZES.values())
    assert sampler.classes[0] == "vox/spk00000" and sampler.classes[7] == "mine/spk00000"
    assert sampler.reports["mine"].empty_classes.tolist() == [5]
    stores = {name: StoreOptions().open_store(folder, "train") for name, folder in runs.items()}
    for batch in batches(sampler.dataset()):
        assert len(set(batch["label"][::2].tolist())) == 2
        for index, label, run, record in zip(
            batch["index"], batch["label"], batch["run"], batch["record"], strict=True
        ):
            name = list(SIZES)[run]
            local = index - sampler.record_offsets[run]
            assert record == stores[name].read(tf.constant([local], tf.int64)).numpy()[0]
            example = tf.train.Example.FromString(record)
            record_label = example.features.feature[layout.LABEL_KEY].int64_list.value[0]
            assert sampler.classes[label] == f"{name}/spk{record_label:05d}"


def test_per_run_reports_and_draw_counts(runs):
    sampler = make_sampler(runs)
    draws = sampler.draws_per_run(0)
    assert {name: len(counts) for name, counts in draws.items()} == {
        name: sum(sizes) for name, sizes in SIZES.items()
    }
    assert sum(int(c.sum()) for c in draws.values()) == sampler.num_batches * 4
    # Every usable class of every run is drawn this epoch.
    for name, counts in draws.items():
        report = sampler.reports[name]
        assert report.summary().startswith(f"{len(report.usable_classes)} of")
        assert (counts > 0).sum() >= len(report.usable_classes)


def test_a_mix_refuses_the_same_run_twice_equal_names_and_bad_weights(runs, tmp_path):
    vox = open_run(runs["vox"])
    with pytest.raises(ValueError, match="names run folder .* twice"):
        RunMix((WeightedRun(vox, 1.0, "a"), WeightedRun(runs["vox"], 1.0, "b")))
    copy = str(tmp_path / "copy")
    shutil.copytree(runs["vox"], copy)
    with pytest.raises(ValueError, match="names run id .* twice"):
        RunMix((WeightedRun(vox, 1.0, "a"), WeightedRun(copy, 1.0, "b")))
    with pytest.raises(ValueError, match="names name 'a' twice"):
        RunMix((WeightedRun(vox, 1.0, "a"), WeightedRun(runs["mine"], 1.0, "a")))
    for weight in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="must be > 0"):
            WeightedRun(vox, weight, "a")
    with pytest.raises(ValueError, match="without '/'"):
        WeightedRun(vox, 1.0, "a/b")
    with pytest.raises(ValueError, match="weighting must be one of"):
        RunMix((WeightedRun(vox, 1.0, "a"),), "sometimes")


def test_a_resume_continues_the_stream_and_refuses_another_mix(runs, tmp_path):
    stopped = make_sampler(runs, features=FEATURES)
    first = batches(stopped.dataset())
    fresh = batches(make_sampler(runs, features=FEATURES).dataset())
    for a, b in zip(first, fresh, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    iterator = iter(stopped.dataset())  # epoch 1: stopped after 3 batches
    for _ in range(3):
        next(iterator)
    path = tf.train.Checkpoint(sampler=stopped.state).write(str(tmp_path / "ckpt"))
    uninterrupted = batches(make_sampler(runs, features=FEATURES, state=MixState(1)).dataset())

    resumed = make_sampler(runs, features=FEATURES)
    tf.train.Checkpoint(sampler=resumed.state).read(path).assert_consumed()
    rest = batches(resumed.dataset(initial_step=3))
    assert len(rest) == len(uninterrupted) - 3
    for a, b in zip(rest, uninterrupted[3:], strict=True):
        for key in ("index", "label", "run", "features"):
            np.testing.assert_array_equal(a[key], b[key])

    # Another mix (the vox run alone, the same weight): refused naming both runs.
    alone = MixedClassBalancedSampler(
        RunMix((WeightedRun(runs["vox"], 1.0, "vox"),)),
        n_classes_per_batch=2,
        n_samples_per_class=2,
        features=None,
    )
    tf.train.Checkpoint(sampler=alone.state).read(path).assert_consumed()
    with pytest.raises(StateRunError) as refused:
        alone.dataset(initial_step=1)
    message = str(refused.value)
    assert "\n" not in message and open_run(runs["mine"]).run_id in message


def test_new_weights_at_a_resume_take_effect_at_the_next_epoch(runs, tmp_path):
    stopped = make_sampler(runs, weights=(1.0, 2.0))
    iterator = iter(stopped.dataset())
    next(iterator)
    path = tf.train.Checkpoint(sampler=stopped.state).write(str(tmp_path / "ckpt"))

    reweighted = make_sampler(runs, weights=(3.0, 1.0))
    assert reweighted.stream == stopped.stream  # the stream names the runs, not the weights
    tf.train.Checkpoint(sampler=reweighted.state).read(path).assert_consumed()
    with pytest.raises(StateRunError, match="new weights take effect at an epoch boundary"):
        reweighted.dataset(initial_step=1)
    next_epoch = batches(reweighted.dataset())
    assert '"vox": 3.0' in reweighted.state.weights.numpy().decode()
    # The next epoch (1) is the new weights' plan of epoch 1.
    fresh = make_sampler(runs, weights=(3.0, 1.0), state=MixState(1))
    expected = batches(fresh.dataset())
    assert len(next_epoch) == len(expected)
    for a, b in zip(next_epoch, expected, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
    # And the same checkpoint resumes mid-epoch with its own weights.
    same = make_sampler(runs, weights=(1.0, 2.0))
    tf.train.Checkpoint(sampler=same.state).read(path).assert_consumed()
    assert len(batches(same.dataset(initial_step=1))) == stopped.steps_per_epoch - 1


@pytest.mark.parametrize("before, after", [((1, 2), (3, 1))])
def test_an_elastic_resume_continues_the_global_stream(runs, before, after, tmp_path):
    global_classes = 6
    make = lambda c: make_sampler(runs, c, n_c=global_classes)
    probe = make(_contexts(*before)[0])
    steps_per_epoch = probe.num_batches // (before[0] * before[1])
    expected, got = _interrupted_and_resumed(
        make, before, after, steps_per_epoch - 1, tmp_path, num_steps=steps_per_epoch + 1
    )
    assert len(got) == len(expected) == steps_per_epoch + 1
    for a, b in zip(got, expected, strict=True):
        labels = a["label"].reshape(global_classes, 2)[:, 0]
        assert len(set(labels.tolist())) == global_classes
        for key in ("index", "label", "run"):
            np.testing.assert_array_equal(a[key], b[key])


def test_noise_is_mixed_into_a_mix_of_runs_and_speed_perturbation_is_refused(runs, tmp_path):
    rng = np.random.default_rng(7)
    noise_dir = str(tmp_path / "noise")
    write_clip_run(noise_dir, [(rng.standard_normal(3000) * 8000).astype(np.int16)] * 3)
    noisy = SpeakerAugmentConfig(noise=AdditiveNoise(noise_dir, snr_db=(0.0, 0.0), probability=1))

    def sampled(augment):
        sampler = MixedClassBalancedSampler(
            make_mix(runs),
            n_classes_per_batch=2,
            n_samples_per_class=2,
            seed=3,
            features=FEATURES,
            augment=augment,
        )
        return batches(sampler.dataset())

    clean, augmented, again = sampled(None), sampled(noisy), sampled(noisy)
    assert len(clean) == len(augmented) > 0
    for plain, mixed, replayed in zip(clean, augmented, again, strict=True):
        # The same plan; every sample's features changed by the noise, the same draws again.
        np.testing.assert_array_equal(plain["index"], mixed["index"])
        np.testing.assert_array_equal(plain["label"], mixed["label"])
        assert (np.abs(plain["features"] - mixed["features"]).max(axis=(1, 2)) > 0).all()
        np.testing.assert_array_equal(mixed["features"], replayed["features"])
    with pytest.raises(ValueError, match="speed perturbation does not run over a mix"):
        sampled(SpeakerAugmentConfig(speed_factors=(1.0, 0.9, 1.1)))


def test_the_datasets_plan_a_batch_at_a_time(runs, monkeypatch):
    """`dataset()` and `epochs_dataset()` never plan a whole epoch of the mix: each batch comes
    from its number, and is the whole plan's row all the same."""
    sampler = make_sampler(runs)
    expected = [sampler.epoch_plan(epoch)["index"].numpy().tolist() for epoch in range(2)]

    def whole_epoch(epoch):
        raise AssertionError("the dataset planned a whole epoch")

    monkeypatch.setattr(sampler.plan, "plan", whole_epoch)
    dataset = sampler.dataset()
    for planned in expected:
        assert [batch["index"].tolist() for batch in batches(dataset)] == planned
    ranged = sampler.epochs_dataset(start_epoch=0, num_epochs=2)
    assert [batch["index"].tolist() for batch in batches(ranged)] == [
        row for plan in expected for row in plan
    ]
