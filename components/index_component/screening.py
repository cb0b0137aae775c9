"""Reading and checking the input records of the indexing job (`indexing`).

`ReadRecords` reads each input file whole, in file order, and checks every record for the
features the indexes need (label, id, group): a record that lacks one, or holds it with another
type or several values, becomes a `Reject` with its file and position; the others are spilled
(`tfx_dynamic_inputs.materialize.spill`) and travel on as `RecordBatch`es of ids and refs. Once
every record is read, `Screen` rejects the records whose id repeats within their set and those whose
label is not of the kind most labels have (int64 class ids or bytes names, `LabelKinds`), and
`CollectLabels` gathers the run's `Vocabulary` from the labels left.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs.index_component import records
from tfx_dynamic_inputs.materialize import stages

REJECTED = stages.REJECTED
# The side outputs of `ReadRecords`.
FILES = "files"
COUNTS = "counts"

# Reasons a record is not indexed (counted towards `max_reject_fraction`), beside the pair-list
# reasons of `materialize.rejects`, which drop single pairs and are not counted.
UNPARSABLE_EXAMPLE = "unparsable_example"  # the record is not a tf.train.Example
MISSING_LABEL = stages.MISSING_LABEL  # no `label_feature`, or an empty one
BAD_LABEL = "bad_label"  # not one int64 in [0, MAX_INT_LABEL) or one printable UTF-8 name
MISSING_ID = "missing_id"
BAD_ID = "bad_id"  # not one int64 or printable UTF-8 id; an unsafe id with a pair list
DUPLICATE_ID = stages.DUPLICATE_ID  # every record of an id that several records of a set share
MISSING_GROUP = "missing_group"
BAD_GROUP = "bad_group"
NO_VALID_PAIRS = stages.NO_VALID_PAIRS  # an x record left without a y to pair with
RECORD_REASONS = (
    UNPARSABLE_EXAMPLE,
    MISSING_LABEL,
    BAD_LABEL,
    MISSING_ID,
    BAD_ID,
    DUPLICATE_ID,
    MISSING_GROUP,
    BAD_GROUP,
    NO_VALID_PAIRS,
)

# int64 labels are class ids, and the class index holds a row per id up to the largest: a label
# past this is refused rather than allocating that many rows (name sparse ids as bytes instead).
MAX_INT_LABEL = 1 << 24
INT_LABELS = "int64"
NAME_LABELS = "bytes"
_RECORDS_PER_BATCH = 1024


class RecordBatch(NamedTuple):
    """Records of one record set, spilled: their ids, refs, and the label (int or name) and group
    of each (None where the job reads none)."""

    record_set: str
    ids: list[str]
    refs: list[stages.Payload]
    labels: list[int | str | None]
    groups: list[str | None]


def _one_value(found: records.Values | None, what: str, missing: str, bad: str) -> int | str:
    """The single int64 or printable UTF-8 value of a feature; `RejectedInput` otherwise."""
    if found is None or not found.values:
        raise stages.RejectedInput(missing, f"no {what} value")
    if len(found.values) != 1:
        raise stages.RejectedInput(bad, f"{len(found.values)} {what} values; expected one")
    (value,) = found.values
    if found.kind == "int64_list":
        return int(value)
    if found.kind != "bytes_list":
        raise stages.RejectedInput(bad, f"a float {what}; expected an int64 or bytes value")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise stages.RejectedInput(bad, f"{what} {value[:64]!r} is not UTF-8") from None
    # Names are lines of classes.txt / ids.txt / groups.txt: no line breaks or control characters.
    if not text or not text.isprintable():
        raise stages.RejectedInput(bad, f"{what} {text[:64]!r} is empty or not printable")
    return text


class ReadRecords(stages.SpillingDoFn):
    """(record_set, path) -> `RecordBatch`es of its records; rejects; (record_set, compression)
    on `FILES` and (record_set, records read) on `COUNTS`.

    Features left empty ("") are not read. `normalize_ids`: ids are normalized as a pair list's
    are (`stages.normalize_id`), so the two meet.
    """

    def __init__(
        self,
        *,
        label_feature: str,
        id_feature: str,
        group_feature: str,
        normalize_ids: bool,
        spill_root: str | None,
    ):
        super().__init__(spill_root)
        self._label_feature = label_feature
        self._id_feature = id_feature
        self._group_feature = group_feature
        self._keys = tuple(k for k in (label_feature, id_feature, group_feature) if k)
        self._normalize_ids = normalize_ids
        self._parser: records.ExampleFeatures | None = None

    def setup(self):
        """Makes the worker's Example parser."""
        self._parser = records.ExampleFeatures()

    def process(self, element):
        """Reads one input file into batches of its records.

        Args:
            element: `(record_set, path)` of one TFRecord file.

        Returns:
            An iterator of `RecordBatch`es, and tagged outputs: `REJECTED` rejects, `FILES`
            `(record_set, compression)` and `COUNTS` `(record_set, records read)`.
        """
        record_set, path = element
        name = posixpath.basename(path)
        compression = records.compression_of(path)
        yield beam.pvalue.TaggedOutput(FILES, (record_set, compression))
        batch = RecordBatch(record_set, [], [], [], [])
        payloads: list[bytes] = []
        count = 0
        for position, payload in enumerate(records.read_frames(path, compression)):
            count += 1
            record_id = f"{name}:{position:012d}"
            try:
                found = self._parser.read(payload, self._keys)
                if found is None:
                    raise stages.RejectedInput(UNPARSABLE_EXAMPLE, "not a tf.train.Example")
                if self._id_feature:
                    record_id = self._record_id(found.get(self._id_feature))
                label = group = None
                if self._label_feature:
                    label = _one_value(
                        found.get(self._label_feature), "label", MISSING_LABEL, BAD_LABEL
                    )
                    if isinstance(label, int) and not 0 <= label < MAX_INT_LABEL:
                        raise stages.RejectedInput(
                            BAD_LABEL,
                            f"int64 label {label} is not a class id in [0, {MAX_INT_LABEL}) "
                            "(store sparse ids as bytes names)",
                        )
                if self._group_feature:
                    group = str(
                        _one_value(
                            found.get(self._group_feature), "group", MISSING_GROUP, BAD_GROUP
                        )
                    )
            except stages.RejectedInput as error:
                source = f"{path}: record {position}"
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    stages.Reject(source, error.reason, error.detail, record_set, record_id),
                )
                continue
            batch.ids.append(record_id)
            batch.labels.append(label)
            batch.groups.append(group)
            payloads.append(payload)
            if len(payloads) == _RECORDS_PER_BATCH:
                batch.refs.extend(self.spill.write(payloads))
                yield batch
                batch, payloads = RecordBatch(record_set, [], [], [], []), []
        if payloads:
            batch.refs.extend(self.spill.write(payloads))
            yield batch
        yield beam.pvalue.TaggedOutput(COUNTS, (record_set, count))

    def _record_id(self, found: records.Values | None) -> str:
        record_id = str(_one_value(found, "id", MISSING_ID, BAD_ID))
        if not self._normalize_ids:
            return record_id
        # A pair list's ids are normalized paths (`pair_list.parse_entry`): so must these be,
        # for the two to meet.
        try:
            return stages.normalize_id(record_id)
        except stages.RejectedInput as error:
            raise stages.RejectedInput(BAD_ID, f"id {record_id!r}: {error.detail}") from None


