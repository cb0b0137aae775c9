"""The audio job: a speaker manifest -> one labelled record set per split, with class indexes.

Rows are parsed, deduplicated and assigned a split on ids alone; each utterance is then decoded
once (tensorflow-io) and its PCM spilled to a file (`spill`). Once the vocabularies are known,
its Example is built with the class id from its split's vocabulary and spilled again, and only
that ref travels, grouped by shard, to the shard writer: the audio never passes through the
runner.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from components import examples, layout
from components.materialize import audio, common, manifest, paths, rejects, shards, spill
from components.materialize.config import AudioConfig
from components.materialize.manifest import ManifestRow
from components.materialize.splits import EVAL, TRAIN, held_out_speakers, held_out_utterances
from components.materialize.verdict import decide

REJECTED = common.REJECTED
_EXAMPLE_OVERHEAD_BYTES = 96  # feature keys and proto framing around the PCM bytes


def run_audio(
    config: AudioConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the audio job and returns its summary (the content of `summary.json`).

    `make_pipeline` returns a fresh `beam.Pipeline`; None builds one from
    `config.beam_pipeline_args` (DirectRunner by default). Raises MaterializeError on bad
    arguments, when nothing is left, or when rejects exceed `config.max_reject_fraction`.
    """
    config.validate()
    manifest_format = manifest.inspect_manifest(config.manifest, config.manifest_format)
    return common.run_job(
        lambda pipeline: build_audio_pipeline(pipeline, config, manifest_format),
        config.output_dir,
        config.overwrite,
        config.beam_pipeline_args,
        make_pipeline,
    )


class Utterance(NamedTuple):
    """A decoded utterance: `pcm` is where its little-endian int16 mono samples, at the job's
    sample rate, were spilled."""

    record_set: str
    id: str
    speaker: str
    pcm: spill.SpillRef
    num_samples: int


class _ParseRows(beam.DoFn):
    def __init__(self, manifest_path: str, manifest_format: manifest.ManifestFormat):
        super().__init__()
        self._manifest_path = manifest_path
        self._format = manifest_format

    def process(self, line: str):
        try:
            yield manifest.parse_row(line, self._format, self._manifest_path)
        except rejects.RejectedInput as error:
            yield beam.pvalue.TaggedOutput(
                REJECTED, rejects.Reject.of_line(self._manifest_path, line, error)
            )


class _Deduplicate(beam.DoFn):
    """(id, [rows]) -> the row when listed once, or listed identically several times (the
    extra copies are rejected); rows of an id listed with different labels are all rejected."""

    def __init__(self, root: str):
        super().__init__()
        self._root = root

    def process(self, element):
        record_id, rows = element
        rows = sorted(rows)
        source = posixpath.join(self._root, record_id)
        if len(set(rows)) == 1:
            yield rows[0]
            for _ in rows[1:]:
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(
                        source, rejects.DUPLICATE_ID, f"listed {len(rows)} times", id=record_id
                    ),
                )
            return
        labels = sorted({f"{row.speaker}/{row.split}".rstrip("/") for row in rows})
        for _ in rows:
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                rejects.Reject(
                    source,
                    rejects.DUPLICATE_ID,
                    f"listed {len(rows)} times with different labels: {', '.join(labels)}",
                    id=record_id,
                ),
            )


def _assign_held_out_speaker(row: ManifestRow, held_out: frozenset[str]) -> ManifestRow:
    return row._replace(split=EVAL if row.speaker in held_out else TRAIN)


def _assign_within_speaker(element, fraction: float, seed: int):
    _, rows = element
    rows = list(rows)
    held_out = held_out_utterances((row.id for row in rows), fraction, seed)
    for row in rows:
        yield row._replace(split=EVAL if row.id in held_out else TRAIN)


class _DecodeUtterances(spill.SpillingDoFn):
    def __init__(self, root: str, sample_rate: int, output_dir: str):
        super().__init__(output_dir)
        self._root = root
        self._sample_rate = sample_rate

    def process(self, row: ManifestRow):
        path = posixpath.join(self._root, row.id)
        try:
            data = paths.read_bytes(self._root, path)
            waveform = audio.decode_audio(data, row.id, self._sample_rate)
        except rejects.RejectedInput as error:
            yield beam.pvalue.TaggedOutput(
                REJECTED,
                rejects.Reject(path, error.reason, error.detail, row.split, row.id),
            )
            return
        [pcm] = self.spill.write([waveform.samples.astype("<i2").tobytes()])
        yield Utterance(row.split, row.id, row.speaker, pcm, len(waveform.samples))


