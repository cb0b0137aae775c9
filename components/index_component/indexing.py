"""The indexing job: the records of a TFX `Examples` artifact -> a run in the `components.layout`
contract (uncompressed shards, offset index, class index, valid-pair index), as one Beam pipeline.

Each input file (GZIP or uncompressed TFRecord, `records.compression_of`) is read whole by one
worker, in file order; every record is checked for the features the indexes need (label, id,
group; `screening`) and spilled (`components.materialize.spill`; through a distributed runner's
shuffle instead), and only its ref travels on. Records are numbered by id: the `id_feature`
value, or `<file name>:<position>` without one (file order).
From there the job is the materialize jobs' own: ids sorted into shard plans
(`materialize.shards`), valid pairs resolved from a pair list (`materialize.pair_index`) or from
groups (`layout.save_group_index`), rejects judged against `max_reject_fraction`, the shards and
indexes written only when the verdict is ok, and `summary.json` written last to commit the run.

Record sets: with a pairing (`pairs` or `group_feature`), `x` and `y` (from the two input splits
the config names); otherwise one per input split, of the same name. A `label_feature` gives
every record set a class index with one vocabulary shared by all of them, so a class id means
the same class in every split: int64 labels are class ids as they stand (`classes.txt` lists
"0" .. "C-1"), bytes labels are names numbered in sorted order.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Mapping

import apache_beam as beam
import numpy as np

from components import layout
from components.index_component import records, screening
from components.materialize import (
    claims,
    common,
    outcome,
    pair_index,
    pair_list,
    rejects,
    shards,
    spill,
)
from components.materialize.config import PAIRS_FORMATS, ShardingConfig
from components.materialize.errors import MaterializeError
from components.materialize.id_index import IdIndex
from components.materialize.shards import IdTable
from components.materialize.verdict import Verdict

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
REJECTED = common.REJECTED


@dataclasses.dataclass(frozen=True)
class IndexConfig:
    """What to index and how.

    `inputs`: record set -> the input split folder whose files become it (`x` and `y` with a
    pairing). `pairs`: a valid-pair list over the `id_feature` values of the x and y records (the
    pairs job's formats, `pairs_format`); `group_feature`: x and y records with equal values of
    it may pair instead. `label_feature`: every record set gets a class index.
    """

    inputs: Mapping[str, str]
    output_dir: str
    label_feature: str = ""
    id_feature: str = ""
    group_feature: str = ""
    pairs: str = ""
    pairs_format: str = "auto"
    sharding: ShardingConfig = ShardingConfig()
    max_reject_fraction: float = 0.1
    overwrite: bool = False
    beam_pipeline_args: tuple[str, ...] = ()

    @property
    def paired(self) -> bool:
        return bool(self.pairs or self.group_feature)

    def validate(self) -> None:
        if not self.inputs:
            raise MaterializeError("no input splits to index")
        if self.paired:
            if self.pairs and self.group_feature:
                raise MaterializeError("pair by a pair list (pairs) or by group_feature, not both")
            if self.pairs and not self.id_feature:
                raise MaterializeError(
                    "a pair list names records by id: set id_feature (the feature holding them)"
                )
            if set(self.inputs) != {X, Y}:
                raise MaterializeError(
                    f"a pairing indexes record sets {X!r} and {Y!r}, got {sorted(self.inputs)}"
                )
        elif not self.label_feature:
            raise MaterializeError(
                "nothing to index: set label_feature (a class index), and/or pairs or "
                "group_feature with x and y splits (a valid-pair index)"
            )
        if self.pairs_format not in PAIRS_FORMATS:
            raise MaterializeError(
                f"pairs_format must be one of {', '.join(PAIRS_FORMATS)}; got {self.pairs_format!r}"
            )
        gfile = layout.gfile()
        if self.pairs and (not gfile.exists(self.pairs) or gfile.isdir(self.pairs)):
            raise MaterializeError(f"pairs: file not found: {self.pairs!r}")
        self.sharding.validate()
        if not 0.0 <= self.max_reject_fraction <= 1.0:
            raise MaterializeError(
                f"max_reject_fraction must be in [0, 1], got {self.max_reject_fraction}"
            )


def run_index(
    config: IndexConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the indexing job into `config.output_dir` and returns its summary.

    Raises MaterializeError on bad arguments, when a record set is left empty, or when rejects
    exceed `config.max_reject_fraction`; `records.RecordFileError` (naming the file and record)
    when an input file is damaged.
    """
    config.validate()
    files = {record_set: input_files(split) for record_set, split in config.inputs.items()}
    return common.run_job(
        lambda pipeline: pipeline | IndexRecords(config, files),
        config.output_dir,
        config.overwrite,
        config.beam_pipeline_args,
        make_pipeline,
        {f"the {record_set} split": split for record_set, split in config.inputs.items()},
    )


def input_files(split_dir: str) -> list[str]:
    """The files of one input split folder, sorted (TFX reads `Split-<name>/*` the same way)."""
    gfile = layout.gfile()
    found = sorted(p for p in gfile.glob(posixpath.join(split_dir, "*")) if not gfile.isdir(p))
    if not found:
        raise MaterializeError(f"input split folder {split_dir} holds no files")
    return found


class _CollectValues(beam.CombineFn):
    """(ids, values) batches of one record set -> `(IdIndex, values)` aligned with its ids."""

    def create_accumulator(self) -> tuple[list[str], list]:
        return [], []

    def add_input(self, accumulator, batch):
        accumulator[0].extend(batch[0])
        accumulator[1].extend(batch[1])
        return accumulator

    def merge_accumulators(self, accumulators):
        ids: list[str] = []
        values: list = []
        for more_ids, more_values in accumulators:
            ids.extend(more_ids)
            values.extend(more_values)
        return ids, values

    def extract_output(self, accumulator) -> tuple[IdIndex, np.ndarray]:
        ids, values = accumulator
        index, order = IdIndex.sorting(ids)
        return index, np.asarray(values, dtype=object)[order]


# ------------------------------------------------------------------------------ record numbers


def _plan_record_sets(
    record_sets: tuple[str, ...], tables: dict[str, IdTable], sharding: ShardingConfig
) -> dict[str, shards.ShardPlan]:
    return {rs: shards.plan_shards(rs, common.table(tables, rs), sharding) for rs in record_sets}


def _group_of(groups: dict, record_set: str, ids: list[str]) -> np.ndarray:
    index, values = groups.get(record_set, (IdIndex.from_ids([]), np.zeros([0], object)))
    return values[index.lookup(ids)] if ids else np.zeros([0], object)


def _select_by_group(
    _, groups: dict, tables: dict[str, IdTable], sharding: ShardingConfig
) -> pair_index.XSelection:
    """The x records whose group has a y record, planned (every x has a group by now)."""
    _, y_group_values = groups.get(Y, (None, np.zeros([0], object)))
    y_groups = set(y_group_values.tolist())
    x_table = common.table(tables, X)
    x_group = _group_of(groups, X, x_table.ids.id_list())
    has_y = np.fromiter((group in y_groups for group in x_group), bool, len(x_group))
    survivors = np.flatnonzero(has_y).astype(np.int64)
    return pair_index.select_x(x_table, survivors, np.arange(len(x_table)), sharding)


def _with_y_plan(
    selection: pair_index.XSelection, tables: dict[str, IdTable], sharding: ShardingConfig
) -> dict[str, shards.ShardPlan]:
    return {X: selection.plan, Y: shards.plan_shards(Y, common.table(tables, Y), sharding)}


class _Assign(beam.DoFn):
    """Screened `RecordBatch` -> ((record_set, shard), [ShardRecord]) with record numbers and
    class ids; x records without a y to pair with become rejects."""

    def __init__(self, by_group: bool):
        super().__init__()
        self._by_group = by_group

    def process(
        self,
        batch: screening.RecordBatch,
        plans,
        selection,
        vocabulary: screening.Vocabulary | None,
    ):
        record_set, ids = batch.record_set, batch.ids
        if selection is not None and record_set == X:
            numbers = selection.candidate_record[selection.candidates.lookup(ids)]
            for i in np.flatnonzero(numbers < 0).tolist():
                detail = (
                    f"no y record has its group {batch.groups[i]!r}"
                    if self._by_group
                    else "every y listed for it is unknown or rejected, or none is listed"
                )
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(f"{X}: {ids[i]}", screening.NO_VALID_PAIRS, detail, X, ids[i]),
                )
        else:
            numbers = plans[record_set].ids.lookup(ids)
        kept = np.flatnonzero(numbers >= 0)
        class_ids = (
            vocabulary.class_ids([batch.labels[i] for i in kept.tolist()])
            if vocabulary is not None
            else np.full([len(kept)], -1, np.int64)
        )
        yield from shards.group_by_shard(
            plans[record_set], numbers[kept], [batch.refs[i] for i in kept.tolist()], class_ids
        )


