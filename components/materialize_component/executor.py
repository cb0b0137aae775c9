"""Executors of the materialize components: run the Beam stage, then map the run onto artifacts.

The Beam stage writes one run directory (`components.layout`). The executor runs it with the
`offset_index` artifact's URI as the run directory, then moves the parts that belong elsewhere:

- `examples/Split-<record_set>/` shards -> `<examples uri>/Split-<record_set>/`, so the
  `Examples` URI holds the split folders directly, as TFX requires. `shards.json` is rewritten
  to point at their new place, relative to the run directory as the layout specifies, so
  `RecordStore.open(<offset_index uri>, record_set)` keeps working.
- `index/pairs/` -> `<pair_index uri>/index/pairs/`.
- `index/<record_set>/{classes.txt, class_ids.npy, class_records/}` ->
  `<class_index uri>/index/<record_set>/`.

So each artifact URI is a run directory for the `components.layout` helpers of its part. Moves
are renames: O(1) per file locally; on object stores a rename is a server-side copy. The
`pair_index` / `class_index` URI also gets a copy of the run's `summary.json`, last: the readers
check that the index there belongs to the run it commits (`layout.check_part`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tfx import types
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from components import artifacts, layout
from components import component_keys as keys
from components.materialize import AudioConfig, PairsConfig, common, config, run_audio, run_pairs

_CLASS_INDEX_PARTS = (layout.CLASSES_FILE, layout.CLASS_IDS_FILE, layout.CLASS_RECORDS_INDEX)


class _MaterializeExecutor(base_beam_executor.BaseBeamExecutor):
    """Shared `Do`: run the job into the offset index URI, then split the run over artifacts."""

    _CONFIG_CLASS: type[PairsConfig | AudioConfig]
    # The job's `run_*` function; staticmethod, so that it is not bound to the executor.
    _RUN_JOB: Callable[..., dict]
    _INDEX_KEY: str

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        raise NotImplementedError

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        raise NotImplementedError

    def _make_beam_pipeline(self):
        # TFX's default is `beam.Pipeline(argv=beam_pipeline_args)`; the jobs' default pipeline
        # is that too, except that local multi_processing runs get the lean SDK workers.
        if self._make_beam_pipeline_fn is not None:
            return super()._make_beam_pipeline()
        return common.make_default_pipeline(self._beam_pipeline_args)

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[keys.EXAMPLES_KEY])
        offset_index = artifact_utils.get_single_instance(output_dict[keys.OFFSET_INDEX_KEY])
        index = artifact_utils.get_single_instance(output_dict[self._INDEX_KEY])
        run_dir = offset_index.uri
        # A retried execution may reuse its output URIs: start from empty ones, so no shard or
        # index file of an earlier attempt survives next to the new ones.
        for artifact in (examples, offset_index, index):
            if tf.io.gfile.exists(artifact.uri):
                tf.io.gfile.rmtree(artifact.uri)

        job_config = config.from_flat(
            self._CONFIG_CLASS, {**exec_properties, "output_dir": run_dir}
        )
        summary = self._RUN_JOB(job_config, make_pipeline=self._make_beam_pipeline)
        record_sets = record_sets_of(run_dir)
        for record_set in record_sets:
            move_shards(run_dir, record_set, examples.uri)
        tf.io.gfile.rmtree(os.path.join(run_dir, layout.EXAMPLES_DIR))
        self._move_index(run_dir, record_sets, index.uri)
        tf.io.gfile.copy(
            os.path.join(run_dir, layout.SUMMARY_FILE),
            os.path.join(index.uri, layout.SUMMARY_FILE),
            overwrite=True,
        )

        examples.split_names = artifact_utils.encode_split_names(record_sets)
        examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        offset_index.set_json_value_custom_property(
            artifacts.RECORD_SETS_PROPERTY, list(record_sets)
        )
        offset_index.set_json_value_custom_property(
            artifacts.NUM_RECORDS_PROPERTY,
            {rs: _num_records(run_dir, rs) for rs in record_sets},
        )
        rejects = summary.get("rejects", {})
        offset_index.set_int_custom_property(
            artifacts.NUM_REJECTS_PROPERTY, int(rejects.get("records", 0))
        )
        offset_index.set_json_value_custom_property(
            artifacts.REJECTS_BY_REASON_PROPERTY, dict(rejects.get("by_reason", {}))
        )
        offset_index.set_string_custom_property(artifacts.EXAMPLES_URI_PROPERTY, examples.uri)
        self._describe_index(index, record_sets)


class PairsExecutor(_MaterializeExecutor):
    """Runs `components.materialize.run_pairs`; `pair_index` gets `index/pairs/`."""

    _CONFIG_CLASS = PairsConfig
    _RUN_JOB = staticmethod(run_pairs)
    _INDEX_KEY = keys.PAIR_INDEX_KEY

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        move_tree(layout.pairs_index_dir(run_dir), layout.pairs_index_dir(index_uri))

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        row_splits, _ = layout.load_csr(layout.pairs_index_dir(index.uri))
        index.set_int_custom_property(artifacts.NUM_PAIRS_PROPERTY, int(row_splits[-1]))


class AudioExecutor(_MaterializeExecutor):
    """Runs `components.materialize.run_audio`; `class_index` gets each set's class index."""

    _CONFIG_CLASS = AudioConfig
    _RUN_JOB = staticmethod(run_audio)
    _INDEX_KEY = keys.CLASS_INDEX_KEY

    def _move_index(self, run_dir: str, record_sets: list[str], index_uri: str) -> None:
        for record_set in record_sets:
            source = layout.index_dir(run_dir, record_set)
            target = layout.index_dir(index_uri, record_set)
            tf.io.gfile.makedirs(target)
            for part in _CLASS_INDEX_PARTS:
                path = os.path.join(source, part)
                if tf.io.gfile.isdir(path):
                    move_tree(path, os.path.join(target, part))
                elif tf.io.gfile.exists(path):
                    tf.io.gfile.rename(path, os.path.join(target, part), overwrite=True)

    def _describe_index(self, index: types.Artifact, record_sets: list[str]) -> None:
        num_classes = {}
        for record_set in record_sets:
            classes = os.path.join(layout.index_dir(index.uri, record_set), layout.CLASSES_FILE)
            num_classes[record_set] = len(layout.load_lines(classes))
        index.set_json_value_custom_property(artifacts.NUM_CLASSES_PROPERTY, num_classes)


def record_sets_of(run_dir: str) -> list[str]:
    """Names of the record sets a run wrote (its `examples/Split-*` folders), sorted."""
    examples_dir = os.path.join(run_dir, layout.EXAMPLES_DIR)
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(examples_dir)]
    return sorted(n[len(layout.SPLIT_PREFIX) :] for n in names if n.startswith(layout.SPLIT_PREFIX))


def move_shards(run_dir: str, record_set: str, examples_uri: str) -> None:
    """Moves a record set's shards into `<examples_uri>/Split-<record_set>/`, fixes shards.json."""
    source = layout.examples_dir(run_dir, record_set)
    target = os.path.join(examples_uri, f"{layout.SPLIT_PREFIX}{record_set}")
    move_tree(source, target)
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


def move_tree(source: str, target: str) -> None:
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
