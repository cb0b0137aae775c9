"""Training inputs of the trainer component, built from the materialize and `IndexExamples`
components' artifacts.

Every artifact URI is a run directory for its part of the `components.layout` contract: records
and shard lists under the `OffsetIndex` URI, the valid-pair CSR (or the groups,
`layout.load_group_index`) under the `PairIndex` URI, the class ids under the `ClassIndex`
URI. Class-balanced batches are of audio records (log-mel features in the graph), or of records
of any kind parsed with a feature spec: the schema's, Transform's output spec, or Transform's
raw spec followed by its transform layer (`example_parser`). Nothing here imports TFX.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from components import layout
from components.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    ImageSpec,
    PairCoverage,
    RecordStore,
    SpecAugment,
    ValidPairs,
    image_example_parser,
    open_pairs_run,
)
from components.inputs.audio_features import audio_features, parse_audio_examples
from components.inputs.class_balanced import record_parser
from components.inputs.epoch_sampler import EpochSampler
from components.inputs.parsing import ParseFn, feature_spec_from_schema

if TYPE_CHECKING:
    import tensorflow_transform as tft

# Keys of the class-balanced batches handed to `run_fn` (see `FnArgs`).
SPEAKER_KEYS = ("features", "lengths", "label", "index")
# Input options that parse class-balanced records with a feature spec instead of the audio front
# end: `feature_spec` names where the spec comes from, `apply_transform` runs Transform's graph.
FEATURE_SPEC_OPTION = "feature_spec"
APPLY_TRANSFORM_OPTION = "apply_transform"
SCHEMA_SPEC = "schema"  # the `schema` channel's spec (`parsing.feature_spec_from_schema`)
TRANSFORMED_SPEC = "transformed"  # records are Transform's output: its transformed_feature_spec
FEATURE_SPECS = (SCHEMA_SPEC, TRANSFORMED_SPEC)

# `resume(sampler, other_inputs)`, called with a training sampler before its dataset is built,
# restores the sampler's state and the other input-side modules (by name: pair coverage) from a
# checkpoint and returns the batches of the epoch in progress already trained (0: a fresh
# start). See `checkpoints.TrainingCheckpoints`.
Resume = Callable[[EpochSampler, Mapping[str, tf.Module]], int]


def pairs_train_dataset(
    offset_index_uri: str,
    pair_index_uri: str,
    *,
    batch_size: int,
    seed: int,
    options: Mapping[str, Any] | None = None,
    resume: Resume | None = None,
) -> tuple[tf.data.Dataset, PairCoverage, tf.data.Dataset | None]:
    """Dynamic-pair batches with the `FnArgs` keys, re-paired every epoch, their coverage, and
    the held-out batch.

    `options`: `image` (`{"height", "width", "channels"}`: decode to float32 in [0, 1] of that
    shape), `held_out` (k: hold k x and k y records out of training, see `hold_out_pairs`),
    `backend`, `memory_budget_bytes`, and `dynamic_pairs` arguments (`strategy`, `remainder`,
    `on_invalid`). The returned `PairCoverage` observes every batch the dataset yields;
    `PairCoverageCallback(coverage)` logs it per epoch. The held-out dataset (None without
    `held_out`) is one batch with the same keys: the k held-out x beside the k held-out y.
    `resume` (see `Resume`) gets the sampler state and the coverage.
    """
    options = dict(options or {})
    image = options.pop("image", None)
    if not image:
        raise ValueError("input_options needs `image`: {height, width, channels}")
    num_held_out = int(options.pop("held_out", 0))
    backend = options.pop("backend", "auto")
    memory_budget_bytes = options.pop("memory_budget_bytes", 1 << 30)
    # A pair list's edges, or groups (O(N) whatever the number of pairs): open_pairs_run tells.
    x_store, y_store, valid_pairs = open_pairs_run(
        offset_index_uri,
        pair_index_dir=pair_index_uri,
        backend=backend,
        memory_budget_bytes=memory_budget_bytes,
        on_invalid=options.get("on_invalid", "fail"),
    )
    image_spec = ImageSpec(**image, dtype=tf.float32)
    held_out = None
    if num_held_out:
        if not isinstance(valid_pairs, ValidPairs):
            raise ValueError("held_out needs a pair list's index; this pair index pairs by group")
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
    sampler = DynamicPairsSampler(
        x_store,
        y_store,
        valid_pairs,
        batch_size=batch_size,
        seed=seed,
        image=image_spec,
        **options,
    )
    coverage = PairCoverage(valid_pairs)
    batches = _training_batches(sampler, resume, {"coverage": coverage})
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
    if not keep.any():
        raise ValueError(
            f"held_out={num_held_out}: holding out x {held_x.tolist()} and y {held_y.tolist()} "
            "leaves no valid pair to train on; lower held_out"
        )
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


# How class-balanced records become batches: the audio front end's settings (log-mel features
# with the `SPEAKER_KEYS`), or a batched parser of records of any kind (`example_parser`).
ClassBalancedParser = AudioFeatureConfig | ParseFn


def class_balanced_train_dataset(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    *,
    n_classes_per_batch: int,
    n_samples_per_class: int,
    seed: int,
    parser: ClassBalancedParser,
    options: Mapping[str, Any] | None = None,
    resume: Resume | None = None,
) -> tf.data.Dataset:
    """Class-balanced batches of `record_set` with the `FnArgs` keys, re-planned every epoch.

    With an `AudioFeatureConfig` as `parser`, the batches are log-mel features with the
    `SPEAKER_KEYS`; with a `ParseFn` (records of any kind: tabular, embedding, transformed
    Examples), dicts of what it returns, beside ``label`` (int64 [B] class ids) and ``index``
    (int64 [B] record numbers).

    `options` go to `components.inputs.class_balanced` (`epoch_mode`, `small_classes`,
    `backend`, `memory_budget_bytes`). `resume`: see `Resume`.
    """
    options = dict(options or {})
    store = RecordStore.open(
        offset_index_uri,
        record_set,
        backend=options.pop("backend", "auto"),
        memory_budget_bytes=options.pop("memory_budget_bytes", 1 << 30),
    )
    audio = isinstance(parser, AudioFeatureConfig)
    options["features" if audio else "parse_fn"] = parser
    sampler = ClassBalancedSampler(
        store,
        class_ids(class_index_uri, record_set),
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        **options,
    )
    batches = _training_batches(sampler, resume, {})
    return batches.map(_speaker_batch) if audio else batches


def _training_batches(
    sampler: EpochSampler, resume: Resume | None, other_inputs: Mapping[str, tf.Module]
) -> tf.data.Dataset:
    """`sampler`'s dataset from the resume point `resume` finds (if any), whose cardinality is
    one epoch's steps either way."""
    initial_step = resume(sampler, other_inputs) if resume else 0
    batches = sampler.dataset(initial_step=initial_step)
    if not initial_step:
        return batches
    # Resumed mid-epoch, the first iteration is short and the dataset's length unknown; Keras
    # then takes the first epoch's length (plus the step that found it over) for every later
    # epoch, cutting them short. An endless tail that yields nothing, cut at one epoch, gives
    # the dataset a whole epoch's length without asserting it: the short first iteration ends
    # early, which Keras takes as the end of that epoch.
    spec = batches.element_spec

    def never(_: tf.Tensor) -> bool:
        return False

    def like_a_batch(_: tf.Tensor) -> object:
        return tf.nest.map_structure(_never_read, spec, expand_composites=True)

    nothing = tf.data.Dataset.range(1).filter(never).repeat().map(like_a_batch)
    return batches.concatenate(nothing).take(sampler.steps_per_epoch)


