"""Audio manifest rows: CSV with a header, or JSON Lines; fields `path`, `speaker`, `split`.

Either every row names its split or none does (then the job assigns them): the CSV header, or
the first JSON Lines row that parses, decides; a row that disagrees is rejected. Without a
manifest (`--speaker_from_path`), `row_of_path` makes a listed file's row.
"""

from __future__ import annotations

import csv
import functools
import json
import posixpath
import re
from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs.materialize import paths, rejects, text_records
from tfx_dynamic_inputs.materialize.errors import MaterializeError

PATH_FIELD = "path"
SPEAKER_FIELD = "speaker"
SPLIT_FIELD = "split"
RECORD_SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ManifestRow(NamedTuple):
    """One utterance: `id` is the normalized path relative to the root."""

    id: str
    speaker: str
    split: str  # "" until assigned when the manifest has no split field


class ManifestFormat(NamedTuple):
    """How a manifest is written: `format` "csv" or "jsonl", and `columns`, the CSV header (for
    JSON Lines `("split",)` when the rows carry a split, else empty). Made by `inspect_manifest`.
    """

    format: str  # "csv" | "jsonl"
    columns: tuple[str, ...]  # CSV header; empty for JSON Lines

    @property
    def has_split(self) -> bool:
        """Whether the rows name their split (else the job assigns them)."""
        return SPLIT_FIELD in self.columns

    @property
    def data(self) -> bytes | None:
        """The manifest's content when `inspect_manifest` read it whole (a pipe), else None."""
        return None


class _StreamedManifest(ManifestFormat):
    """The format of a manifest that can be read only once (a pipe): its content rides along,
    so the job reads the rows from it. Compares as the format it is."""

    def __new__(cls, manifest: ManifestFormat, data: bytes):
        streamed = super().__new__(cls, *manifest)
        streamed._data = data
        return streamed

    def __getnewargs__(self):
        return (ManifestFormat(*self), self._data)

    @property
    def data(self) -> bytes | None:
        return self._data


def inspect_manifest(path: str, manifest_format: str = "auto") -> ManifestFormat:
    """Reads the format (and CSV header) at pipeline construction.

    For JSON Lines, whether rows carry a split is decided by the first row that is a JSON
    object. A manifest that is not a regular file (a pipe such as `<(...)`, a FIFO) is read
    whole, once, here: the format carries its content (`ManifestFormat.data`) for the job.
    Raises MaterializeError when the CSV header is not valid UTF-8, lacks `path` or `speaker`,
    or names one of `path`, `speaker`, `split` twice.

    Args:
        path: the manifest (local, object store or a pipe).
        manifest_format: "auto" (by the name: `.csv` is CSV, else JSON Lines), "csv" or "jsonl".

    Returns:
        The `ManifestFormat`.

    Example:
        inspect_manifest("manifest.csv").has_split  # True when the header has a `split` column
    """
    if manifest_format == "auto":
        manifest_format = "csv" if path.lower().endswith(".csv") else "jsonl"
    data = text_records.read_if_stream(path)
    if manifest_format == "jsonl":
        has_split = _first_jsonl_has_split(path, data)
        return _with_data(ManifestFormat("jsonl", (SPLIT_FIELD,) if has_split else ()), data)
    header = next(
        (r for r in text_records.read_text_records(path, True, data) if r.text.strip()), None
    )
    columns: tuple[str, ...] = ()
    if header is not None:
        problem = text_records.utf8_problem(header)
        if problem:
            raise MaterializeError(f"manifest {path}: CSV header {problem}")
        try:
            columns = tuple(column.strip() for column in next(csv.reader([header.text]), []))
        except csv.Error as error:
            raise MaterializeError(f"manifest {path}: CSV header: {error}") from None
    missing = [f for f in (PATH_FIELD, SPEAKER_FIELD) if f not in columns]
    if missing:
        raise MaterializeError(
            f"manifest {path}: CSV header {list(columns)} lacks {', '.join(missing)}"
        )
    # A repeated column would give each row two values for one field, and silently keep one.
    repeated = [f for f in (PATH_FIELD, SPEAKER_FIELD, SPLIT_FIELD) if columns.count(f) > 1]
    if repeated:
        raise MaterializeError(
            f"manifest {path}: CSV header {list(columns)} names column {repeated[0]!r} "
            f"{columns.count(repeated[0])} times"
        )
    return _with_data(ManifestFormat("csv", columns), data)


