"""Keras callbacks that record what `Model.fit` did, for the tests to check."""

from __future__ import annotations

import keras


class BatchesPerEpoch(keras.callbacks.Callback):
    """Counts the batches `fit` trains on in each epoch: `counts[e]` for the e-th epoch it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: list[int] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.counts.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.counts[-1] += 1
