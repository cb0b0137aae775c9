"""Training inputs of the trainer component, built from the materialize component's artifacts.

Every artifact URI is a run directory for its part of the `components.layout` contract: records
and shard lists under the `OffsetIndex` URI, the valid-pair CSR under the `PairIndex` URI, the
class ids under the `ClassIndex` URI. Nothing here imports TFX.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from components import layout
from components.inputs import (
    AudioFeatureConfig,
    ImageSpec,
    PairCoverage,
    RecordStore,
    SpecAugment,
    class_balanced,
    dynamic_pairs,
    open_pairs_run,
)
from components.inputs.audio_features import audio_features, parse_audio_examples

# Keys of the class-balanced batches handed to `run_fn` (see `FnArgs`).
SPEAKER_KEYS = ("features", "lengths", "label", "index")


def pairs_train_dataset(
    offset_index_uri: str,
    pair_index_uri: str,
    *,
    batch_size: int,
    seed: int,
    options: Mapping[str, Any] | None = None,
) -> tuple[tf.data.Dataset, PairCoverage]:
    """Dynamic-pair batches with the `FnArgs` keys, re-paired every epoch, and their coverage.

    `options`: `image` (`{"height", "width", "channels"}`: decode to float32 in [0, 1] of that
    shape), `backend`, `memory_budget_bytes`, and `dynamic_pairs` arguments (`strategy`,
    `remainder`, `on_invalid`). The returned `PairCoverage` observes every batch the dataset
    yields; `PairCoverageCallback(coverage)` logs it per epoch.
    """
    options = dict(options or {})
    image = options.pop("image", None)
    if not image:
        raise ValueError("input_options needs `image`: {height, width, channels}")
    x_store, y_store, valid_pairs = open_pairs_run(
        offset_index_uri,
        pair_index_dir=pair_index_uri,
        backend=options.pop("backend", "auto"),
        memory_budget_bytes=options.pop("memory_budget_bytes", 1 << 30),
        on_invalid=options.get("on_invalid", "fail"),
    )
    batches = dynamic_pairs(
        x_store,
        y_store,
        valid_pairs,
        batch_size=batch_size,
        seed=seed,
        image=ImageSpec(**image, dtype=tf.float32),
        **options,
    )
    coverage = PairCoverage(valid_pairs)
    return coverage.observe(batches), coverage


def audio_feature_config(options: Mapping[str, Any] | None) -> AudioFeatureConfig:
    """`AudioFeatureConfig` from a JSON-able dict (`spec_augment` as a dict or None)."""
    values = dict(options or {})
    spec_augment = values.pop("spec_augment", None)
    if spec_augment is not None:
        values["spec_augment"] = SpecAugment(**spec_augment)
    return AudioFeatureConfig(**values)


def class_ids(class_index_uri: str, record_set: str) -> np.ndarray:
    """int64 [N]: the class id of each record of `record_set` (memory-mapped)."""
    path = os.path.join(layout.index_dir(class_index_uri, record_set), layout.CLASS_IDS_FILE)
    return layout.load_npy(path, mmap=True, shape=(None,), dtype=layout.INTEGER)


def speaker_train_dataset(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int,
    features: AudioFeatureConfig,
    options: Mapping[str, Any] | None = None,
) -> tf.data.Dataset:
    """Class-balanced batches of `record_set` with the `FnArgs` keys, re-planned every epoch.

    `options` go to `components.inputs.class_balanced` (`epoch_mode`, `small_classes`,
    `backend`, `memory_budget_bytes`).
    """
    options = dict(options or {})
    store = RecordStore.open(
        offset_index_uri,
        record_set,
        backend=options.pop("backend", "auto"),
        memory_budget_bytes=options.pop("memory_budget_bytes", 1 << 30),
    )
    batches = class_balanced(
        store,
        class_ids(class_index_uri, record_set),
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        features=features,
        **options,
    )
    return batches.map(_speaker_batch)


def speaker_eval_dataset(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    *,
    batch_size: int,
    features: AudioFeatureConfig,
    backend: str = "auto",
    memory_budget_bytes: int = 1 << 30,
) -> tf.data.Dataset:
    """Every record of `record_set` once, in record order, in batches of whole utterances.

    Features are computed in ``"pad"`` mode without SpecAugment (nothing random), so every
    iteration yields the same batches: the evaluation set stays fixed across epochs.
    """
    store = RecordStore.open(
        offset_index_uri, record_set, backend=backend, memory_budget_bytes=memory_budget_bytes
    )
    labels = tf.constant(np.asarray(class_ids(class_index_uri, record_set), np.int64))
    if int(labels.shape[0]) != store.num_records:
        raise ValueError(
            f"class index of {record_set!r} lists {labels.shape[0]} records, the offset index "
            f"{store.num_records}"
        )
    eval_features = dataclasses.replace(features, mode="pad", spec_augment=None)

    def load(index: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = parse_audio_examples(store.read(index), eval_features.sample_rate)
        computed = audio_features(
            parsed["audio"], eval_features, index=index, sample_rate=parsed["sample_rate"]
        )
        return _speaker_batch({**computed, "label": tf.gather(labels, index), "index": index})

    return (
        tf.data.Dataset.range(store.num_records)
        .batch(batch_size)
        .map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _speaker_batch(batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {
        "features": batch["features"],
        "lengths": tf.cast(batch["lengths"], tf.int32),
        "label": tf.cast(batch["label"], tf.int64),
        "index": tf.cast(batch["index"], tf.int64),
    }