class LabelKinds(NamedTuple):
    """How many labels are int64 and how many bytes: the kind most labels have is the run's."""

    ints: int
    names: int

    @property
    def kind(self) -> str:
        """The run's label kind: `INT_LABELS` unless most labels are bytes."""
        return INT_LABELS if self.ints >= self.names else NAME_LABELS


def count_kinds(labels: list[int | str | None]) -> LabelKinds:
    """The label kinds of one batch.

    Args:
        labels: int64 labels, names (str), or None where a record has none.

    Returns:
        The `LabelKinds` (None labels count as neither).
    """
    ints = sum(isinstance(label, int) for label in labels)
    return LabelKinds(ints, sum(isinstance(label, str) for label in labels))


def sum_kinds(counts) -> LabelKinds:
    """The sum of per-batch `LabelKinds`.

    Args:
        counts: an iterable of `LabelKinds`.

    Returns:
        Their `LabelKinds` total.
    """
    counts = list(counts)
    return LabelKinds(sum(c.ints for c in counts), sum(c.names for c in counts))


class Screen(beam.DoFn):
    """`RecordBatch` -> the batch without the records whose id repeats in its set or whose label
    is not of the run's kind; those become rejects.
    """

    def process(self, batch: RecordBatch, duplicates: list[tuple[str, str]], kinds):
        """Drops the duplicates and the labels of the wrong kind from one batch.

        Args:
            batch: the `RecordBatch`.
            duplicates: side input, `(record_set, id)` of every id that repeats.
            kinds: side input, the run's `LabelKinds`, or None when no label is read.

        Returns:
            An iterator of the kept `RecordBatch` (when any is kept) and `REJECTED` rejects.
        """
        repeated = {record_id for rs, record_id in duplicates if rs == batch.record_set}
        kind = kinds.kind if kinds is not None else None
        kept = RecordBatch(batch.record_set, [], [], [], [])
        for record_id, ref, label, group in zip(
            batch.ids, batch.refs, batch.labels, batch.groups, strict=True
        ):
            reason = detail = ""
            if record_id in repeated:
                reason, detail = DUPLICATE_ID, f"id {record_id!r} names several records"
            elif kind is not None and isinstance(label, int) != (kind == INT_LABELS):
                reason = BAD_LABEL
                detail = (
                    f"label {label!r} is {'an int64' if isinstance(label, int) else 'bytes'}, "
                    f"but most labels are {kind} ({kinds.ints} int64, {kinds.names} bytes)"
                )
            if reason:
                yield beam.pvalue.TaggedOutput(
                    REJECTED,
                    stages.Reject(
                        f"{batch.record_set}: {record_id}",
                        reason,
                        detail,
                        batch.record_set,
                        record_id,
                    ),
                )
                continue
            kept.ids.append(record_id)
            kept.refs.append(ref)
            kept.labels.append(label)
            kept.groups.append(group)
        if kept.ids:
            yield kept


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The class names of the run, shared by every record set: int64 labels are their own class
    ids ("0" .. str(max)), bytes labels are numbered in sorted order."""

    kind: str
    names: list[str]

    def class_ids(self, labels: list[int | str]) -> np.ndarray:
        """The class id of each label.

        Args:
            labels: int64 labels (their own ids) or names (in `names`), of this kind.

        Returns:
            int64 [len(labels)].

        Example:
            Vocabulary(NAME_LABELS, ["cat", "dog"]).class_ids(["dog", "cat"])  # [1, 0]
        """
        if self.kind == INT_LABELS:
            return np.asarray(labels, np.int64).reshape([-1])
        return np.searchsorted(np.asarray(self.names, dtype=object), labels).astype(np.int64)


class CollectLabels(beam.CombineFn):
    """Label lists -> (largest int64 label, set of names): what `vocabulary` builds the
    run's `Vocabulary` from (the labels left after `Screen`)."""

    def create_accumulator(self) -> tuple[int, set[str]]:
        """`(-1, set())`: no int64 label, no name yet."""
        return -1, set()

    def add_input(self, accumulator, labels):
        """Adds one batch's labels.

        Args:
            accumulator: `(largest int64 label, names)` so far.
            labels: the batch's labels (int or str).

        Returns:
            The updated accumulator.
        """
        largest, names = accumulator
        ints = [label for label in labels if isinstance(label, int)]
        names.update(label for label in labels if isinstance(label, str))
        return max([largest, *ints]), names

    def merge_accumulators(self, accumulators):
        """Merges accumulators.

        Args:
            accumulators: iterable of `(largest int64 label, names)`.

        Returns:
            `(the largest of them, the union of the names)`.
        """
        largest, names = -1, set()
        for more_largest, more_names in accumulators:
            largest = max(largest, more_largest)
            names |= more_names
        return largest, names

    def extract_output(self, accumulator) -> tuple[int, set[str]]:
        """The accumulator as it is.

        Args:
            accumulator: `(largest int64 label, names)`.

        Returns:
            The same pair.
        """
        return accumulator


def vocabulary(collected: tuple[int, set[str]], kinds: LabelKinds) -> Vocabulary:
    """The run's `Vocabulary` from its collected labels.

    Args:
        collected: `(largest int64 label, names)` from `CollectLabels`.
        kinds: the run's `LabelKinds`.

    Returns:
        int64 labels: classes "0" .. str(largest); bytes labels: the names, sorted.

    Example:
        vocabulary((2, set()), LabelKinds(5, 0)).names  # ["0", "1", "2"]
    """
    largest, names = collected
    if kinds.kind == INT_LABELS:
        return Vocabulary(INT_LABELS, [str(i) for i in range(largest + 1)])
    return Vocabulary(NAME_LABELS, sorted(names))
