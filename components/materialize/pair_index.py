"""The valid-pair index of the pairs job: the pair list resolved against the decoded images
(`ResolvePairList`), the x images with a valid pair left chosen as records (`SelectRecords`),
and the CSR index of each x record's valid y record numbers (`WritePairIndex`).

Only ids, record numbers and edges pass through here, never images.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, common, pair_list, rejects, shards
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.gather import Gathered
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.shards import IdTable, ShardPlan
from tfx_dynamic_inputs.materialize.verdict import Verdict

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
REJECTED = common.REJECTED


@dataclasses.dataclass(frozen=True)
class XSelection:
    """Which decoded x images become records.

    `candidates`: the sorted ids of every x image that decoded; `candidate_record` int64
    [num candidates]: its record number in `plan`, or -1 when no valid pair is left for it;
    `mentioned` bool [num candidates]: whether the pair list names it at all.
    """

    candidates: IdIndex
    candidate_record: np.ndarray
    mentioned: np.ndarray
    plan: ShardPlan

    @property
    def record_sets(self) -> tuple[str, ...]:
        """The record sets whose records `assign` numbers: x only (every y is a record)."""
        return (X,)

    def assign(self, record_set: str, ids: list[str]) -> tuple[np.ndarray, list[tuple]]:
        """Numbers the decoded x candidates `ids`, as `GroupSelection.assign` does by group.

        Args:
            record_set: `x`.
            ids: ids of x candidates (images that decoded, records that passed screening).

        Returns:
            (int64 [len(ids)] record numbers, -1 where left out; (position, reason, detail) of
            each one left out: no valid pair left for it, or not in the pair list at all).
        """
        if record_set != X:
            raise ValueError(f"a pair list selects x records, not {record_set!r}")
        candidates = self.candidates.lookup(ids)
        numbers = self.candidate_record[candidates]
        refused = [
            (
                i,
                rejects.NO_VALID_PAIRS,
                "every y listed for it is unknown or rejected, or none is listed"
                if self.mentioned[candidates[i]]
                else "not in the pair list",
            )
            for i in np.flatnonzero(numbers < 0).tolist()
        ]
        return numbers, refused


def select_x(
    x_table: IdTable, survivors: np.ndarray, mentioned: np.ndarray, sharding: ShardingConfig
) -> XSelection:
    """Plans the x record set over the candidates with at least one valid pair.

    `survivors` and `mentioned` are sorted int64 candidate indices (positions in `x_table`).

    Args:
        x_table: the decoded x images (the candidates).
        survivors: int64 [k], the candidates with a valid pair, sorted.
        mentioned: int64 [m], the candidates the pair list names, sorted.
        sharding: how the x record set is cut into shards.

    Returns:
        The `XSelection`: candidate `survivors[j]` becomes record j.
    """
    candidate_record = np.full([len(x_table)], -1, np.int64)
    candidate_record[survivors] = np.arange(len(survivors), dtype=np.int64)
    is_mentioned = np.zeros([len(x_table)], bool)
    is_mentioned[mentioned] = True
    plan = shards.plan_shards(X, x_table.subset(survivors), sharding)
    return XSelection(x_table.ids, candidate_record, is_mentioned, plan)


class _ResolveEdges(beam.DoFn):
    """[PairEntry] -> (x candidate index int64 [k], y record number int64 [k], x candidate
    indices named by the batch); entries naming unknown or rejected ids become rejects."""

    def __init__(self, pairs_path: str):
        super().__init__()
        self._pairs_path = pairs_path

    def process(self, entries, tables, rejected_tables):
        x_index = common.table(tables, X).ids
        y_index = common.table(tables, Y).ids
        x_candidate = x_index.lookup([entry.x_id for entry in entries])
        edge_entry = np.fromiter(
            (i for i, entry in enumerate(entries) for _ in entry.y_ids), np.int64
        )
        y_ids = [y_id for entry in entries for y_id in entry.y_ids]
        edge_x = x_candidate[edge_entry]
        edge_y = y_index.lookup(y_ids)
        valid = (edge_x >= 0) & (edge_y >= 0)
        invalid = np.flatnonzero(~valid)
        if len(invalid):
            x_ids = [entries[i].x_id for i in edge_entry[invalid].tolist()]
            bad_y = [y_ids[i] for i in invalid.tolist()]
            x_rejected = common.table(rejected_tables, X).ids.lookup(x_ids) >= 0
            y_rejected = common.table(rejected_tables, Y).ids.lookup(bad_y) >= 0
            for k, edge in enumerate(invalid.tolist()):
                if edge_x[edge] < 0:
                    reason = rejects.PAIR_REJECTED_X if x_rejected[k] else rejects.PAIR_UNKNOWN_X
                else:
                    reason = rejects.PAIR_REJECTED_Y if y_rejected[k] else rejects.PAIR_UNKNOWN_Y
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(
                        f"{self._pairs_path}: x={x_ids[k]} y={bad_y[k]}", reason, _DETAIL[reason]
                    ),
                )
        for i, entry in enumerate(entries):
            if not entry.y_ids and x_candidate[i] < 0:
                rejected = common.table(rejected_tables, X).ids.lookup([entry.x_id])[0] >= 0
                reason = rejects.PAIR_REJECTED_X if rejected else rejects.PAIR_UNKNOWN_X
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(
                        f"{self._pairs_path}: x={entry.x_id} y=(none)", reason, _DETAIL[reason]
                    ),
                )
        yield edge_x[valid], edge_y[valid], np.unique(x_candidate[x_candidate >= 0])


_DETAIL = {
    rejects.PAIR_UNKNOWN_X: "x id is not an image in x_dir",
    rejects.PAIR_REJECTED_X: "x image was rejected (see its own reject)",
    rejects.PAIR_UNKNOWN_Y: "y id is not an image in y_dir",
    rejects.PAIR_REJECTED_Y: "y image was rejected (see its own reject)",
}


class PairList(NamedTuple):
    """What `ResolvePairList` yields, as PCollections: `num_lines` (singleton int, the lines
    read); `edges` (x candidate indices, y record numbers, x candidates named: see
    `_ResolveEdges`); `rejects` (Reject)."""

    num_lines: beam.PCollection
    edges: beam.PCollection
    rejects: beam.PCollection


@beam.ptransform_fn
def ResolvePairList(
    begin: beam.pvalue.PBegin,
    pairs_path: str,
    pairs_format: str,
    tables: beam.PCollection,
    rejected_tables: beam.PCollection,
) -> PairList:
    """PBegin -> `PairList`: the pair list parsed, its ids looked up among the decoded images.

    `tables` and `rejected_tables`: PCollection[(record_set, IdTable)] (see
    `pairs_pipeline.DecodedImages`).

    Args:
        begin: the pipeline's root.
        pairs_path: the pair list.
        pairs_format: "jsonl" or "csv".
        tables: as above, a side input.
        rejected_tables: as above, a side input.

    Returns:
        The `PairList`.
    """
    read = begin | "ReadPairs" >> pair_list.read_pair_list(pairs_path, pairs_format)
    edges = (
        read.parsed
        | "BatchEntries" >> beam.BatchElements(min_batch_size=256, max_batch_size=8192)
        | "ResolveEdges"
        >> beam.ParDo(
            _ResolveEdges(pairs_path),
            beam.pvalue.AsDict(tables),
            beam.pvalue.AsDict(rejected_tables),
        ).with_outputs(REJECTED, main="edges")
    )
    return PairList(
        read.num_records,
        edges.edges,
        (read.rejects, edges[REJECTED]) | "Rejects" >> beam.Flatten(),
    )


class _UnionIndices(beam.CombineFn):
    """int64 arrays -> their sorted union."""

    def create_accumulator(self) -> list[np.ndarray]:
        return []

    def add_input(self, accumulator, indices):
        accumulator.append(np.asarray(indices, np.int64))
        return accumulator

    def merge_accumulators(self, accumulators):
        parts = itertools.chain.from_iterable(accumulators)
        return [np.unique(np.concatenate([np.zeros([0], np.int64), *parts]))]

    def extract_output(self, accumulator) -> np.ndarray:
        return np.unique(np.concatenate([np.zeros([0], np.int64), *accumulator]))


def _select(
    survivors: np.ndarray,
    tables: dict[str, IdTable],
    mentioned: np.ndarray,
    sharding: ShardingConfig,
) -> XSelection:
    return select_x(common.table(tables, X), survivors, mentioned, sharding)


def _plan_record_sets(
    selection: XSelection, tables: dict[str, IdTable], sharding: ShardingConfig
) -> dict[str, ShardPlan]:
    return {X: selection.plan, Y: shards.plan_shards(Y, common.table(tables, Y), sharding)}


class Selected(NamedTuple):
    """What `SelectRecords` yields, as singleton PCollections: `selection` (XSelection) and
    `plans` (dict record_set -> ShardPlan)."""

    selection: beam.PCollection
    plans: beam.PCollection


@beam.ptransform_fn
def SelectRecords(
    edges: beam.PCollection, tables: beam.PCollection, sharding: ShardingConfig
) -> Selected:
    """Resolved edges -> `Selected`: the x with a valid pair, and the plans of both sets.

    Args:
        edges: PCollection of `(x candidate indices int64 [k], y record numbers int64 [k],
            x candidates named int64 [m])`, from `ResolvePairList`.
        tables: PCollection[(record_set, IdTable)], a side input.
        sharding: how each record set is cut into shards.

    Returns:
        The `Selected` singletons.
    """
    survivors = (
        edges
        | "ValidX" >> beam.Map(lambda e: e[0])
        | "UnionValidX" >> beam.CombineGlobally(_UnionIndices())
    )
    mentioned = (
        edges
        | "NamedX" >> beam.Map(lambda e: e[2])
        | "UnionNamedX" >> beam.CombineGlobally(_UnionIndices())
    )
    selection = survivors | "SelectX" >> beam.Map(
        _select,
        beam.pvalue.AsDict(tables),
        beam.pvalue.AsSingleton(mentioned),
        sharding,
    )
    plans = selection | "Plans" >> beam.Map(_plan_record_sets, beam.pvalue.AsDict(tables), sharding)
    return Selected(selection, plans)


def _edges_by_shard(edges, selection: XSelection):
    x_candidate, y_record, _ = edges
    x_record = selection.candidate_record[x_candidate]
    edge_shard = selection.plan.shard_of(x_record)
    for shard in np.unique(edge_shard).tolist():
        members = edge_shard == shard
        yield shard, (x_record[members], y_record[members])


def _pair_rows(element, selection: XSelection, tables: dict[str, IdTable]):
    """(x shard, edge parts) -> (shard, degrees int64 [shard size], y values, duplicates)."""
    shard, parts = element
    num_y = len(common.table(tables, Y))
    x_record = np.concatenate([part[0] for part in parts])
    y_record = np.concatenate([part[1] for part in parts])
    keys = np.unique(x_record * max(num_y, 1) + y_record)
    start, end = selection.plan.shard_starts[shard], selection.plan.shard_starts[shard + 1]
    degrees = np.bincount(keys // max(num_y, 1) - start, minlength=int(end - start))
    return shard, degrees.astype(np.int64), keys % max(num_y, 1), len(x_record) - len(keys)


def _write_pair_index(
    pieces, output_dir: str, run_id: str, selection: XSelection, verdict: Verdict
) -> dict:
    pieces = sorted(pieces, key=lambda piece: piece[0])
    if not verdict.ok:
        return {"pairs": {"num_pairs": 0}}
    if [piece[0] for piece in pieces] != list(range(selection.plan.num_shards)):
        raise RuntimeError("x shards missing from the pair index")
    degrees = np.concatenate([piece[1] for piece in pieces])
    values = np.concatenate([piece[2] for piece in pieces]).astype(np.int64)
    if len(degrees) != selection.plan.num_records or degrees.min() == 0:
        raise RuntimeError("an x record without a valid pair reached the pair index")
    row_splits = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    layout.save_csr(layout.pairs_index_dir(output_dir), row_splits, values)
    layout.save_run_file(layout.pairs_index_dir(output_dir), run_id)
    return {
        "pairs": {
            "num_pairs": int(len(values)),
            "duplicate_entries": int(sum(piece[3] for piece in pieces)),
            "degree": {
                "min": int(degrees.min()),
                "max": int(degrees.max()),
                "mean": round(float(degrees.mean()), 3),
                "median": float(np.median(degrees)),
            },
        }
    }


@beam.ptransform_fn
def WritePairIndex(
    edges: beam.PCollection,
    output_dir: str,
    selection: beam.PCollection,
    tables: beam.PCollection,
    verdict: beam.PCollection,
) -> beam.PCollection:
    """Resolved edges -> a singleton {"pairs": stats}; writes the valid-pair CSR index over x
    records, and its `run.json` (the run of the job that claims `output_dir`), when the verdict
    is ok.

    `selection` and `verdict`: singleton PCollections; `tables`: PCollection[(record_set,
    IdTable)].

    Args:
        edges: the resolved edges, as `SelectRecords` takes them.
        output_dir: the run folder, claimed by this job.
        selection: singleton PCollection[XSelection].
        tables: PCollection[(record_set, IdTable)].
        verdict: singleton PCollection[Verdict].

    Returns:
        Singleton PCollection[dict]: {"pairs": stats} ({"num_pairs": 0} when not ok).

    Raises:
        RuntimeError: (in the workers) when x shards are missing or an x record has no pair.
    """
    return (
        edges
        | "EdgesByShard" >> beam.FlatMap(_edges_by_shard, beam.pvalue.AsSingleton(selection))
        | "GroupEdges" >> beam.GroupByKey()
        | "PairRows"
        >> beam.Map(_pair_rows, beam.pvalue.AsSingleton(selection), beam.pvalue.AsDict(tables))
        | "WritePairIndex"
        >> Gathered(
            _write_pair_index,
            output_dir,
            claims.claimed_run_id(output_dir),
            beam.pvalue.AsSingleton(selection),
            beam.pvalue.AsSingleton(verdict),
        )
    )
