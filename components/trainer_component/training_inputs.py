"""Training inputs of the trainer component, built from the materialize and `IndexExamples`
components' artifacts.

Every artifact URI is a run directory for its part of the `tfx_dynamic_inputs.layout` contract:
records and shard lists under the `OffsetIndex` URI, the valid-pair CSR (or the groups,
`layout.load_group_index`) under the `PairIndex` URI, the class ids under the `ClassIndex`
URI. Class-balanced batches are of audio records (log-mel features in the graph), or of records
of any kind parsed with a feature spec: the schema's, Transform's output spec, or Transform's
raw spec followed by its transform layer (`example_parser`). Nothing here imports TFX.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    GroupPairs,
    PairCoverage,
    StoreOptions,
    ValidPairs,
    image_example_parser,
    open_pairs_run,
)
from tfx_dynamic_inputs.inputs.audio_features import audio_features, parse_audio_examples
from tfx_dynamic_inputs.inputs.class_balanced import record_parser
from tfx_dynamic_inputs.inputs.draw_counts import DrawCounts
from tfx_dynamic_inputs.inputs.epoch_sampler import EpochSampler
from tfx_dynamic_inputs.inputs.graph_functions import as_written
from tfx_dynamic_inputs.inputs.parsing import ParseFn, feature_spec_from_schema
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmentConfig
from tfx_dynamic_inputs.trainer_component.input_options import (
    SCHEMA_SPEC,
    TRANSFORMED_SPEC,
    ClassBalancedInputOptions,
    PairsInputOptions,
)

if TYPE_CHECKING:
    import tensorflow_transform as tft

# Keys of the class-balanced batches handed to `run_fn` (see `FnArgs`).
SPEAKER_KEYS = ("features", "lengths", "label", "index")
# `resume(sampler, other_inputs)`, called with a training sampler before its dataset is built,
# restores the sampler's state and the other input-side modules (by name: pair coverage, draw
# counts) from a
# checkpoint and returns the batches of the epoch in progress already trained (0: a fresh
# start). See `checkpoints.TrainingCheckpoints`.
Resume = Callable[[EpochSampler, Mapping[str, tf.Module]], int]


def pairs_train_dataset(
    offset_index_uri: str,
    pair_index_uri: str,
    *,
    batch_size: int,
    seed: int,
    options: PairsInputOptions,
    resume: Resume | None = None,
) -> tuple[tf.data.Dataset, PairCoverage, tf.data.Dataset | None]:
    """Dynamic-pair batches with the `FnArgs` keys, re-paired every epoch, their coverage, and
    the held-out batch.

    Args:
      offset_index_uri, pair_index_uri: the run's `OffsetIndex` and `PairIndex` artifacts.
      batch_size: pairs per batch.
      seed: the plans' seed (and the held-out draw's).
      options: the trainer's `PairsInputOptions` (image shape, held-out records, pairing).
      resume: gets the sampler state and the coverage (see `Resume`).

    Returns:
      `(train, coverage, held_out)`: the training batches (dicts: ``x``, ``y`` float32
      [B, H, W, C], ``x_index``, ``y_index`` int64 [B]); the `PairCoverage` observing every
      batch the dataset yields (`PairCoverageCallback(coverage)` logs it per epoch); and the
      held-out dataset (None without `options.held_out`): one batch with the same keys, the k
      held-out x beside the k held-out y.

    Raises:
      ValueError: `held_out` too large for the run (`hold_out_pairs`, `hold_out_group_pairs`).
    """
    # A pair list's edges, or groups (O(N) whatever the number of pairs): open_pairs_run tells.
    x_store, y_store, valid_pairs = open_pairs_run(
        offset_index_uri,
        pair_index_dir=pair_index_uri,
        store_options=options.store_options(),
        on_invalid=options.on_invalid,
    )
    image_spec = options.image_spec()
    held_out = None
    if options.held_out:
        hold_out = hold_out_pairs if isinstance(valid_pairs, ValidPairs) else hold_out_group_pairs
        valid_pairs, held_x, held_y = hold_out(valid_pairs, options.held_out, seed)
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
        strategy=options.strategy,
        remainder=options.remainder,
        on_invalid=options.on_invalid,
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

    Args:
        valid_pairs: the valid pairs of the run.
        num_held_out: how many x and how many y to hold out.
        seed: the seed of the draw.

    Returns:
        `(training pairs, held-out x int64 [num_held_out], held-out y int64 [num_held_out])`.

    Raises:
        ValueError: unless 0 < num_held_out < min(planned x, num y), or when holding them out
            leaves no valid pair.

    Example:
        training, held_x, held_y = hold_out_pairs(valid_pairs, 2, seed=0)
    """
    held_x, held_y = _draw_held_out(valid_pairs.planned_x, valid_pairs.num_y, num_held_out, seed)
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


