"""class_balanced end to end: real TFRecord shards, both backends, workers, resume, sources."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.audio_features import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.class_balanced import ClassBalancedSampler, class_balanced
from tfx_dynamic_inputs.inputs.epoch_plan import EpochState
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import StoreOptions

# Also run in the full install: the library on its lowest TensorFlow (2.16, the TFX stack's).
pytestmark = pytest.mark.full

SIZES = [5, 3, 1, 0, 8, 6, 4, 7, 2, 9, 3, 5]
CROP = AudioFeatureConfig(crop_seconds=0.1, num_mel_bins=20)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("audio_run"))
    return output_dir, write_audio_run(output_dir, SIZES, seed=3)


def epoch_batches(dataset) -> list[dict[str, np.ndarray]]:
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


@pytest.mark.parametrize(
    "backend, budget, expected_backend",
    [("memory", 1 << 30, "memory"), ("disk", 1 << 30, "disk"), ("auto", 1, "disk")],
)
def test_batches_from_a_materialized_run(run, backend, budget, expected_backend):
    """The last case reads records and the class index's record numbers from disk (memory
    budget of 1 byte)."""
    output_dir, info = run
    n_c, n_p = 4, 2
    sampler = ClassBalancedSampler(
        output_dir,
        n_classes_per_batch=n_c,
        n_samples_per_class=n_p,
        seed=1,
        store_options=StoreOptions(backend=backend, memory_budget_bytes=budget),
        memory_budget_bytes=budget,
        features=CROP,
    )
    assert sampler.store.backend == expected_backend
    assert sampler.classes == [f"spk{c:05d}" for c in range(len(SIZES))]
    dataset = sampler.dataset()
    batch_size, frames = n_c * n_p, CROP.crop_frames
    assert dataset.element_spec == {
        "index": tf.TensorSpec([batch_size], tf.int64),
        "label": tf.TensorSpec([batch_size], tf.int64),
        "features": tf.TensorSpec([batch_size, frames, 20], tf.float32),
        "lengths": tf.TensorSpec([batch_size], tf.int64),
        "mask": tf.TensorSpec([batch_size, frames], tf.bool),
    }
    usable = [c for c, size in enumerate(SIZES) if size > 0]
    assert int(dataset.cardinality()) == -(-len(usable) // n_c) == sampler.steps_per_epoch
    epochs = [epoch_batches(dataset) for _ in range(2)]
    for batches in epochs:
        seen = set()
        for batch in batches:
            np.testing.assert_array_equal(info["class_ids"][batch["index"]], batch["label"])
            groups = batch["label"].reshape(n_c, n_p)
            assert (groups == groups[:, :1]).all() and len(set(groups[:, 0])) == n_c
            assert np.isfinite(batch["features"]).all() and batch["mask"].all()
            assert (batch["lengths"] == frames).all()
            seen.update(batch["label"].tolist())
        assert sorted(seen) == usable
    assert not all(np.array_equal(a["index"], b["index"]) for a, b in zip(*epochs, strict=True)), (
        "the second epoch repeated the first"
    )
    assert int(sampler.state.epoch) == 2


def test_features_are_the_records_features(run):
    """A batch's features are those of the records it names (pad mode: no randomness)."""
    output_dir, info = run
    config = AudioFeatureConfig(mode="pad", num_mel_bins=20)
    dataset = class_balanced(
        output_dir, n_classes_per_batch=3, n_samples_per_class=2, features=config
    )
    assert dataset.element_spec["features"].shape.as_list() == [6, None, 20]
    from tfx_dynamic_inputs.inputs.audio_features import audio_features

    batch = next(iter(dataset))
    waveforms = [info["waveforms"][i] for i in batch["index"].numpy()]
    expected = audio_features(tf.constant([w.astype("<i2").tobytes() for w in waveforms]), config)
    np.testing.assert_allclose(batch["features"], expected["features"], atol=1e-5)
    np.testing.assert_array_equal(batch["lengths"], expected["lengths"])
    np.testing.assert_array_equal(batch["mask"], expected["mask"])


