"""What a sampler does about the samples it leaves out because their records are damaged.

`SkipLog` counts them in `EpochState.skipped_samples` and logs one warning per epoch that skips
any (stores opened with `on_damaged="skip"`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import tensorflow as tf

from tfx_dynamic_inputs.inputs.epoch_state import EpochState

_log = logging.getLogger(__name__)


class SkipLog:
    """Counts the samples a sampler leaves out of a batch and logs each epoch that skips once.

    `record(epoch, kept)` adds the samples with `kept == False` to `state.skipped_samples`; the
    first batch of an epoch that skips any logs one warning naming the epoch, the total so far and
    what `describe()` says about the damaged records (their record numbers, shards and offsets).
    Python runs only for a batch that skips something.

    Args:
      sampler: the sampler's name, for the warning.
      state: holds the count, `state.skipped_samples`.
      describe: returns what is known of the damaged records, for the warning.
    """

    def __init__(self, sampler: str, state: EpochState, describe: Callable[[], str]):
        self._sampler = sampler
        self._state = state
        self._describe = describe
        self._logged_epochs: set[int] = set()
        self._lock = threading.Lock()

    def record(self, epoch: tf.Tensor, kept: tf.Tensor) -> tf.Tensor:
        """Counts a batch's skipped samples, and logs the first skip of an epoch.

        Args:
          epoch: int64 scalar, the batch's epoch.
          kept: bool [B], false for the samples left out.

        Returns:
          bool scalar, true when this call logged: run it before the batch is returned (a
          control dependency).
        """
        skipped = tf.reduce_sum(tf.cast(tf.logical_not(kept), tf.int64))
        total = self._state.skipped_samples.assign_add(skipped)
        return tf.cond(
            skipped > 0,
            lambda: tf.py_function(self._log, [epoch, total], tf.bool),
            lambda: tf.constant(False),
        )

    def _log(self, epoch: tf.Tensor, total: tf.Tensor) -> bool:
        epoch = int(epoch.numpy())
        with self._lock:
            if epoch in self._logged_epochs:
                return False
            self._logged_epochs.add(epoch)
        _log.warning(
            "%s: epoch %d skips samples whose records are damaged (on_damaged='skip'); %d "
            "skipped so far (state.skipped_samples). %s",
            self._sampler,
            epoch,
            int(total.numpy()),
            self._describe(),
        )
        return True
