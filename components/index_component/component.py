"""`IndexExamples`: any TFX `Examples` -> the indexed record sets the trainers read.

ExampleGen and Transform write GZIP-compressed TFRecord files, which cannot be read by record
number. This Beam-backed component reads the splits of any `Examples` artifact of
`tf.train.Example`s (GZIP or not) and writes what the materialize components write for raw
files:

- `indexed_examples`: a standard `Examples` artifact of uncompressed, sorted shards (the same
  records, less the rejected ones), which StatisticsGen, Transform and Evaluator read as well;
- `offset_index` (`OffsetIndex`): where every record is, for by-index reads;
- `class_index` (`ClassIndex`, with `label_feature`): the class of every record, one vocabulary
  for all splits (int64 labels are class ids as they stand; bytes labels are names numbered in
  sorted order), for `ClassBalancedTrainer`;
- `pair_index` (`PairIndex`, with `pairs` or `group_feature`): the valid `y` of each `x` record,
  from a pair list over `id_feature` values (the pairs job's JSON Lines / CSV formats) or from a
  shared group (x and y records with equal `group_feature` values may pair), for
  `PairsTrainer`. A pairing indexes the input splits `x_split` and `y_split` as
  the record sets `x` and `y`; without one, every input split is indexed under its own name.

A record that lacks a feature the indexes need, or holds it with another type or several values,
is a counted reject (reason and source in `<offset_index>/rejects.jsonl`, counts in
`summary.json` and the `num_rejects` / `rejects_by_reason` properties), as are repeated ids and
x records left without a y; the component fails when rejects exceed `max_reject_fraction` of the
records read (default 0.1), or when a record set is left empty.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_dynamic_inputs import artifacts
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.index_component import executor


class IndexExamplesSpec(types.ComponentSpec):
    """`IndexExamples`' spec: the indexing parameters, the input `examples`, and the indexed
    Examples, offset index and optional class and pair indexes."""

    PARAMETERS = {
        keys.LABEL_FEATURE_KEY: ExecutionParameter(type=str, optional=True),
        keys.ID_FEATURE_KEY: ExecutionParameter(type=str, optional=True),
        keys.X_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
        keys.Y_SPLIT_KEY: ExecutionParameter(type=str, optional=True),
        keys.PAIRS_KEY: ExecutionParameter(type=str, optional=True),
        keys.PAIRS_FORMAT_KEY: ExecutionParameter(type=str, optional=True),
        keys.GROUP_FEATURE_KEY: ExecutionParameter(type=str, optional=True),
        keys.NUM_SHARDS_KEY: ExecutionParameter(type=int, optional=True),
        keys.MAX_SHARD_BYTES_KEY: ExecutionParameter(type=int, optional=True),
        keys.MAX_REJECT_FRACTION_KEY: ExecutionParameter(type=float, optional=True),
    }
    INPUTS = {
        keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
    }
    OUTPUTS = {
        keys.INDEXED_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        keys.OFFSET_INDEX_KEY: ChannelParameter(type=artifacts.OffsetIndex),
        keys.CLASS_INDEX_KEY: ChannelParameter(type=artifacts.ClassIndex, optional=True),
        keys.PAIR_INDEX_KEY: ChannelParameter(type=artifacts.PairIndex, optional=True),
    }


class IndexExamples(base_beam_component.BaseBeamComponent):
    """Beam job: Examples (any splits, GZIP or not) -> indexed Examples, OffsetIndex, and a
    ClassIndex and/or PairIndex."""

    SPEC_CLASS = IndexExamplesSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        *,
        label_feature: str | None = None,
        id_feature: str | None = None,
        x_split: str | None = None,
        y_split: str | None = None,
        pairs: str | None = None,
        pairs_format: str | None = None,
        group_feature: str | None = None,
        num_shards: int | None = None,
        max_shard_bytes: int | None = None,
        max_reject_fraction: float | None = None,
    ):
        """Checks the indexing settings and declares the outputs they call for.

        Args:
          examples: the `Examples` to index (ExampleGen's, Transform's `transformed_examples`).
          label_feature: int64 or bytes feature holding each record's class: a ClassIndex.
          id_feature: int64 or bytes feature holding each record's id (unique within a split):
            the ids a pair list names, and the record order; default `<file name>:<position>`.
          x_split: the input split paired as record set `x`.
          y_split: the input split paired as record set `y`.
          pairs: a valid-pair list (`{"x": id, "y": [ids]}` JSON Lines, or an `x,y` CSV edge
            list) over `id_feature` values.
          pairs_format: "auto" | "jsonl" | "csv".
          group_feature: int64 or bytes feature; x and y records with equal values may pair.
          num_shards: shards per record set (default: shards of up to `max_shard_bytes`).
          max_shard_bytes: the largest shard (default 128 MiB).
          max_reject_fraction: the largest share of records read that may be rejected (0.1).

        Raises:
          ValueError: nothing to index, both pairings, a pairing without its splits, splits
            without a pairing, or a pair list without `id_feature`.

        Example:

            IndexExamples(transform.outputs["transformed_examples"], label_feature="label")
        """
        paired = bool(pairs or group_feature)
        if pairs and group_feature:
            raise ValueError("pair by a pair list (pairs) or by group_feature, not both")
        if paired and not (x_split and y_split):
            raise ValueError("a pairing (pairs or group_feature) needs x_split and y_split")
        if not paired and (x_split or y_split):
            raise ValueError(
                "x_split and y_split name the splits of a pairing: set pairs or group_feature"
            )
        if pairs and not id_feature:
            raise ValueError("a pair list names records by id: set id_feature")
        if not (paired or label_feature):
            raise ValueError("nothing to index: set label_feature and/or a pairing")
        super().__init__(
            spec=IndexExamplesSpec(
                examples=examples,
                label_feature=label_feature,
                id_feature=id_feature,
                x_split=x_split,
                y_split=y_split,
                pairs=pairs,
                pairs_format=pairs_format,
                group_feature=group_feature,
                num_shards=num_shards,
                max_shard_bytes=max_shard_bytes,
                max_reject_fraction=max_reject_fraction,
                indexed_examples=types.Channel(type=standard_artifacts.Examples),
                offset_index=types.Channel(type=artifacts.OffsetIndex),
                class_index=types.Channel(type=artifacts.ClassIndex) if label_feature else None,
                pair_index=types.Channel(type=artifacts.PairIndex) if paired else None,
            )
        )
