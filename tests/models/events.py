"""Reads back TensorBoard event files, for the tests of the pictures."""

from __future__ import annotations

import glob
import os

import numpy as np
import tensorflow as tf


def read_summaries(log_dir: str) -> dict[str, dict[int, np.ndarray]]:
    """tag -> step -> value of the event files directly in `log_dir`.

    Images come back decoded, uint8 [H, W, C] (the first image of the summary); histograms as
    float [buckets, 3] (left edge, right edge, count); scalars as 0-d arrays.
    """
    summaries: dict[str, dict[int, np.ndarray]] = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if array.dtype == object:  # an image summary: width, height, encoded images
                    array = tf.io.decode_image(array[2]).numpy()
                summaries.setdefault(value.tag, {})[event.step] = array
    return summaries