def _with_data(manifest: ManifestFormat, data: bytes | None) -> ManifestFormat:
    return manifest if data is None else _StreamedManifest(manifest, data)


def _first_jsonl_has_split(path: str, data: bytes | None) -> bool:
    for record in text_records.read_text_records(path, data=data):
        if not record.text.strip() or text_records.utf8_problem(record):
            continue
        try:
            fields = json.loads(record.text)
        except json.JSONDecodeError:
            continue
        if isinstance(fields, dict):
            return SPLIT_FIELD in fields
    return False


def parse_row(line: str, manifest: ManifestFormat, source: str) -> ManifestRow:
    """Parses one manifest line (or CSV record); raises `RejectedInput` for malformed rows,
    unsafe paths, rows without a speaker, split names that are not safe record set names, and
    rows that have a split when the manifest has none or the other way round.

    Args:
        line: one manifest line (JSON Lines) or CSV record.
        manifest: the manifest's format (`inspect_manifest`).
        source: the manifest's path, named in messages.

    Returns:
        The `ManifestRow` (split "" when the manifest has none).

    Raises:
        RejectedInput: MALFORMED_ROW, UNSAFE_PATH, MISSING_LABEL, BAD_ENCODING, INVALID_SPLIT
            or INCONSISTENT_SPLIT.
    """
    fields = _fields(line, manifest, source)
    raw_path = fields.get(PATH_FIELD)
    if not isinstance(raw_path, str) or not raw_path.strip():
        raise rejects.RejectedInput(rejects.MALFORMED_ROW, "row without a path")
    # The path as written (a JSON string, a quoted CSV field; an unquoted field is stripped):
    # a file whose name starts or ends with a space can be named.
    record_id = paths.normalize_id(raw_path)
    speaker = fields.get(SPEAKER_FIELD)
    if isinstance(speaker, int | float) and not isinstance(speaker, bool):
        speaker = str(speaker)
    if not isinstance(speaker, str) or not speaker.strip():
        raise rejects.RejectedInput(rejects.MISSING_LABEL, f"{record_id}: no speaker")
    speaker = speaker.strip()
    if "\n" in speaker or "\r" in speaker:
        raise rejects.RejectedInput(rejects.MISSING_LABEL, f"{record_id}: speaker has a newline")
    if not speaker.isascii() and paths.printable(speaker) != speaker:
        # A JSON escape such as "\ud800" decodes to a lone surrogate, which no coder can write.
        raise rejects.RejectedInput(
            rejects.BAD_ENCODING,
            f"{record_id}: speaker {paths.printable(speaker)!r} is not valid Unicode",
        )
    return ManifestRow(record_id, speaker, _split(fields, manifest, record_id))


def row_of_path(raw_id: str) -> ManifestRow:
    """The row of a file listed under the root (`raw_id`: its path relative to the root): its
    speaker is the first folder of that path, as in VoxCeleb's `id10001/<video>/00001.wav`; the
    split is assigned by the job. Raises `RejectedInput` for unsafe paths and for files
    directly under the root (MISSING_LABEL).

    Args:
        raw_id: the file's path relative to the root.

    Returns:
        The `ManifestRow`, split "".

    Raises:
        RejectedInput: UNSAFE_PATH, NON_UTF8_NAME or MISSING_LABEL.

    Example:
        row_of_path("id10001/vid/00001.wav")  # ManifestRow("id10001/vid/00001.wav", "id10001", "")
    """
    record_id = paths.normalize_id(raw_id)
    speaker, in_folder, _ = record_id.partition("/")
    if not in_folder:
        raise rejects.RejectedInput(
            rejects.MISSING_LABEL, f"{record_id}: directly under the root, not in a speaker folder"
        )
    return ManifestRow(record_id, speaker, "")


