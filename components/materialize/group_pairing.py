"""Valid pairs by group: x may pair with every y of its group.

In the pairs job each image's group comes from its groups file (`--x_groups`, `--y_groups`:
`group_list`) or, with `--groups_from_subfolder`, is the first folder of its id (`ReadGroups`);
the indexing job reads it from a feature. `select_by_group` (run by `stages.PlanByGroup`)
chooses the records: every candidate with one group, but an x only when some y shares its group
(an x with no valid pair is not materialized, as with a pair list; a y whose group has no x
still is). `WriteGroupIndex` writes the group pair index (`layout.save_group_index`).

Only ids, group names and record numbers pass through here, never images, and nothing grows
with the number of valid pairs: O(N_x + N_y) for any group sizes.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, common, group_list, rejects, shards
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.shards import IdTable, ShardPlan
from tfx_dynamic_inputs.materialize.verdict import Verdict

X = layout.X_RECORD_SET
Y = layout.Y_RECORD_SET
REJECTED = common.REJECTED
# What an image's group is when it has none: not listed (or not in a folder), or listed twice
# with different groups.
NO_GROUP = -1
CONFLICTING = -2


@dataclasses.dataclass(frozen=True)
class GroupTable:
    """The groups of one record set's images: `ids`, those with a group entry; `group` int64
    [len(ids)], an index into `names` (sorted) or `CONFLICTING`; `conflicts`: id -> its groups,
    for the ids listed with several."""

    ids: IdIndex
    group: np.ndarray
    names: list[str]
    conflicts: dict[str, list[str]]


def group_table(ids: list[str], groups: list[str]) -> GroupTable:
    """The `GroupTable` of (id, group) entries in any order: an id listed again with the same
    group counts once, with another group it is `CONFLICTING`.

    Args:
        ids: record ids (str), aligned with `groups`.
        groups: the group name of each entry.

    Returns:
        The `GroupTable`.

    Example:
        group_table(["b", "a", "a"], ["g", "g", "h"]).group  # [CONFLICTING, 0] ("a" first)
    """
    if not ids:
        return GroupTable(IdIndex.from_ids([]), np.zeros([0], np.int64), [], {})
    names = sorted(set(groups))
    code_of = {name: code for code, name in enumerate(names)}
    codes = np.fromiter((code_of[group] for group in groups), np.int64, len(groups))
    encoded = np.array([record_id.encode("utf-8") for record_id in ids], dtype=bytes)
    order = np.argsort(encoded, kind="stable")
    encoded, codes = encoded[order], codes[order]
    starts = np.concatenate([[True], encoded[1:] != encoded[:-1]])
    entry_id = np.cumsum(starts) - 1
    first = codes[starts]
    conflicting = np.zeros(len(first), bool)
    conflicting[entry_id[codes != first[entry_id]]] = True
    unique = encoded[starts]
    conflicts: dict[str, set[str]] = collections.defaultdict(set)
    for entry in np.flatnonzero(conflicting[entry_id]).tolist():
        conflicts[unique[entry_id[entry]].decode("utf-8")].add(names[codes[entry]])
    return GroupTable(
        IdIndex(unique),
        np.where(conflicting, CONFLICTING, first).astype(np.int64),
        names,
        {record_id: sorted(found) for record_id, found in conflicts.items()},
    )


def subfolder_table(table: IdTable) -> GroupTable:
    """The groups of `--groups_from_subfolder`: the first folder of each id (`cat/001.png` is in
    `cat`); an image directly under its root has none.

    Args:
        table: the decoded images of one record set.

    Returns:
        The `GroupTable` of the images in a folder.
    """
    ids, groups = [], []
    for record_id in table.ids.id_list():
        folder, in_folder, _ = record_id.partition("/")
        if in_folder:
            ids.append(record_id)
            groups.append(folder)
    return group_table(ids, groups)


class CollectGroups(shards.CollectColumns):
    """Combines `(ids, groups)` batches of one record set into a `GroupTable`."""

    def __init__(self):
        super().__init__(group_table)


class _ResolveEntries(beam.DoFn):
    """[GroupEntry] of one record set -> (record_set, (ids, groups)) of the decoded images they
    name; an entry naming an id that is no image becomes a reject (one naming a rejected image
    is dropped: the image has its own reject)."""

    def __init__(self, record_set: str, path: str):
        super().__init__()
        self._record_set = record_set
        self._path = path

    def process(self, entries: list[group_list.GroupEntry], tables, rejected_tables):
        record_set = self._record_set
        ids = [entry.id for entry in entries]
        known = common.table(tables, record_set).ids.lookup(ids) >= 0
        unknown = np.flatnonzero(~known).tolist()
        rejected = common.table(rejected_tables, record_set).ids.lookup([ids[i] for i in unknown])
        for i, was_rejected in zip(unknown, (rejected >= 0).tolist(), strict=True):
            if not was_rejected:
                entry = entries[i]
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    rejects.Reject(
                        f"{self._path}:{entry.line}: id={entry.id} group={entry.group}",
                        rejects.GROUP_UNKNOWN_ID,
                        f"not an image in {record_set}_dir",
                    ),
                )
        kept = np.flatnonzero(known).tolist()
        yield record_set, ([ids[i] for i in kept], [entries[i].group for i in kept])


@dataclasses.dataclass(frozen=True)
class GroupSelection:
    """Which decoded images become records, and the group of each.

    Per record set: `candidates`, the sorted ids of every image that decoded; `candidate_group`
    int64 [num candidates], an index into `names` (every group named, sorted), or `NO_GROUP` /
    `CONFLICTING`; `candidate_record` int64 [num candidates], its record number in `plans`, or
    -1 when it is left out. `conflicts`: id -> groups of the images listed with several;
    `missing_detail`: what a reject says of an image without a group; `record_noun`: what a
    reject calls a record ("image", "record").
    """

    names: list[str]
    candidates: dict[str, IdIndex]
    candidate_group: dict[str, np.ndarray]
    candidate_record: dict[str, np.ndarray]
    plans: dict[str, ShardPlan]
    conflicts: dict[str, dict[str, list[str]]]
    missing_detail: dict[str, str]
    record_noun: str = "image"

    @property
    def record_sets(self) -> tuple[str, ...]:
        """The record sets whose records `assign` numbers: both."""
        return (X, Y)

    def assign(self, record_set: str, ids: list[str]) -> tuple[np.ndarray, list[tuple]]:
        """Numbers the decoded candidates `ids` of `record_set`.

        Args:
            record_set: `x` or `y`.
            ids: ids of candidates (images that decoded, records that passed screening).

        Returns:
            (int64 [len(ids)] record numbers, -1 where left out; (position, reason, detail) of
            each one left out).
        """
        candidate = self.candidates[record_set].lookup(ids)
        numbers = self.candidate_record[record_set][candidate]
        refused = []
        for i in np.flatnonzero(numbers < 0).tolist():
            group = int(self.candidate_group[record_set][candidate[i]])
            if group == NO_GROUP:
                refused.append((i, rejects.MISSING_GROUP, self.missing_detail[record_set]))
            elif group == CONFLICTING:
                listed = ", ".join(map(repr, self.conflicts[record_set][ids[i]]))
                refused.append((i, rejects.CONFLICTING_GROUP, f"listed with groups {listed}"))
            else:
                detail = f"no y {self.record_noun} has its group {self.names[group]!r}"
                refused.append((i, rejects.NO_VALID_PAIRS, detail))
        return numbers, refused

    def record_groups(self, record_set: str) -> np.ndarray:
        """int64 [num records]: the group of each record, in record order.

        Args:
            record_set: `x` or `y`.

        Returns:
            int64 [num records], indexes into `names`.
        """
        return self.candidate_group[record_set][self.candidate_record[record_set] >= 0]


def select_by_group(
    _,
    group_tables: dict[str, GroupTable],
    tables: dict[str, IdTable],
    sharding: ShardingConfig,
    missing_detail: dict[str, str],
    record_noun: str = "image",
) -> GroupSelection:
    """Plans the records: the y with a group, and the x whose group has a y.

    Args:
        _: the element of the one-element PCollection this runs on.
        group_tables: record_set -> the `GroupTable` of its candidates' groups.
        tables: record_set -> the `IdTable` of its candidates.
        sharding: how each record set is cut into shards.
        missing_detail: record_set -> what a reject says of a candidate without a group.
        record_noun: what a reject calls a record.

    Returns:
        The `GroupSelection`.
    """
    empty = group_table([], [])
    names = sorted(set().union(*(t.names for t in group_tables.values())))
    position = {name: i for i, name in enumerate(names)}
    candidate_group = {}
    for record_set in (X, Y):
        groups = group_tables.get(record_set, empty)
        found = groups.ids.lookup(common.table(tables, record_set).ids.id_list())
        listed = np.flatnonzero(found >= 0)
        group = groups.group[found[listed]]
        # Each record set numbered its own groups; the index numbers those of both.
        renumbered = np.array([position[name] for name in groups.names], np.int64)
        candidate_group[record_set] = np.full([len(found)], NO_GROUP, np.int64)
        candidate_group[record_set][listed] = np.where(
            group >= 0, renumbered[np.maximum(group, 0)], group
        )
    y_group = candidate_group[Y]
    y_per_group = np.bincount(y_group[y_group >= 0], minlength=max(len(names), 1))
    x_group = candidate_group[X]
    kept = {X: (x_group >= 0) & (y_per_group[np.maximum(x_group, 0)] > 0), Y: y_group >= 0}
    candidate_record, plans = {}, {}
    for record_set in (X, Y):
        table = common.table(tables, record_set)
        survivors = np.flatnonzero(kept[record_set]).astype(np.int64)
        record = np.full([len(table)], -1, np.int64)
        record[survivors] = np.arange(len(survivors), dtype=np.int64)
        candidate_record[record_set] = record
        plans[record_set] = shards.plan_shards(record_set, table.subset(survivors), sharding)
    return GroupSelection(
        names=names,
        candidates={rs: common.table(tables, rs).ids for rs in (X, Y)},
        candidate_group=candidate_group,
        candidate_record=candidate_record,
        plans=plans,
        conflicts={rs: group_tables.get(rs, empty).conflicts for rs in (X, Y)},
        missing_detail=missing_detail,
        record_noun=record_noun,
    )


class Groups(NamedTuple):
    """What `ReadGroups` yields.

    Attributes:
        tables: PCollection[(record_set, GroupTable)], the group of each decoded image.
        line_counts: singleton PCollection, dict: the lines read from each groups file
            (`x_group_lines`, `y_group_lines`); empty for subfolders.
        rejects: PCollection[Reject] of the groups files' lines.
        missing_detail: record_set -> what a reject says of an image without a group.
    """

    tables: beam.PCollection
    line_counts: beam.PCollection
    rejects: beam.PCollection
    missing_detail: dict[str, str]


@beam.ptransform_fn
def ReadGroups(
    begin: beam.pvalue.PBegin,
    group_files: dict[str, tuple[str, str]],
    tables: beam.PCollection,
    rejected_tables: beam.PCollection,
) -> Groups:
    """Each decoded image's group, from its groups file or, without one, from its first folder.

    Args:
        begin: the pipeline's root.
        group_files: record_set -> (groups file, its format); empty with
            `--groups_from_subfolder`.
        tables: PCollection[(record_set, IdTable)] of the decoded images.
        rejected_tables: PCollection[(record_set, IdTable)] of the rejected images' ids.

    Returns:
        `Groups`, for `stages.PlanByGroup`.
    """
    if not group_files:
        return Groups(
            tables | "Subfolders" >> beam.Map(lambda keyed: (keyed[0], subfolder_table(keyed[1]))),
            begin | "NoLineCounts" >> beam.Create([{}]),
            begin | "NoGroupRejects" >> beam.Create([]),
            {rs: f"directly under {rs}_dir, not in a group folder" for rs in (X, Y)},
        )
    batches, line_counts, line_rejects = [], [], []
    for record_set, (path, groups_format) in sorted(group_files.items()):
        name = record_set.upper()
        read = begin | f"Read{name}Groups" >> group_list.read_group_list(path, groups_format)
        resolved = (
            read.parsed
            | f"Batch{name}Entries" >> beam.BatchElements(min_batch_size=256, max_batch_size=8192)
            | f"Resolve{name}Entries"
            >> beam.ParDo(
                _ResolveEntries(record_set, path),
                beam.pvalue.AsDict(tables),
                beam.pvalue.AsDict(rejected_tables),
            ).with_outputs(REJECTED, main="groups")
        )
        batches.append(resolved.groups)
        line_counts.append(
            read.num_records
            | f"{name}LineCount" >> beam.Map(lambda n, key: (key, n), f"{record_set}_group_lines")
        )
        line_rejects += [read.rejects, resolved[REJECTED]]
    return Groups(
        tuple(batches)
        | "AllGroups" >> beam.Flatten()
        | "CollectGroups" >> beam.CombinePerKey(CollectGroups()),
        tuple(line_counts) | "LineCounts" >> beam.Flatten() | "ByFile" >> beam.combiners.ToDict(),
        tuple(line_rejects) | "GroupRejects" >> beam.Flatten(),
        {rs: f"not listed in {path}" for rs, (path, _) in group_files.items()},
    )


def _write_group_index(
    verdict: Verdict, output_dir: str, run_id: str, selection: GroupSelection
) -> dict:
    if not verdict.ok:
        return {"pairs": {"num_pairs": 0}}
    x_groups, y_groups = selection.record_groups(X), selection.record_groups(Y)
    # groups.txt lists the groups of records only (an x group without y left no record).
    used = np.unique(np.concatenate([x_groups, y_groups]))
    return layout.save_group_index(
        output_dir,
        np.searchsorted(used, x_groups),
        np.searchsorted(used, y_groups),
        [selection.names[group] for group in used.tolist()],
        run_id,
    )


@beam.ptransform_fn
def WriteGroupIndex(
    verdict: beam.PCollection, output_dir: str, selection: beam.PCollection
) -> beam.PCollection:
    """The verdict -> a singleton {"pairs": stats}; writes the group pair index, and its
    `run.json` (the run of the job that claims `output_dir`), when the verdict is ok.

    Args:
        verdict: singleton PCollection[Verdict].
        output_dir: the run folder, claimed by this job.
        selection: singleton PCollection[GroupSelection] (a side input).

    Returns:
        Singleton PCollection[dict]: {"pairs": stats} ({"num_pairs": 0} when not ok).
    """
    return verdict | "WriteGroupIndex" >> beam.Map(
        _write_group_index,
        output_dir,
        claims.claimed_run_id(output_dir),
        beam.pvalue.AsSingleton(selection),
    )
