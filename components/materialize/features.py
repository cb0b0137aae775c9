"""`tf.train.Example` feature constructors shared by the image and audio records."""

from __future__ import annotations

import tensorflow as tf


def bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def int64_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))


def serialize_example(features: dict[str, tf.train.Feature]) -> bytes:
    """Serializes with map keys sorted: plain serialization orders the feature map by hash
    and insertion order, which differs between processes and would break byte-identical
    re-runs."""
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)
