"""Sorted, deterministic shard and offset-index writing for record sets, as Beam transforms.

Records are ordered by id. The ids of a record set (small keys, never payloads) are gathered
once to fix every record's number and shard (`ShardPlan`); the records' payloads (spill refs,
or the bytes themselves: `spill.Payload`) are then grouped by shard, each shard is written by
one worker, which copies its records' frames from the spill files (or frames the bytes), and
the per-shard offsets are gathered into the record set's index.

A payload is the serialized record itself, or, given a `MakeRecord`, what the shard writer
builds the record from once its class is known (the audio job's PCM, whose Example holds the
class id of its speaker).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import os
from collections.abc import Callable, Iterable
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, rejects, spill
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.id_index import IdIndex

# One record on its way to a shard: (record number, its payload, class id or -1).
ShardRecord = tuple[int, spill.Payload, int]
# (record id, payload, class id, class name) -> the serialized record.
MakeRecord = Callable[[str, bytes, int, str], bytes]

# The end of the message a shard writer fails with when the records it receives are not its plan.
LOST_RECORDS = "records were lost or duplicated between stages"


@dataclasses.dataclass(frozen=True)
class IdTable:
    """The ids of one record set, sorted, with the serialized size of each (int64 [N])."""

    ids: IdIndex
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, positions: np.ndarray) -> IdTable:
        """The `IdTable` of the records at `positions`.

        Args:
            positions: int64 [k], positions into this table (its sort order is kept when ascending).

        Returns:
            A new `IdTable` of k ids and their sizes.
        """
        positions = np.asarray(positions, np.int64)
        return IdTable(self.ids.take(positions), self.sizes[positions])


class CollectColumns(beam.CombineFn):
    """Combines batches of two aligned columns, `(keys, values)` lists, into whole columns and
    hands them to `finish`: `CollectIds` makes an `IdTable` of them, `group_pairing.CollectGroups`
    a `GroupTable`.

    Args:
        finish: (all keys, all values) -> the combined output.
    """

    def __init__(self, finish: Callable[[list, list], object]):
        super().__init__()
        self._finish = finish

    def create_accumulator(self) -> tuple[list, list]:
        """An empty `(keys, values)` pair of lists."""
        return [], []

    def add_input(self, accumulator, batch: tuple[list, list]):
        """Appends one batch to the accumulator.

        Args:
            accumulator: `(keys, values)` lists so far.
            batch: `(keys, values)` lists of one batch, aligned.

        Returns:
            The accumulator, extended.
        """
        accumulator[0].extend(batch[0])
        accumulator[1].extend(batch[1])
        return accumulator

    def merge_accumulators(self, accumulators):
        """Concatenates accumulators.

        Args:
            accumulators: iterable of `(keys, values)` lists.

        Returns:
            One `(keys, values)` pair holding them all.
        """
        keys: list = []
        values: list = []
        for more_keys, more_values in accumulators:
            keys.extend(more_keys)
            values.extend(more_values)
        return keys, values

    def extract_output(self, accumulator):
        """Hands the whole columns to `finish`.

        Args:
            accumulator: `(keys, values)` lists of all batches.

        Returns:
            What `finish(keys, values)` returns.
        """
        return self._finish(*accumulator)


class CollectIds(CollectColumns):
    """Combines `(ids, sizes)` batches of one record set into an `IdTable`."""

    def __init__(self):
        super().__init__(id_table)


def id_table(ids: list[str], sizes: list[int]) -> IdTable:
    """The `IdTable` of unique `ids` and their serialized `sizes`, in any order.

    Args:
        ids: the record ids (str), unique.
        sizes: the serialized size in bytes of each record, aligned with `ids`.

    Returns:
        The `IdTable`, sorted by id; `sizes` int64 [N] in that order.

    Example:
        id_table(["b", "a"], [5, 3])  # ids ["a", "b"], sizes [3, 5]
    """
    index, order = IdIndex.sorting(ids)
    return IdTable(index, np.asarray(sizes, np.int64).reshape([-1])[order])


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where each record of one record set goes.

    Record r (the r-th id in sort order) is in shard s when
    `shard_starts[s] <= r < shard_starts[s + 1]`; `shard_starts` is int64 [num_shards + 1].
    """

    record_set: str
    ids: IdIndex
    shard_starts: np.ndarray

    @property
    def num_records(self) -> int:
        """How many records the record set holds."""
        return len(self.ids)

    @property
    def num_shards(self) -> int:
        """How many shards the record set is cut into."""
        return len(self.shard_starts) - 1

    def shard_of(self, record_numbers: np.ndarray) -> np.ndarray:
        """int64 [n]: the shard of each record number.

        Args:
            record_numbers: int64 [n], record numbers in [0, num_records).

        Returns:
            int64 [n], the shard of each, in [0, num_shards).
        """
        return np.searchsorted(self.shard_starts, record_numbers, side="right").astype(np.int64) - 1

    def shard_path(self, output_dir: str, shard: int) -> str:
        """The path of shard `shard` of this record set in the run at `output_dir`.

        Args:
            output_dir: the run directory.
            shard: the shard number, in [0, num_shards).

        Returns:
            The shard file's path (`layout.shard_name` below the record set's examples folder).
        """
        return os.path.join(
            layout.examples_dir(output_dir, self.record_set),
            layout.shard_name(shard, self.num_shards),
        )


