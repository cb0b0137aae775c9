"""Custom TFX artifact types for the indexes of a materialized run.

A materialized run (see `tfx_dynamic_inputs.layout`) is split over artifacts: the TFRecord shards
form a standard `Examples` artifact (`Split-<record_set>/` folders directly under its URI, so
StatisticsGen, SchemaGen, ExampleValidator and Trainer read it), and each index is its own
artifact whose URI holds the index's part of the run layout, so the `tfx_dynamic_inputs.layout`
helpers read it with the artifact URI as the run directory:

- `OffsetIndex`: `index/<record_set>/{offsets.npy, shards.json, ids.txt}`, `summary.json` and
  `rejects.jsonl`. Shard paths in `shards.json` are relative to the `Examples` URI, which the
  artifact records in its `examples_uri` custom property (and which the trainer takes as input).
- `PairIndex`: `index/pairs/{row_splits,values}.npy`, the valid `y` records of each `x` record.
- `ClassIndex`: `index/<record_set>/{classes.txt, class_ids.npy, class_records/}`.

Kubeflow Pipelines v2 recovers a custom type in the container from its schema title, which is
the `TYPE_NAME`: it must be an importable `<module>.<Class>` path with a single dot, matching
`^[a-z][a-z0-9-_]{2,20}[.][A-Z][a-zA-Z0-9-_]{2,49}$`. The `tfx_dynamic_inputs` package exposes these
classes lazily under that name, without importing TFX for users of the tf.data inputs. Custom
types declare no `PROPERTIES` (KFP v2 rejects them); metadata lives in custom properties.
"""

from __future__ import annotations

from tfx.types import artifact

# Custom property keys, shared by the materialize and trainer components.
EXAMPLES_URI_PROPERTY = "examples_uri"
RECORD_SETS_PROPERTY = "record_sets"  # JSON list of the record set (split) names
NUM_RECORDS_PROPERTY = "num_records"  # JSON {record_set: count}
NUM_REJECTS_PROPERTY = "num_rejects"  # rejected input records (files, manifest rows)
REJECTS_BY_REASON_PROPERTY = "rejects_by_reason"  # JSON {reason: count}, pair entries included
NUM_PAIRS_PROPERTY = "num_valid_pairs"
NUM_CLASSES_PROPERTY = "num_classes"  # JSON {record_set: count}
# Of the ClassIndex and PairIndex artifacts IndexExamples writes (the trainers read the first).
LABEL_FEATURE_PROPERTY = "label_feature"  # the feature the classes come from
LABEL_KIND_PROPERTY = "label_kind"  # "int64" (labels are class ids) or "bytes" (names)
BY_GROUP_PROPERTY = "by_group"  # 1: valid pairs by group (layout.has_group_index); 0: a pair list


class OffsetIndex(artifact.Artifact):
    """Per record set: (shard, offset, length) of every record, shard list and source ids."""

    TYPE_NAME = "tfx_dynamic_inputs.OffsetIndex"


class PairIndex(artifact.Artifact):
    """CSR over the `x` records: the valid `y` record numbers of each."""

    TYPE_NAME = "tfx_dynamic_inputs.PairIndex"


class ClassIndex(artifact.Artifact):
    """Per labelled record set: class vocabulary, class of each record, records of each class."""

    TYPE_NAME = "tfx_dynamic_inputs.ClassIndex"


ARTIFACT_TYPES = (OffsetIndex, PairIndex, ClassIndex)
