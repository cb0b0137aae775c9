"""Draw counts per record: equal to the plans' own counts, this epoch and so far, through Keras
epochs, a checkpoint and TensorBoard; and what they show of `epoch_mode="samples"` over classes
of very different sizes."""

from __future__ import annotations

import glob
import importlib.util
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tfx_dynamic_inputs.inputs import ClassBalancedPlan, ClassBalancedSampler
from tfx_dynamic_inputs.inputs.draw_counts import SUMMARY_KEYS, DrawCounts, DrawCountsCallback

SIZES = [5, 3, 1, 8, 6, 4, 7, 2, 9, 3]
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    output_dir = str(tmp_path_factory.mktemp("draws"))
    write_audio_run(output_dir, SIZES, seed=2, min_samples=400, max_samples=900)
    return output_dir


def _sampler(run_dir: str) -> ClassBalancedSampler:
    return ClassBalancedSampler(
        run_dir, n_classes_per_batch=3, n_samples_per_class=2, epoch_mode="samples", features=None
    )


@pytest.mark.parametrize(
    "tensorboard",
    [
        pytest.param(False, id="logs"),
        pytest.param(
            True,
            id="tensorboard",
            marks=[
                pytest.mark.full,
                pytest.mark.skipif(not HAS_TENSORBOARD, reason="TensorBoard is not installed"),
            ],
        ),
    ],
)
def test_counts_are_the_plans_own_through_keras_epochs(run_dir, tmp_path, tensorboard):
    sampler = _sampler(run_dir)
    counts = DrawCounts(sampler.store.num_records)
    epochs = 3
    seen = [np.zeros(sampler.store.num_records, np.int64) for _ in range(epochs)]

    class Snapshot(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen[epoch] = counts.this_epoch.numpy().astype(np.int64)

    dataset = counts.observe(sampler.dataset(), key="index").map(
        lambda b: (tf.cast(b["index"][:, None], tf.float32), tf.cast(b["label"], tf.float32))
    )
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    log_dir = str(tmp_path / "logs") if tensorboard else None
    history = model.fit(
        dataset,
        epochs=epochs,
        verbose=0,
        callbacks=[DrawCountsCallback(counts, log_dir=log_dir), Snapshot()],
    )
    expected = [
        np.bincount(sampler.epoch_plan(e)["index"].numpy().ravel(), minlength=len(seen[0]))
        for e in range(epochs)
    ]
    for epoch in range(epochs):
        np.testing.assert_array_equal(seen[epoch], expected[epoch])
    total = np.sum(expected, axis=0)
    np.testing.assert_array_equal(counts.so_far.numpy(), total)
    # Samples mode draws every record every epoch.
    assert history.history["draws_epoch_min"] == [1.0] * epochs
    assert history.history["draws_epoch_max"][-1] == expected[-1].max()
    assert history.history["draws_total_median"][-1] == np.median(total)
    assert history.history["records_never_drawn"] == [0.0] * epochs
    if not tensorboard:
        return
    events = glob.glob(f"{log_dir}/draw_counts/events.out.tfevents.*")
    assert len(events) == 1
    tags = {
        value.tag
        for event in tf.compat.v1.train.summary_iterator(events[0])
        for value in event.summary.value
    }
    assert {"draws_per_record/this_epoch", "draws_per_record/so_far", *SUMMARY_KEYS} <= tags


@pytest.mark.skipif(HAS_TENSORBOARD, reason="TensorBoard is installed")
def test_the_callback_without_tensorboard_fails_when_built(tmp_path):
    with pytest.raises(ImportError, match="pip install tensorboard"):
        DrawCountsCallback(DrawCounts(3), log_dir=str(tmp_path))
    assert DrawCountsCallback(DrawCounts(3)).counts.num_records == 3


def test_a_restored_checkpoint_keeps_counting(run_dir, tmp_path):
    sampler = _sampler(run_dir)
    counts = DrawCounts(sampler.store.num_records)
    list(counts.observe(sampler.dataset(), "index"))  # one epoch, counted
    path = tf.train.Checkpoint(draws=counts).write(str(tmp_path / "ckpt"))
    restored = DrawCounts(sampler.store.num_records)
    tf.train.Checkpoint(draws=restored).read(path).assert_consumed()
    restored.start_epoch()
    list(restored.observe(sampler.dataset(), "index"))  # the next epoch
    first = np.bincount(
        sampler.epoch_plan(0)["index"].numpy().ravel(), minlength=counts.num_records
    )
    second = np.bincount(
        sampler.epoch_plan(1)["index"].numpy().ravel(), minlength=counts.num_records
    )
    np.testing.assert_array_equal(restored.this_epoch.numpy(), second)
    np.testing.assert_array_equal(restored.so_far.numpy(), first + second)


def test_samples_mode_oversamples_small_classes_and_the_counts_show_it():
    """A user's corpus: a few big classes and many small ones. In samples mode the late rounds
    hold only the big classes, and the rest of their batches are other classes again."""
    sizes = np.array([400, 300, 250] + [3] * 60)
    plan = ClassBalancedPlan(
        np.concatenate([[0], np.cumsum(sizes)]),
        n_classes_per_batch=16,
        n_samples_per_class=2,
        epoch_mode="samples",
    )
    counts = DrawCounts(int(sizes.sum()))
    counts.update(plan.plan(0)["position"])
    summary = counts.result()
    draws = counts.this_epoch.numpy()
    big, small = draws[: sizes[:3].sum()], draws[sizes[:3].sum() :]
    assert summary["draws_epoch_min"] == 1.0  # every record of every class
    assert big.max() <= 2 and small.mean() > 20 * big.mean()
    assert summary["draws_epoch_max"] == small.max()


def test_a_record_number_out_of_range_is_an_error():
    counts = DrawCounts(4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside"):
        counts.update(tf.constant([0, 4], tf.int64))
    with pytest.raises(ValueError, match="num_records"):
        DrawCounts(0)


def test_tracked_plans_are_counted_at_each_epoch_end(run_dir):
    sampler = _sampler(run_dir)
    counts = DrawCounts(sampler.store.num_records)
    counts.track_plan(lambda epoch: sampler.epoch_plan(epoch)["index"])
    callback = DrawCountsCallback(counts)
    expected = [
        np.bincount(sampler.epoch_plan(e)["index"].numpy().ravel(), minlength=counts.num_records)
        for e in (0, 1)
    ]
    for epoch in (0, 1):
        callback.on_epoch_begin(epoch)
        logs = {}
        callback.on_epoch_end(epoch, logs)
        np.testing.assert_array_equal(counts.this_epoch.numpy(), expected[epoch])
        assert logs["draws_epoch_max"] == expected[epoch].max()
    np.testing.assert_array_equal(counts.so_far.numpy(), expected[0] + expected[1])
    with pytest.raises(ValueError, match="track_plan"):
        DrawCounts(3).count_epoch(0)


def test_a_capped_sampler_draws_no_record_more_often_than_the_cap(run_dir):
    def sampler(cap):
        return ClassBalancedSampler(
            run_dir,
            n_classes_per_batch=3,
            n_samples_per_class=2,
            epoch_mode="samples",
            max_draws_per_record=cap,
            features=None,
        )

    with pytest.raises(ValueError, match=r"max_draws_per_record=1 .* pass at least (\d+)") as low:
        sampler(1)
    cap = int(re.search(r"pass at least (\d+)", str(low.value)).group(1))
    capped = sampler(cap)
    assert f"max_draws_per_record {cap}" in capped.stream
    counts = DrawCounts(capped.store.num_records)
    dataset = counts.observe(capped.dataset(), key="index")  # each iteration the next epoch
    for _ in range(3):
        counts.start_epoch()
        for batch in dataset:
            assert len(set(batch["label"].numpy().tolist())) == 3
        assert 1 <= counts.result()["draws_epoch_min"] <= counts.result()["draws_epoch_max"] <= cap
