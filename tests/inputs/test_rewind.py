"""`EpochSampler.rewind`: an iteration started and dropped (Keras' `fit` under a `tf.distribute`
strategy reads one batch before training) is undone, so training starts where the dataset was
built: the epoch and the resume step."""

from __future__ import annotations

import functools

import keras
import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.inputs import DynamicPairsSampler

NUM_X, NUM_Y, BATCH = 23, 7, 4


def _sampler() -> DynamicPairsSampler:
    rng = np.random.default_rng(3)
    x = rng.random([NUM_X, 2]).astype(np.float32)
    y = rng.random([NUM_Y, 2]).astype(np.float32)
    rows = [rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist() for _ in x]
    return DynamicPairsSampler(x, y, rows, batch_size=BATCH, seed=11)


def _epoch(dataset: tf.data.Dataset) -> list[list[int]]:
    return [batch["x_index"].numpy().tolist() for batch in dataset]


@settings(max_examples=6, deadline=None)
# An epoch is 6 batches: a resume at step 3 leaves 3 to read from.
@given(epoch=st.integers(0, 2), step=st.integers(0, 3), peeked=st.integers(1, 3))
def test_a_dropped_iteration_is_undone(epoch, step, peeked):
    reference = _reference_epochs(5)

    sampler = _sampler()
    # As restored from a checkpoint written at batch `step` of `epoch` (the next epoch to plan
    # is the one after the epoch in progress; at a boundary, `epoch` itself).
    sampler.state.epoch.assign(epoch + 1 if step else epoch)
    dataset = sampler.dataset(initial_step=step)
    iterator = iter(dataset)
    for _ in range(peeked):
        next(iterator)
    del iterator
    sampler.rewind()
    assert _epoch(dataset) == reference[epoch][step:]
    assert _epoch(dataset) == reference[epoch + 1]


def test_fit_under_a_strategy_trains_the_epochs_the_dataset_was_built_for():
    class Rewind(keras.callbacks.Callback):
        def __init__(self, sampler):
            super().__init__()
            self.sampler = sampler

        def on_train_begin(self, logs=None):
            self.sampler.rewind()

    def fit(rewind: bool) -> int:
        sampler = _sampler()
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
        batches = sampler.dataset().map(lambda b: (b["x"], tf.reduce_sum(b["y"], axis=1)))
        with strategy.scope():
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse", jit_compile=False)
        model.fit(batches, epochs=2, verbose=0, callbacks=[Rewind(sampler)] if rewind else [])
        return int(sampler.state.epoch.numpy())

    # Keras' read of one batch before training planned an epoch that was never trained.
    assert fit(rewind=False) == 3
    assert fit(rewind=True) == 2


def test_rewind_before_any_dataset_changes_nothing():
    sampler = _sampler()
    sampler.state.epoch.assign(4)
    sampler.rewind()
    assert int(sampler.state.epoch.numpy()) == 4
    assert _epoch(sampler.dataset(initial_step=1)) == _reference_epochs(5)[3][1:]


@functools.cache
def _reference_epochs(count: int) -> list[list[list[int]]]:
    sampler = _sampler()
    return [_epoch(sampler.dataset()) for _ in range(count)]
