"""The records of a text input (pair list, groups file, manifest): read in order with the
number of their first line, split at b"\\n" as Beam's `ReadFromText` does (or as CSV records,
whose quoted fields may span lines), then parsed on the workers (`ReadParsedRecords`).

Bytes that are not UTF-8 do not stop the reading: `utf8_problem` finds the records holding
them, which become rejects. A pipe or FIFO can be read only once: `read_if_stream` reads it
whole, and the job reads its records from those bytes.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_dynamic_inputs.materialize import paths, rejects

_UTF8_BOM = b"\xef\xbb\xbf"
_UNDECODABLE = "rejected"  # the output of `ReadParsedRecords`' steps that holds rejects


class TextRecord(NamedTuple):
    """One record of a text input: a line, or a CSV record (whose quoted fields may span lines).

    `line` is the 1-based number of its first line; `text` keeps its line endings, and holds
    each byte that is not UTF-8 as a lone surrogate (`surrogateescape`).
    """

    line: int
    text: str


def read_text_records(
    path: str, csv_records: bool = False, data: bytes | None = None
) -> Iterator[TextRecord]:
    """Yields the records of a text file (any Beam path) in order, blank ones included; of
    `data` instead when given (the file's content, read once by `read_if_stream`).

    The file is split at b"\\n" only, like Beam's `ReadFromText` (not at the other Unicode
    line breaks `str.splitlines` knows), and a leading UTF-8 byte order mark is dropped. Bytes
    that are not UTF-8 do not stop the reading: `utf8_problem` finds the records holding them.

    Args:
        path: the file (read when `data` is None).
        csv_records: yield CSV records (quoted fields may span lines) rather than lines.
        data: the file's content, or None.

    Returns:
        An iterator of `TextRecord`s.
    """
    if data is not None:
        yield from _text_records(io.BytesIO(data), csv_records)
        return
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        yield from _text_records(handle, csv_records)


def _text_records(handle: Iterable[bytes], csv_records: bool) -> Iterator[TextRecord]:
    lines = _decoded_lines(handle)
    if csv_records:
        yield from _csv_records(lines)
    else:
        yield from (TextRecord(number, line) for number, line in enumerate(lines, 1))


def read_if_stream(path: str) -> bytes | None:
    """The whole content of a local `path` that is not a regular file (a pipe such as bash's
    `<(...)`, a FIFO, `/dev/stdin`), read now; None for a regular file or a remote path.

    A stream can be read only once: a job that sniffed its format (a CSV header) and then read
    it again would find it empty. The job keeps these bytes and reads its records from them.

    Args:
        path: the input's path.

    Returns:
        The stream's bytes, or None.
    """
    if not paths.is_local(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # The reader says what is wrong with the path.
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def csv_fields(text: str) -> list[str]:
    """The fields of one CSV record (`text`, as `read_text_records` yields it): a quoted field
    exactly as written between its quotes, an unquoted one without surrounding whitespace (so
    `a.png, b.png` names `b.png`, and `" b.png"` names ` b.png`).

    Args:
        text: one CSV record.

    Returns:
        Its fields.

    Raises:
        csv.Error: when it is not a CSV record.
    """
    values = next(csv.reader([text]), [])
    quoted = _quoted_fields(text)
    if len(quoted) != len(values):  # not a shape the scan knows: strip every field
        quoted = [False] * len(values)
    return [
        value if was_quoted else value.strip()
        for value, was_quoted in zip(values, quoted, strict=True)
    ]


def _quoted_fields(text: str) -> list[bool]:
    """Whether each field of a CSV record (the csv module's default dialect) is quoted: it is
    when its first character is the quote; the csv module does not say."""
    flags = []
    i, n = 0, len(text)
    while True:
        quoted = i < n and text[i] == '"'
        flags.append(quoted)
        if quoted:
            i += 1
            while i < n:
                if text[i] == '"':
                    if text.startswith('"', i + 1):  # a doubled quote inside the field
                        i += 2
                        continue
                    i += 1
                    break
                i += 1
        while i < n and text[i] not in ",\r\n":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        return flags


def _decoded_lines(handle: Iterable[bytes]) -> Iterator[str]:
    for number, line in enumerate(handle):
        if number == 0:
            line = line.removeprefix(_UTF8_BOM)
        yield line.decode("utf-8", "surrogateescape")


def _csv_records(lines: Iterable[str]) -> Iterator[TextRecord]:
    # The csv module finds where a record ends (a quoted field may hold newlines); the record's
    # own parser reads its fields again from `text`, so a reject can quote the record.
    consumed: list[str] = []

    def pulled() -> Iterator[str]:
        for line in lines:
            consumed.append(line)
            yield line

    reader = csv.reader(pulled())
    first_line = 1
    while True:
        try:
            next(reader)
        except StopIteration:
            return
        except csv.Error:
            pass  # The record's parser meets the same error and rejects the record.
        yield TextRecord(first_line, "".join(consumed))
        consumed.clear()
        first_line = reader.line_num + 1


def utf8_problem(record: TextRecord) -> str | None:
    """Where a record is not valid UTF-8.

    Args:
        record: a record as `read_text_records` yields it.

    Returns:
        None when it is valid UTF-8; otherwise which line and byte are not.
    """
    if record.text.isascii():
        return None
    try:
        record.text.encode("utf-8")
    except UnicodeEncodeError as error:
        line = record.line + record.text.count("\n", 0, error.start)
        byte = ord(record.text[error.start]) - 0xDC00
        return f"line {line}: byte 0x{byte:02x} is not valid UTF-8"
    return None


class ParsedRecords(NamedTuple):
    """What `ReadParsedRecords` yields, as PCollections: `num_records` (singleton int: the
    records read, blank ones and the header excepted); `parsed` (what `parse` made of the valid
    records); `rejects` (Reject of each record that is not valid UTF-8 or does not parse, and
    those `parse` yields)."""

    num_records: beam.PCollection
    parsed: beam.PCollection
    rejects: beam.PCollection


# What a record parser returns for one record's text: the parsed items and any rejects beside
# them; it raises `rejects.RejectedInput` to reject the whole record.
RecordParser = Callable[[str, int], Iterable[object]]


@beam.ptransform_fn
def ReadParsedRecords(
    begin: beam.pvalue.PBegin,
    path: str,
    parse: RecordParser,
    *,
    csv_records: bool,
    skip_header: bool,
    bad_encoding_reason: str,
    data: bytes | None = None,
) -> ParsedRecords:
    """The records of a pair list, groups file or manifest, parsed, with line numbers in every
    reject.

    The file is read by one worker in one pass (line numbers and CSV records that span lines
    need it; a million rows take seconds) and its records are then spread over the workers and
    parsed there.

    Args:
        begin: the pipeline's root.
        path: the file (any Beam path).
        parse: (text, line) -> the parsed items of one record, and rejects beside them.
        csv_records: whether a record is a CSV record (its quoted fields may span lines) rather
            than a line.
        skip_header: drop the first non-blank record.
        bad_encoding_reason: the reject reason of a record that is not valid UTF-8.
        data: the file's content when it was read already (`read_if_stream`); the records
            are read from it.

    Returns:
        `ParsedRecords`.
    """
    read = (
        begin
        | "Path" >> beam.Create([path], reshuffle=False)
        | "Read"
        >> beam.FlatMap(
            _read_records, csv_records, skip_header, bad_encoding_reason, data
        ).with_outputs(_UNDECODABLE, main="records")
    )
    parsed = (
        read.records
        | "Spread" >> beam.Reshuffle()
        | "Parse"
        >> beam.FlatMap(_parse_record, path, parse).with_outputs(_UNDECODABLE, main="parsed")
    )
    return ParsedRecords(
        (read.records, read[_UNDECODABLE])
        | "All" >> beam.Flatten()
        | "Count" >> beam.combiners.Count.Globally(),
        parsed.parsed,
        (read[_UNDECODABLE], parsed[_UNDECODABLE]) | "Rejects" >> beam.Flatten(),
    )


def _parse_record(record: TextRecord, path: str, parse: RecordParser) -> Iterator[object]:
    try:
        for item in parse(record.text, record.line):
            yield (
                beam.pvalue.TaggedOutput(_UNDECODABLE, item)
                if isinstance(item, rejects.Reject)
                else item
            )
    except rejects.RejectedInput as error:
        yield beam.pvalue.TaggedOutput(
            _UNDECODABLE, rejects.Reject.of_line(path, record.text, error, record.line)
        )


def _read_records(
    path: str,
    csv_records: bool,
    skip_header: bool,
    bad_encoding_reason: str,
    data: bytes | None = None,
) -> Iterator[TextRecord | beam.pvalue.TaggedOutput]:
    header_pending = skip_header
    for record in read_text_records(path, csv_records, data):
        if not record.text.strip():
            continue
        if header_pending:
            header_pending = False
            continue
        problem = utf8_problem(record)
        if problem is None:
            yield record
            continue
        # Lone surrogates cannot pass through Beam's coders: the reject quotes the record
        # with its bad bytes written out.
        error = rejects.RejectedInput(bad_encoding_reason, problem)
        yield beam.pvalue.TaggedOutput(
            _UNDECODABLE,
            rejects.Reject.of_line(path, paths.printable(record.text), error, record.line),
        )
