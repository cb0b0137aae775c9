"""One typed handle for a materialized run: `open_run(uri) -> Run`.

A run is what the Beam jobs write (`tfx_dynamic_inputs.layout`): record sets with their offset
indexes, a valid-pair or group index, class indexes, and `summary.json`, which commits the run and
says what it recorded (the job, the sample rate or image storage, counts, rejects). In a TFX
pipeline the same run is split over the artifacts of one component execution
(`<component>/{examples,offset_index,pair_index,class_index}/<execution id>`,
`tfx_dynamic_inputs.run_artifacts`); `open_run` takes the run folder or any of those URIs.

The run is checked once, when it is opened (its `summary.json` commits it as ok, and every
artifact of it names the same run); what it recorded is read from it, never defaulted again:
`Run.sample_rate` is the rate the audio job stored, not 16000.

Example:

    run = open_run("runs/speakers")            # or ".../MaterializeAudio/offset_index/7"
    run.kind, run.sample_rate, run.record_sets  # ("audio", 16000, ("eval", "train"))
    store = run.store("train", StoreOptions(backend="disk"))
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import posixpath

import tensorflow as tf

from tfx_dynamic_inputs import component_keys, layout
from tfx_dynamic_inputs.inputs.arguments import choice, int_argument
from tfx_dynamic_inputs.inputs.record_store import BACKENDS, ON_DAMAGED, READERS, RecordStore
from tfx_dynamic_inputs.inputs.shard_checks import PayloadCheck

# The artifact output keys of one materialize (or index) component execution.
_EXAMPLES_KEYS = (component_keys.EXAMPLES_KEY, component_keys.INDEXED_EXAMPLES_KEY)
_ARTIFACT_KEYS = (
    *_EXAMPLES_KEYS,
    component_keys.OFFSET_INDEX_KEY,
    component_keys.PAIR_INDEX_KEY,
    component_keys.CLASS_INDEX_KEY,
)


@dataclasses.dataclass(frozen=True)
class StoreOptions:
    """How `Run.store` opens a record set (see `RecordStore.open`); checked when built.

    Args:
      backend: "auto" (memory when the shards fit in `memory_budget_bytes`), "memory" or "disk".
      memory_budget_bytes: the most shard bytes "auto" loads into memory.
      on_damaged: "fail" (a damaged record fails the read, naming it) or "skip" (counted).
      verify_crc: check each frame's CRCs, as `TFRecordDataset` does.
      reader: the disk backend's reader: "auto" (the native reader when it is built, else the
        Python reader), "native", "mapped" (the native reader over shards mapped into memory:
        no system call a record; the pages read count in the process's resident memory) or
        "python".

    Example:

        StoreOptions(backend="disk", on_damaged="skip")
    """

    backend: str = "auto"
    memory_budget_bytes: int = 1 << 30
    on_damaged: str = "fail"
    verify_crc: bool = True
    reader: str = "auto"

    def __post_init__(self):
        choice("backend", self.backend, BACKENDS)
        choice("on_damaged", self.on_damaged, ON_DAMAGED)
        choice("reader", self.reader, READERS)
        int_argument("memory_budget_bytes", self.memory_budget_bytes, minimum=0)
        if not isinstance(self.verify_crc, bool):
            raise TypeError(f"verify_crc must be a bool, got {self.verify_crc!r}")

    def open_store(
        self,
        run_dir: str,
        record_set: str,
        *,
        payload_check: PayloadCheck | None = None,
        budget_share: int = 1,
    ) -> RecordStore:
        """Opens `record_set` of the run at `run_dir` with these options (`RecordStore.open`).

        Args:
          run_dir: the run folder (or the TFX artifact holding its record sets).
          record_set: the record set's name, e.g. "train" or "x".
          payload_check: a check of each record's bytes (`parsing.example_check`), or None.
          budget_share: how many stores share `memory_budget_bytes` (each gets its part).

        Returns:
          The `RecordStore`.

        Raises:
          layout.IndexFileError, layout.RunCommitError: as `RecordStore.open`.
        """
        return RecordStore.open(
            run_dir,
            record_set,
            backend=self.backend,
            memory_budget_bytes=self.memory_budget_bytes // budget_share,
            on_damaged=self.on_damaged,
            verify_crc=self.verify_crc,
            payload_check=payload_check,
            reader=self.reader,
        )


class Run:
    """A committed run, opened by `open_run`: where its parts are and what it recorded.

    Attributes:
      uri: the run folder holding the offset indexes (a pipeline's `offset_index` artifact).
      run_id: the id `summary.json` commits.
      kind: the job that wrote it, `summary["job"]` ("pairs", "audio", or the index job's).
      record_sets: the record set names, sorted.
      pair_index_uri / class_index_uri: the folders holding `index/pairs` / the class indexes
        (the run folder, or the `pair_index` / `class_index` artifact), None when absent.

    Example:

        run = open_run("runs/speakers")
        run.sample_rate, run.config, run.rejects  # what the audio job recorded
        run.num_records("train"), run.has_class_index("train")
        train = run.store("train", StoreOptions(on_damaged="skip"))
    """

    def __init__(
        self,
        uri: str,
        summary: dict,
        pair_index_uri: str | None,
        class_index_uri: str | None,
    ):
        """Use `open_run`; this signature is internal."""
        self.uri = uri
        self._summary = summary
        self.run_id: str = summary[layout.RUN_ID_KEY]
        self.kind: str | None = summary.get("job")
        self.record_sets: tuple[str, ...] = tuple(sorted(summary.get("record_sets") or {}))
        self.pair_index_uri = pair_index_uri
        self.class_index_uri = class_index_uri

    @property
    def summary(self) -> dict:
        """A copy of the run's `summary.json`."""
        return dict(self._summary)

    @property
    def config(self) -> dict:
        """What the job was run with (`summary["config"]`)."""
        return dict(self._summary.get("config") or {})

    @property
    def sample_rate(self) -> int | None:
        """The rate (Hz) the audio job stored every record at; None for a run without audio."""
        return self.config.get("sample_rate")

    @property
    def image_storage(self) -> str | None:
        """ "encoded" or "raw" for a pairs run; None otherwise."""
        return self.config.get("image_storage")

    @property
    def raw_image_shape(self) -> tuple[int, int, int] | None:
        """(height, width, channels) of raw-stored images; None unless `image_storage == "raw"`."""
        if self.image_storage != "raw":
            return None
        height, width, channels = self.config["raw_size"]
        return int(height), int(width), int(channels)

    @property
    def rejects(self) -> dict:
        """`{"total", "records", "by_reason"}`: the inputs the job did not materialize."""
        return dict(self._summary.get("rejects") or {})

    def num_records(self, record_set: str) -> int:
        """Records in `record_set`, as the run recorded them.

        Args:
          record_set: one of `record_sets`.

        Returns:
          The number of records `summary.json` counts in it.

        Raises:
          KeyError: the run has no such record set (the message names those it has).

        Example:

            run.num_records("train")
        """
        return int(self._record_set(record_set)["num_records"])

    def has_class_index(self, record_set: str) -> bool:
        """Whether the run holds a class index of `record_set` (what `class_balanced` reads).

        Args:
          record_set: a record set name, e.g. "train".

        Returns:
          True when `class_index_uri` holds the class index of `record_set`.

        Example:

            if run.has_class_index("train"):
                dataset = class_balanced(
                    run, record_set="train", n_classes_per_batch=8, n_samples_per_class=4
                )
        """
        return self.class_index_uri is not None and tf.io.gfile.isdir(
            layout.class_records_dir(self.class_index_uri, record_set)
        )

    def store(self, record_set: str, options: StoreOptions | None = None) -> RecordStore:
        """The `RecordStore` of `record_set`, opened with `options` (default `StoreOptions()`).

        Args:
          record_set: one of `record_sets`.
          options: how the store is opened; None: `StoreOptions()`.

        Returns:
          The `RecordStore`.

        Raises:
          KeyError: the run has no such record set.
          layout.IndexFileError, layout.RunCommitError: as `RecordStore.open`.

        Example:

            store = run.store("train", StoreOptions(backend="disk"))
        """
        self._record_set(record_set)
        return (options or StoreOptions()).open_store(self.uri, record_set)

    def pairs(
        self,
        options: StoreOptions | None = None,
        *,
        check_examples: bool = False,
        on_invalid: str = "fail",
    ):
        """`(x_store, y_store, valid_pairs)` of a pairs run (see `open_pairs_run`): the valid
        pairs are a `ValidPairs`, or a `GroupPairs` when the run paired by group.

        Args:
          options: how the `x` and `y` stores are opened (they share `memory_budget_bytes`);
            None: `StoreOptions()`.
          check_examples, on_invalid: as in `open_pairs_run`.

        Returns:
          `(x_store, y_store, valid_pairs)`.

        Raises:
          FileNotFoundError: the run has no pair index.
          layout.IndexFileError, layout.RunCommitError: as `open_pairs_run`.

        Example:

            x_store, y_store, valid_pairs = open_run("runs/digits").pairs()
        """
        from tfx_dynamic_inputs.inputs.pairs import open_pairs_run

        if self.pair_index_uri is None:
            raise FileNotFoundError(f"run {self.run_id} at {self.uri} has no pair index")
        return open_pairs_run(
            self.uri,
            pair_index_dir=None if self.pair_index_uri == self.uri else self.pair_index_uri,
            store_options=options,
            check_examples=check_examples,
            on_invalid=on_invalid,
        )

    def _record_set(self, record_set: str) -> dict:
        stats = (self._summary.get("record_sets") or {}).get(record_set)
        if stats is None:
            close = difflib.get_close_matches(str(record_set), self.record_sets, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(
                f"run {self.run_id} at {self.uri} has no record set {record_set!r} (it has "
                f"{', '.join(self.record_sets) or 'none'}){hint}"
            )
        return stats

    def __repr__(self) -> str:
        sets = ", ".join(f"{name}={self.num_records(name)}" for name in self.record_sets)
        return f"Run({self.run_id}, kind={self.kind!r}, {sets}, uri={self.uri!r})"


def open_run(uri: str) -> Run:
    """Opens the committed run at `uri`: a run folder the materialize or index job wrote, or
    any artifact URI of one pipeline execution of their components (`examples`,
    `offset_index`, `pair_index`, `class_index`, `indexed_examples`).

    Every part of the run is checked to name the run `summary.json` commits, and the summary's
    fields to be of their types, so what `Run` reports is what the parts hold.

    Args:
      uri: the run folder, or an artifact URI of one component execution.

    Returns:
      The `Run`; its parts are found beside `uri` (the artifacts of the same execution).

    Raises:
      ValueError: `uri` is a file (`summary.json`, say), not a folder.
      FileNotFoundError: nothing at `uri` is a run, or its offset index artifact is missing.
      layout.IndexFileError: `summary.json` is damaged (a folder, truncated, not a JSON object,
        a field of the wrong type), a record set it counts has no `shards.json` or another
        count; the message is one line naming the file.
      layout.RunCommitError: the run is not committed as ok, names no run id (a run of an older
        version), or a part or artifact of it holds another run (both run ids named).

    Example:

        run = open_run("pipeline_root/MaterializeAudio/class_index/12")
        run.store("train").num_records
    """
    if not isinstance(uri, (str, os.PathLike)):
        raise TypeError(f"open_run takes a run folder path, got {uri!r:.200}")
    uri = os.fspath(uri)
    uri = uri.rstrip("/") or uri
    if tf.io.gfile.exists(uri) and not tf.io.gfile.isdir(uri):
        raise ValueError(
            f"{uri} is a file, not a run: open_run takes the run folder (for a "
            f"{layout.SUMMARY_FILE}, the folder holding it: {os.path.dirname(uri) or '.'}) or an "
            "artifact URI"
        )
    run_dir = _run_folder(uri)
    summary_path = os.path.join(run_dir, layout.SUMMARY_FILE)
    if not tf.io.gfile.exists(summary_path):
        raise FileNotFoundError(
            f"{uri} is not a run: no {summary_path} (a materialize output folder, or an artifact "
            "of a MaterializePairs / MaterializeAudio / IndexExamples execution)"
        )
    summary = layout.load_summary(run_dir)
    _check_record_sets(run_dir, summary)
    pair_dir = _part_folder(run_dir, component_keys.PAIR_INDEX_KEY, layout.pairs_index_dir)
    if pair_dir is not None:
        layout.check_part(pair_dir, layout.pairs_index_dir(pair_dir))
    class_dir = _part_folder(
        run_dir,
        component_keys.CLASS_INDEX_KEY,
        lambda folder: os.path.join(folder, layout.INDEX_DIR),
        has_part=_has_class_index,
    )
    if class_dir is not None:
        for record_set in summary.get("record_sets") or {}:
            class_records = layout.class_records_dir(class_dir, record_set)
            if tf.io.gfile.isdir(class_records):
                layout.check_part(class_dir, class_records)
    return Run(run_dir, summary, pair_dir, class_dir)


def _check_record_sets(run_dir: str, summary: dict) -> None:
    """Refuses a record set `summary.json` counts whose `shards.json` is missing or counts other
    records (a job writes the index of every record set it counts), and a `shards.json` in the
    run (counted or not) that names another run."""
    summary_path = os.path.join(run_dir, layout.SUMMARY_FILE)
    counted = summary.get("record_sets") or {}
    index_root = os.path.join(run_dir, layout.INDEX_DIR)
    on_disk = (
        {name.rstrip("/") for name in tf.io.gfile.listdir(index_root)}
        if tf.io.gfile.isdir(index_root)
        else set()
    )
    for record_set in sorted(on_disk | set(counted)):
        shards_path = os.path.join(layout.index_dir(run_dir, record_set), layout.SHARDS_FILE)
        expected = counted.get(record_set, {}).get("num_records")
        if not tf.io.gfile.exists(shards_path):
            if expected is not None:
                raise layout.IndexFileError(
                    f"{summary_path} counts {expected} records in {record_set!r} but "
                    f"{shards_path} is missing"
                )
            continue
        # Its shard paths are checked where the store is opened (`layout.load_shards`).
        manifest = layout.load_json(shards_path)
        if not isinstance(manifest, dict):
            raise layout.IndexFileError(
                f"{shards_path}: expected a JSON object, got {type(manifest).__name__}"
            )
        layout.check_committed(run_dir, layout.run_id_field(manifest, shards_path), shards_path)
        listed = manifest.get("num_records")
        if expected is not None and (not layout.is_count(listed) or listed != expected):
            raise layout.IndexFileError(
                f"{summary_path} counts {expected} records in {record_set!r} but "
                f"{shards_path} lists {listed!r:.200}"
            )


def _split_artifact(uri: str) -> tuple[str, str, str] | None:
    """`(component folder, output key, execution id)` of a TFX artifact URI of our components
    (`execution id` "" in the executor tests' flat layout), or None."""
    parent, _, last = uri.rpartition("/")
    if last in _ARTIFACT_KEYS:
        return parent, last, ""
    component, _, key = parent.rpartition("/")
    if key in _ARTIFACT_KEYS:
        return component, key, last
    return None


def _sibling(uri: str, key: str) -> str | None:
    parts = _split_artifact(uri)
    if parts is None:
        return None
    component, _, execution = parts
    return (
        posixpath.join(component, key, execution) if execution else posixpath.join(component, key)
    )


def _run_folder(uri: str) -> str:
    """The folder holding the offset indexes and `summary.json` of the run `uri` is part of."""
    if tf.io.gfile.exists(os.path.join(uri, layout.SUMMARY_FILE)) and tf.io.gfile.isdir(
        os.path.join(uri, layout.INDEX_DIR)
    ):
        parts = _split_artifact(uri)
        if parts is None or parts[1] == component_keys.OFFSET_INDEX_KEY:
            return uri
    offset_index = _sibling(uri, component_keys.OFFSET_INDEX_KEY)
    if offset_index is not None and tf.io.gfile.isdir(offset_index):
        return offset_index
    if offset_index is not None:
        raise FileNotFoundError(
            f"{uri} is an artifact of a run whose offset_index artifact {offset_index} is missing"
        )
    return uri


def _has_class_index(folder: str) -> bool:
    index_root = os.path.join(folder, layout.INDEX_DIR)
    if not tf.io.gfile.isdir(index_root):
        return False
    return any(
        tf.io.gfile.isdir(layout.class_records_dir(folder, name.rstrip("/")))
        for name in tf.io.gfile.listdir(index_root)
    )


def _part_folder(run_dir: str, key: str, part_path, has_part=None) -> str | None:
    """The folder holding a part of the run (`part_path(folder)` exists in it): the run folder,
    or the artifact `key` of the same execution, checked to hold the same run."""
    has_part = has_part or (lambda folder: tf.io.gfile.isdir(part_path(folder)))
    if has_part(run_dir):
        return run_dir
    sibling = _sibling(run_dir, key)
    if sibling is None or not has_part(sibling):
        return None
    layout.check_same_run(run_dir, sibling)
    return sibling
