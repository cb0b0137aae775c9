"""Audio manifest rows: CSV with a header, or JSON Lines; fields `path`, `speaker`, `split`."""

from __future__ import annotations

import csv
import json
import posixpath
import re
from typing import NamedTuple

from components import layout
from components.materialize import paths, rejects
from components.materialize.errors import MaterializeError

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
    format: str  # "csv" | "jsonl"
    columns: tuple[str, ...]  # CSV header; empty for JSON Lines

    @property
    def has_split(self) -> bool:
        return SPLIT_FIELD in self.columns

    @property
    def skip_header_lines(self) -> int:
        return 1 if self.format == "csv" else 0


def inspect_manifest(path: str, manifest_format: str = "auto") -> ManifestFormat:
    """Reads the format (and CSV header) at pipeline construction.

    For JSON Lines, whether rows carry a split is decided by the first non-empty row. Raises
    MaterializeError when the CSV header lacks `path` or `speaker`.
    """
    if manifest_format == "auto":
        manifest_format = "csv" if path.lower().endswith(".csv") else "jsonl"
    with layout.gfile().GFile(path, "r") as handle:
        first_line = ""
        for line in handle:
            if line.strip():
                first_line = line.lstrip("\ufeff")
                break
    if manifest_format == "jsonl":
        try:
            first = json.loads(first_line) if first_line else {}
        except json.JSONDecodeError:
            first = {}
        has_split = isinstance(first, dict) and SPLIT_FIELD in first
        return ManifestFormat("jsonl", (SPLIT_FIELD,) if has_split else ())
    columns = tuple(column.strip() for column in next(csv.reader([first_line]), []))
    missing = [f for f in (PATH_FIELD, SPEAKER_FIELD) if f not in columns]
    if missing:
        raise MaterializeError(
            f"manifest {path}: CSV header {list(columns)} lacks {', '.join(missing)}"
        )
    return ManifestFormat("csv", columns)


def parse_row(line: str, manifest: ManifestFormat, source: str) -> ManifestRow:
    """Parses one manifest line; raises `RejectedInput` for malformed rows, unsafe paths,
    rows without a speaker and invalid split names."""
    fields = _fields(line, manifest, source)
    raw_path = fields.get(PATH_FIELD)
    if not isinstance(raw_path, str) or not raw_path.strip():
        raise rejects.RejectedInput(rejects.MALFORMED_ROW, "row without a path")
    record_id = paths.normalize_id(raw_path.strip())
    speaker = fields.get(SPEAKER_FIELD)
    if isinstance(speaker, int | float) and not isinstance(speaker, bool):
        speaker = str(speaker)
    if not isinstance(speaker, str) or not speaker.strip():
        raise rejects.RejectedInput(rejects.MISSING_LABEL, f"{record_id}: no speaker")
    speaker = speaker.strip()
    if "\n" in speaker or "\r" in speaker:
        raise rejects.RejectedInput(rejects.MISSING_LABEL, f"{record_id}: speaker has a newline")
    split = ""
    if manifest.has_split:
        split = fields.get(SPLIT_FIELD)
        split = split.strip() if isinstance(split, str) else ""
        if not RECORD_SET_NAME.match(split):
            raise rejects.RejectedInput(
                rejects.INVALID_SPLIT,
                f"{record_id}: split {split!r} is not a record set name "
                "(letters, digits, '_', '.', '-')",
            )
    return ManifestRow(record_id, speaker, split)


def _fields(line: str, manifest: ManifestFormat, source: str) -> dict:
    if manifest.format == "jsonl":
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as error:
            raise rejects.RejectedInput(rejects.MALFORMED_ROW, f"invalid JSON: {error}") from error
        if not isinstance(fields, dict):
            raise rejects.RejectedInput(rejects.MALFORMED_ROW, "a JSON line must be an object")
        return fields
    try:
        values = next(csv.reader([line]), [])
    except csv.Error as error:
        raise rejects.RejectedInput(rejects.MALFORMED_ROW, f"invalid CSV: {error}") from error
    if len(values) != len(manifest.columns):
        raise rejects.RejectedInput(
            rejects.MALFORMED_ROW,
            f"{len(values)} fields, header of {posixpath.basename(source)} has "
            f"{len(manifest.columns)}",
        )
    return dict(zip(manifest.columns, values, strict=True))
