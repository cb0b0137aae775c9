"""Rejected inputs: reasons, the exception decoders raise, Beam counters and `rejects.jsonl`."""

from __future__ import annotations

import collections
import json
import os
from typing import NamedTuple

import apache_beam as beam

from components import layout

COUNTER_NAMESPACE = "materialize"

# Reasons an input file or manifest row is not materialized.
MISSING_FILE = "missing_file"
READ_ERROR = "read_error"
UNSAFE_PATH = "unsafe_path"  # `..` leaving the root, absolute path, control characters
SYMLINK_ESCAPES_ROOT = "symlink_escapes_root"
UNSUPPORTED_FORMAT = "unsupported_format"
CORRUPT_IMAGE = "corrupt_image"
CORRUPT_AUDIO = "corrupt_audio"
EMPTY_AUDIO = "empty_audio"
DUPLICATE_ID = "duplicate_id"
MALFORMED_ROW = "malformed_row"
MISSING_LABEL = "missing_label"
INVALID_SPLIT = "invalid_split"
NO_VALID_PAIRS = "no_valid_pairs"  # an x image whose valid-pair list is (or became) empty

# Reasons a valid-pair entry (one x -> y edge) is dropped. They are not input records, so they
# do not count towards the reject fraction.
MALFORMED_PAIR_ENTRY = "malformed_pair_entry"
UNSAFE_PAIR_PATH = "unsafe_pair_path"
PAIR_UNKNOWN_X = "pair_unknown_x"
PAIR_UNKNOWN_Y = "pair_unknown_y"
PAIR_REJECTED_X = "pair_rejected_x"
PAIR_REJECTED_Y = "pair_rejected_y"

RECORD_REASONS = (
    MISSING_FILE,
    READ_ERROR,
    UNSAFE_PATH,
    SYMLINK_ESCAPES_ROOT,
    UNSUPPORTED_FORMAT,
    CORRUPT_IMAGE,
    CORRUPT_AUDIO,
    EMPTY_AUDIO,
    DUPLICATE_ID,
    MALFORMED_ROW,
    MISSING_LABEL,
    INVALID_SPLIT,
    NO_VALID_PAIRS,
)
PAIR_ENTRY_REASONS = (
    MALFORMED_PAIR_ENTRY,
    UNSAFE_PAIR_PATH,
    PAIR_UNKNOWN_X,
    PAIR_UNKNOWN_Y,
    PAIR_REJECTED_X,
    PAIR_REJECTED_Y,
)
ALL_REASONS = RECORD_REASONS + PAIR_ENTRY_REASONS


class Reject(NamedTuple):
    """One input that was not materialized.

    `source` names the input (a file path, a manifest or pair-list line); `record_set` and `id`
    are set when the input had a record id (so pair entries can tell rejected ids from unknown
    ones).
    """

    source: str
    reason: str
    detail: str = ""
    record_set: str = ""
    id: str = ""

    @classmethod
    def of_line(cls, path: str, line: str, error: RejectedInput) -> Reject:
        """The reject of one unparsable line of a manifest or pair list."""
        return cls(f"{path}: {line[:200]}", error.reason, error.detail)

    def to_json(self) -> str:
        fields = {"source": self.source, "reason": self.reason, "detail": self.detail}
        if self.record_set:
            fields["record_set"] = self.record_set
        if self.id:
            fields["id"] = self.id
        return json.dumps(fields, sort_keys=True, ensure_ascii=False)


class RejectedInput(Exception):
    """Raised by decoders and parsers; the calling DoFn turns it into a `Reject`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def reject_counter(reason: str) -> beam.metrics.metricbase.Counter:
    return beam.metrics.Metrics.counter(COUNTER_NAMESPACE, f"rejected_{reason}")


def _count_reject(reject: Reject) -> Reject:
    reject_counter(reject.reason).inc()
    return reject


def _write_rejects(rejects: list[Reject], output_dir: str) -> dict[str, int]:
    layout.save_lines(
        os.path.join(output_dir, layout.REJECTS_FILE), sorted(r.to_json() for r in rejects)
    )
    return dict(sorted(collections.Counter(r.reason for r in rejects).items()))


class RecordRejects(beam.PTransform):
    """Counts rejects (a Beam counter per reason) and writes them, sorted, to `rejects.jsonl`.

    Input: PCollection[Reject]. Output: a singleton PCollection[dict[str, int]], the number of
    rejects per reason (sorted by reason; empty when nothing was rejected), available once the
    file is written. The file is written whatever the job's verdict, so a failed run still
    says what went wrong.
    """

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        return (
            rejects
            | "Count" >> beam.Map(_count_reject)
            | "Gather" >> beam.combiners.ToList()
            | "Write" >> beam.Map(_write_rejects, self._output_dir)
        )