def hold_out_group_pairs(
    pairs: GroupPairs, num_held_out: int, seed: int
) -> tuple[GroupPairs, np.ndarray, np.ndarray]:
    """`hold_out_pairs` for a pairing by group: the held-out x and y leave their groups.

    Args:
        pairs: the group pairing of the run.
        num_held_out: how many x and how many y to hold out.
        seed: the seed of the draw (the same draw as `hold_out_pairs`).

    Returns:
        `(training groups, held-out x int64 [num_held_out], held-out y int64 [num_held_out])`:
        no held-out x is planned and no held-out y drawn; an x whose group is left without y is
        left out of the plan and counted.

    Raises:
        ValueError: unless 0 < num_held_out < min(planned x, num y), or when holding them out
            leaves no x with a y in its group.

    Example:
        training, held_x, held_y = hold_out_group_pairs(groups, 2, seed=0)
    """
    held_x, held_y = _draw_held_out(pairs.planned_x, pairs.num_y, num_held_out, seed)
    x_groups = pairs.x_group.copy()
    x_groups[held_x] = -1
    y_groups = np.full(pairs.num_y, -1, np.int64)
    y_groups[pairs.group_values] = np.repeat(
        np.arange(pairs.num_groups, dtype=np.int64), np.diff(pairs.group_row_splits)
    )
    y_groups[held_y] = -1
    try:
        training = GroupPairs.build(x_groups, y_groups, on_invalid="skip")
    except ValueError as error:
        raise ValueError(
            f"held_out={num_held_out}: holding out x {held_x.tolist()} and y {held_y.tolist()} "
            f"leaves no x with a y in its group ({error}); lower held_out"
        ) from None
    return dataclasses.replace(training, groups=pairs.groups), held_x, held_y