# ------------------------------------------------------------------------------------- summary


def _inputs_section(files: list[tuple[str, str]], counts: dict[str, int]) -> dict:
    section: dict[str, dict] = {}
    for record_set, compression in sorted(files):
        entry = section.setdefault(
            record_set,
            {"records": counts.get(record_set, 0), "files": 0, records.GZIP: 0},
        )
        entry["files"] += 1
        entry[records.GZIP] += compression == records.GZIP
    return {"input_records": section}


def _labels_section(
    vocabulary: screening.Vocabulary, feature: str, kinds: screening.LabelKinds
) -> dict:
    return {
        "labels": {
            "feature": feature,
            "kind": vocabulary.kind,
            "num_classes": len(vocabulary.names),
            "int64_labels": kinds.ints,
            "bytes_labels": kinds.names,
        }
    }


def _write_groups(
    verdict: Verdict,
    output_dir: str,
    run_id: str,
    plans: dict[str, shards.ShardPlan],
    groups: dict,
) -> dict:
    if not verdict.ok:
        return {"pairs": {"num_pairs": 0}}
    x_group = _group_of(groups, X, plans[X].ids.id_list())
    y_group = _group_of(groups, Y, plans[Y].ids.id_list())
    names = sorted(set(x_group.tolist()) | set(y_group.tolist()))
    lookup = np.asarray(names, dtype=object)
    return layout.save_group_index(
        output_dir,
        np.searchsorted(lookup, x_group).astype(np.int64),
        np.searchsorted(lookup, y_group).astype(np.int64),
        names,
        run_id,
    )


