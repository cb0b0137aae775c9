"""Labelled record stores from what users have, for the class-balanced sampler.

`labelled_records` resolves a source whose records each carry a class: a materialized run
directory (its class index), a store with labels, a dataset of `(waveform, label)`, or ids with
labels and a waveform loader. It returns the store (through `sources.record_store_from` for
datasets and ids) with the class index in CSR form (`LabelledRecords`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import examples, layout
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions
from tfx_dynamic_inputs.inputs.sources import DEFAULT_RECORD_SET, record_store_from


@dataclasses.dataclass(frozen=True)
class LabelledRecords:
    """A record store with the class index of its records.

    Attributes:
      store: the records.
      row_splits: int64 [C + 1], values: int64 [N]: CSR, the record numbers of each class.
      classes: class names (sorted string labels, or the run's `classes.txt`), else None.
      labels_in_records: the records carry the `label` feature (a materialized run).
    """

    store: RecordStore
    row_splits: np.ndarray
    values: np.ndarray
    classes: list[str] | None
    labels_in_records: bool


def labelled_records(
    source,
    labels=None,
    *,
    record_set: str | None = None,
    load_fn: Callable[[object], object] | None = None,
    store_options: StoreOptions | None = None,
    memory_budget_bytes: int = 1 << 30,
    cache_dir: str | None = None,
    sample_rate: int | None = None,
) -> LabelledRecords:
    """The store and class index of a labelled source (see `class_balanced` for the kinds).

    Args:
      source: a run (`Run` or its folder), a `RecordStore` (with `labels`), a `tf.data.Dataset`
        of `(waveform, label)`, or sample ids (with `labels` and `load_fn`).
      labels: int [N] class ids (>= 0) or strings [N] (class names, numbered in sorted order).
      record_set: the run's labelled record set (optional when it has only one).
      load_fn: id -> waveform, for sample ids.
      store_options: how a run's record set is opened (`StoreOptions`); default
        `StoreOptions(memory_budget_bytes=memory_budget_bytes)`.
      memory_budget_bytes, cache_dir: for datasets and ids, read once into a store (memory, or
        indexed shards under `cache_dir` when larger than the budget).
      sample_rate: the rate waveforms from a dataset or `load_fn` are stored at.

    Returns:
      `LabelledRecords`: the store, the class index (`row_splits` int64 [C + 1], `values`
      int64 [N] record numbers grouped by class) and the class names (or None).

    Raises:
      ValueError, TypeError: a source of no kind above, or labels that do not fit it.
      FileNotFoundError: a run whose `record_set` has no class index.
      layout.IndexFileError, layout.RunCommitError: a damaged or uncommitted run.

    Example:

        labelled = labelled_records(clip_ids, labels=speakers, load_fn=load_wav, sample_rate=16000)
        labelled.store.num_records, labelled.classes   # N, the sorted speaker names
    """
    if isinstance(source, (str, os.PathLike, Run)):
        if labels is not None or load_fn is not None:
            raise ValueError("a materialized run has its own labels; do not pass labels/load_fn")
        if isinstance(source, (str, os.PathLike)):
            output_dir, class_dir = os.fspath(source), None
        else:  # its class index may be another artifact of the same execution
            output_dir, class_dir = source.uri, source.class_index_uri
        return _open_labelled_run(
            output_dir,
            record_set,
            store_options or StoreOptions(memory_budget_bytes=memory_budget_bytes),
            class_index_dir=class_dir,
        )
    if isinstance(source, RecordStore):
        if labels is None:
            raise ValueError("a RecordStore source needs labels (one class per record)")
        return _from_labels(source, labels)
    if isinstance(source, tf.data.Dataset):
        if labels is not None or load_fn is not None:
            raise ValueError(
                "a dataset source yields (waveform, label): do not pass labels/load_fn"
            )
        return _from_dataset(source, cache_dir, memory_budget_bytes, sample_rate)
    if load_fn is None or labels is None:
        raise TypeError(
            "source must be a run directory, a RecordStore (with labels), a tf.data.Dataset of "
            "(waveform, label), or sample ids with labels and load_fn; got "
            f"{type(source).__name__}" + ("" if load_fn is not None else " without load_fn")
        )
    ids = list(source)
    if len(ids) != len(labels):
        raise ValueError(f"{len(ids)} ids but {len(labels)} labels")
    encoder = _AudioEncoder(sample_rate)

    def load_and_check(item):
        try:
            waveform = load_fn(item)
        except Exception as error:
            raise ValueError(f"load_fn failed for id {item!r}: {error}") from error
        return encoder.encode(waveform, where=f"id {item!r}")

    store = record_store_from(
        ids,
        load_fn=load_and_check,
        encode_fn=lambda record: record,
        parse_fn=None,
        cache_dir=cache_dir,
        memory_budget_bytes=memory_budget_bytes,
    )
    return _from_labels(store, labels)


def _open_labelled_run(
    output_dir,
    record_set,
    store_options: StoreOptions,
    labels_in_records: bool = True,
    class_index_dir: str | None = None,
) -> LabelledRecords:
    """A record set with its class index (`labels_in_records`: a materialized run's records
    carry the `label` feature; a dataset cache's do not). `class_index_dir`: the run folder
    holding the class index when it is not `output_dir` (a pipeline's `class_index` artifact,
    checked to hold the same run)."""
    class_root = output_dir if class_index_dir is None else class_index_dir
    if class_root != output_dir:
        layout.check_same_run(output_dir, class_root)
    if record_set is None:
        index_root = os.path.join(class_root, layout.INDEX_DIR)
        labelled_sets = sorted(
            name
            for name in (tf.io.gfile.listdir(index_root) if tf.io.gfile.isdir(index_root) else [])
            if tf.io.gfile.isdir(layout.class_records_dir(class_root, name.rstrip("/")))
        )
        if len(labelled_sets) != 1:
            raise ValueError(
                f"pass record_set: {output_dir} has labelled record sets {labelled_sets}"
                if labelled_sets
                else f"{output_dir} has no labelled record set (no index/*/class_records)"
            )
        record_set = labelled_sets[0].rstrip("/")
    class_dir = layout.class_records_dir(class_root, record_set)
    if not tf.io.gfile.isdir(class_dir):
        raise FileNotFoundError(
            f"record set {record_set!r} of {class_root} has no class index ({class_dir}); "
            "open a pipeline's outputs with tfx_dynamic_inputs.inputs.open_run"
        )
    layout.check_part(class_root, class_dir)
    row_splits, values = layout.load_csr(class_dir)
    classes_path = os.path.join(layout.index_dir(class_root, record_set), layout.CLASSES_FILE)
    classes = layout.load_lines(classes_path) if tf.io.gfile.exists(classes_path) else None
    if classes is not None and len(classes) != len(row_splits) - 1:
        raise layout.IndexFileError(
            f"{classes_path} lists {len(classes)} classes but the class index has "
            f"{len(row_splits) - 1}"
        )
    store = store_options.open_store(output_dir, record_set)
    _check_csr(row_splits, values, store.num_records, class_dir)
    return LabelledRecords(store, np.asarray(row_splits), values, classes, labels_in_records)


def _from_labels(store: RecordStore, labels) -> LabelledRecords:
    class_ids, classes = _class_ids(labels, store.num_records)
    num_classes = int(class_ids.max()) + 1 if len(class_ids) else 0
    row_splits, values = layout.class_records(class_ids, num_classes)
    return LabelledRecords(store, row_splits, values, classes, False)


def _class_ids(labels, num_records: int) -> tuple[np.ndarray, list[str] | None]:
    """int64 [N] class ids and the class names (sorted) when `labels` are strings."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num_records:
        raise ValueError(
            f"labels must be a vector with one class per record ({num_records}), got shape "
            f"{labels.shape}"
        )
    if labels.dtype.kind in "SUO":
        classes, class_ids = np.unique(labels.astype(str), return_inverse=True)
        return class_ids.astype(np.int64), classes.tolist()
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers or strings, got dtype {labels.dtype}")
    class_ids = labels.astype(np.int64)
    if len(class_ids) and class_ids.min() < 0:
        bad = int(np.flatnonzero(class_ids < 0)[0])
        raise ValueError(f"labels must be >= 0; record {bad} has label {class_ids[bad]}")
    return class_ids, None


def _from_dataset(dataset, cache_dir, memory_budget_bytes, sample_rate) -> LabelledRecords:
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise TypeError(f"a dataset source must yield (waveform, label) pairs, got {spec}")
    record_set = DEFAULT_RECORD_SET
    if cache_dir is not None and tf.io.gfile.isdir(layout.class_records_dir(cache_dir, record_set)):
        # A complete cache from an earlier run: its class index is written last.
        return _open_labelled_run(
            cache_dir,
            record_set,
            StoreOptions(memory_budget_bytes=memory_budget_bytes),
            labels_in_records=False,
        )
    encoder = _AudioEncoder(sample_rate)
    labels: list = []

    def encode(element) -> bytes:
        waveform, label = element
        labels.append(label.decode() if isinstance(label, bytes) else label)
        return encoder.encode(waveform, where=f"dataset element {len(labels) - 1}")

    store = record_store_from(
        dataset,
        encode_fn=encode,
        cache_dir=cache_dir,
        record_set=record_set,
        memory_budget_bytes=memory_budget_bytes,
    )
    if not labels:
        raise ValueError(
            f"{cache_dir} holds records of an earlier run but no class index; remove it"
        )
    if store.backend == "disk" and cache_dir is not None:
        class_ids, classes = _class_ids(labels, store.num_records)
        num_classes = len(classes) if classes is not None else int(class_ids.max()) + 1
        layout.save_class_index(cache_dir, record_set, class_ids, num_classes, classes)
    return _from_labels(store, labels)


class _AudioEncoder:
    """Waveforms -> audio Examples in the layout of a materialized record set."""

    def __init__(self, sample_rate: int | None):
        self._sample_rate = sample_rate

    def encode(self, waveform, *, where: str) -> bytes:
        samples = np.asarray(waveform.numpy() if isinstance(waveform, tf.Tensor) else waveform)
        if samples.ndim == 2 and samples.shape[1] == 1:
            samples = samples[:, 0]
        if samples.ndim != 1:
            raise ValueError(
                f"{where}: expected a mono waveform [n] or [n, 1], got {samples.shape}"
            )
        if samples.size == 0:
            raise ValueError(f"{where}: empty waveform")
        if samples.dtype.kind == "f":
            samples = np.round(np.clip(samples, -1.0, 32767 / 32768) * 32768)
        elif samples.dtype.kind not in "iu":
            raise ValueError(f"{where}: waveform dtype {samples.dtype} is not int16 or float")
        pcm = samples.astype("<i2")
        feature = {
            layout.AUDIO_KEY: examples.bytes_feature(pcm.tobytes()),
            layout.NUM_SAMPLES_KEY: examples.int64_feature(len(pcm)),
        }
        if self._sample_rate is not None:
            feature[layout.SAMPLE_RATE_KEY] = examples.int64_feature(self._sample_rate)
        return examples.serialize_example(feature)


def _check_csr(row_splits, values, num_records: int, where: str) -> None:
    """Every record in exactly one class: `values` is a permutation of the record numbers.

    `layout.load_csr` checked the shape of the CSR; the sampler gathers records by these values,
    so one out of range would fail only mid-epoch, inside the graph, without naming the index.
    """
    if len(values) != num_records or (len(row_splits) and row_splits[-1] != len(values)):
        raise layout.IndexFileError(
            f"{where}: the class index covers {len(values)} records (row_splits end at "
            f"{row_splits[-1] if len(row_splits) else None}) but the record set has {num_records}"
        )
    values_path = os.path.join(where, layout.VALUES_FILE)
    outside = np.flatnonzero((values < 0) | (values >= num_records))
    if len(outside):
        position = int(outside[0])
        raise layout.IndexFileError(
            f"{values_path}: entry {position} is record {int(values[position])}, outside "
            f"[0, {num_records})"
        )
    repeated = np.flatnonzero(np.bincount(values, minlength=num_records) != 1)
    if len(repeated):
        record = int(repeated[0])
        raise layout.IndexFileError(
            f"{values_path}: record {record} is listed "
            f"{int(np.count_nonzero(values == record))} times; every record belongs to one class"
        )
