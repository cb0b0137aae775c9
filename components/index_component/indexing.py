"""The indexing job: the records of a TFX `Examples` artifact -> a run in the
`tfx_dynamic_inputs.layout` contract (uncompressed shards, offset index, class index, valid-pair
index), as one Beam pipeline.

Each input file (GZIP or uncompressed TFRecord, `records.compression_of`) is read whole by one
worker, in file order; every record is checked for the features the indexes need (label, id,
group; `screening`) and spilled (`tfx_dynamic_inputs.materialize.spill`; through a distributed
runner's shuffle instead), and only its ref travels on. Records are numbered by id: the `id_feature`
value, or `<file name>:<position>` without one (file order).
From there the job is composed of the materialize jobs' own stages (`tfx_dynamic_inputs.materialize.
stages`): ids sorted into shard plans, valid pairs resolved from a pair list or from groups,
rejects judged against `max_reject_fraction`, the shards and indexes written only when the
verdict is ok, and `summary.json` written last to commit the run.

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

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.index_component import records, screening
from tfx_dynamic_inputs.materialize import stages
from tfx_dynamic_inputs.materialize.config import check_reject_fraction
from tfx_dynamic_inputs.materialize.gather import Gathered
from tfx_dynamic_inputs.materialize.stages import MaterializeError, ShardingConfig

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
REJECTED = stages.REJECTED


@dataclasses.dataclass(frozen=True)
class IndexConfig:
    """What to index and how.

    Attributes:
        inputs: record set -> the input split folder whose files become it (`x` and `y` with a
            pairing).
        output_dir: the run's folder.
        label_feature: every record set gets a class index of this feature's values.
        id_feature: the feature holding each record's id (else `<file name>:<position>`).
        group_feature: x and y records with equal values of it may pair.
        pairs: a valid-pair list over the `id_feature` values of the x and y records (the pairs
            job's formats, `pairs_format`), instead of `group_feature`.
        pairs_format: "auto" (by extension), "jsonl" or "csv".
        sharding: how each record set is cut into shards.
        max_reject_fraction: the largest fraction of records that may be rejected.
        overwrite: whether a previous run in `output_dir` may be replaced.
        beam_pipeline_args: Beam options for the default pipeline.

    Example:
        >>> IndexConfig(inputs={"train": split_dir}, output_dir=out, label_feature="label")
        ... # doctest: +SKIP
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
        """Whether x records pair with y records (by a pair list or a group feature)."""
        return bool(self.pairs or self.group_feature)

    def validate(self) -> None:
        """Checks the config before any folder is touched.

        Raises:
            MaterializeError: naming the first setting that is wrong.
        """
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
        if self.pairs_format not in stages.PAIRS_FORMATS:
            raise MaterializeError(
                f"pairs_format must be one of {', '.join(stages.PAIRS_FORMATS)}; "
                f"got {self.pairs_format!r}"
            )
        gfile = layout.gfile()
        if self.pairs and (not gfile.exists(self.pairs) or gfile.isdir(self.pairs)):
            raise MaterializeError(f"pairs: file not found: {self.pairs!r}")
        self.sharding.validate()
        check_reject_fraction(self.max_reject_fraction)


def run_index(
    config: IndexConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the indexing job into `config.output_dir` (`stages.run_job`).

    Args:
        config: the job's config; validated first.
        make_pipeline: returns a fresh `beam.Pipeline` (TFX's `_make_beam_pipeline`); None
            builds one from `config.beam_pipeline_args`.

    Returns:
        The run's summary (the content of `summary.json`).

    Raises:
        MaterializeError: on bad arguments, when a record set is left empty, or when rejects
            exceed `config.max_reject_fraction`.
        records.RecordFileError: naming the file and record, when an input file is damaged.

    Example:
        run_index(IndexConfig(inputs={"train": split_dir}, output_dir="/tmp/run",
                              label_feature="label"))
    """
    config.validate()
    files = {record_set: input_files(split) for record_set, split in config.inputs.items()}
    return stages.run_job(
        lambda pipeline: pipeline | IndexRecords(config, files),
        config.output_dir,
        config.overwrite,
        config.beam_pipeline_args,
        make_pipeline,
        {f"the {record_set} split": split for record_set, split in config.inputs.items()},
    )


def input_files(split_dir: str) -> list[str]:
    """The files of one input split folder, sorted (TFX reads `Split-<name>/*` the same way).

    Args:
        split_dir: the split folder (any gfile path).

    Returns:
        The paths of its files (folders left out).

    Raises:
        MaterializeError: when it holds no file.
    """
    gfile = layout.gfile()
    found = sorted(p for p in gfile.glob(posixpath.join(split_dir, "*")) if not gfile.isdir(p))
    if not found:
        raise MaterializeError(f"input split folder {split_dir} holds no files")
    return found


def _record_source(record_set: str, record_id: str) -> str:
    """What a reject of a record names as its source: its record set and id."""
    return f"{record_set}: {record_id}"


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
            **stages.sharding_summary(config.sharding),
        },
    }


# ------------------------------------------------------------------------------------ the job


class IndexRecords(stages.Job[IndexConfig]):
    """The indexing job as one transform (`run_index` runs it).

    Args:
        config: the job's config.
        files: record set -> its input files.

    Returns (of `expand`):
        A singleton PCollection, the summary (the content of `summary.json`).
    """

    def __init__(self, config: IndexConfig, files: dict[str, list[str]]):
        super().__init__(config)
        self._files = files

    def _build(self, begin: beam.pvalue.PBegin, config: IndexConfig) -> beam.PCollection:
        output_dir = config.output_dir
        record_sets = tuple(sorted(config.inputs))

        read, screened, kinds = self._read_and_screen(begin)
        tables = screened.batches | "Tables" >> stages.CollectIdTables()
        pairing = self._plan_pairs(begin, read, screened, tables)
        plans = (
            pairing.plans
            if pairing is not None
            else begin | "Plan" >> stages.PlanRecordSets(record_sets, tables, config.sharding)
        )
        sections = []
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
        assigned = screened.batches | "Assign" >> stages.AssignToShards(
            plans,
            _record_source,
            pairing.selection if pairing is not None else None,
            vocabulary,
        )

        num_inputs = (
            read[screening.COUNTS]
            | "Counts" >> beam.Values()
            | "AllRecords" >> beam.CombineGlobally(sum)
        )
        all_rejects = (read[REJECTED], screened[REJECTED], assigned[REJECTED])
        if pairing is not None:
            all_rejects += (pairing.rejects,)
        # Every record set must keep a record.
        judgement = all_rejects | "Judge" >> stages.Judge(
            output_dir,
            num_inputs=num_inputs,
            plans=plans,
            required_record_sets=record_sets,
            max_reject_fraction=config.max_reject_fraction,
            record_reasons=screening.RECORD_REASONS,
            input_noun="records",
        )
        index_stats = assigned.shard_batches | "Write" >> stages.WriteShards(
            output_dir,
            plans=plans,
            verdict=judgement.verdict,
            vocabularies=(
                vocabulary
                | "PerRecordSet"
                >> beam.Map(lambda v: {record_set: v.names for record_set in record_sets})
                if vocabulary is not None
                else None
            ),
        )
        if pairing is not None:
            sections.append(
                judgement.verdict | "PairIndex" >> stages.WritePairing(output_dir, pairing, tables)
            )
        sections.append(
            read[screening.FILES]
            | "InputsSection"
            >> Gathered(
                _inputs_section,
                beam.pvalue.AsDict(
                    read[screening.COUNTS] | "RecordsPerSet" >> beam.CombinePerKey(sum)
                ),
            )
        )
        return judgement | "Summary" >> stages.Commit(
            output_dir,
            _static_summary(config),
            plans=plans,
            index_stats=index_stats,
            sections=tuple(sections),
        )

    def _read_and_screen(self, begin: beam.pvalue.PBegin):
        """Read and screen: (the reader's outputs, the screen's outputs, the singleton
        `LabelKinds` or None without a label feature)."""
        config = self._config
        listed = sorted((rs, path) for rs, paths_ in self._files.items() for path in paths_)
        # Spill files on this machine's runners, the records themselves through a distributed
        # runner's shuffle (`stages.resolve_spill_root`).
        spill_root = stages.resolve_spill_root("auto", begin.pipeline, config.output_dir)
        read = (
            begin
            | "Files" >> beam.Create(listed, reshuffle=False)
            | "Read"
            >> stages.ReadSpread(
                screening.ReadRecords(
                    label_feature=config.label_feature,
                    id_feature=config.id_feature,
                    group_feature=config.group_feature,
                    normalize_ids=bool(config.pairs),
                    spill_root=spill_root,
                ),
                main="batches",
                extra_outputs=(screening.FILES, screening.COUNTS),
            )
        )
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
        return read, screened, kinds

    def _plan_pairs(self, begin, read, screened, tables) -> stages.Pairing | None:
        """Plan ids of a pairing: by the pair list, or by the group feature; None without one."""
        config = self._config
        if config.pairs:
            rejected_tables = (
                (read[REJECTED], screened[REJECTED])
                | "ReadRejects" >> beam.Flatten()
                | "RejectedTables" >> stages.CollectRejectedIds()
            )
            return begin | "PairList" >> stages.PlanByPairList(
                config.pairs, config.pairs_format, tables, rejected_tables, config.sharding
            )
        if config.group_feature:
            group_tables = (
                screened.batches
                | "GroupKeys" >> beam.Map(lambda b: (b.record_set, (b.ids, b.groups)))
                | "GroupTables" >> stages.CollectGroupTables()
            )
            return begin | "ByGroup" >> stages.PlanByGroup(
                group_tables,
                tables,
                config.sharding,
                # Screening rejects a record without a group before it becomes a candidate.
                missing_detail={rs: f"no {config.group_feature} value" for rs in (X, Y)},
                record_noun="record",
            )
        return None
