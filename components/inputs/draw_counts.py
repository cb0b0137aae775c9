"""How often each record was drawn: this epoch and so far, as counts, a summary and a histogram.

`DrawCounts` keeps one count per record for the current epoch and one for all epochs (int32,
8 bytes a record: 80 MB at 10M records). Feed it in the input pipeline (`counts.observe(dataset,
key)`) or in a training step (`counts.update(index)`); `DrawCountsCallback` adds the summary to
every Keras epoch's logs and writes both histograms to TensorBoard. It is a `tf.Module`: put it
in the checkpoint with the sampler state and a resumed run keeps counting where it stopped.
Observed in the input pipeline, it counts the batches the pipeline produced, prefetched ones
included, so a run resumed from a mid-epoch checkpoint counts again the few batches it reads
again. Tracking a plan instead (`track_plan`, as the trainer component does), it counts each
epoch's plan when the epoch ends: exact after any resume, since a plan is a pure function of its
epoch (samples left out as damaged, `skipped_samples`, count as drawn).

What it shows: with ``epoch_mode="samples"`` over classes of very different sizes, the short
batches of the late rounds (where only the big classes still have records) are completed with
other classes, so small classes are drawn many times per record while the big ones are drawn
about once (`draws_epoch_max` against `draws_epoch_median`); with ``"classes"`` every class is
drawn about equally often, so records of big classes are drawn rarely.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.graph_functions import as_written
from tfx_dynamic_inputs.inputs.summaries import summary_writer

SUMMARY_KEYS = (
    "draws_epoch_min",
    "draws_epoch_median",
    "draws_epoch_max",
    "draws_total_min",
    "draws_total_median",
    "draws_total_max",
    "records_never_drawn",
)


class DrawCounts(tf.Module):
    """Per-record draw counts, this epoch and over all epochs.

    Args:
      num_records: the records that can be drawn (record numbers `0..num_records-1`).
      name: the `tf.Module` name.

    Raises:
      ValueError: `num_records` below 1.

    Attributes:
      this_epoch, so_far: int32 [num_records] variables, the draws of each record.

    Example:

        counts = DrawCounts(sampler.store.num_records)
        dataset = counts.observe(sampler.dataset(), key="index")
        model.fit(dataset, epochs=3, callbacks=[DrawCountsCallback(counts)])
    """

    def __init__(self, num_records: int, *, name: str | None = None):
        super().__init__(name=name)
        if num_records < 1:
            raise ValueError(f"num_records must be >= 1, got {num_records}")
        self.num_records = int(num_records)
        self.this_epoch = tf.Variable(
            tf.zeros([self.num_records], tf.int32), trainable=False, name="this_epoch"
        )
        self.so_far = tf.Variable(
            tf.zeros([self.num_records], tf.int32), trainable=False, name="so_far"
        )
        self._epoch_index: Callable[[int], tf.Tensor] | None = None

    @property
    def tracks_plan(self) -> bool:
        """Whether epochs are counted from a plan (`track_plan`) rather than observed."""
        return self._epoch_index is not None

    def track_plan(self, epoch_index: Callable[[int], tf.Tensor]) -> None:
        """Counts each epoch from its plan when it ends (`count_epoch`, which
        `DrawCountsCallback` calls) instead of observing batches.

        Args:
          epoch_index: the record numbers an epoch's plan draws, e.g.
            ``lambda epoch: sampler.epoch_plan(epoch)["index"]``.
        """
        self._epoch_index = epoch_index

    def count_epoch(self, epoch: int) -> None:
        """Sets this epoch's counts to the plan's of `epoch` and adds them to `so_far`.

        Args:
          epoch: the epoch that ended.

        Raises:
          ValueError: no plan is tracked (`track_plan`).
        """
        if self._epoch_index is None:
            raise ValueError("count_epoch needs a plan: call track_plan first")
        self.start_epoch()
        self.update(self._epoch_index(epoch))

    def update(self, index) -> tf.Operation:
        """Counts one draw of each record number in `index` (repeats count again).

        Args:
          index: int [B] (any shape, flattened) record numbers in `[0, num_records)`.

        Returns:
          The update op (in eager mode, already run).

        Raises:
          tf.errors.InvalidArgumentError: a record number outside `[0, num_records)`.
        """
        index = tf.cast(tf.reshape(index, [-1]), tf.int64)
        in_range = tf.debugging.Assert(
            tf.reduce_all((index >= 0) & (index < self.num_records)),
            ["DrawCounts: a record number outside [0, num_records):", index],
            summarize=8,
        )
        with tf.control_dependencies([in_range]):
            ones = tf.ones_like(index, tf.int32)
            # The raw op: a variable's own scatter_nd_add reads the whole variable back.
            return tf.group(
                *(
                    tf.raw_ops.ResourceScatterNdAdd(
                        ref=counts.handle, indices=index[:, None], updates=ones
                    )
                    for counts in (self.this_epoch, self.so_far)
                )
            )

    def observe(self, dataset: tf.data.Dataset, key: str) -> tf.data.Dataset:
        """Wraps a dataset of batches so that each batch's `key` records are counted.

        Args:
          dataset: elements are dicts with `key` (int [B] record numbers).
          key: ``"index"`` (class-balanced batches), ``"x_index"`` or ``"y_index"`` (pairs).

        Returns:
          The same elements, each yielded once counted.
        """

        def count(batch):
            with tf.control_dependencies([self.update(batch[key])]):
                return tf.nest.map_structure(tf.identity, batch)

        return dataset.map(as_written(count))

    def start_epoch(self) -> None:
        """Clears this epoch's counts (`so_far` keeps counting)."""
        self.this_epoch.assign(tf.zeros([self.num_records], tf.int32))

    def result(self) -> dict[str, float]:
        """Minimum, median and maximum draws per record, this epoch and so far.

        Returns:
          `SUMMARY_KEYS`: ``draws_epoch_*`` and ``draws_total_*`` (min, median, max over the
          records) and ``records_never_drawn`` (records not drawn so far).
        """
        epoch, total = self.this_epoch.numpy(), self.so_far.numpy()
        return {
            "draws_epoch_min": float(epoch.min()),
            "draws_epoch_median": float(np.median(epoch)),
            "draws_epoch_max": float(epoch.max()),
            "draws_total_min": float(total.min()),
            "draws_total_median": float(np.median(total)),
            "draws_total_max": float(total.max()),
            "records_never_drawn": float(np.count_nonzero(total == 0)),
        }