def _draw_held_out(
    planned_x: np.ndarray, num_y: int, num_held_out: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """`num_held_out` of the planned x and of the y, drawn from `seed`, ascending."""
    limit = min(len(planned_x), num_y)
    if not 0 < num_held_out < limit:
        raise ValueError(
            f"held_out={num_held_out}: needs 0 < held_out < {limit} (the planned x: "
            f"{len(planned_x)}, the y: {num_y})"
        )
    rng = np.random.default_rng(seed)
    held_x = np.sort(rng.choice(planned_x, num_held_out, replace=False)).astype(np.int64)
    held_y = np.sort(rng.choice(num_y, num_held_out, replace=False)).astype(np.int64)
    return held_x, held_y


def class_ids(class_index_uri: str, record_set: str) -> np.ndarray:
    """int64 [N]: the class id of each record of `record_set` (memory-mapped).

    Args:
        class_index_uri: the ClassIndex artifact's URI.
        record_set: the record set's name, e.g. "train".

    Returns:
        int64 [N], read-only.
    """
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
    options: ClassBalancedInputOptions | None = None,
    resume: Resume | None = None,
    draw_counts: DrawCounts | None = None,
    augment: SpeakerAugmentConfig | None = None,
) -> tf.data.Dataset:
    """Class-balanced batches of `record_set` with the `FnArgs` keys, re-planned every epoch.

    Args:
      offset_index_uri, class_index_uri: the run's `OffsetIndex` and `ClassIndex` artifacts.
      record_set: the split to train on.
      n_classes_per_batch, n_samples_per_class: the batch geometry, `n_c` x `n_p`.
      seed: the plans' seed.
      parser: an `AudioFeatureConfig` (log-mel features with the `SPEAKER_KEYS`) or a `ParseFn`
        (records of any kind: tabular, embedding, transformed Examples).
      options: the trainer's `ClassBalancedInputOptions` (`epoch_mode`, `small_classes`, how
        the store opens); None: the defaults.
      resume: see `Resume`.
      draw_counts: made to count each epoch's plan (`DrawCounts.track_plan`, over the record
        set's records; `DrawCountsCallback` counts at each epoch's end) and resumed with the
        sampler state. None: not counted.
      augment: the speaker augmentation (audio only; labels are then the derived classes), or
        None.

    Returns:
      The batches: with an `AudioFeatureConfig`, the `SPEAKER_KEYS`; with a `ParseFn`, dicts of
      what it returns beside ``label`` (int64 [B] class ids) and ``index`` (int64 [B] record
      numbers).
    """
    options = options or ClassBalancedInputOptions()
    store = options.store_options().open_store(offset_index_uri, record_set)
    audio = isinstance(parser, AudioFeatureConfig)
    sampler = ClassBalancedSampler(
        store,
        class_ids(class_index_uri, record_set),
        n_classes_per_batch=n_classes_per_batch,
        n_samples_per_class=n_samples_per_class,
        seed=seed,
        epoch_mode=options.epoch_mode,
        small_classes=options.small_classes,
        max_draws_per_record=options.max_draws_per_record,
        features=parser if audio else None,
        parse_fn=None if audio else parser,
        augment=augment,
    )
    if draw_counts is None:
        batches = _training_batches(sampler, resume, {})
    else:
        if draw_counts.num_records != sampler.store.num_records:
            raise ValueError(
                f"draw_counts counts {draw_counts.num_records} records but {record_set!r} holds "
                f"{sampler.store.num_records}"
            )
        draw_counts.track_plan(lambda epoch: sampler.epoch_plan(epoch)["index"])
        batches = _training_batches(sampler, resume, {"draw_counts": draw_counts})
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

    nothing = tf.data.Dataset.range(1).filter(as_written(never)).repeat()
    nothing = nothing.map(as_written(like_a_batch))
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
    store_options: StoreOptions | None = None,
) -> tf.data.Dataset:
    """Every record of `record_set` once, in record order, in batches of `batch_size`, with the
    keys of `class_balanced_train_dataset`: the same batches every iteration.

    `store_options`: how the record store opens (default `StoreOptions()`).

    Audio features are computed in ``"pad"`` mode (whole utterances) without SpecAugment
    (nothing random), so the evaluation set stays fixed across epochs.

    Args:
        offset_index_uri: the OffsetIndex artifact's URI.
        class_index_uri: the ClassIndex artifact's URI.
        record_set: the record set to read, e.g. "eval".
        batch_size: records per batch (the last batch may be smaller).
        parser: the `AudioFeatureConfig` of the audio front end, or a batched parse function:
            serialized records (string [B]) -> dict of tensors.
        store_options: as above.

    Returns:
        A `tf.data.Dataset` of dicts: the parsed features, `label` int64 [B] and `index`
        int64 [B] (the record numbers).

    Raises:
        ValueError: when the class index and the offset index count different records.

    Example:
        class_balanced_eval_dataset(offsets, classes, "eval", batch_size=64,
                                    parser=AudioFeatureConfig())
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
            store_options or StoreOptions(),
        )
        return batches.map(_speaker_batch)
    return _in_record_order(
        offset_index_uri,
        class_index_uri,
        record_set,
        batch_size,
        lambda records, index: parser(records),
        store_options or StoreOptions(),
    )


def _in_record_order(
    offset_index_uri: str,
    class_index_uri: str,
    record_set: str,
    batch_size: int,
    load: Callable[[tf.Tensor, tf.Tensor], Mapping[str, tf.Tensor]],
    store_options: StoreOptions,
) -> tf.data.Dataset:
    """Batches of every record in order: `load(records, index)`'s dict, ``label`` and ``index``."""
    store = store_options.open_store(offset_index_uri, record_set)
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
        .map(as_written(read), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def num_classes(class_index_uri: str, record_set: str) -> int:
    """The classes of `record_set`'s class index (its vocabulary: empty classes included).

    Args:
        class_index_uri: the ClassIndex artifact's URI.
        record_set: the record set's name.

    Returns:
        The number of classes.
    """
    row_splits, _ = layout.load_csr(layout.class_records_dir(class_index_uri, record_set))
    return len(row_splits) - 1


def example_parser(
    options: ClassBalancedInputOptions,
    *,
    schema_path: str | None,
    tf_transform_output: tft.TFTransformOutput | None,
    label_feature: str = "",
) -> ParseFn | None:
    """The batched parser of class-balanced records that are not audio, as `options` ask.

    * ``feature_spec="schema"``: `tf.io.parse_example` with the spec of the `schema` channel
      (what TFX's components parse the records with);
    * ``feature_spec="transformed"``: with Transform's `transformed_feature_spec()`: the records
      are Transform's `transformed_examples`;
    * ``apply_transform=True``: raw records parsed with Transform's `raw_feature_spec()` (or the
      schema's, with ``feature_spec="schema"``), then Transform's `transform_features_layer()`
      applied to the batch: its graph runs in the input pipeline.

    Args:
      options: the trainer's `ClassBalancedInputOptions`.
      schema_path: the `schema` channel's file, or None.
      tf_transform_output: Transform's output of the `transform_graph` channel, or None.
      label_feature: the feature IndexExamples took the classes from: left out of the parsed
        dict (the batch's ``label`` is its class id).

    Returns:
      tf.string [B] -> dict of tensors; None when the records are audio (the audio front end).

    Raises:
      ValueError: the spec's source is missing (naming the trainer input it needs).
    """
    if not options.parses_with_a_feature_spec:
        return None
    source, apply_transform = options.feature_spec, options.apply_transform
    if options.needs_transform_graph and tf_transform_output is None:
        raise ValueError("transformed features need the trainer's transform_graph input")
    if source == SCHEMA_SPEC and schema_path is None:
        raise ValueError(f"feature_spec={SCHEMA_SPEC!r} needs the trainer's schema input")

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


@as_written
def _speaker_batch(batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {
        "features": batch["features"],
        "lengths": tf.cast(batch["lengths"], tf.int32),
        "label": tf.cast(batch["label"], tf.int64),
        "index": tf.cast(batch["index"], tf.int64),
    }