class _BuildExamples(spill.SpillingDoFn):
    def __init__(self, sample_rate: int, output_dir: str):
        super().__init__(output_dir)
        self._sample_rate = sample_rate

    def process(self, utterance: Utterance, class_ids: dict[str, dict[str, int]], plans):
        class_id = class_ids[utterance.record_set][utterance.speaker]
        serialized = examples.serialize_example(
            {
                layout.ID_KEY: examples.bytes_feature(utterance.id.encode("utf-8")),
                layout.AUDIO_KEY: examples.bytes_feature(spill.read_payloads([utterance.pcm])[0]),
                layout.NUM_SAMPLES_KEY: examples.int64_feature(utterance.num_samples),
                layout.SAMPLE_RATE_KEY: examples.int64_feature(self._sample_rate),
                layout.LABEL_KEY: examples.int64_feature(class_id),
                layout.SPEAKER_KEY: examples.bytes_feature(utterance.speaker.encode("utf-8")),
            }
        )
        plan = plans[utterance.record_set]
        yield from shards.group_by_shard(
            plan,
            plan.ids.lookup([utterance.id]),
            self.spill.write([serialized]),
            np.array([class_id], np.int64),
        )


def _vocabularies(_, speakers_by_set: dict[str, list[str]]) -> dict[str, list[str]]:
    return {record_set: sorted(speakers) for record_set, speakers in speakers_by_set.items()}