def _static_summary(config: IndexConfig) -> dict:
    return {
        "job": "index_examples",
        "inputs": dict(sorted(config.inputs.items())),
        "config": {
            "label_feature": config.label_feature or None,
            "id_feature": config.id_feature or None,
            "group_feature": config.group_feature or None,
            "pairs": config.pairs or None,
            "max_reject_fraction": config.max_reject_fraction,
            **common.sharding_summary(config.sharding),
        },
    }


# ------------------------------------------------------------------------------------ the job


class IndexRecords(beam.PTransform):
    """The indexing job as one transform (`run_index` runs it). `files`: record set -> its input
    files. Output: a singleton PCollection, the summary (the content of `summary.json`)."""

    def __init__(self, config: IndexConfig, files: dict[str, list[str]]):
        super().__init__()
        self._config = config
        self._files = files

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        config = self._config
        output_dir = config.output_dir
        record_sets = tuple(sorted(config.inputs))
        listed = sorted((rs, path) for rs, paths_ in self._files.items() for path in paths_)
        # Spill files on this machine's runners, the records themselves through a distributed
        # runner's shuffle (`spill.resolve_spill_root`).
        spill_root = spill.resolve_spill_root("auto", begin.pipeline, output_dir)
        read = (
            begin
            | "Files" >> beam.Create(listed, reshuffle=False)
            | "SpreadFiles" >> beam.Reshuffle()
            | "Read"
            >> beam.ParDo(
                screening.ReadRecords(
                    label_feature=config.label_feature,
                    id_feature=config.id_feature,
                    group_feature=config.group_feature,
                    normalize_ids=bool(config.pairs),
                    spill_root=spill_root,
                )
            ).with_outputs(REJECTED, screening.FILES, screening.COUNTS, main="batches")
        )
        all_rejects = [read[REJECTED]]

        # Ids from a feature may repeat; `<file>:<position>` ids cannot.
        duplicates = (
            (
                read.batches
                | "Ids" >> beam.FlatMap(lambda b: ((b.record_set, i) for i in b.ids))
                | "CountIds" >> beam.combiners.Count.PerElement()
                | "Repeated" >> beam.Filter(lambda counted: counted[1] > 1)
                | "RepeatedIds" >> beam.Keys()
            )
            if config.id_feature
            else begin | "NoRepeatedIds" >> beam.Create([])
        )
        kinds = None
        if config.label_feature:
            kinds = (
                read.batches
                | "LabelKinds" >> beam.Map(lambda b: screening.count_kinds(b.labels))
                | "AllLabelKinds" >> beam.CombineGlobally(screening.sum_kinds)
            )
        screened = read.batches | "Screen" >> beam.ParDo(
            screening.Screen(),
            beam.pvalue.AsList(duplicates),
            beam.pvalue.AsSingleton(kinds) if kinds is not None else None,
        ).with_outputs(REJECTED, main="batches")
        all_rejects.append(screened[REJECTED])

        tables = (
            screened.batches
            | "Keys"
            >> beam.Map(
                lambda b: (b.record_set, (b.ids, [spill.payload_length(p) for p in b.refs]))
            )
            | "CollectIds" >> beam.CombinePerKey(shards.CollectIds())
        )
        sections = []
        selection = None
        if config.pairs:
            rejected_tables = (
                (read[REJECTED], screened[REJECTED])
                | "ReadRejects" >> beam.Flatten()
                | "WithId" >> beam.Filter(lambda reject: bool(reject.id))
                | "RejectedId" >> beam.Map(lambda reject: (reject.record_set, reject.id))
                | "DistinctRejectedIds" >> beam.Distinct()
                | "RejectedKeys" >> beam.Map(lambda key: (key[0], ([key[1]], [0])))
                | "CollectRejectedIds" >> beam.CombinePerKey(shards.CollectIds())
            )
            pairs_format = pair_list.resolve_format(config.pairs, config.pairs_format)
            resolved = begin | "PairList" >> pair_index.ResolvePairList(
                config.pairs, pairs_format, tables, rejected_tables
            )
            all_rejects.append(resolved.rejects)
            selected = resolved.edges | "Select" >> pair_index.SelectRecords(
                tables, config.sharding
            )
            selection, plans = selected.selection, selected.plans
        elif config.group_feature:
            groups = (
                screened.batches
                | "GroupKeys" >> beam.Map(lambda b: (b.record_set, (b.ids, b.groups)))
                | "CollectGroups" >> beam.CombinePerKey(_CollectValues())
            )
            selection = (
                begin
                | "Once" >> beam.Create([None])
                | "SelectByGroup"
                >> beam.Map(
                    _select_by_group,
                    beam.pvalue.AsDict(groups),
                    beam.pvalue.AsDict(tables),
                    config.sharding,
                )
            )
            plans = selection | "Plans" >> beam.Map(
                _with_y_plan, beam.pvalue.AsDict(tables), config.sharding
            )
        else:
            plans = (
                begin
                | "RecordSets" >> beam.Create([record_sets])
                | "Plans"
                >> beam.Map(_plan_record_sets, beam.pvalue.AsDict(tables), config.sharding)
            )

        vocabulary = None
        if config.label_feature:
            vocabulary = (
                screened.batches
                | "Labels" >> beam.Map(lambda b: b.labels)
                | "CollectLabels" >> beam.CombineGlobally(screening.CollectLabels())
                | "Vocabulary" >> beam.Map(screening.vocabulary, beam.pvalue.AsSingleton(kinds))
            )
            sections.append(
                vocabulary
                | "LabelsSection"
                >> beam.Map(_labels_section, config.label_feature, beam.pvalue.AsSingleton(kinds))
            )
        assigned = screened.batches | "Assign" >> beam.ParDo(
            _Assign(by_group=bool(config.group_feature)),
            beam.pvalue.AsSingleton(plans),
            beam.pvalue.AsSingleton(selection) if selection is not None else None,
            beam.pvalue.AsSingleton(vocabulary) if vocabulary is not None else None,
        ).with_outputs(REJECTED, main="shard_batches")
        all_rejects.append(assigned[REJECTED])

        num_inputs = (
            read[screening.COUNTS]
            | "Counts" >> beam.Values()
            | "AllRecords" >> beam.CombineGlobally(sum)
        )
        # Every record set must keep a record.
        judgement = tuple(all_rejects) | "Judge" >> outcome.Judge(
            output_dir,
            num_inputs=num_inputs,
            plans=plans,
            required_record_sets=record_sets,
            max_reject_fraction=config.max_reject_fraction,
            record_reasons=screening.RECORD_REASONS,
            input_noun="records",
        )
        verdict = judgement.verdict
        index_stats = assigned.shard_batches | "Write" >> shards.WriteRecordSets(
            output_dir,
            plans=beam.pvalue.AsSingleton(plans),
            verdict=beam.pvalue.AsSingleton(verdict),
            vocabularies=(
                beam.pvalue.AsSingleton(
                    vocabulary
                    | "PerRecordSet"
                    >> beam.Map(lambda v: {record_set: v.names for record_set in record_sets})
                )
                if vocabulary is not None
                else None
            ),
        )
        if config.pairs:
            sections.append(
                resolved.edges
                | "PairIndex" >> pair_index.WritePairIndex(output_dir, selection, tables, verdict)
            )
        elif config.group_feature:
            sections.append(
                verdict
                | "GroupIndex"
                >> beam.Map(
                    _write_groups,
                    output_dir,
                    claims.claimed_run_id(output_dir),
                    beam.pvalue.AsSingleton(plans),
                    beam.pvalue.AsDict(groups),
                )
            )
        sections.append(
            read[screening.FILES]
            | "GatherFiles" >> beam.combiners.ToList()
            | "InputsSection"
            >> beam.Map(
                _inputs_section,
                beam.pvalue.AsDict(
                    read[screening.COUNTS] | "RecordsPerSet" >> beam.CombinePerKey(sum)
                ),
            )
        )
        return judgement | "Summary" >> outcome.WriteSummary(
            output_dir,
            _static_summary(config),
            plans=plans,
            index_stats=index_stats,
            sections=tuple(sections) | "Sections" >> beam.Flatten(),
        )