def plan_shards(record_set: str, table: IdTable, sharding: ShardingConfig) -> ShardPlan:
    """Cuts the sorted records into shards.

    With `num_shards` set, shards hold equal counts (±1). Otherwise a shard starts wherever a
    record's frame begins past the next multiple of `max_shard_bytes`, so a shard holds at most
    `max_shard_bytes` plus one record.

    Args:
        record_set: the record set's name, e.g. "train".
        table: the record set's sorted ids and sizes.
        sharding: `num_shards` (0: by size) and `max_shard_bytes`.

    Returns:
        The `ShardPlan`; an empty table gets zero shards.

    Example:
        plan_shards("train", table, ShardingConfig(num_shards=4)).num_shards  # 4 (when N >= 4)
    """
    n = len(table)
    if n == 0:
        return ShardPlan(record_set, table.ids, np.zeros([1], np.int64))
    if sharding.num_shards > 0:
        num_shards = min(sharding.num_shards, n)
        starts = (np.arange(num_shards + 1, dtype=np.int64) * n) // num_shards
        return ShardPlan(record_set, table.ids, starts)
    frame_sizes = table.sizes + layout.FRAME_OVERHEAD_BYTES
    frame_begins = np.cumsum(frame_sizes) - frame_sizes
    window = frame_begins // sharding.max_shard_bytes
    firsts = np.flatnonzero(np.concatenate([[True], window[1:] != window[:-1]]))
    return ShardPlan(record_set, table.ids, np.append(firsts, n).astype(np.int64))


def group_by_shard(
    plan: ShardPlan,
    record_numbers: np.ndarray,
    payloads: list[spill.Payload],
    class_ids: np.ndarray,
) -> Iterable[tuple[tuple[str, int], list[ShardRecord]]]:
    """Splits one batch of planned records into `((record_set, shard), [ShardRecord])`.

    Args:
        plan: the record set's `ShardPlan`.
        record_numbers: int64 [n], the batch's record numbers.
        payloads: the n payloads (bytes or `spill.SpillRef`), aligned.
        class_ids: int64 [n], the class of each record, -1 when unlabelled.

    Returns:
        An iterable of `((record_set, shard), [(record number, payload, class id)])`, one item
        per shard the batch touches.
    """
    shards = plan.shard_of(record_numbers)
    for shard in np.unique(shards).tolist():
        members = np.flatnonzero(shards == shard).tolist()
        yield (
            (plan.record_set, shard),
            [(int(record_numbers[i]), payloads[i], int(class_ids[i])) for i in members],
        )


class ShardResult(NamedTuple):
    """What one shard writer reports: `offsets` int64 [n, 2] (frame offset, payload length)
    and `class_ids` int64 [n] (-1 for unlabelled records), in record order."""

    record_set: str
    shard: int
    offsets: np.ndarray
    class_ids: np.ndarray


class _WriteShard(beam.DoFn):
    def __init__(self, output_dir: str, make_record: MakeRecord | None = None):
        super().__init__()
        self._output_dir = output_dir
        self._make_record = make_record

    def process(self, element, plans: dict[str, ShardPlan], verdict, vocabularies=None):
        (record_set, shard), batches = element
        if not verdict.ok:
            return
        plan = plans[record_set]
        records = sorted(itertools.chain.from_iterable(batches), key=operator.itemgetter(0))
        record_numbers = np.fromiter((r[0] for r in records), np.int64, len(records))
        start, end = int(plan.shard_starts[shard]), int(plan.shard_starts[shard + 1])
        if not np.array_equal(record_numbers, np.arange(start, end)):
            raise RuntimeError(
                f"shard {shard} of {record_set!r} received {len(records)} records, planned "
                f"{end - start}: {LOST_RECORDS}"
            )
        payloads = [r[1] for r in records]
        class_ids = np.fromiter((r[2] for r in records), np.int64, len(records))
        path = plan.shard_path(self._output_dir, shard)
        if self._make_record is None:
            frames = spill.read_frames(payloads)
            lengths = np.fromiter((len(f) for f in frames), np.int64, len(frames))
            offsets = layout.write_frames(path, frames, lengths - layout.FRAME_OVERHEAD_BYTES)
        else:
            classes = vocabularies[record_set]
            # Each record is made and written in turn (`layout.write_shard` streams them).
            offsets = layout.write_shard(
                path,
                (
                    self._make_record(record_id, payload, class_id, classes[class_id])
                    for record_id, payload, class_id in zip(
                        plan.ids.take(record_numbers).id_list(),
                        spill.read_payloads(payloads),
                        class_ids.tolist(),
                        strict=True,
                    )
                ),
            )
        beam.metrics.Metrics.counter(
            rejects.COUNTER_NAMESPACE, f"records_written_{record_set}"
        ).inc(len(records))
        yield ShardResult(record_set, shard, offsets, class_ids)


