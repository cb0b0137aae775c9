"""Coverage of valid pairs: which distinct valid (x, y) pairs training has seen, per epoch.

`PairCoverage` keeps one flag per valid pair for the current epoch and one for all epochs, and
counts pairs that are not valid at all. Feed it either in the input pipeline
(`coverage.observe(dataset)`) or in a training step (`coverage.update(x_index, y_index)`);
`PairCoverageCallback` logs it at the end of every Keras epoch.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs.inputs.graph_functions import as_written
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs
from tfx_dynamic_inputs.inputs.summaries import summary_writer
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs
from tfx_dynamic_inputs.inputs.variables import index_variable


class PairCoverage(tf.Module):
    """Distinct valid pairs seen, this epoch and overall.

    Pairs are identified by the key `x * num_y + y`; the sorted keys of all valid pairs are held
    once (int64 [num_pairs], a `variables.index_variable`, so `observe` does not copy them into
    the dataset graph every epoch, nor do checkpoints of this module hold them) and batches are
    matched by binary search.

    Args:
      valid_pairs: what `ValidPairs.build` takes (a `tf.RaggedTensor` [num_x, None], CSR
        arrays `(row_splits, values)`, a list of y lists, a `ValidPairs`), or a `GroupPairs`
        (listed pair by pair, x left out of its plan skipped).
      num_y: the number of y records (default: max y + 1); ignored for `GroupPairs`.
      name: the `tf.Module` name.

    Raises:
      ValueError: `valid_pairs` with an invalid x (see `ValidPairs.build`), group pairs too
        many to list (`GroupPairs.edges`), or built inside a `tf.distribute` strategy scope.

    Attributes:
      num_pairs: distinct valid pairs.
      seen_this_epoch, seen_ever: bool [num_pairs] variables, one flag per pair.
      invalid_seen: int64 scalar variable, the invalid pairs recorded (all epochs).

    Example:

        coverage = PairCoverage([[0, 2], [1]])  # x 0 pairs with y 0 or 2, x 1 with y 1
        dataset = coverage.observe(dataset)  # then coverage.result() after each epoch
    """

    def __init__(self, valid_pairs, *, num_y: int | None = None, name: str | None = None):
        super().__init__(name=name)
        if isinstance(valid_pairs, GroupPairs):
            # x left out of the plan have no pairs to cover.
            pairs = ValidPairs.build(
                valid_pairs.edges(),
                num_x=valid_pairs.num_x,
                num_y=valid_pairs.num_y,
                on_invalid="skip",
            )
        else:
            pairs = ValidPairs.build(valid_pairs, num_y=num_y)
        x_of_pair = np.repeat(np.arange(pairs.num_x, dtype=np.int64), np.diff(pairs.row_splits))
        keys = np.unique(x_of_pair * pairs.num_y + pairs.values)
        self.num_y = pairs.num_y
        self.num_pairs = len(keys)
        self._find_pairs = _pair_finder(keys)
        self.seen_this_epoch = tf.Variable(
            tf.zeros([self.num_pairs], tf.bool), trainable=False, name="seen_this_epoch"
        )
        self.seen_ever = tf.Variable(
            tf.zeros([self.num_pairs], tf.bool), trainable=False, name="seen_ever"
        )
        self.invalid_seen = tf.Variable(0, dtype=tf.int64, trainable=False, name="invalid_seen")

    def update(self, x_index, y_index) -> tf.Tensor:
        """Records a batch of pairs as seen.

        Args:
          x_index: int [B] (any shape, flattened) x record numbers.
          y_index: int [B] y record numbers, one per x.

        Returns:
          bool [B]: which pairs are valid; the invalid ones are counted in `invalid_seen`.
        """
        x_index = tf.cast(tf.reshape(x_index, [-1]), tf.int64)
        y_index = tf.cast(tf.reshape(y_index, [-1]), tf.int64)
        clipped, found = self._find_pairs(x_index * self.num_y + y_index)
        valid = tf.logical_and(tf.logical_and(y_index >= 0, y_index < self.num_y), found)
        seen_positions = tf.boolean_mask(clipped, valid)[:, None]
        flags = tf.ones_like(seen_positions[:, 0], dtype=tf.bool)
        updates = [
            tf.raw_ops.ResourceScatterNdUpdate(
                ref=flags_variable.handle, indices=seen_positions, updates=flags
            )
            for flags_variable in (self.seen_this_epoch, self.seen_ever)
        ]
        updates.append(
            tf.raw_ops.AssignAddVariableOp(
                resource=self.invalid_seen.handle,
                value=tf.reduce_sum(tf.cast(tf.logical_not(valid), tf.int64)),
            )
        )
        with tf.control_dependencies(updates):
            return tf.identity(valid)

    def observe(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Wraps a dataset so that every batch it yields is recorded (`update`).

        Args:
          dataset: elements are dicts with ``x_index`` and ``y_index`` (int [B] each).

        Returns:
          The same elements, each available once recorded.
        """

        def record(batch):
            valid = self.update(batch["x_index"], batch["y_index"])
            with tf.control_dependencies([valid]):
                return tf.nest.map_structure(tf.identity, batch)

        return dataset.map(as_written(record))

    def result(self) -> dict[str, float]:
        """The coverage so far.

        Returns:
          ``pair_coverage_epoch`` and ``pair_coverage_total``: fractions of the valid pairs
          seen this epoch and ever; ``invalid_pairs``: the invalid pairs recorded (an int).
        """
        return {
            "pair_coverage_epoch": _fraction(self.seen_this_epoch, self.num_pairs),
            "pair_coverage_total": _fraction(self.seen_ever, self.num_pairs),
            "invalid_pairs": int(self.invalid_seen.numpy()),
        }

    def start_epoch(self) -> None:
        """Clears the flags of this epoch (`seen_ever` and `invalid_seen` keep counting)."""
        self.seen_this_epoch.assign(tf.zeros([self.num_pairs], tf.bool))


