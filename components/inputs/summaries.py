"""TensorBoard writers of the input side's Keras callbacks (pair coverage, draw counts)."""

from __future__ import annotations

import importlib.util

import tensorflow as tf


def summary_writer(log_dir: str | None, folder: str, owner: str) -> tf.summary.SummaryWriter | None:
    """A writer of `<log_dir>/<folder>`, or None without a `log_dir`.

    `tf.summary` needs TensorBoard, which TensorFlow 2.20+ no longer installs: a callback asked
    for summaries says so when it is built, not after the first epoch has trained.

    Args:
      log_dir: the TensorBoard folder, or None for no summaries.
      folder: the subfolder the callback writes.
      owner: the callback's name, for the error.

    Returns:
      The writer, or None.

    Raises:
      ImportError: `log_dir` without TensorBoard installed.

    Example:

        writer = summary_writer("logs", "pair_coverage", "PairCoverageCallback")
    """
    if not log_dir:
        return None
    if importlib.util.find_spec("tensorboard") is None:
        raise ImportError(
            f"{owner}(log_dir=...) writes TensorBoard summaries: pip install tensorboard "
            "(or pass log_dir=None)"
        )
    return tf.summary.create_file_writer(f"{log_dir}/{folder}")
