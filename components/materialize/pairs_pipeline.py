"""The pairs job: image folders X and Y plus a valid-pair list, or the group of each image ->
record sets `x`, `y` and the valid-pair index `index/pairs` over x records (a CSR of edges, or
the groups).

Files are decoded in batches (one Beam element per `files_per_batch` files); each decoded
Example is spilled to a file at once and only its ref travels on, grouped by shard, to the
shard writer, or with `--spill none` the Example itself does (`spill`). Everything global
(sorting, which images survive) runs on ids and record numbers only. The job is composed of
the shared `stages` (read, plan ids, write shards and indexes, commit); what is its own is the
listing and decoding of images and the reading of groups files (`group_pairing.ReadGroups`).
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Iterator
from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    group_pairing,
    images,
    pair_list,
    paths,
    rejects,
    spill,
    stages,
)
from tfx_dynamic_inputs.materialize.config import PairsConfig

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
REJECTED = stages.REJECTED


def run_pairs(
    config: PairsConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the pairs job (`stages.run_materialize`).

    Args:
        config: the job's config; validated first.
        make_pipeline: returns a fresh `beam.Pipeline` (e.g. TFX's
            `BaseBeamExecutor._make_beam_pipeline`); None builds one from
            `config.beam_pipeline_args` (DirectRunner by default).

    Returns:
        The run's summary (the content of `summary.json`).

    Raises:
        MaterializeError: on bad arguments, when nothing is left, or when rejects exceed
            `config.max_reject_fraction`.

    Example:
        run_pairs(PairsConfig(x_dir="data/x", y_dir="data/y", pairs="data/pairs.jsonl",
                              output_dir="/tmp/run"))["record_sets"]["x"]["num_records"]
    """
    config.validate()
    return stages.run_materialize(MaterializePairs(config), config, make_pipeline)


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
    listed); `records` (record_set, [ids], [Payload]); `rejects` (Reject)."""

    file_counts: beam.PCollection
    records: beam.PCollection
    rejects: beam.PCollection


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
        # Not reshuffled here: ReadSpread spreads the listed batches.
        | "Roots" >> beam.Create(sorted(roots.items()), reshuffle=False)
        | "List" >> beam.FlatMap(_list_batches, files_per_batch)
    )
    file_counts = (
        listed
        | "FilesPerBatch" >> beam.Map(lambda batch: (batch[0], len(batch[1])))
        | "FilesPerSet" >> beam.CombinePerKey(sum)
    )
    decoded = listed | "Decode" >> stages.ReadSpread(
        _DecodeImages(roots, storage, spill_root), main="records"
    )
    return DecodedImages(file_counts, decoded.records, decoded[REJECTED])


@dataclasses.dataclass(frozen=True)
class _PathUnderRoot:
    """A reject's source for an image: its path, its record set's root joined with its id."""

    roots: dict[str, str]

    def __call__(self, record_set: str, record_id: str) -> str:
        return posixpath.join(self.roots[record_set], record_id)


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
            **stages.sharding_summary(config.sharding),
        },
    }


class MaterializePairs(stages.Job[PairsConfig]):
    """The pairs job as one transform, applied to a pipeline (`run_pairs` runs it).

    Args:
        config: the job's config.

    Returns (of `expand`):
        A singleton PCollection, the summary (the content of `summary.json`).

    Example:
        # Under `stages.run_job`, whose claim on the output folder the writers read:
        stages.run_job(lambda p: p | MaterializePairs(config), config.output_dir, False, (), None)
    """

    def _build(self, begin: beam.pvalue.PBegin, config: PairsConfig) -> beam.PCollection:
        output_dir = config.output_dir
        roots = {X: config.x_dir, Y: config.y_dir}
        storage = images.ImageStorage(
            config.image_storage,
            config.raw_height,
            config.raw_width,
            config.raw_channels,
            max_pixels=config.max_image_pixels,
        )

        # Read and screen: decoding is the screen; the ids of the images left, and of those
        # rejected, are what the pairing sees.
        spill_root = stages.resolve_spill_root(config.spill, begin.pipeline, output_dir)
        decoded = begin | "Images" >> _DecodeImageSets(
            roots, storage, config.files_per_batch, spill_root
        )
        tables = decoded.records | "Tables" >> stages.CollectIdTables()
        rejected_tables = decoded.rejects | "RejectedTables" >> stages.CollectRejectedIds()

        # Plan ids.
        if config.pairs:
            pairing = begin | "PairList" >> stages.PlanByPairList(
                config.pairs, config.pairs_format, tables, rejected_tables, config.sharding
            )
            input_rejects = (decoded.rejects, pairing.rejects)
            line_counts = pairing.num_lines | "PairLines" >> beam.Map(lambda n: {"pair_lines": n})
        else:
            groups = begin | "Groups" >> group_pairing.ReadGroups(
                _group_files(config), tables, rejected_tables
            )
            pairing = begin | "ByGroup" >> stages.PlanByGroup(
                groups.tables, tables, config.sharding, groups.missing_detail
            )
            input_rejects = (decoded.rejects, groups.rejects)
            line_counts = groups.line_counts
        assigned = decoded.records | "Assign" >> stages.AssignToShards(
            pairing.plans, _PathUnderRoot(roots), pairing.selection
        )
        num_files = (
            decoded.file_counts | "Files" >> beam.Values() | "AllFiles" >> beam.CombineGlobally(sum)
        )
        judgement = (*input_rejects, assigned[REJECTED]) | "Judge" >> stages.Judge(
            output_dir,
            num_inputs=num_files,
            plans=pairing.plans,
            required_record_sets=(X, Y),
            max_reject_fraction=config.max_reject_fraction,
        )

        # Write shards, then indexes, then commit.
        index_stats = assigned.shard_batches | "Write" >> stages.WriteShards(
            output_dir, plans=pairing.plans, verdict=judgement.verdict
        )
        pair_stats = judgement.verdict | "PairIndex" >> stages.WritePairing(
            output_dir, pairing, tables
        )
        input_counts = line_counts | "InputCounts" >> beam.Map(
            _input_counts, beam.pvalue.AsDict(decoded.file_counts)
        )
        return judgement | "Summary" >> stages.Commit(
            output_dir,
            _static_summary(config),
            plans=pairing.plans,
            index_stats=index_stats,
            sections=(pair_stats, input_counts),
        )
