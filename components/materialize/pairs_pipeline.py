"""The pairs job: image folders X and Y plus a valid-pair list -> record sets `x`, `y` and the
valid-pair CSR index `index/pairs` over x records.

Files are decoded in batches (one Beam element per `files_per_batch` files); each decoded
Example is spilled to a file at once (`spill`), and only its ref travels on, grouped by shard,
to the shard writer. Everything global (sorting, which x survive) runs on ids and record
numbers only.
"""

from __future__ import annotations

import dataclasses
import itertools
import posixpath
from collections.abc import Callable, Iterator

import apache_beam as beam
import numpy as np

from components import layout
from components.materialize import common, images, pair_list, paths, rejects, shards, spill
from components.materialize.config import PairsConfig, ShardingConfig
from components.materialize.id_index import IdIndex
from components.materialize.shards import IdTable, ShardPlan
from components.materialize.verdict import Verdict, decide

X = "x"
Y = "y"
REJECTED = common.REJECTED


def run_pairs(
    config: PairsConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the pairs job and returns its summary (the content of `summary.json`).

    `make_pipeline` returns a fresh `beam.Pipeline` (e.g. TFX's
    `BaseBeamExecutor._make_beam_pipeline`); None builds one from
    `config.beam_pipeline_args` (DirectRunner by default). Raises MaterializeError on bad
    arguments, when nothing is left, or when rejects exceed `config.max_reject_fraction`.
    """
    config.validate()
    return common.run_job(
        lambda pipeline: build_pairs_pipeline(pipeline, config),
        config.output_dir,
        config.overwrite,
        config.beam_pipeline_args,
        make_pipeline,
    )


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


def select_x(
    x_table: IdTable, survivors: np.ndarray, mentioned: np.ndarray, sharding: ShardingConfig
) -> XSelection:
    """Plans the x record set over the candidates with at least one valid pair.

    `survivors` and `mentioned` are sorted int64 candidate indices (positions in `x_table`).
    """
    candidate_record = np.full([len(x_table)], -1, np.int64)
    candidate_record[survivors] = np.arange(len(survivors), dtype=np.int64)
    is_mentioned = np.zeros([len(x_table)], bool)
    is_mentioned[mentioned] = True
    plan = shards.plan_shards(X, x_table.subset(survivors), sharding)
    return XSelection(x_table.ids, candidate_record, is_mentioned, plan)


def _list_batches(record_set_root: tuple[str, str], batch_size: int) -> Iterator[tuple]:
    record_set, root = record_set_root
    batch: list[tuple[str, str]] = []
    for path in paths.list_files(root):
        batch.append((paths.relative_id(root, path), path))
        if len(batch) == batch_size:
            yield record_set, batch
            batch = []
    if batch:
        yield record_set, batch


class _DecodeImages(spill.SpillingDoFn):
    """(record_set, [(id, path)]) -> (record_set, [ids], [SpillRef of each Example]); rejects."""

    def __init__(self, roots: dict[str, str], storage: images.ImageStorage, output_dir: str):
        super().__init__(output_dir)
        self._roots = roots
        self._storage = storage

    def process(self, listed):
        record_set, files = listed
        ids: list[str] = []
        serialized: list[bytes] = []
        for raw_id, path in files:
            record_id = ""
            try:
                record_id = paths.normalize_id(raw_id)
                data = paths.read_bytes(self._roots[record_set], path)
                serialized.append(images.image_example(record_id, data, self._storage))
                ids.append(record_id)
            except rejects.RejectedInput as error:
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(path, error.reason, error.detail, record_set, record_id),
                )
        if ids:
            yield record_set, ids, self.spill.write(serialized)


class _ParsePairEntries(beam.DoFn):
    def __init__(self, pairs_path: str, pairs_format: str):
        super().__init__()
        self._pairs_path = pairs_path
        self._pairs_format = pairs_format

    def process(self, line: str):
        if not line.strip():
            return
        try:
            entry = pair_list.parse_entry(line, self._pairs_format)
        except rejects.RejectedInput as error:
            yield beam.pvalue.TaggedOutput(
                REJECTED, rejects.Reject.of_line(self._pairs_path, line, error)
            )
            return
        for raw_y, detail in entry.unsafe_y:
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                rejects.Reject(
                    f"{self._pairs_path}: x={entry.x_id} y={raw_y}",
                    rejects.UNSAFE_PAIR_PATH,
                    f"y id: {detail}",
                ),
            )
        yield entry


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


class _AssignRecords(beam.DoFn):
    """Decoded batches -> ((record_set, shard), [ShardRecord]); x without valid pairs rejected."""

    def __init__(self, roots: dict[str, str]):
        super().__init__()
        self._roots = roots

    def process(self, decoded, plans, selection: XSelection):
        record_set, ids, refs = decoded
        if record_set == X:
            numbers = selection.candidate_record[selection.candidates.lookup(ids)]
            for i in np.flatnonzero(numbers < 0).tolist():
                candidate = selection.candidates.lookup([ids[i]])[0]
                detail = (
                    "every y listed for it is unknown or rejected, or none is listed"
                    if selection.mentioned[candidate]
                    else "not in the pair list"
                )
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(
                        posixpath.join(self._roots[X], ids[i]),
                        rejects.NO_VALID_PAIRS,
                        detail,
                        X,
                        ids[i],
                    ),
                )
        else:
            numbers = plans[record_set].ids.lookup(ids)
        kept = np.flatnonzero(numbers >= 0)
        yield from shards.group_by_shard(
            plans[record_set],
            numbers[kept],
            [refs[i] for i in kept.tolist()],
            np.full([len(kept)], -1, np.int64),
        )


def _edges_by_shard(edges, selection: XSelection):
    x_candidate, y_record, _ = edges
    x_record = selection.candidate_record[x_candidate]
    edge_shard = selection.plan.shard_of(x_record)
    for shard in np.unique(edge_shard).tolist():
        members = edge_shard == shard
        yield shard, (x_record[members], y_record[members])


def _pair_rows(element, selection: XSelection, num_y: int):
    """(x shard, edge parts) -> (shard, degrees int64 [shard size], y values, duplicates)."""
    shard, parts = element
    x_record = np.concatenate([part[0] for part in parts])
    y_record = np.concatenate([part[1] for part in parts])
    keys = np.unique(x_record * max(num_y, 1) + y_record)
    start, end = selection.plan.shard_starts[shard], selection.plan.shard_starts[shard + 1]
    degrees = np.bincount(keys // max(num_y, 1) - start, minlength=int(end - start))
    return shard, degrees.astype(np.int64), keys % max(num_y, 1), len(x_record) - len(keys)


def _write_pair_index(pieces, output_dir: str, selection: XSelection, verdict: Verdict) -> dict:
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


def build_pairs_pipeline(pipeline: beam.Pipeline, config: PairsConfig) -> None:
    """Adds the pairs job to `pipeline` (the transforms the TFX component reuses)."""
    output_dir = config.output_dir
    roots = {X: config.x_dir, Y: config.y_dir}
    storage = images.ImageStorage(
        config.image_storage, config.raw_height, config.raw_width, config.raw_channels
    )
    pairs_format = pair_list.resolve_format(config.pairs, config.pairs_format)
    header_lines = int(pairs_format == "csv" and pair_list.has_csv_header(config.pairs))

    listed = (
        pipeline
        | "Roots" >> beam.Create(sorted(roots.items()), reshuffle=False)  # SpreadFiles does
        | "List" >> beam.FlatMap(_list_batches, config.files_per_batch)
        | "SpreadFiles" >> beam.Reshuffle()
    )
    file_counts = (
        listed
        | "FilesPerBatch" >> beam.Map(lambda batch: (batch[0], len(batch[1])))
        | "FilesPerSet" >> beam.CombinePerKey(sum)
    )
    decoded = listed | "Decode" >> beam.ParDo(
        _DecodeImages(roots, storage, output_dir)
    ).with_outputs(REJECTED, main="records")
    tables = (
        decoded.records
        | "Keys" >> beam.Map(lambda d: (d[0], (d[1], [ref.length for ref in d[2]])))
        | "CollectIds" >> beam.CombinePerKey(shards.CollectIds())
    )
    rejected_tables = (
        decoded[REJECTED]
        | "WithId" >> beam.Filter(lambda reject: bool(reject.id))
        | "RejectedKeys" >> beam.Map(lambda reject: (reject.record_set, ([reject.id], [0])))
        | "CollectRejectedIds" >> beam.CombinePerKey(shards.CollectIds())
    )

    lines = pipeline | "ReadPairs" >> beam.io.ReadFromText(
        config.pairs, skip_header_lines=header_lines
    )
    entries = lines | "ParsePairs" >> beam.ParDo(
        _ParsePairEntries(config.pairs, pairs_format)
    ).with_outputs(REJECTED, main="entries")
    edges = (
        entries.entries
        | "BatchEntries" >> beam.BatchElements(min_batch_size=256, max_batch_size=8192)
        | "ResolveEdges"
        >> beam.ParDo(
            _ResolveEdges(config.pairs),
            beam.pvalue.AsDict(tables),
            beam.pvalue.AsDict(rejected_tables),
        ).with_outputs(REJECTED, main="edges")
    )
    survivors = edges.edges | "ValidX" >> beam.Map(lambda e: e[0])
    survivors = survivors | "UnionValidX" >> beam.CombineGlobally(_UnionIndices())
    mentioned = edges.edges | "NamedX" >> beam.Map(lambda e: e[2])
    mentioned = mentioned | "UnionNamedX" >> beam.CombineGlobally(_UnionIndices())

    impulse = pipeline | "Impulse" >> beam.Create([None])
    selection = impulse | "SelectX" >> beam.Map(
        lambda _, tables, valid, named: select_x(
            common.table(tables, X), valid, named, config.sharding
        ),
        beam.pvalue.AsDict(tables),
        beam.pvalue.AsSingleton(survivors),
        beam.pvalue.AsSingleton(mentioned),
    )
    plans = impulse | "Plans" >> beam.Map(
        lambda _, tables, selected: {
            X: selected.plan,
            Y: shards.plan_shards(Y, common.table(tables, Y), config.sharding),
        },
        beam.pvalue.AsDict(tables),
        beam.pvalue.AsSingleton(selection),
    )
    assigned = decoded.records | "Assign" >> beam.ParDo(
        _AssignRecords(roots), beam.pvalue.AsSingleton(plans), beam.pvalue.AsSingleton(selection)
    ).with_outputs(REJECTED, main="shard_batches")

    reject_counts = (
        (decoded[REJECTED], entries[REJECTED], edges[REJECTED], assigned[REJECTED])
        | "AllRejects" >> beam.Flatten()
        | "Rejects" >> rejects.RecordRejects(output_dir)
    )
    verdict = impulse | "Verdict" >> beam.Map(
        lambda _, files, counts, plans: decide(
            num_inputs=sum(files.values()),
            reject_counts=counts,
            record_counts={name: plan.num_records for name, plan in plans.items()},
            required_record_sets=(X, Y),
            max_reject_fraction=config.max_reject_fraction,
        ),
        beam.pvalue.AsDict(file_counts),
        beam.pvalue.AsSingleton(reject_counts),
        beam.pvalue.AsSingleton(plans),
    )

    index_stats = assigned.shard_batches | "Write" >> shards.WriteRecordSets(
        output_dir,
        plans=beam.pvalue.AsSingleton(plans),
        verdict=beam.pvalue.AsSingleton(verdict),
    )
    pair_stats = (
        edges.edges
        | "EdgesByShard" >> beam.FlatMap(_edges_by_shard, beam.pvalue.AsSingleton(selection))
        | "GroupEdges" >> beam.GroupByKey()
        | "PairRows"
        >> beam.Map(
            lambda element, selected, tables: _pair_rows(
                element, selected, len(common.table(tables, Y))
            ),
            beam.pvalue.AsSingleton(selection),
            beam.pvalue.AsDict(tables),
        )
        | "GatherPairRows" >> beam.combiners.ToList()
        | "WritePairIndex"
        >> beam.Map(
            _write_pair_index,
            output_dir,
            beam.pvalue.AsSingleton(selection),
            beam.pvalue.AsSingleton(verdict),
        )
    )
    static = {
        "job": "pairs",
        "inputs": {"x_dir": config.x_dir, "y_dir": config.y_dir, "pairs": config.pairs},
        "config": {
            "pairs_format": pairs_format,
            "image_storage": config.image_storage,
            "raw_size": [config.raw_height, config.raw_width, config.raw_channels],
            "max_reject_fraction": config.max_reject_fraction,
            **common.sharding_summary(config.sharding),
        },
    }
    _ = impulse | "Summary" >> beam.Map(
        lambda _, verdict, counts, plans, stats, pair_stats, files, num_lines: common.write_summary(
            _,
            output_dir,
            static,
            verdict,
            counts,
            plans,
            stats,
            [
                *pair_stats,
                {"input_counts": {X: files.get(X, 0), Y: files.get(Y, 0), "pair_lines": num_lines}},
            ],
        ),
        beam.pvalue.AsSingleton(verdict),
        beam.pvalue.AsSingleton(reject_counts),
        beam.pvalue.AsSingleton(plans),
        beam.pvalue.AsDict(index_stats),
        beam.pvalue.AsList(pair_stats),
        beam.pvalue.AsDict(file_counts),
        beam.pvalue.AsSingleton(lines | "CountLines" >> beam.combiners.Count.Globally()),
    )
