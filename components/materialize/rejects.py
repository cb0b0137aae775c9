"""Rejected inputs: reasons, the exception decoders raise, Beam counters and `rejects.jsonl`."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import posixpath
from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize.gather import Gathered

COUNTER_NAMESPACE = "materialize"

# Reasons an input file or manifest row is not materialized.
MISSING_FILE = "missing_file"
READ_ERROR = "read_error"
UNSAFE_PATH = "unsafe_path"  # `..` leaving the root, absolute path, control characters
SYMLINK_ESCAPES_ROOT = "symlink_escapes_root"
SYMLINK_LOOP = "symlink_loop"
NOT_REGULAR_FILE = "not_regular_file"  # a FIFO, socket or device: never opened
NON_UTF8_NAME = "non_utf8_name"  # a listed file whose name is not valid UTF-8
UNSUPPORTED_FORMAT = "unsupported_format"
CORRUPT_IMAGE = "corrupt_image"
CORRUPT_AUDIO = "corrupt_audio"
EMPTY_AUDIO = "empty_audio"
TOO_SHORT = "too_short"  # audio shorter than `layout.MIN_AUDIO_SECONDS`
# The limits on what one file may decode to (`config.AudioLimits`, `max_image_pixels`).
TOO_LONG = "too_long"  # audio longer than --max_audio_seconds
IMPLAUSIBLE_RATE = "implausible_rate"  # a native sample rate outside the input rate range
NON_FINITE_AUDIO = "non_finite_audio"  # float samples that are NaN or infinite
IMAGE_TOO_LARGE = "image_too_large"  # more pixels than --max_image_pixels
DUPLICATE_ID = "duplicate_id"
BAD_ENCODING = "bad_encoding"  # a manifest row that is not valid UTF-8
MALFORMED_ROW = "malformed_row"
MISSING_LABEL = "missing_label"
INVALID_SPLIT = "invalid_split"  # a split that is not a safe record set name
INCONSISTENT_SPLIT = "inconsistent_split"  # rows must all have a split, or none may
NO_VALID_PAIRS = "no_valid_pairs"  # an x image whose valid-pair list is (or became) empty
# Pairing by group: an image without a group (not in its groups file; with
# --groups_from_subfolder, directly under its root), or listed there with two different groups.
MISSING_GROUP = "missing_group"
CONFLICTING_GROUP = "conflicting_group"

# Reasons a valid-pair entry (one x -> y edge) is dropped. They are not input records, so they
# do not count towards the reject fraction.
MALFORMED_PAIR_ENTRY = "malformed_pair_entry"
PAIR_BAD_ENCODING = "pair_bad_encoding"  # a pair-list line that is not valid UTF-8
UNSAFE_PAIR_PATH = "unsafe_pair_path"
PAIR_UNKNOWN_X = "pair_unknown_x"
PAIR_UNKNOWN_Y = "pair_unknown_y"
PAIR_REJECTED_X = "pair_rejected_x"
PAIR_REJECTED_Y = "pair_rejected_y"
# Reasons a line of a groups file (--x_groups, --y_groups) is dropped; not input records either.
MALFORMED_GROUP_ENTRY = "malformed_group_entry"
GROUP_BAD_ENCODING = "group_bad_encoding"  # a groups-file line that is not valid UTF-8
UNSAFE_GROUP_PATH = "unsafe_group_path"
GROUP_UNKNOWN_ID = "group_unknown_id"  # an id that is not among the listed images

RECORD_REASONS = (
    MISSING_FILE,
    READ_ERROR,
    UNSAFE_PATH,
    SYMLINK_ESCAPES_ROOT,
    SYMLINK_LOOP,
    NOT_REGULAR_FILE,
    NON_UTF8_NAME,
    UNSUPPORTED_FORMAT,
    CORRUPT_IMAGE,
    CORRUPT_AUDIO,
    EMPTY_AUDIO,
    TOO_SHORT,
    TOO_LONG,
    IMPLAUSIBLE_RATE,
    NON_FINITE_AUDIO,
    IMAGE_TOO_LARGE,
    DUPLICATE_ID,
    BAD_ENCODING,
    MALFORMED_ROW,
    MISSING_LABEL,
    INVALID_SPLIT,
    INCONSISTENT_SPLIT,
    NO_VALID_PAIRS,
    MISSING_GROUP,
    CONFLICTING_GROUP,
)
PAIR_ENTRY_REASONS = (
    MALFORMED_PAIR_ENTRY,
    PAIR_BAD_ENCODING,
    UNSAFE_PAIR_PATH,
    PAIR_UNKNOWN_X,
    PAIR_UNKNOWN_Y,
    PAIR_REJECTED_X,
    PAIR_REJECTED_Y,
)
GROUP_ENTRY_REASONS = (
    MALFORMED_GROUP_ENTRY,
    GROUP_BAD_ENCODING,
    UNSAFE_GROUP_PATH,
    GROUP_UNKNOWN_ID,
)
ALL_REASONS = RECORD_REASONS + PAIR_ENTRY_REASONS + GROUP_ENTRY_REASONS


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
    def of_line(
        cls, path: str, line: str, error: RejectedInput, line_number: int | None = None
    ) -> Reject:
        """The reject of one unparsable line (or CSV record) of a manifest or pair list;
        `line_number` (1-based, of its first line) is named in the source when known.

        Args:
            path: the manifest's or pair list's path.
            line: the line's text (the first 200 characters, stripped, are kept).
            error: why it was rejected.
            line_number: its 1-based line number, or None.

        Returns:
            The `Reject`, with `error`'s reason and detail.

        Example:
            Reject.of_line("pairs.jsonl", "{", error, 3).source  # "pairs.jsonl:3: {"
        """
        where = path if line_number is None else f"{path}:{line_number}"
        return cls(f"{where}: {line.strip()[:200]}", error.reason, error.detail)

    def to_json(self) -> str:
        """This reject as a line of `rejects.jsonl` (sorted keys; no empty record_set or id)."""
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


@dataclasses.dataclass(frozen=True)
class Formats:
    """The file formats a decoder reads: `name` as messages say it ("PNG or JPEG"), `noun` for
    one file ("image"), the `extensions` that claim them, and the reason for a file that claims
    one but is none of them."""

    name: str
    noun: str
    extensions: tuple[str, ...]
    corrupt_reason: str

    def unrecognized(self, data: bytes, source_name: str) -> RejectedInput:
        """The error for `data`, whose content is none of the formats: corrupt when its
        extension claims one, unsupported otherwise.

        Args:
            data: the file's bytes.
            source_name: the file's name or path (its extension is read).

        Returns:
            A `RejectedInput` (returned, not raised) with `corrupt_reason` or UNSUPPORTED_FORMAT.
        """
        extension = posixpath.splitext(source_name)[1].lower()
        if extension in self.extensions:
            what = "empty file" if not data else f"content is not {self.name}"
            return RejectedInput(self.corrupt_reason, f"{what} (extension {extension})")
        return RejectedInput(
            UNSUPPORTED_FORMAT,
            f"not a {self.name} {self.noun} (extension {extension or 'none'!r})",
        )


def reject_counter(reason: str) -> beam.metrics.metricbase.Counter:
    """The Beam counter of rejects with `reason` (`materialize:rejected_<reason>`).

    Args:
        reason: one of `ALL_REASONS`.

    Returns:
        The counter.
    """
    return beam.metrics.Metrics.counter(COUNTER_NAMESPACE, f"rejected_{reason}")


def _write_rejects(rejects: list[Reject], output_dir: str) -> dict[str, int]:
    layout.save_lines(
        os.path.join(output_dir, layout.REJECTS_FILE), sorted(r.to_json() for r in rejects)
    )
    counts = dict(sorted(collections.Counter(r.reason for r in rejects).items()))
    for reason, count in counts.items():
        reject_counter(reason).inc(count)
    return counts


class RecordRejects(beam.PTransform):
    """Counts rejects (a Beam counter per reason) and writes them, sorted, to `rejects.jsonl`.

    Input: PCollection[Reject]. Output: a singleton PCollection[dict[str, int]], the number of
    rejects per reason (sorted by reason; empty when nothing was rejected), available once the
    file is written. The file is written whatever the job's verdict, so a failed run still
    says what went wrong.

    Args:
        output_dir: the run folder `rejects.jsonl` is written to.

    Example:
        counts = all_rejects | RecordRejects(run_dir)
    """

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    def expand(self, rejects: beam.PCollection) -> beam.PCollection:
        """Gathers, writes and counts the rejects.

        Args:
            rejects: PCollection[Reject].

        Returns:
            A singleton PCollection[dict[str, int]] of rejects per reason.
        """
        return rejects | "Write" >> Gathered(_write_rejects, self._output_dir)