class _WriteIndex(beam.DoFn):
    def __init__(self, output_dir: str, run_id: str):
        super().__init__()
        self._output_dir = output_dir
        self._run_id = run_id

    def process(self, element, plans: dict[str, ShardPlan], vocabularies: dict[str, list[str]]):
        record_set, results = element
        plan = plans[record_set]
        results = sorted(results, key=operator.attrgetter("shard"))
        if [r.shard for r in results] != list(range(plan.num_shards)):
            raise RuntimeError(f"record set {record_set!r}: shards missing from the index")
        offsets = np.concatenate(
            [
                np.concatenate([np.full([len(r.offsets), 1], r.shard, np.int64), r.offsets], 1)
                for r in results
            ]
        )
        shard_paths = [plan.shard_path(self._output_dir, s) for s in range(plan.num_shards)]
        layout.save_record_set_index(
            self._output_dir, record_set, shard_paths, offsets, plan.ids.id_list(), self._run_id
        )
        stats = {
            "num_records": plan.num_records,
            "num_shards": plan.num_shards,
            "num_bytes": int(np.sum(offsets[:, 2] + layout.FRAME_OVERHEAD_BYTES)),
        }
        vocabulary = vocabularies.get(record_set)
        if vocabulary is not None:
            class_ids = np.concatenate([r.class_ids for r in results])
            layout.save_class_index(
                self._output_dir, record_set, class_ids, len(vocabulary), vocabulary, self._run_id
            )
            counts = np.bincount(class_ids, minlength=len(vocabulary))
            stats["num_classes"] = len(vocabulary)
            stats["records_per_class"] = {
                "min": int(counts.min()),
                "max": int(counts.max()),
                "mean": round(float(counts.mean()), 3),
            }
            stats["class_counts"] = dict(zip(vocabulary, counts.tolist(), strict=True))
        yield record_set, stats


class WriteRecordSets(beam.PTransform):
    """Writes shards and the offset index (plus the class index of labelled sets).

    Input: PCollection[((record_set, shard), list[ShardRecord])], any number of batches per
    shard. Side inputs: `plans` (singleton dict record_set -> ShardPlan), `verdict` (singleton
    with `.ok`; nothing is written when false) and `vocabularies` (singleton dict record_set ->
    class names, for labelled sets only; None when no set is labelled). `make_record` builds
    each record from its payload (labelled sets only); without it a payload is the record.
    Output: PCollection[(record_set, stats dict)]. The indexes name the run of the job that
    claims `output_dir` (`claims.claimed_run_id`).

    Args:
        output_dir: the run directory, claimed by this job.
        plans: side input, as above.
        verdict: side input, as above.
        vocabularies: side input, as above, or None.
        make_record: builds a record from (id, payload, class id, class name), or None.

    Raises:
        RuntimeError: (in the workers) when a shard receives other records than its plan
            names (`LOST_RECORDS`), or shards are missing from a record set's index.

    Example:
        stats = batches | WriteRecordSets(run_dir, plans_view, verdict_view)
    """

    def __init__(
        self,
        output_dir: str,
        plans,
        verdict,
        vocabularies=None,
        make_record: MakeRecord | None = None,
    ):
        super().__init__()
        self._output_dir = output_dir
        self._plans = plans
        self._verdict = verdict
        self._vocabularies = vocabularies
        self._make_record = make_record

    def expand(self, shard_batches: beam.PCollection) -> beam.PCollection:
        """Groups the batches by shard, writes each shard, then each record set's index.

        Args:
            shard_batches: PCollection[((record_set, shard), list[ShardRecord])].

        Returns:
            PCollection[(record_set, stats dict)].
        """
        vocabularies = {} if self._vocabularies is None else self._vocabularies
        run_id = claims.claimed_run_id(self._output_dir)
        return (
            shard_batches
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                _WriteShard(self._output_dir, self._make_record),
                self._plans,
                self._verdict,
                vocabularies,
            )
            | "ByRecordSet" >> beam.Map(lambda result: (result.record_set, result))
            | "GatherShards" >> beam.GroupByKey()
            | "WriteIndex"
            >> beam.ParDo(_WriteIndex(self._output_dir, run_id), self._plans, vocabularies)
        )