def test_samples_mode_covers_every_record(run):
    output_dir, info = run
    dataset = class_balanced(
        output_dir,
        n_classes_per_batch=3,
        n_samples_per_class=2,
        epoch_mode="samples",
        small_classes="skip",
        features=None,
    )
    seen = np.concatenate([b["index"] for b in epoch_batches(dataset)])
    expected = np.flatnonzero(np.asarray(SIZES)[info["class_ids"]] >= 2)
    np.testing.assert_array_equal(np.unique(seen), expected)
    batch = next(iter(dataset))
    assert batch["record"].dtype == tf.string
    assert set(batch) == {"index", "label", "record"}


def test_workers_get_disjoint_whole_batches_whose_union_is_the_plan(run):
    output_dir, _ = run
    num_workers = 3
    per_worker = []
    for worker in range(num_workers):
        sampler = ClassBalancedSampler(
            output_dir,
            n_classes_per_batch=2,
            n_samples_per_class=3,
            seed=9,
            features=None,
            worker_index=worker,
            num_workers=num_workers,
        )
        per_worker.append([tuple(b["index"]) for b in epoch_batches(sampler.dataset())])
    plan = sampler.epoch_plan(0)["index"].numpy()
    assert len(plan) % num_workers == 0
    assert all(len(batches) == len(plan) // num_workers for batches in per_worker)
    flat = [batch for batches in per_worker for batch in batches]
    assert sorted(flat) == sorted(map(tuple, plan))
    for a in range(num_workers):
        for b in range(a + 1, num_workers):
            assert not set(per_worker[a]) & set(per_worker[b])


def test_input_context_slices_like_worker_index(run):
    output_dir, _ = run
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    by_context = class_balanced(
        output_dir,
        n_classes_per_batch=2,
        n_samples_per_class=1,
        features=None,
        input_context=context,
    )
    by_index = class_balanced(
        output_dir,
        n_classes_per_batch=2,
        n_samples_per_class=1,
        features=None,
        worker_index=1,
        num_workers=2,
    )
    a, b = epoch_batches(by_context), epoch_batches(by_index)
    assert [x["index"].tolist() for x in a] == [x["index"].tolist() for x in b]


def test_resume_from_a_checkpoint_yields_the_rest_of_the_epoch(run, tmp_path):
    output_dir, _ = run
    kwargs = dict(n_classes_per_batch=3, n_samples_per_class=2, seed=4, features=CROP)
    full = class_balanced(output_dir, state=EpochState(), **kwargs)
    expected = epoch_batches(full) + epoch_batches(full)

    state = EpochState()
    interrupted = iter(class_balanced(output_dir, state=state, **kwargs))
    done = [next(interrupted) for _ in range(2)]
    path = tf.train.Checkpoint(sampler=state).write(str(tmp_path / "ckpt"))

    restored = EpochState()
    tf.train.Checkpoint(sampler=restored).read(path).assert_consumed()
    resumed = class_balanced(output_dir, state=restored, initial_step=2, **kwargs)
    got = [{k: v.numpy() for k, v in b.items()} for b in done]
    got += epoch_batches(resumed) + epoch_batches(resumed)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        np.testing.assert_array_equal(a["features"], b["features"])


def test_keras_fit_replans_every_epoch(run):
    output_dir, _ = run
    import keras

    sampler = ClassBalancedSampler(
        output_dir, n_classes_per_batch=3, n_samples_per_class=2, features=CROP
    )
    dataset = sampler.dataset().map(lambda b: (b["features"], b["label"]))
    model = keras.Sequential(
        [keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(len(SIZES))]
    )
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit(dataset, epochs=3, verbose=0)
    assert len(history.history["loss"]) == 3
    assert int(sampler.state.epoch) == 3


def test_ids_labels_and_load_fn_like_a_keras_sequence(tmp_path):
    rng = np.random.default_rng(5)
    waveforms = {f"clip-{i}": rng.uniform(-0.5, 0.5, 2000 + 37 * i) for i in range(30)}
    ids = sorted(waveforms)
    labels = [f"speaker-{i % 7}" for i in range(30)]
    sampler = ClassBalancedSampler(
        ids,
        labels,
        load_fn=waveforms.__getitem__,
        n_classes_per_batch=4,
        n_samples_per_class=3,
        features=CROP,
    )
    assert sampler.classes == [f"speaker-{i}" for i in range(7)]
    for batch in epoch_batches(sampler.dataset()):
        names = [sampler.classes[c] for c in batch["label"]]
        assert names == [labels[i] for i in batch["index"]]

    def broken(item):
        if item == "clip-13":
            raise OSError("cannot read")
        return waveforms[item]

    with pytest.raises(ValueError, match="load_fn failed for id 'clip-13'"):
        ClassBalancedSampler(
            ids, labels, load_fn=broken, n_classes_per_batch=2, n_samples_per_class=2
        )
    with pytest.raises(ValueError, match="id 'clip-3': expected a mono waveform"):
        ClassBalancedSampler(
            ids,
            labels,
            load_fn=lambda item: np.zeros([100, 2] if item == "clip-3" else [100]),
            n_classes_per_batch=2,
            n_samples_per_class=2,
        )


def test_dataset_of_waveforms_and_labels_written_to_shards_and_reused(tmp_path):
    rng = np.random.default_rng(6)
    waveforms = [rng.uniform(-0.5, 0.5, [1600 + 10 * i, 1]).astype(np.float32) for i in range(40)]
    labels = np.array([i % 9 for i in range(40)], np.int64)
    dataset = tf.data.Dataset.from_generator(
        lambda: zip(waveforms, labels, strict=True),
        output_signature=(tf.TensorSpec([None, 1], tf.float32), tf.TensorSpec([], tf.int64)),
    )
    cache = str(tmp_path / "cache")
    kwargs = dict(n_classes_per_batch=3, n_samples_per_class=2, features=CROP, cache_dir=cache)
    sampler = ClassBalancedSampler(dataset, memory_budget_bytes=10_000, **kwargs)
    assert sampler.store.backend == "disk"
    first = epoch_batches(sampler.dataset())
    for batch in first:
        np.testing.assert_array_equal(labels[batch["index"]], batch["label"])

    def must_not_be_read(waveform, label):
        tf.debugging.Assert(False, ["the cached dataset was read again"])
        return waveform, label

    reused = ClassBalancedSampler(dataset.map(must_not_be_read), **kwargs)
    again = epoch_batches(reused.dataset())
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a["index"], b["index"])
        np.testing.assert_array_equal(a["features"], b["features"])


