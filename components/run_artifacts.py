"""A job's run directory split over its component's output artifacts.

The Beam jobs (materialize, indexing) write one run directory (`tfx_dynamic_inputs.layout`). Their
executors run the job with the `offset_index` artifact's URI as the run directory, then move the
parts that belong elsewhere:

- `examples/Split-<record_set>/` shards -> `<examples uri>/Split-<record_set>/`, so the
  `Examples` URI holds the split folders directly, as TFX requires. `shards.json` is rewritten
  to point at their new place, relative to the run directory as the layout specifies, so
  `RecordStore.open(<offset_index uri>, record_set)` keeps working.
- `index/pairs/` -> `<pair_index uri>/index/pairs/`.
- `index/<record_set>/{classes.txt, class_ids.npy, class_records/}` ->
  `<class_index uri>/index/<record_set>/`.

So each artifact URI is a run directory for the `tfx_dynamic_inputs.layout` helpers of its part.
Moves are renames: O(1) per file locally; on object stores a rename is a server-side copy. The
`pair_index` / `class_index` URI also gets a copy of the run's `summary.json`, last: the readers
check that the index there belongs to the run it commits (`layout.check_part`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable

import tensorflow as tf
from tfx import types
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs.materialize import common

_CLASS_INDEX_PARTS = (layout.CLASSES_FILE, layout.CLASS_IDS_FILE, layout.CLASS_RECORDS_INDEX)


class RunExecutor(base_beam_executor.BaseBeamExecutor):
    """Base of the executors whose Beam job writes a run directory."""

    def _make_beam_pipeline(self):
        # TFX's default is `beam.Pipeline(argv=beam_pipeline_args)`; the jobs' default pipeline
        # is that too, except that local multi_processing runs get the lean SDK workers.
        if self._make_beam_pipeline_fn is not None:
            return super()._make_beam_pipeline()
        return common.make_default_pipeline(self._beam_pipeline_args)


def clear_outputs(outputs: Iterable[types.Artifact]) -> None:
    """Removes what the output URIs hold: a retried execution may reuse them, and no shard or
    index file of an earlier attempt may survive next to the new ones.

    Args:
        outputs: the execution's output artifacts; what each URI holds is removed.
    """
    for artifact in outputs:
        if tf.io.gfile.exists(artifact.uri):
            tf.io.gfile.rmtree(artifact.uri)


def split_examples(
    run_dir: str, summary: dict, examples: types.Artifact, offset_index: types.Artifact
) -> list[str]:
    """Moves the run's shards into `examples`, describes it and `offset_index` (whose URI is
    `run_dir`); returns the record sets, sorted.

    Args:
        run_dir: the run folder (the offset index's URI).
        summary: the run's `summary.json` content (its rejects are recorded).
        examples: the Examples output artifact; gets the shards, split names and payload format.
        offset_index: the OffsetIndex output artifact; gets record sets, counts and rejects.

    Returns:
        The record set names, sorted.
    """
    record_sets = _record_sets_of(run_dir)
    for record_set in record_sets:
        _move_shards(run_dir, record_set, examples.uri)
    tf.io.gfile.rmtree(os.path.join(run_dir, layout.EXAMPLES_DIR))
    examples.split_names = artifact_utils.encode_split_names(record_sets)
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    offset_index.set_json_value_custom_property(artifacts.RECORD_SETS_PROPERTY, record_sets)
    offset_index.set_json_value_custom_property(
        artifacts.NUM_RECORDS_PROPERTY, {rs: _num_records(run_dir, rs) for rs in record_sets}
    )
    rejects = summary["rejects"]
    offset_index.set_int_custom_property(artifacts.NUM_REJECTS_PROPERTY, int(rejects["records"]))
    offset_index.set_json_value_custom_property(
        artifacts.REJECTS_BY_REASON_PROPERTY, dict(rejects["by_reason"])
    )
    offset_index.set_string_custom_property(artifacts.EXAMPLES_URI_PROPERTY, examples.uri)
    return record_sets


def move_class_index(run_dir: str, record_sets: list[str], index_uri: str) -> None:
    """Moves the class index of each record set into `<index_uri>/index/<record_set>/`.

    Args:
        run_dir: the run folder.
        record_sets: the labelled record sets.
        index_uri: the ClassIndex artifact's URI.
    """
    for record_set in record_sets:
        source = layout.index_dir(run_dir, record_set)
        target = layout.index_dir(index_uri, record_set)
        tf.io.gfile.makedirs(target)
        for part in _CLASS_INDEX_PARTS:
            path = os.path.join(source, part)
            if tf.io.gfile.isdir(path):
                _move_tree(path, os.path.join(target, part))
            elif tf.io.gfile.exists(path):
                tf.io.gfile.rename(path, os.path.join(target, part), overwrite=True)


def move_pair_index(run_dir: str, index_uri: str) -> None:
    """Moves the valid-pair index into `<index_uri>/index/pairs/`.

    Args:
        run_dir: the run folder.
        index_uri: the PairIndex artifact's URI.
    """
    _move_tree(layout.pairs_index_dir(run_dir), layout.pairs_index_dir(index_uri))


def commit_index(run_dir: str, index_uri: str) -> None:
    """Copies the run's `summary.json` to an index URI, once its parts are there: the copy
    commits them (`layout.check_part`).

    Args:
        run_dir: the run folder.
        index_uri: an index artifact's URI that holds the moved parts.
    """
    tf.io.gfile.copy(
        os.path.join(run_dir, layout.SUMMARY_FILE),
        os.path.join(index_uri, layout.SUMMARY_FILE),
        overwrite=True,
    )


def _record_sets_of(run_dir: str) -> list[str]:
    """Names of the record sets a run wrote (its `examples/Split-*` folders), sorted."""
    examples_dir = os.path.join(run_dir, layout.EXAMPLES_DIR)
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(examples_dir)]
    return sorted(n[len(layout.SPLIT_PREFIX) :] for n in names if n.startswith(layout.SPLIT_PREFIX))


def _move_shards(run_dir: str, record_set: str, examples_uri: str) -> None:
    """Moves a record set's shards into `<examples_uri>/Split-<record_set>/`, fixes shards.json."""
    source = layout.examples_dir(run_dir, record_set)
    target = os.path.join(examples_uri, f"{layout.SPLIT_PREFIX}{record_set}")
    _move_tree(source, target)
    shards_path = os.path.join(layout.index_dir(run_dir, record_set), layout.SHARDS_FILE)
    manifest = layout.load_json(shards_path)
    manifest["shards"] = [
        posixpath.relpath(
            posixpath.join(target, posixpath.relpath(posixpath.join(run_dir, shard), source)),
            run_dir,
        )
        for shard in manifest["shards"]
    ]
    layout.save_json(shards_path, manifest)


def _move_tree(source: str, target: str) -> None:
    """Moves every file below `source` to the same relative path below `target`."""
    for directory, _, files in tf.io.gfile.walk(source):
        relative = posixpath.relpath(directory, source)
        # No normpath: it would fold the `//` of `gs://`.
        target_dir = target if relative == "." else posixpath.join(target, relative)
        tf.io.gfile.makedirs(target_dir)
        for name in files:
            tf.io.gfile.rename(
                posixpath.join(directory, name), posixpath.join(target_dir, name), overwrite=True
            )
    tf.io.gfile.rmtree(source)


def _num_records(run_dir: str, record_set: str) -> int:
    shards = layout.load_json(
        os.path.join(layout.index_dir(run_dir, record_set), layout.SHARDS_FILE)
    )
    return int(shards["num_records"])
