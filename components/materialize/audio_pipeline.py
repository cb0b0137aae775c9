"""The audio job: a speaker manifest (or speaker folders) -> one labelled record set per split,
with class indexes.

Rows are parsed (or listed), deduplicated and assigned a split on ids alone; each utterance is
then decoded once, in batches of `files_per_batch` by two threads (`audio`: libsndfile, FFmpeg,
soxr), and its PCM spilled to a file, or with `--spill none` handed on as it is (`spill`). The
plan of every record set (speaker vocabulary, shard of each id) is made from small keys; the
PCM payloads travel, grouped by shard, to the shard writers, which build each Example there:
its label is the class id of its speaker in the vocabulary of its split, known only once every
utterance is decoded. So the audio is spilled once and, spilled, never passes through the
runner.

The job is composed of the shared `stages` (read, verdict, write shards, commit); the manifest,
the splits and the speaker plan are its own.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
import posixpath
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs import examples, layout
from tfx_dynamic_inputs.materialize import audio, manifest, paths, rejects, shards, spill, stages
from tfx_dynamic_inputs.materialize.config import (
    AUDIO_EXTENSIONS,
    AudioConfig,
    AudioLimits,
    ShardingConfig,
)
from tfx_dynamic_inputs.materialize.gather import Gathered
from tfx_dynamic_inputs.materialize.manifest import ManifestRow
from tfx_dynamic_inputs.materialize.splits import (
    EVAL,
    TRAIN,
    held_out_speakers,
    held_out_utterances,
)

REJECTED = stages.REJECTED
_NUM_FILES = "num_files"
_EXAMPLE_OVERHEAD_BYTES = 96  # feature keys and proto framing around the PCM bytes
# Threads decoding each batch of files (`_DecodeUtterances`).
DECODE_THREADS = 2


def run_audio(
    config: AudioConfig, make_pipeline: Callable[[], beam.Pipeline] | None = None
) -> dict:
    """Runs the audio job (`stages.run_materialize`), once its config is valid and its
    manifest's format known.

    Args:
        config: the job's config.
        make_pipeline: as for `stages.run_job`.

    Returns:
        The run's summary (the content of `summary.json`).

    Raises:
        MaterializeError: on bad arguments or an unreadable manifest header, when a required
            record set is left empty, or when rejects exceed `config.max_reject_fraction`.

    Example:
        run_audio(AudioConfig(root="data/audio", manifest="data/manifest.csv",
                              output_dir="/tmp/run"))["record_sets"]["train"]["num_shards"]
    """
    config.validate()
    manifest_format = _inspect_manifest(config)
    return stages.run_materialize(MaterializeAudio(config, manifest_format), config, make_pipeline)


class Utterance(NamedTuple):
    """A decoded utterance: `pcm` is the payload of its little-endian int16 mono samples at
    the job's sample rate (the bytes, or where they were spilled)."""

    record_set: str
    id: str
    speaker: str
    pcm: spill.Payload
    num_samples: int


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
    """A batch of rows (`files_per_batch`) -> an `Utterance` or a tagged reject each, in order.

    The files of a batch are read and decoded by `DECODE_THREADS` threads: libsndfile (reading
    each file by its descriptor, `audio.decode_audio_file`) and soxr release the GIL for most of
    each file, so with two threads the in-memory job on 2,000 clips runs 1.2-1.3x as fast as
    with one on 2 cores (a third adds nothing).
    """

    def __init__(self, root: str, sample_rate: int, spill_root: str | None, limits: AudioLimits):
        super().__init__(spill_root)
        self._root = root
        self._sample_rate = sample_rate
        self._limits = limits
        self._pool: ThreadPoolExecutor | None = None

    def setup(self):
        self._pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="decode")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown()

    def _decode(self, row: ManifestRow) -> tuple[bytes, int] | rejects.Reject:
        """(PCM bytes, number of samples) of the row's file, or its reject."""
        path = posixpath.join(self._root, row.id)
        try:
            with paths.open_input(self._root, path) as file:
                waveform = audio.decode_audio_file(file, row.id, self._sample_rate, self._limits)
        except rejects.RejectedInput as error:
            return rejects.Reject(path, error.reason, error.detail, row.split, row.id)
        return waveform.samples.astype("<i2", copy=False).tobytes(), len(waveform.samples)

    def process(self, batch: list[ManifestRow]):
        # Each file's PCM is spilled as it comes, while the threads decode the next ones.
        for row, decoded in self._decode_in_order(batch):
            if isinstance(decoded, rejects.Reject):
                yield beam.pvalue.TaggedOutput(REJECTED, decoded)
                continue
            pcm, num_samples = decoded
            [spilled] = self.spill.write([pcm])
            yield Utterance(row.split, row.id, row.speaker, spilled, num_samples)

    def _decode_in_order(self, batch: list[ManifestRow]):
        """(row, `_decode(row)`) in batch order, at most `2 x DECODE_THREADS` files decoded
        ahead of the one handed on: what is held is bounded by the threads, not by
        `files_per_batch`."""
        rows = iter(batch)
        pending = collections.deque(
            (row, self._pool.submit(self._decode, row))
            for row in itertools.islice(rows, 2 * DECODE_THREADS)
        )
        while pending:
            row, future = pending.popleft()
            following = next(rows, None)
            if following is not None:
                pending.append((following, self._pool.submit(self._decode, following)))
            yield row, future.result()