def _pair_finder(sorted_keys: np.ndarray):
    """keys (int64 [B]) -> (position of each key in `sorted_keys`, clipped to a valid index;
    bool [B]: the key is there). A closure, not a module attribute: a `tf.Module` would track
    the variable and write every key into each checkpoint."""
    table = index_variable(sorted_keys, tf.int64, name="pair_keys")
    last = len(sorted_keys) - 1

    def find(keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        position = tf.searchsorted(table, keys, side="left", out_type=tf.int64)
        clipped = tf.minimum(position, last)
        return clipped, tf.equal(tf.gather(table, clipped), keys)

    return find


def _fraction(flags: tf.Variable, total: int) -> float:
    return float(tf.math.count_nonzero(flags).numpy()) / max(total, 1)


class PairCoverageCallback(keras.callbacks.Callback):
    """Logs pair coverage at the end of every epoch (into `logs`, and TensorBoard if asked).

    Adds `pair_coverage_epoch`, `pair_coverage_total` and `invalid_pairs` to the epoch logs, so
    `History`, `CSVLogger` and progress bars show them; with `log_dir`, also writes them as
    scalars (step = epoch) to `<log_dir>/pair_coverage`.

    Args:
      coverage: the `PairCoverage` the training dataset feeds (`observe` or `update`).
      log_dir: a TensorBoard folder, or None for the logs only.

    Example:

        callback = PairCoverageCallback(coverage, log_dir="logs")
        model.fit(dataset, epochs=3, callbacks=[callback])  # dataset from coverage.observe
    """

    def __init__(self, coverage: PairCoverage, log_dir: str | None = None):
        super().__init__()
        self.coverage = coverage
        self._writer = summary_writer(log_dir, "pair_coverage", "PairCoverageCallback")

    def on_epoch_begin(self, epoch, logs=None):
        """Starts the coverage's epoch (`PairCoverage.start_epoch`).

        Args:
          epoch: the epoch Keras begins (0-based); unused.
          logs: Keras' epoch logs; unused.
        """
        self.coverage.start_epoch()

    def on_epoch_end(self, epoch, logs=None):
        """Adds `PairCoverage.result()` to `logs` and, with a `log_dir`, writes it at `epoch`.

        Args:
          epoch: the epoch Keras ends (0-based): the step of the TensorBoard scalars.
          logs: Keras' epoch logs (updated in place), or None.
        """
        values = self.coverage.result()
        if logs is not None:
            logs.update(values)
        if self._writer is not None:
            with self._writer.as_default(step=epoch):
                for name, value in values.items():
                    tf.summary.scalar(name, value)
            self._writer.flush()