def _split(fields: dict, manifest: ManifestFormat, record_id: str) -> str:
    # A JSON Lines row whose split disagrees with the first row's would silently land in a
    # record set its author did not choose: `train` (its split ignored), or no split at all. A
    # CSV row always has the header's columns; an empty split there is an invalid name.
    if SPLIT_FIELD in fields and not manifest.has_split:
        raise rejects.RejectedInput(
            rejects.INCONSISTENT_SPLIT,
            f"{record_id}: row has split {fields[SPLIT_FIELD]!r}, but the manifest's first row "
            "has none (every row must name its split, or none)",
        )
    if not manifest.has_split:
        return ""
    if SPLIT_FIELD not in fields:
        raise rejects.RejectedInput(
            rejects.INCONSISTENT_SPLIT,
            f"{record_id}: row has no split, but the manifest's first row has one "
            "(every row must name its split, or none)",
        )
    split = fields[SPLIT_FIELD]
    if isinstance(split, str):
        split = split.strip()
    if not isinstance(split, str) or not RECORD_SET_NAME.match(split):
        raise rejects.RejectedInput(
            rejects.INVALID_SPLIT,
            f"{record_id}: split {split!r} is not a record set name "
            "(a letter or digit, then up to 63 letters, digits, '_', '.', '-')",
        )
    return split


def _fields(line: str, manifest: ManifestFormat, source: str) -> dict:
    if manifest.format == "jsonl":
        try:
            fields = json.loads(line, object_pairs_hook=_object_once)
        except json.JSONDecodeError as error:
            raise rejects.RejectedInput(rejects.MALFORMED_ROW, f"invalid JSON: {error}") from error
        if not isinstance(fields, dict):
            raise rejects.RejectedInput(rejects.MALFORMED_ROW, "a JSON line must be an object")
        return fields
    try:
        values = text_records.csv_fields(line)
    except csv.Error as error:
        raise rejects.RejectedInput(rejects.MALFORMED_ROW, f"invalid CSV: {error}") from error
    if len(values) != len(manifest.columns):
        raise rejects.RejectedInput(
            rejects.MALFORMED_ROW,
            f"{len(values)} fields, header of {posixpath.basename(source)} has "
            f"{len(manifest.columns)}",
        )
    return dict(zip(manifest.columns, values, strict=True))


def _object_once(pairs: list[tuple[str, object]]) -> dict:
    # json.loads keeps the last of repeated keys: a row naming its path, speaker or split twice
    # is refused instead (other keys are not read).
    names = [name for name, _ in pairs]
    for field in (PATH_FIELD, SPEAKER_FIELD, SPLIT_FIELD):
        if names.count(field) > 1:
            raise rejects.RejectedInput(
                rejects.MALFORMED_ROW, f"field {field!r} given {names.count(field)} times"
            )
    return dict(pairs)


def read_manifest(path: str, manifest: ManifestFormat) -> beam.PTransform:
    """PBegin -> `text_records.ParsedRecords` of `ManifestRow`s (not yet deduplicated): the manifest
    read (a CSV field may hold quoted newlines; a pipe from the content `inspect_manifest` read)
    and parsed; a reject names its line number.

    Args:
        path: the manifest's path.
        manifest: its format, from `inspect_manifest` (with the content of a pipe).

    Returns:
        The reading PTransform.
    """
    is_csv = manifest.format == "csv"
    return text_records.ReadParsedRecords(
        path,
        functools.partial(_parse_record, path=path, manifest=ManifestFormat(*manifest)),
        csv_records=is_csv,
        skip_header=is_csv,
        bad_encoding_reason=rejects.BAD_ENCODING,
        data=manifest.data,
    )


def _parse_record(
    text: str, line: int, *, path: str, manifest: ManifestFormat
) -> list[ManifestRow]:
    return [parse_row(text, manifest, path)]
