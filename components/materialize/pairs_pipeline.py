"""The pairs job: image folders X and Y plus a valid-pair list, or the group of each image ->
record sets `x`, `y` and the valid-pair index `index/pairs` over x records (a CSR of edges, or
the groups).

Files are decoded in batches (one Beam element per `files_per_batch` files); each decoded
Example is spilled to a file at once and only its ref travels on, grouped by shard, to the
shard writer, or with `--spill none` the Example itself does (`spill`). Everything global
(sorting, which images survive) runs on ids and record numbers only; the valid-pair side of the
job is in `pair_index` (a pair list) or `group_pairing` (groups).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from components import layout
from components.materialize import (
    common,
    group_pairing,
    images,
    outcome,
    pair_index,
    pair_list,
    paths,
    rejects,
    shards,
    spill,
)
from components.materialize.config import PairsConfig

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
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
    return common.run_materialize(MaterializePairs(config), config, make_pipeline)


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
    """(record_set, [(id, path)]) -> (record_set, [ids], [Payload of each Example]); rejects."""

    def __init__(self, roots: dict[str, str], storage: images.ImageStorage, spill_root: str | None):
        super().__init__(spill_root)
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


class DecodedImages(NamedTuple):
    """What `_DecodeImageSets` yields, as PCollections: `file_counts` (record_set, files
    listed); `records` (record_set, [ids], [Payload]); `rejects` (Reject); `tables` and
    `rejected_tables` (record_set, IdTable) of the decoded and of the rejected ids."""

    file_counts: beam.PCollection
    records: beam.PCollection
    rejects: beam.PCollection
    tables: beam.PCollection
    rejected_tables: beam.PCollection


@beam.ptransform_fn
def _DecodeImageSets(
    begin: beam.pvalue.PBegin,
    roots: dict[str, str],
    storage: images.ImageStorage,
    files_per_batch: int,
    spill_root: str | None,
) -> DecodedImages:
    """PBegin -> `DecodedImages`: every file under each root, decoded in batches, its Examples
    spilled below `spill_root` (or, when None, handed on as they are)."""
    listed = (
        begin
        # Not reshuffled here: SpreadFiles spreads the listed batches.
        | "Roots" >> beam.Create(sorted(roots.items()), reshuffle=False)
        | "List" >> beam.FlatMap(_list_batches, files_per_batch)
        | "SpreadFiles" >> beam.Reshuffle()
    )
    file_counts = (
        listed
        | "FilesPerBatch" >> beam.Map(lambda batch: (batch[0], len(batch[1])))
        | "FilesPerSet" >> beam.CombinePerKey(sum)
    )
    decoded = listed | "Decode" >> beam.ParDo(
        _DecodeImages(roots, storage, spill_root)
    ).with_outputs(REJECTED, main="records")
    tables = (
        decoded.records
        | "Keys" >> beam.Map(lambda d: (d[0], (d[1], [spill.payload_length(p) for p in d[2]])))
        | "CollectIds" >> beam.CombinePerKey(shards.CollectIds())
    )
    rejected_tables = (
        decoded[REJECTED]
        | "WithId" >> beam.Filter(lambda reject: bool(reject.id))
        | "RejectedKeys" >> beam.Map(lambda reject: (reject.record_set, ([reject.id], [0])))
        | "CollectRejectedIds" >> beam.CombinePerKey(shards.CollectIds())
    )
    return DecodedImages(file_counts, decoded.records, decoded[REJECTED], tables, rejected_tables)


class _AssignRecords(beam.DoFn):
    """Decoded batches -> ((record_set, shard), [ShardRecord]); the images the pairing leaves
    out rejected (x without valid pairs; by group, images without one group too)."""

    def __init__(self, roots: dict[str, str]):
        super().__init__()
        self._roots = roots

    def process(
        self, decoded, plans, selection: pair_index.XSelection | group_pairing.GroupSelection
    ):
        record_set, ids, payloads = decoded
        if isinstance(selection, group_pairing.GroupSelection):
            numbers, refused = selection.assign(record_set, ids)
        elif record_set == X:
            numbers, refused = _assign_listed_x(selection, ids)
        else:
            numbers, refused = plans[record_set].ids.lookup(ids), []
        for i, reason, detail in refused:
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                rejects.Reject(
                    posixpath.join(self._roots[record_set], ids[i]),
                    reason,
                    detail,
                    record_set,
                    ids[i],
                ),
            )
        kept = np.flatnonzero(numbers >= 0)
        yield from shards.group_by_shard(
            plans[record_set],
            numbers[kept],
            [payloads[i] for i in kept.tolist()],
            np.full([len(kept)], -1, np.int64),
        )


def _assign_listed_x(
    selection: pair_index.XSelection, ids: list[str]
) -> tuple[np.ndarray, list[tuple]]:
    """As `GroupSelection.assign`, for x images paired by a pair list."""
    candidates = selection.candidates.lookup(ids)
    numbers = selection.candidate_record[candidates]
    refused = [
        (
            i,
            rejects.NO_VALID_PAIRS,
            "every y listed for it is unknown or rejected, or none is listed"
            if selection.mentioned[candidates[i]]
            else "not in the pair list",
        )
        for i in np.flatnonzero(numbers < 0).tolist()
    ]
    return numbers, refused


def _input_counts(line_counts: dict[str, int], file_counts: dict[str, int]) -> dict:
    return {"input_counts": {X: file_counts.get(X, 0), Y: file_counts.get(Y, 0), **line_counts}}


def _group_files(config: PairsConfig) -> dict[str, tuple[str, str]]:
    """record_set -> (groups file, its format); empty with `groups_from_subfolder`."""
    if config.groups_from_subfolder:
        return {}
    return {
        record_set: (path, pair_list.resolve_format(path, config.groups_format))
        for record_set, path in ((X, config.x_groups), (Y, config.y_groups))
    }


def _pairing_summary(config: PairsConfig) -> tuple[dict, dict]:
    """The inputs and the config entries of the summary that say how x pair with y."""
    if config.pairs:
        pairs_format = pair_list.resolve_format(config.pairs, config.pairs_format)
        return {"pairs": config.pairs}, {"pairs_format": pairs_format}
    if config.groups_from_subfolder:
        return {"groups_from_subfolder": True}, {}
    files = _group_files(config)
    return (
        {f"{record_set}_groups": path for record_set, (path, _) in files.items()},
        {"groups_format": {record_set: fmt for record_set, (_, fmt) in files.items()}},
    )


def _static_summary(config: PairsConfig) -> dict:
    inputs, pairing = _pairing_summary(config)
    return {
        "job": "pairs",
        "inputs": {"x_dir": config.x_dir, "y_dir": config.y_dir, **inputs},
        "config": {
            **pairing,
            "image_storage": config.image_storage,
            "raw_size": [config.raw_height, config.raw_width, config.raw_channels],
            "max_reject_fraction": config.max_reject_fraction,
            **common.sharding_summary(config.sharding),
        },
    }


class MaterializePairs(beam.PTransform):
    """The pairs job as one transform, applied to a pipeline (`run_pairs` runs it).

    Output: a singleton PCollection, the summary (the content of `summary.json`).
    """

    def __init__(self, config: PairsConfig):
        super().__init__()
        self._config = config

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        config = self._config
        output_dir = config.output_dir
        roots = {X: config.x_dir, Y: config.y_dir}
        storage = images.ImageStorage(
            config.image_storage,
            config.raw_height,
            config.raw_width,
            config.raw_channels,
            max_pixels=config.max_image_pixels,
        )

        spill_root = spill.resolve_spill_root(config.spill, begin.pipeline, output_dir)
        decoded = begin | "Images" >> _DecodeImageSets(
            roots, storage, config.files_per_batch, spill_root
        )
        if config.pairs:
            pairs = begin | "PairList" >> pair_index.ResolvePairList(
                config.pairs,
                pair_list.resolve_format(config.pairs, config.pairs_format),
                decoded.tables,
                decoded.rejected_tables,
            )
            selected = pairs.edges | "Select" >> pair_index.SelectRecords(
                decoded.tables, config.sharding
            )
            selection, plans, pairing_rejects = selected.selection, selected.plans, pairs.rejects
            line_counts = pairs.num_lines | "PairLines" >> beam.Map(lambda n: {"pair_lines": n})
        else:
            grouping = begin | "Groups" >> group_pairing.SelectByGroup(
                _group_files(config), decoded.tables, decoded.rejected_tables, config.sharding
            )
            selection, plans, pairing_rejects = grouping.selection, grouping.plans, grouping.rejects
            line_counts = grouping.line_counts
        assigned = decoded.records | "Assign" >> beam.ParDo(
            _AssignRecords(roots),
            beam.pvalue.AsSingleton(plans),
            beam.pvalue.AsSingleton(selection),
        ).with_outputs(REJECTED, main="shard_batches")

        num_files = (
            decoded.file_counts | "Files" >> beam.Values() | "AllFiles" >> beam.CombineGlobally(sum)
        )
        judgement = (
            decoded.rejects,
            pairing_rejects,
            assigned[REJECTED],
        ) | "Judge" >> outcome.Judge(
            output_dir,
            num_inputs=num_files,
            plans=plans,
            required_record_sets=(X, Y),
            max_reject_fraction=config.max_reject_fraction,
        )
        index_stats = assigned.shard_batches | "Write" >> shards.WriteRecordSets(
            output_dir,
            plans=beam.pvalue.AsSingleton(plans),
            verdict=beam.pvalue.AsSingleton(judgement.verdict),
        )
        if config.pairs:
            pair_stats = pairs.edges | "PairIndex" >> pair_index.WritePairIndex(
                output_dir, selection, decoded.tables, judgement.verdict
            )
        else:
            pair_stats = judgement.verdict | "GroupIndex" >> group_pairing.WriteGroupIndex(
                output_dir, selection
            )
        input_counts = line_counts | "InputCounts" >> beam.Map(
            _input_counts, beam.pvalue.AsDict(decoded.file_counts)
        )
        return judgement | "Summary" >> outcome.WriteSummary(
            output_dir,
            _static_summary(config),
            plans=plans,
            index_stats=index_stats,
            sections=(pair_stats, input_counts) | "Sections" >> beam.Flatten(),
        )