def audio_example(
    record_id: str, pcm: bytes | memoryview, sample_rate: int, class_id: int, speaker: str
) -> bytes:
    """The serialized Example of one utterance; `pcm`: its little-endian int16 mono samples.

    Args:
        record_id: the utterance's id (its path below the root).
        pcm: little-endian int16 mono samples, 2 bytes each.
        sample_rate: their rate in Hz.
        class_id: the speaker's class id in the record set's vocabulary.
        speaker: the speaker's name.

    Returns:
        The serialized `tf.train.Example` (features id, audio, num_samples, sample_rate, label,
        speaker).
    """
    return examples.serialize_example(
        {
            layout.ID_KEY: examples.bytes_feature(record_id.encode("utf-8")),
            layout.AUDIO_KEY: examples.bytes_feature(pcm),
            layout.NUM_SAMPLES_KEY: examples.int64_feature(len(pcm) // 2),
            layout.SAMPLE_RATE_KEY: examples.int64_feature(sample_rate),
            layout.LABEL_KEY: examples.int64_feature(class_id),
            layout.SPEAKER_KEY: examples.bytes_feature(speaker.encode("utf-8")),
        }
    )


@dataclasses.dataclass(frozen=True)
class _AudioRecord:
    """The job's `shards.MakeRecord`: an utterance's Example from its PCM and its class."""

    sample_rate: int

    def __call__(
        self, record_id: str, pcm: bytes | memoryview, class_id: int, speaker: str
    ) -> bytes:
        return audio_example(record_id, pcm, self.sample_rate, class_id, speaker)


def _inspect_manifest(config: AudioConfig) -> manifest.ManifestFormat | None:
    """The manifest's format; None when the job lists the root instead."""
    if config.speaker_from_path:
        return None
    return manifest.inspect_manifest(config.manifest, config.manifest_format)


class ManifestRows(NamedTuple):
    """What `_ReadManifest` and `_ListSpeakerFolders` yield, as PCollections: `num_rows`
    (singleton int, the inputs: non-blank manifest lines, or audio files listed); `rows`
    (ManifestRow, one per id); `rejects` (Reject)."""

    num_rows: beam.PCollection
    rows: beam.PCollection
    rejects: beam.PCollection


@beam.ptransform_fn
def _ReadManifest(
    begin: beam.pvalue.PBegin,
    manifest_path: str,
    manifest_format: manifest.ManifestFormat,
    root: str,
) -> ManifestRows:
    """PBegin -> `ManifestRows`: the manifest parsed and deduplicated by id."""
    read = begin | "ReadManifest" >> manifest.read_manifest(manifest_path, manifest_format)
    unique = (
        read.parsed
        | "ById" >> beam.Map(lambda row: (row.id, row))
        | "GroupById" >> beam.GroupByKey()
        | "Deduplicate" >> beam.ParDo(_Deduplicate(root)).with_outputs(REJECTED, main="rows")
    )
    return ManifestRows(
        read.num_records,
        unique.rows,
        (read.rejects, unique[REJECTED]) | "Rejects" >> beam.Flatten(),
    )


def _rows_of_files(root: str) -> Iterator[ManifestRow | beam.pvalue.TaggedOutput]:
    """Every audio file below `root` as a row, or as a tagged reject."""
    for path in paths.list_files(root):
        raw_id = paths.relative_id(root, path)
        if posixpath.splitext(raw_id)[1].lower() not in AUDIO_EXTENSIONS:
            continue
        try:
            yield manifest.row_of_path(raw_id)
        except rejects.RejectedInput as error:
            yield beam.pvalue.TaggedOutput(
                REJECTED, rejects.Reject(path, error.reason, error.detail)
            )


def _list_root(_, root: str) -> Iterator[ManifestRow | beam.pvalue.TaggedOutput]:
    """`_rows_of_files`, then their count (tagged `_NUM_FILES`): one listing counts itself."""
    num_files = 0
    for listed in _rows_of_files(root):
        num_files += 1
        yield listed
    yield beam.pvalue.TaggedOutput(_NUM_FILES, num_files)


@beam.ptransform_fn
def _ListSpeakerFolders(begin: beam.pvalue.PBegin, root: str) -> ManifestRows:
    """PBegin -> `ManifestRows`: every file below `root` with an audio extension, its speaker
    the first folder of its path (`manifest.row_of_path`). Ids are unique paths: nothing to
    deduplicate."""
    listed = (
        begin
        # Not reshuffled here: the job spreads the rows before decoding them.
        | "Root" >> beam.Impulse()
        | "List" >> beam.FlatMap(_list_root, root).with_outputs(REJECTED, _NUM_FILES, main="rows")
    )
    return ManifestRows(listed[_NUM_FILES], listed.rows, listed[REJECTED])


def _split_mode(config: AudioConfig, has_split: bool) -> str:
    """How rows get their split: "manifest" (its split column), "none" (all train), "speaker"
    (held-out speakers) or "utterance" (held-out utterances of every speaker)."""
    if has_split:
        return "manifest"
    if config.eval_fraction == 0:
        return "none"
    return "speaker" if config.split_mode == "speaker" else "utterance"


@beam.ptransform_fn
def _AssignSplits(
    rows: beam.PCollection, mode: str, eval_fraction: float, seed: int
) -> beam.PCollection:
    """ManifestRow without a split -> the same row with its split, by `_split_mode` (any but
    "manifest")."""
    if mode == "none":
        return rows | "AllTrain" >> beam.Map(lambda row: row._replace(split=TRAIN))
    if mode == "speaker":
        held_out = (
            rows
            | "Speakers" >> beam.Map(lambda row: row.speaker)
            | "DistinctSpeakers" >> beam.Distinct()
            | "HoldOut" >> Gathered(held_out_speakers, eval_fraction, seed)
        )
        return rows | "SplitBySpeaker" >> beam.Map(
            _assign_held_out_speaker, beam.pvalue.AsSingleton(held_out)
        )
    return (
        rows
        | "BySpeaker" >> beam.Map(lambda row: (row.speaker, row))
        | "GroupBySpeaker" >> beam.GroupByKey()
        | "SplitUtterances" >> beam.FlatMap(_assign_within_speaker, eval_fraction, seed)
    )


def _plan_key(utterance: Utterance) -> tuple[str, str, str, int, int]:
    """What the plan needs of an utterance: (record set, id, speaker, estimated Example size,
    number of samples)."""
    size = (
        spill.payload_length(utterance.pcm)
        + len(utterance.id)
        + len(utterance.speaker)
        + _EXAMPLE_OVERHEAD_BYTES
    )
    return utterance.record_set, utterance.id, utterance.speaker, size, utterance.num_samples


class AudioPlan(NamedTuple):
    """Every record set's plan, as dicts keyed by record set: `vocabularies` (sorted speaker
    names), `class_ids` (speaker -> class id), `plans` (ShardPlan) and `num_samples` (their
    total)."""

    vocabularies: dict[str, list[str]]
    class_ids: dict[str, dict[str, int]]
    plans: dict[str, shards.ShardPlan]
    num_samples: dict[str, int]


def _plan_audio(
    _, keys: list[tuple[str, str, str, int, int]], sharding: ShardingConfig
) -> AudioPlan:
    """The `AudioPlan` of the `_plan_key`s of every decoded utterance."""
    by_set: dict[str, list[tuple[str, str, str, int, int]]] = {}
    for key in keys:
        by_set.setdefault(key[0], []).append(key)
    plan = AudioPlan({}, {}, {}, {})
    for name, members in sorted(by_set.items()):
        _, ids, speakers, sizes, samples = zip(*members, strict=True)
        vocabulary = sorted(set(speakers))
        plan.vocabularies[name] = vocabulary
        plan.class_ids[name] = {speaker: i for i, speaker in enumerate(vocabulary)}
        table = shards.id_table(list(ids), list(sizes))
        plan.plans[name] = shards.plan_shards(name, table, sharding)
        plan.num_samples[name] = sum(samples)
    return plan


def _assign_shard(utterance: Utterance, plan: AudioPlan):
    """An utterance -> `((record_set, shard), [ShardRecord])`, labelled by its speaker."""
    shard_plan = plan.plans[utterance.record_set]
    yield from shards.group_by_shard(
        shard_plan,
        shard_plan.ids.lookup([utterance.id]),
        [utterance.pcm],
        np.array([plan.class_ids[utterance.record_set][utterance.speaker]], np.int64),
    )


def _audio_seconds(plan: AudioPlan, sample_rate: int) -> dict:
    """The summary's `audio_seconds` section: the duration of each record set."""
    return {
        "audio_seconds": {
            name: round(n / sample_rate, 3) for name, n in sorted(plan.num_samples.items())
        }
    }


def _static_summary(config: AudioConfig, mode: str) -> dict:
    return {
        "job": "audio",
        "inputs": {
            "manifest": config.manifest or None,
            "root": config.root,
            "speaker_from_path": config.speaker_from_path,
        },
        "config": {
            "sample_rate": config.sample_rate,
            "split_mode": mode,
            "eval_fraction": config.eval_fraction if mode in ("speaker", "utterance") else 0,
            "split_seed": config.split_seed,
            "max_reject_fraction": config.max_reject_fraction,
            **stages.sharding_summary(config.sharding),
        },
    }


class MaterializeAudio(stages.Job[AudioConfig]):
    """The audio job as one transform, applied to a pipeline (`run_audio` runs it).

    `manifest_format` is read from the manifest when not given (and unused with
    `config.speaker_from_path`). Output: a singleton PCollection, the summary (the content of
    `summary.json`).

    Args:
        config: the job's config.
        manifest_format: the manifest's format (`manifest.inspect_manifest`), or None.

    Example:
        # Under `stages.run_job`, whose claim on the output folder the writers read:
        stages.run_job(lambda p: p | MaterializeAudio(config), config.output_dir, False, (), None)
    """

    def __init__(self, config: AudioConfig, manifest_format: manifest.ManifestFormat | None = None):
        super().__init__(config)
        self._format = _inspect_manifest(config) if manifest_format is None else manifest_format

    def _build(self, begin: beam.pvalue.PBegin, config: AudioConfig) -> beam.PCollection:
        output_dir = config.output_dir
        has_split = self._format is not None and self._format.has_split
        mode = _split_mode(config, has_split)

        if self._format is None:
            listed = begin | "List" >> _ListSpeakerFolders(config.root)
            counted_inputs = "audio_files"
        else:
            listed = begin | "Manifest" >> _ReadManifest(config.manifest, self._format, config.root)
            counted_inputs = "manifest_rows"
        rows = listed.rows
        if mode != "manifest":
            rows = rows | "Split" >> _AssignSplits(mode, config.eval_fraction, config.split_seed)
        spill_root = stages.resolve_spill_root(config.spill, begin.pipeline, output_dir)
        batches = rows | "Batch" >> beam.BatchElements(
            min_batch_size=config.files_per_batch, max_batch_size=config.files_per_batch
        )
        decoded = batches | "Decode" >> stages.ReadSpread(
            _DecodeUtterances(config.root, config.sample_rate, spill_root, config.limits),
            main="utterances",
        )
        utterances = decoded.utterances
        # One plan from every utterance's key, as a side input: the shard writers need it all.
        planned = (
            begin
            | "PlanImpulse" >> beam.Impulse()
            | "Plan"
            >> beam.Map(
                _plan_audio,
                beam.pvalue.AsList(utterances | "PlanKeys" >> beam.Map(_plan_key)),
                config.sharding,
            )
        )
        plans = planned | "Plans" >> beam.Map(operator.attrgetter("plans"))
        shard_batches = utterances | "Assign" >> beam.FlatMap(
            _assign_shard, beam.pvalue.AsSingleton(planned)
        )

        judgement = (listed.rejects, decoded[REJECTED]) | "Judge" >> stages.Judge(
            output_dir,
            num_inputs=listed.num_rows,
            plans=plans,
            required_record_sets=() if has_split else (TRAIN,),
            max_reject_fraction=config.max_reject_fraction,
        )
        index_stats = shard_batches | "Write" >> stages.WriteShards(
            output_dir,
            plans=plans,
            verdict=judgement.verdict,
            vocabularies=planned | "Vocabularies" >> beam.Map(operator.attrgetter("vocabularies")),
            make_record=_AudioRecord(config.sample_rate),
        )
        input_counts = listed.num_rows | "InputCounts" >> beam.Map(
            lambda num_rows: {"input_counts": {counted_inputs: num_rows}}
        )
        audio_seconds = planned | "AudioSeconds" >> beam.Map(_audio_seconds, config.sample_rate)
        return judgement | "Summary" >> stages.Commit(
            output_dir,
            _static_summary(config, mode),
            plans=plans,
            index_stats=index_stats,
            sections=(input_counts, audio_seconds),
        )