def build_audio_pipeline(
    pipeline: beam.Pipeline,
    config: AudioConfig,
    manifest_format: manifest.ManifestFormat | None = None,
) -> None:
    """Adds the audio job to `pipeline` (the transforms the TFX component reuses).

    `manifest_format` is read from the manifest when not given.
    """
    if manifest_format is None:
        manifest_format = manifest.inspect_manifest(config.manifest, config.manifest_format)
    output_dir = config.output_dir
    lines = (
        pipeline
        | "ReadManifest"
        >> beam.io.ReadFromText(
            config.manifest, skip_header_lines=manifest_format.skip_header_lines
        )
        | "SkipBlank" >> beam.Filter(lambda line: bool(line.strip()))
    )
    parsed = lines | "Parse" >> beam.ParDo(
        _ParseRows(config.manifest, manifest_format)
    ).with_outputs(REJECTED, main="rows")
    unique = (
        parsed.rows
        | "ById" >> beam.Map(lambda row: (row.id, row))
        | "GroupById" >> beam.GroupByKey()
        | "Deduplicate" >> beam.ParDo(_Deduplicate(config.root)).with_outputs(REJECTED, main="rows")
    )
    rows = unique.rows
    if manifest_format.has_split:
        split_mode = "manifest"
    elif config.eval_fraction == 0:
        split_mode = "none"
        rows = rows | "AllTrain" >> beam.Map(lambda row: row._replace(split=TRAIN))
    elif config.split_mode == "speaker":
        split_mode = "speaker"
        held_out = (
            rows
            | "Speakers" >> beam.Map(lambda row: row.speaker)
            | "DistinctSpeakers" >> beam.Distinct()
            | "AllSpeakers" >> beam.combiners.ToList()
            | "HoldOut" >> beam.Map(held_out_speakers, config.eval_fraction, config.split_seed)
        )
        rows = rows | "SplitBySpeaker" >> beam.Map(
            _assign_held_out_speaker, beam.pvalue.AsSingleton(held_out)
        )
    else:
        split_mode = "utterance"
        rows = (
            rows
            | "BySpeaker" >> beam.Map(lambda row: (row.speaker, row))
            | "GroupBySpeaker" >> beam.GroupByKey()
            | "SplitUtterances"
            >> beam.FlatMap(_assign_within_speaker, config.eval_fraction, config.split_seed)
        )
    decoded = (
        rows
        | "SpreadRows" >> beam.Reshuffle()
        | "Decode"
        >> beam.ParDo(_DecodeUtterances(config.root, config.sample_rate, output_dir)).with_outputs(
            REJECTED, main="utterances"
        )
    )
    utterances = decoded.utterances

    impulse = pipeline | "Impulse" >> beam.Create([None])
    speakers_by_set = (
        utterances
        | "SetSpeaker" >> beam.Map(lambda u: (u.record_set, u.speaker))
        | "DistinctSetSpeakers" >> beam.Distinct()
        | "SpeakersBySet" >> beam.GroupByKey()
    )
    vocabularies = impulse | "Vocabularies" >> beam.Map(
        _vocabularies, beam.pvalue.AsDict(speakers_by_set)
    )
    class_ids = vocabularies | "ClassIds" >> beam.Map(
        lambda vocabs: {name: {c: i for i, c in enumerate(v)} for name, v in vocabs.items()}
    )
    tables = (
        utterances
        | "Keys"
        >> beam.Map(
            lambda u: (
                u.record_set,
                ([u.id], [u.pcm.length + len(u.id) + len(u.speaker) + _EXAMPLE_OVERHEAD_BYTES]),
            )
        )
        | "CollectIds" >> beam.CombinePerKey(shards.CollectIds())
    )
    plans = impulse | "Plans" >> beam.Map(
        lambda _, tables: {
            name: shards.plan_shards(name, table, config.sharding)
            for name, table in sorted(tables.items())
        },
        beam.pvalue.AsDict(tables),
    )
    shard_batches = utterances | "BuildExamples" >> beam.ParDo(
        _BuildExamples(config.sample_rate, output_dir),
        beam.pvalue.AsSingleton(class_ids),
        beam.pvalue.AsSingleton(plans),
    )
    reject_counts = (
        (parsed[REJECTED], unique[REJECTED], decoded[REJECTED])
        | "AllRejects" >> beam.Flatten()
        | "Rejects" >> rejects.RecordRejects(output_dir)
    )
    num_rows = lines | "CountRows" >> beam.combiners.Count.Globally()
    required = () if manifest_format.has_split else (TRAIN,)
    verdict = impulse | "Verdict" >> beam.Map(
        lambda _, rows, counts, plans: decide(
            num_inputs=rows,
            reject_counts=counts,
            record_counts={name: plan.num_records for name, plan in plans.items()},
            required_record_sets=required,
            max_reject_fraction=config.max_reject_fraction,
        ),
        beam.pvalue.AsSingleton(num_rows),
        beam.pvalue.AsSingleton(reject_counts),
        beam.pvalue.AsSingleton(plans),
    )
    index_stats = shard_batches | "Write" >> shards.WriteRecordSets(
        output_dir,
        plans=beam.pvalue.AsSingleton(plans),
        verdict=beam.pvalue.AsSingleton(verdict),
        vocabularies=beam.pvalue.AsSingleton(vocabularies),
    )
    total_samples = (
        utterances
        | "Samples" >> beam.Map(lambda u: (u.record_set, u.num_samples))
        | "SamplesPerSet" >> beam.CombinePerKey(sum)
    )
    static = {
        "job": "audio",
        "inputs": {"manifest": config.manifest, "root": config.root},
        "config": {
            "sample_rate": config.sample_rate,
            "split_mode": split_mode,
            "eval_fraction": config.eval_fraction if split_mode in ("speaker", "utterance") else 0,
            "split_seed": config.split_seed,
            "max_reject_fraction": config.max_reject_fraction,
            **common.sharding_summary(config.sharding),
        },
    }
    _ = impulse | "Summary" >> beam.Map(
        lambda _, verdict, counts, plans, stats, samples, rows: common.write_summary(
            _,
            output_dir,
            static,
            verdict,
            counts,
            plans,
            stats,
            [
                {"input_counts": {"manifest_rows": rows}},
                {
                    "audio_seconds": {
                        name: round(n / config.sample_rate, 3)
                        for name, n in sorted(samples.items())
                    }
                },
            ],
        ),
        beam.pvalue.AsSingleton(verdict),
        beam.pvalue.AsSingleton(reject_counts),
        beam.pvalue.AsSingleton(plans),
        beam.pvalue.AsDict(index_stats),
        beam.pvalue.AsDict(total_samples),
        beam.pvalue.AsSingleton(num_rows),
    )
