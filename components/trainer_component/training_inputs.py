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
    ValidPairs,
    class_balanced,
    dynamic_pairs,
    image_example_parser,
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
) -> tuple[tf.data.Dataset, PairCoverage, tf.data.Dataset | None]:
    """Dynamic-pair batches with the `FnArgs` keys, re-paired every epoch, their coverage, and
    the held-out batch.

    `options`: `image` (`{"height", "width", "channels"}`: decode to float32 in [0, 1] of that
    shape), `held_out` (k: hold k x and k y records out of training, see `hold_out_pairs`),
    `backend`, `memory_budget_bytes`, and `dynamic_pairs` arguments (`strategy`, `remainder`,
    `on_invalid`). The returned `PairCoverage` observes every batch the dataset yields;
    `PairCoverageCallback(coverage)` logs it per epoch. The held-out dataset (None without
    `held_out`) is one batch with the same keys: the k held-out x beside the k held-out y.
    """
    options = dict(options or {})
    image = options.pop("image", None)
    if not image:
        raise ValueError("input_options needs `image`: {height, width, channels}")
    num_held_out = int(options.pop("held_out", 0))
    x_store, y_store, valid_pairs = open_pairs_run(
        offset_index_uri,
        pair_index_dir=pair_index_uri,
        backend=options.pop("backend", "auto"),
        memory_budget_bytes=options.pop("memory_budget_bytes", 1 << 30),
        on_invalid=options.get("on_invalid", "fail"),
    )
    image_spec = ImageSpec(**image, dtype=tf.float32)
    held_out = None
    if num_held_out:
        valid_pairs, held_x, held_y = hold_out_pairs(valid_pairs, num_held_out, seed)
        parse = image_example_parser(image_spec)
        held_out = tf.data.Dataset.from_tensors(
            {
                "x": parse(x_store.read(held_x)),
                "y": parse(y_store.read(held_y)),
                "x_index": tf.constant(held_x),
                "y_index": tf.constant(held_y),
            }
        )
    batches = dynamic_pairs(
        x_store,
        y_store,
        valid_pairs,
        batch_size=batch_size,
        seed=seed,
        image=image_spec,
        **options,
    )
    coverage = PairCoverage(valid_pairs)
    return coverage.observe(batches), coverage, held_out


def hold_out_pairs(
    valid_pairs: ValidPairs, num_held_out: int, seed: int
) -> tuple[ValidPairs, np.ndarray, np.ndarray]:
    """Holds `num_held_out` x and as many y records out of training, drawn from `seed`.

    Returns the valid pairs without them (the held-out x have no pairs; no x pairs with a
    held-out y, and an x left without partners is left out of the plan and counted) and the
    held-out x and y record numbers, ascending: fixed images the model never trains on.
    """
    planned_x = valid_pairs.planned_x
    limit = min(len(planned_x), valid_pairs.num_y)
    if not 0 < num_held_out < limit:
        raise ValueError(
            f"held_out={num_held_out}: needs 0 < held_out < {limit} (the planned x: "
            f"{len(planned_x)}, the y: {valid_pairs.num_y})"
        )
    rng = np.random.default_rng(seed)
    held_x = np.sort(rng.choice(planned_x, num_held_out, replace=False)).astype(np.int64)
    held_y = np.sort(rng.choice(valid_pairs.num_y, num_held_out, replace=False)).astype(np.int64)
    row_splits, values = valid_pairs.row_splits, valid_pairs.values
    row_of_value = np.repeat(np.arange(valid_pairs.num_x), np.diff(row_splits))
    keep = ~np.isin(values, held_y) & ~np.isin(row_of_value, held_x)
    kept_degrees = np.bincount(row_of_value[keep], minlength=valid_pairs.num_x)
    training = ValidPairs.build(
        (np.concatenate([[0], np.cumsum(kept_degrees)]).astype(np.int64), values[keep]),
        num_x=valid_pairs.num_x,
        num_y=valid_pairs.num_y,
        on_invalid="skip",
    )
    return training, held_x, held_y


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
