"""Executor of `IndexExamples`: run the indexing job, then map the run onto the output artifacts.

As the materialize executors do (`tfx_dynamic_inputs.run_artifacts`): the job writes one run
directory, the `offset_index` URI; its shards then move into
`<indexed_examples>/Split-<record_set>/` (`shards.json` rewritten to point there), its class index
parts into `<class_index>/index/<record_set>/`, its pair index into `<pair_index>/index/pairs/`, and
each index URI gets a copy of `summary.json`, so the readers (`RecordStore.open`, `class_balanced`,
`ValidPairs.load`, `open_pairs_run`, `layout.load_group_index`) check that every part belongs to
the run it commits.
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from tfx_dynamic_inputs import artifacts, execution, layout, run_artifacts
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.index_component.indexing import IndexConfig, run_index
from tfx_dynamic_inputs.materialize.config import ShardingConfig

# The file format of Examples artifacts that do not say (what ExampleGen writes): TFRecord, with
# any compression `ReadFromTFRecord` detects.
_TFRECORD_FORMAT = "tfrecords_gzip"


class Executor(execution.LoggedExecutor, run_artifacts.RunExecutor):
    """Indexes the input `examples` into `indexed_examples`, `offset_index` and the class and/or
    pair index."""

    def execute(self, run: execution.Execution) -> None:
        """Runs the indexing job into `offset_index`, then moves its parts to the other outputs.

        Args:
          run: the execution: the `examples` input, the indexing parameters, the outputs.

        Raises:
          ValueError: unreadable input Examples, a missing split, or outputs that do not match
            the parameters; the job's own errors (too many rejects, an empty record set).
        """
        exec_properties = run.properties
        inputs = input_splits(run.input(keys.EXAMPLES_KEY), exec_properties)
        examples = run.output(keys.INDEXED_EXAMPLES_KEY)
        offset_index = run.output(keys.OFFSET_INDEX_KEY)
        class_index = run.optional_output(keys.CLASS_INDEX_KEY)
        pair_index = run.optional_output(keys.PAIR_INDEX_KEY)
        run_artifacts.clear_outputs(
            a for a in (examples, offset_index, class_index, pair_index) if a is not None
        )

        run_dir = offset_index.uri
        config = IndexConfig(
            inputs=inputs,
            output_dir=run_dir,
            label_feature=exec_properties.get(keys.LABEL_FEATURE_KEY) or "",
            id_feature=exec_properties.get(keys.ID_FEATURE_KEY) or "",
            group_feature=exec_properties.get(keys.GROUP_FEATURE_KEY) or "",
            pairs=exec_properties.get(keys.PAIRS_KEY) or "",
            pairs_format=exec_properties.get(keys.PAIRS_FORMAT_KEY) or "auto",
            sharding=ShardingConfig(
                **{
                    name: exec_properties[key]
                    for name, key in (
                        ("num_shards", keys.NUM_SHARDS_KEY),
                        ("max_shard_bytes", keys.MAX_SHARD_BYTES_KEY),
                    )
                    if exec_properties.get(key) is not None
                }
            ),
            **(
                {"max_reject_fraction": exec_properties[keys.MAX_REJECT_FRACTION_KEY]}
                if exec_properties.get(keys.MAX_REJECT_FRACTION_KEY) is not None
                else {}
            ),
        )
        if bool(class_index) != bool(config.label_feature) or bool(pair_index) != config.paired:
            raise ValueError(
                "the class_index / pair_index outputs must match label_feature / the pairing"
            )
        summary = run_index(config, make_pipeline=self._make_beam_pipeline)

        record_sets = run_artifacts.split_examples(run_dir, summary, examples, offset_index)
        if class_index is not None:
            run_artifacts.move_class_index(run_dir, record_sets, class_index.uri)
            labels = summary["labels"]
            class_index.set_string_custom_property(
                artifacts.LABEL_FEATURE_PROPERTY, labels["feature"]
            )
            class_index.set_string_custom_property(artifacts.LABEL_KIND_PROPERTY, labels["kind"])
            class_index.set_json_value_custom_property(
                artifacts.NUM_CLASSES_PROPERTY, {rs: labels["num_classes"] for rs in record_sets}
            )
        if pair_index is not None:
            run_artifacts.move_pair_index(run_dir, pair_index.uri)
            pair_index.set_int_custom_property(
                artifacts.NUM_PAIRS_PROPERTY, int(summary["pairs"]["num_pairs"])
            )
            pair_index.set_int_custom_property(
                artifacts.BY_GROUP_PROPERTY, int(layout.has_group_index(pair_index.uri))
            )
        # Last, once its parts are all there: the copy commits each index.
        for index in (class_index, pair_index):
            if index is not None:
                run_artifacts.commit_index(run_dir, index.uri)


def input_splits(source: types.Artifact, exec_properties: dict[str, Any]) -> dict[str, str]:
    """Record set -> the split folder of `source` it is read from: `x` and `y` from `x_split` and
    `y_split` for a pairing, else every split under its own name.

    Args:
      source: the input `Examples`.
      exec_properties: the execution parameters (`x_split`, `y_split`).

    Returns:
      Record set name -> split folder URI.

    Raises:
      ValueError: Examples that are not TFRecord files of `tf.train.Example`, that have no
        splits, or that lack a named split.
    """
    payload = examples_utils.get_payload_format(source)
    if payload != example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE:
        raise ValueError(
            "IndexExamples reads tf.train.Example records; the input Examples hold "
            f"{example_gen_pb2.PayloadFormat.Name(payload)}"
        )
    file_format = examples_utils.get_file_format(source)
    if file_format != _TFRECORD_FORMAT:
        raise ValueError(
            f"IndexExamples reads TFRecord files; the input Examples are {file_format!r}"
        )
    available = artifact_utils.decode_split_names(source.split_names)
    if not available:
        raise ValueError(f"the input Examples at {source.uri} have no splits")
    x_split = exec_properties.get(keys.X_SPLIT_KEY)
    y_split = exec_properties.get(keys.Y_SPLIT_KEY)
    chosen = {layout.X_RECORD_SET: x_split, layout.Y_RECORD_SET: y_split} if x_split else None
    for split in (chosen or {}).values():
        if split not in available:
            raise ValueError(f"split {split!r} is not in the input Examples (splits {available})")
    return {
        record_set: artifact_utils.get_split_uri([source], split)
        for record_set, split in (chosen or {s: s for s in available}).items()
    }