class DrawCountsCallback(keras.callbacks.Callback):
    """Clears `counts`' epoch at each epoch's start; at its end adds `counts.result()` to the
    epoch logs and, with `log_dir`, writes the histograms of draws per record (this epoch and
    so far) and the summary scalars (step = epoch) to `<log_dir>/draw_counts`.

    Args:
      counts: the `DrawCounts` the training dataset feeds.
      log_dir: a TensorBoard folder, or None for the logs only.

    Raises:
      ImportError: `log_dir` without TensorBoard installed.

    Example:

        model.fit(counts.observe(dataset, "index"), callbacks=[DrawCountsCallback(counts, "logs")])
    """

    def __init__(self, counts: DrawCounts, log_dir: str | None = None):
        super().__init__()
        self.counts = counts
        self._writer = summary_writer(log_dir, "draw_counts", "DrawCountsCallback")

    def on_epoch_begin(self, epoch, logs=None):
        """Starts the counts' epoch (`DrawCounts.start_epoch`) when they observe batches.

        Args:
          epoch: the epoch Keras begins (0-based); unused.
          logs: Keras' epoch logs; unused.
        """
        if not self.counts.tracks_plan:
            self.counts.start_epoch()

    def on_epoch_end(self, epoch, logs=None):
        """Counts the epoch's plan (when tracked), adds the summary to `logs` and, with a
        `log_dir`, writes it and the histograms.

        Args:
          epoch: the epoch Keras ends (0-based; the plan's epoch): the step of the summaries.
          logs: Keras' epoch logs (updated in place), or None.
        """
        if self.counts.tracks_plan:
            self.counts.count_epoch(epoch)
        values = self.counts.result()
        if logs is not None:
            logs.update(values)
        if self._writer is not None:
            with self._writer.as_default(step=epoch):
                tf.summary.histogram("draws_per_record/this_epoch", self.counts.this_epoch)
                tf.summary.histogram("draws_per_record/so_far", self.counts.so_far)
                for name, value in values.items():
                    tf.summary.scalar(name, value)
            self._writer.flush()