def _never_read(spec: tf.TensorSpec) -> tf.Tensor:
    # Never made (the tail yields nothing), only traced: `Empty` has no static value, which a
    # composite's (sparse, ragged) static shape would be checked against, as zeros' would.
    return tf.raw_ops.Empty(
        shape=[0 if size is None else size for size in spec.shape], dtype=spec.dtype
    )


def class_balanced_eval_dataset(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    *,
    batch_size: int,
    parser: ClassBalancedParser,
    backend: str = "auto",
    memory_budget_bytes: int = 1 << 30,
) -> tf.data.Dataset:
    """Every record of `record_set` once, in record order, in batches of `batch_size`, with the
    keys of `class_balanced_train_dataset`: the same batches every iteration.

    Audio features are computed in ``"pad"`` mode (whole utterances) without SpecAugment
    (nothing random), so the evaluation set stays fixed across epochs.
    """
    if isinstance(parser, AudioFeatureConfig):
        eval_features = dataclasses.replace(parser, mode="pad", spec_augment=None)

        def load(records: tf.Tensor, index: tf.Tensor) -> dict[str, tf.Tensor]:
            parsed = parse_audio_examples(records, eval_features.sample_rate)
            return audio_features(
                parsed["audio"], eval_features, index=index, sample_rate=parsed["sample_rate"]
            )

        batches = _in_record_order(
            offset_index_uri,
            class_index_uri,
            record_set,
            batch_size,
            load,
            backend,
            memory_budget_bytes,
        )
        return batches.map(_speaker_batch)
    return _in_record_order(
        offset_index_uri,
        class_index_uri,
        record_set,
        batch_size,
        lambda records, index: parser(records),
        backend,
        memory_budget_bytes,
    )


