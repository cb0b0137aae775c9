"""Plan ids: which records each record set keeps, the number and shard of each (its
`shards.ShardPlan`), and the valid pairs that decide which x are kept; then every screened
record assigned to its shard, or rejected when the plan leaves it out.

Records are numbered by sorted id (`layout`'s contract), so the plans are made from the id
tables alone (`stages.CollectIdTables`); the payloads meet their plan only in `AssignToShards`.
Three plans: every record of every set (`PlanRecordSets`); x with a valid pair in a pair list
(`PlanByPairList`); x whose group has a y (`PlanByGroup`). The two pairings yield a `Pairing`,
which `stages.WritePairing` turns into the valid-pair index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs.materialize import (
    common,
    group_pairing,
    pair_index,
    pair_list,
    rejects,
    shards,
)
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.shards import IdTable, ShardPlan

REJECTED = common.REJECTED


class Pairing(NamedTuple):
    """How x records pair with y records, planned.

    Attributes:
        selection: singleton PCollection, the `pair_index.XSelection` (pair list) or
            `group_pairing.GroupSelection` (groups) that numbers the candidates.
        plans: singleton PCollection, dict record_set -> ShardPlan.
        edges: the pair list's resolved edges (`pair_index.ResolvePairList`); None by group.
        rejects: PCollection[Reject] of the pair list's entries; empty by group.
        num_lines: singleton PCollection, the lines the pair list holds; None by group.
    """

    selection: beam.PCollection
    plans: beam.PCollection
    edges: beam.PCollection | None
    rejects: beam.PCollection
    num_lines: beam.PCollection | None


def _plan_record_sets(
    record_sets: tuple[str, ...], tables: dict[str, IdTable], sharding: ShardingConfig
) -> dict[str, ShardPlan]:
    return {rs: shards.plan_shards(rs, common.table(tables, rs), sharding) for rs in record_sets}


@beam.ptransform_fn
def PlanRecordSets(
    begin: beam.pvalue.PBegin,
    record_sets: tuple[str, ...],
    tables: beam.PCollection,
    sharding: ShardingConfig,
) -> beam.PCollection:
    """Plans every screened record of each record set (no pairing leaves any out).

    Args:
        begin: the pipeline's root.
        record_sets: the record sets to plan (one left without records gets an empty plan).
        tables: PCollection[(record_set, IdTable)] (`CollectIdTables`).
        sharding: how each record set is cut into shards.

    Returns:
        A singleton PCollection, dict record_set -> ShardPlan.

    Example:
        plans = begin | "Plan" >> PlanRecordSets(("train", "eval"), tables, ShardingConfig())
    """
    return (
        begin
        | "RecordSets" >> beam.Create([record_sets])
        | "Plans" >> beam.Map(_plan_record_sets, beam.pvalue.AsDict(tables), sharding)
    )


@beam.ptransform_fn
def PlanByPairList(
    begin: beam.pvalue.PBegin,
    pairs_path: str,
    pairs_format: str,
    tables: beam.PCollection,
    rejected_tables: beam.PCollection,
    sharding: ShardingConfig,
) -> Pairing:
    """Reads the pair list, resolves its ids against the candidates, and plans the x left with
    a valid pair and every y.

    Args:
        begin: the pipeline's root.
        pairs_path: the pair list (JSON Lines or a CSV edge list, any Beam path).
        pairs_format: "auto" (by extension), "jsonl" or "csv".
        tables: PCollection[(record_set, IdTable)] of the candidates (`CollectIdTables`).
        rejected_tables: PCollection[(record_set, IdTable)] of the rejected ids
            (`CollectRejectedIds`): an entry naming one is told apart from an unknown id.
        sharding: how each record set is cut into shards.

    Returns:
        The `Pairing`, with `edges`, `rejects` and `num_lines` of the pair list.

    Example:
        pairing = begin | "PairList" >> PlanByPairList(
            "pairs.jsonl", "auto", tables, rejected_tables, ShardingConfig())
    """
    resolved = begin | "PairList" >> pair_index.ResolvePairList(
        pairs_path, pair_list.resolve_format(pairs_path, pairs_format), tables, rejected_tables
    )
    selected = resolved.edges | "Select" >> pair_index.SelectRecords(tables, sharding)
    return Pairing(
        selected.selection, selected.plans, resolved.edges, resolved.rejects, resolved.num_lines
    )


@beam.ptransform_fn
def CollectGroupTables(batches: beam.PCollection) -> beam.PCollection:
    """The group of every candidate, by record set.

    Args:
        batches: the input, PCollection[(record_set, (ids, groups))], aligned lists.

    Returns:
        PCollection[(record_set, group_pairing.GroupTable)], for `PlanByGroup`.

    Example:
        group_tables = group_batches | "GroupTables" >> CollectGroupTables()
    """
    return batches | "CollectGroups" >> beam.CombinePerKey(group_pairing.CollectGroups())


@beam.ptransform_fn
def PlanByGroup(
    begin: beam.pvalue.PBegin,
    group_tables: beam.PCollection,
    tables: beam.PCollection,
    sharding: ShardingConfig,
    missing_detail: dict[str, str],
    record_noun: str = "image",
) -> Pairing:
    """Plans the y with a group and the x whose group has a y (`group_pairing.select_by_group`).

    Args:
        begin: the pipeline's root.
        group_tables: PCollection[(record_set, GroupTable)] (`CollectGroupTables`, or the pairs
            job's `group_pairing.ReadGroups`).
        tables: PCollection[(record_set, IdTable)] of the candidates (`CollectIdTables`).
        sharding: how each record set is cut into shards.
        missing_detail: record_set -> what a reject says of a candidate without a group.
        record_noun: what a reject calls a record ("image", "record").

    Returns:
        The `Pairing`, without edges, rejects or line count.

    Example:
        pairing = begin | "ByGroup" >> PlanByGroup(
            group_tables, tables, ShardingConfig(), {"x": "no group", "y": "no group"})
    """
    selection = (
        begin
        | "Once" >> beam.Create([None])
        | "Select"
        >> beam.Map(
            group_pairing.select_by_group,
            beam.pvalue.AsDict(group_tables),
            beam.pvalue.AsDict(tables),
            sharding,
            missing_detail,
            record_noun,
        )
    )
    plans = selection | "Plans" >> beam.Map(lambda chosen: chosen.plans)
    return Pairing(selection, plans, None, begin | "NoPairRejects" >> beam.Create([]), None)


# (record set, id) -> the `source` a reject of that record names.
RejectSource = Callable[[str, str], str]


class _AssignToShards(beam.DoFn):
    def __init__(self, source_of: RejectSource):
        super().__init__()
        self._source_of = source_of

    def process(self, batch, plans: dict[str, ShardPlan], selection, vocabulary):
        record_set, ids, payloads = batch[0], batch[1], batch[2]
        if selection is not None and record_set in selection.record_sets:
            numbers, refused = selection.assign(record_set, ids)
        else:
            numbers, refused = plans[record_set].ids.lookup(ids), []
        for i, reason, detail in refused:
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                rejects.Reject(
                    self._source_of(record_set, ids[i]), reason, detail, record_set, ids[i]
                ),
            )
        kept = np.flatnonzero(numbers >= 0).tolist()
        class_ids = (
            vocabulary.class_ids([batch[3][i] for i in kept])
            if vocabulary is not None
            else np.full([len(kept)], -1, np.int64)
        )
        yield from shards.group_by_shard(
            plans[record_set], numbers[kept], [payloads[i] for i in kept], class_ids
        )


class AssignToShards(beam.PTransform):
    """Screened batches -> the shard batches `WriteShards` takes; the records the plan leaves
    out (an x without a valid pair, an image without one group) become rejects.

    Args:
        plans: singleton PCollection, dict record_set -> ShardPlan.
        source_of: (record set, id) -> what a reject of that record names as its source.
        selection: singleton PCollection of the `Pairing`'s selection, or None without one.
        vocabulary: singleton PCollection of an object with `class_ids(labels) -> int64 [n]`
            (`screening.Vocabulary`), whose labels are each batch's fourth field; None for
            unlabelled records.

    Returns (of `expand`):
        `DoOutputsTuple`: `shard_batches`, PCollection[((record_set, shard), [ShardRecord])],
        and `REJECTED`.

    Example:
        assigned = batches | "Assign" >> AssignToShards(pairing.plans, source_of, pairing.selection)
    """

    def __init__(
        self,
        plans: beam.PCollection,
        source_of: RejectSource,
        selection: beam.PCollection | None = None,
        vocabulary: beam.PCollection | None = None,
    ):
        super().__init__()
        self._plans = plans
        self._source_of = source_of
        self._selection = selection
        self._vocabulary = vocabulary

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        """Numbers each batch's records by the plans and groups them by shard.

        Args:
            batches: PCollection of screened batches `(record_set, ids, payloads[, labels])`.

        Returns:
            `DoOutputsTuple` with `shard_batches` and `REJECTED`.
        """

        def singleton(side: beam.PCollection | None):
            return None if side is None else beam.pvalue.AsSingleton(side)

        return batches | "Assign" >> beam.ParDo(
            _AssignToShards(self._source_of),
            beam.pvalue.AsSingleton(self._plans),
            singleton(self._selection),
            singleton(self._vocabulary),
        ).with_outputs(REJECTED, main="shard_batches")