def test_record_store_with_labels(run):
    output_dir, info = run
    store = RecordStore.open(output_dir, "train", backend="memory")
    dataset = class_balanced(
        store, info["class_ids"], n_classes_per_batch=5, n_samples_per_class=1, features=CROP
    )
    for batch in epoch_batches(dataset):
        np.testing.assert_array_equal(info["class_ids"][batch["index"]], batch["label"])


def test_bad_inputs_are_clear_errors(run, tmp_path):
    output_dir, info = run
    with pytest.raises(ValueError, match=r"n_classes_per_batch=10 .* usable classes, 9"):
        class_balanced(
            output_dir, n_classes_per_batch=10, n_samples_per_class=3, small_classes="skip"
        )
    store = RecordStore.open(output_dir, "train", backend="memory")
    with pytest.raises(ValueError, match="needs labels"):
        class_balanced(store, n_classes_per_batch=2, n_samples_per_class=2)
    with pytest.raises(ValueError, match="one class per record"):
        class_balanced(store, info["class_ids"][:-1], n_classes_per_batch=2, n_samples_per_class=2)
    with pytest.raises(ValueError, match="record 0 has label -1"):
        class_balanced(
            store, np.full(store.num_records, -1), n_classes_per_batch=2, n_samples_per_class=2
        )
    with pytest.raises(TypeError, match="without load_fn"):
        class_balanced(["a", "b"], [0, 1], n_classes_per_batch=1, n_samples_per_class=1)
    with pytest.raises(FileNotFoundError, match="no class index"):
        class_balanced(
            output_dir, record_set="missing", n_classes_per_batch=1, n_samples_per_class=1
        )
    with pytest.raises(ValueError, match="no labelled record set"):
        class_balanced(str(tmp_path), n_classes_per_batch=1, n_samples_per_class=1)