def _in_record_order(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    batch_size: int,
    load: Callable[[tf.Tensor, tf.Tensor], Mapping[str, tf.Tensor]],
    backend: str,
    memory_budget_bytes: int,
) -> tf.data.Dataset:
    """Batches of every record in order: `load(records, index)`'s dict, ``label`` and ``index``."""
    store = RecordStore.open(
        offset_index_uri, record_set, backend=backend, memory_budget_bytes=memory_budget_bytes
    )
    labels = tf.constant(np.asarray(class_ids(class_index_uri, record_set), np.int64))
    if int(labels.shape[0]) != store.num_records:
        raise ValueError(
            f"class index of {record_set!r} lists {labels.shape[0]} records, the offset index "
            f"{store.num_records}"
        )

    def read(index: tf.Tensor) -> dict[str, tf.Tensor]:
        loaded = load(store.read(index), index)
        return {**loaded, "label": tf.gather(labels, index), "index": index}

    return (
        tf.data.Dataset.range(store.num_records)
        .batch(batch_size)
        .map(read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def num_classes(class_index_uri: str, record_set: str) -> int:
    """The classes of `record_set`'s class index (its vocabulary: empty classes included)."""
    row_splits, _ = layout.load_csr(layout.class_records_dir(class_index_uri, record_set))
    return len(row_splits) - 1


def example_parser(
    options: dict[str, Any],
    *,
    schema_path: str | None,
    tf_transform_output: tft.TFTransformOutput | None,
    label_feature: str = "",
) -> ParseFn | None:
    """The batched parser (tf.string [B] -> dict of tensors) of class-balanced records that are
    not audio, as `options` ask for it (its options are popped); None when they do not (the
    audio front end).

    * ``feature_spec: "schema"``: `tf.io.parse_example` with the spec of the `schema` channel
      (what TFX's components parse the records with);
    * ``feature_spec: "transformed"``: with Transform's `transformed_feature_spec()`: the records
      are Transform's `transformed_examples`;
    * ``apply_transform: true``: raw records parsed with Transform's `raw_feature_spec()` (or the
      schema's, with ``feature_spec: "schema"``), then Transform's `transform_features_layer()`
      applied to the batch: its graph runs in the input pipeline.

    `label_feature` (the feature IndexExamples took the classes from) is left out of the parsed
    dict: the batch's ``label`` is its class id.
    """
    source = options.pop(FEATURE_SPEC_OPTION, None)
    apply_transform = options.pop(APPLY_TRANSFORM_OPTION, False)
    if source is None and not apply_transform:
        return None
    if source is not None and source not in FEATURE_SPECS:
        raise ValueError(f"input option {FEATURE_SPEC_OPTION} must be one of {FEATURE_SPECS}")
    if not isinstance(apply_transform, bool):
        raise ValueError(f"input option {APPLY_TRANSFORM_OPTION} must be true or false")
    if "features" in options:
        raise ValueError(
            f"give features (the audio front end) or {FEATURE_SPEC_OPTION} / "
            f"{APPLY_TRANSFORM_OPTION}, not both"
        )
    if apply_transform and source == TRANSFORMED_SPEC:
        raise ValueError(
            f"{FEATURE_SPEC_OPTION}={TRANSFORMED_SPEC!r} reads records Transform already "
            f"transformed: drop {APPLY_TRANSFORM_OPTION}"
        )
    if (apply_transform or source == TRANSFORMED_SPEC) and tf_transform_output is None:
        raise ValueError("transformed features need the trainer's transform_graph input")
    if source == SCHEMA_SPEC and schema_path is None:
        raise ValueError(f"{FEATURE_SPEC_OPTION}={SCHEMA_SPEC!r} needs the trainer's schema input")

    if source == SCHEMA_SPEC:
        spec = feature_spec_from_schema(schema_path)
    elif source == TRANSFORMED_SPEC:
        spec = tf_transform_output.transformed_feature_spec()
    else:
        spec = tf_transform_output.raw_feature_spec()
    parse = record_parser(None, spec)
    transform = tf_transform_output.transform_features_layer() if apply_transform else None

    def parse_records(records: tf.Tensor) -> dict[str, tf.Tensor]:
        features = parse(records)
        if transform is not None:
            features = transform(features)
        return {key: value for key, value in features.items() if key != label_feature}

    return parse_records


def _speaker_batch(batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {
        "features": batch["features"],
        "lengths": tf.cast(batch["lengths"], tf.int32),
        "label": tf.cast(batch["label"], tf.int64),
        "index": tf.cast(batch["index"], tf.int64),
    }