def test_small_classes_are_reported_and_logged(run, caplog):
    output_dir, _ = run
    sampler = ClassBalancedSampler(
        output_dir,
        n_classes_per_batch=2,
        n_samples_per_class=3,
        small_classes="skip",
        features=None,
    )
    np.testing.assert_array_equal(sampler.report.small_classes, [2, 8])
    np.testing.assert_array_equal(sampler.report.skipped_classes, [2, 3, 8])
    assert "2 classes with fewer than 3 records skipped: [2, 8]" in sampler.report.summary()
    labels = np.concatenate([b["label"] for b in epoch_batches(sampler.dataset())])
    assert not np.isin([2, 3, 8], labels).any()


def test_damaged_index_and_shards_fail_with_the_place(tmp_path):
    output_dir = str(tmp_path)
    info = write_audio_run(output_dir, [3, 4, 5], seed=8)
    # A class index that disagrees with the records' labels.
    class_dir = layout.class_records_dir(output_dir, "train")
    values = np.load(os.path.join(class_dir, layout.VALUES_FILE))
    layout.save_csr(class_dir, info["row_splits"], values[::-1].copy())
    dataset = class_balanced(
        output_dir, n_classes_per_batch=3, n_samples_per_class=3, features=CROP
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="label differs from the class index"):
        epoch_batches(dataset)
    layout.save_csr(class_dir, info["row_splits"], values)
    # A flipped byte inside a shard.
    shard = os.path.join(layout.examples_dir(output_dir, "train"), layout.shard_name(1, 3))
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))
    dataset = class_balanced(
        output_dir,
        n_classes_per_batch=3,
        n_samples_per_class=3,
        features=CROP,
        store_options=StoreOptions(backend="disk"),
        epoch_mode="samples",
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="CRC mismatch") as error:
        epoch_batches(dataset)
    assert shard in str(error.value)


@pytest.mark.parametrize("max_draws_per_record", [None, 3])
def test_the_datasets_plan_a_batch_at_a_time(monkeypatch, max_draws_per_record):
    """Without a draw cap, `dataset()` and `epochs_dataset()` never plan a whole epoch: each
    batch comes from its number, and is the whole plan's row all the same. With the cap they
    plan whole epochs (its fillers rank every class once an epoch)."""
    labels = np.repeat(np.arange(9), [5, 3, 1, 8, 6, 4, 7, 2, 9])
    sampler = ClassBalancedSampler(
        [f"clip-{i}" for i in range(len(labels))],
        labels,
        load_fn=lambda item: np.zeros(8, np.float32),
        n_classes_per_batch=2,
        n_samples_per_class=2,
        seed=5,
        epoch_mode="samples",
        max_draws_per_record=max_draws_per_record,
        features=None,
    )
    assert sampler.plans_batches_alone == (max_draws_per_record is None)
    expected = [sampler.epoch_plan(epoch)["index"].numpy().tolist() for epoch in range(2)]
    if max_draws_per_record is None:

        def whole_epoch(epoch):
            raise AssertionError("the dataset planned a whole epoch")

        monkeypatch.setattr(sampler.plan, "plan", whole_epoch)
    dataset = sampler.dataset()
    for planned in expected:
        assert [batch["index"].tolist() for batch in dataset.as_numpy_iterator()] == planned
    ranged = sampler.epochs_dataset(start_epoch=0, num_epochs=2)
    got = [batch["index"].tolist() for batch in ranged.as_numpy_iterator()]
    assert got == [row for plan in expected for row in plan]
