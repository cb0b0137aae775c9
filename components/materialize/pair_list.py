"""Valid-pair list entries: JSON Lines `{"x": id, "y": [ids]}` or a CSV `x,y` edge list."""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs.materialize import paths, rejects, text_records

CSV_HEADER = ("x", "y")


class PairEntry(NamedTuple):
    """One parsed line: normalized ids, plus the y ids refused as unsafe (raw id, why)."""

    x_id: str
    y_ids: list[str]
    unsafe_y: list[tuple[str, str]]


def resolve_format(path: str, pairs_format: str = "auto") -> str:
    """The pair list's format: `pairs_format` itself, or for "auto" guessed from the file name.

    Args:
        path: the pair list's path.
        pairs_format: "auto", "jsonl" or "csv".

    Returns:
        "csv" or "jsonl" ("auto": "csv" for a `.csv` name, else "jsonl").

    Example:
        resolve_format("pairs.CSV")  # "csv"
    """
    if pairs_format != "auto":
        return pairs_format
    return "csv" if path.lower().endswith(".csv") else "jsonl"


def has_csv_header(
    path: str, header: tuple[str, ...] = CSV_HEADER, data: bytes | None = None
) -> bool:
    """True when the first non-blank record of a CSV file (or of `data`, its content) is
    `header` (an edge list's `x,y`).

    Args:
        path: the CSV file (read when `data` is None).
        header: the header's field names.
        data: the file's content, when already read (a pipe), or None.

    Returns:
        Whether the first non-blank record is `header` (fields compared stripped).
    """
    for record in text_records.read_text_records(path, csv_records=True, data=data):
        if record.text.strip():
            try:
                values = next(csv.reader([record.text]), [])
            except csv.Error:
                return False
            return tuple(v.strip() for v in values) == header
    return False


def json_line(line: str, reason: str) -> object:
    """The JSON value of one JSON Lines line; a `reason` reject when it is not JSON.

    Args:
        line: one line of text.
        reason: the reject reason when it does not parse.

    Returns:
        The parsed JSON value (any type).

    Raises:
        RejectedInput: with `reason` when the line is not JSON.
    """
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise rejects.RejectedInput(reason, f"invalid JSON: {error}") from error


def two_csv_fields(line: str, reason: str, names: str) -> tuple[str, str]:
    """The two fields (`names`, as "x,y") of one CSV line, as `text_records.csv_fields` reads
    them (a quoted field as written, an unquoted one stripped); a `reason` reject otherwise.

    Args:
        line: one CSV record.
        reason: the reject reason when it is not two fields.
        names: the fields' names for the message, e.g. "x,y".

    Returns:
        The two fields.

    Raises:
        RejectedInput: with `reason` when the line is not CSV or not two fields.

    Example:
        two_csv_fields('a.png," b.png"', rejects.MALFORMED_PAIR_ENTRY, "x,y")  # ("a.png", " b.png")
    """
    try:
        values = text_records.csv_fields(line)
    except csv.Error as error:
        raise rejects.RejectedInput(reason, f"invalid CSV: {error}") from error
    if len(values) != 2:
        raise rejects.RejectedInput(reason, f"expected 2 fields {names}; got {len(values)}")
    return values[0], values[1]


def parse_entry(line: str, pairs_format: str) -> PairEntry:
    """Parses one line; a JSON line may list no y at all.

    Ids are taken as written, so an image whose name starts or ends with a space can be named:
    a JSON string exactly, a quoted CSV field exactly (`" a.png"`), an unquoted CSV field
    without its surrounding spaces (`a.png, b.png`). Raises
    `RejectedInput(MALFORMED_PAIR_ENTRY)` for lines that do not parse and
    `RejectedInput(UNSAFE_PAIR_PATH)` when the x id leaves its root; unsafe y ids are returned
    in `unsafe_y` so the line's other entries survive.

    Args:
        line: one record of the pair list.
        pairs_format: "jsonl" or "csv".

    Returns:
        The `PairEntry`.

    Raises:
        RejectedInput: MALFORMED_PAIR_ENTRY or UNSAFE_PAIR_PATH, as above.

    Example:
        parse_entry('{"x": "a.png", "y": ["b.png"]}', "jsonl")  # PairEntry("a.png", ["b.png"], [])
    """
    if pairs_format == "jsonl":
        entry = json_line(line, rejects.MALFORMED_PAIR_ENTRY)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), str):
            raise rejects.RejectedInput(
                rejects.MALFORMED_PAIR_ENTRY, 'expected {"x": "<id>", "y": ["<id>", ...]}'
            )
        y_ids = entry.get("y", [])
        if not isinstance(y_ids, list) or not all(isinstance(y, str) for y in y_ids):
            raise rejects.RejectedInput(
                rejects.MALFORMED_PAIR_ENTRY, '"y" must be a list of id strings'
            )
        x_id = entry["x"]
    else:
        x_id, y_id = two_csv_fields(line, rejects.MALFORMED_PAIR_ENTRY, "x,y")
        y_ids = [y_id]
    x_id = paths.normalize_listed_id(x_id, rejects.UNSAFE_PAIR_PATH, "x id")
    safe_y, unsafe_y = [], []
    for raw in y_ids:
        try:
            safe_y.append(paths.normalize_id(raw))
        except rejects.RejectedInput as error:
            unsafe_y.append((raw, error.detail))
    return PairEntry(x_id, safe_y, unsafe_y)


def read_pair_list(path: str, pairs_format: str) -> beam.PTransform:
    """PBegin -> `text_records.ParsedRecords` of `PairEntry`s: the pair list read (once, also
    when it is a pipe) and parsed; a reject names its line number, and each unsafe y id is a
    reject of its own.

    Args:
        path: the pair list (local, object store or a pipe).
        pairs_format: "jsonl" or "csv" (`resolve_format`).

    Returns:
        The reading PTransform (its header check and a pipe's content are read here, at
        pipeline build time).
    """
    is_csv = pairs_format == "csv"
    data = text_records.read_if_stream(path)  # a pipe is read once: for the header and the records
    return text_records.ReadParsedRecords(
        path,
        functools.partial(_parse_record, path=path, pairs_format=pairs_format),
        csv_records=is_csv,
        skip_header=is_csv and has_csv_header(path, data=data),
        bad_encoding_reason=rejects.PAIR_BAD_ENCODING,
        data=data,
    )


def _parse_record(
    text: str, line: int, *, path: str, pairs_format: str
) -> Iterator[PairEntry | rejects.Reject]:
    entry = parse_entry(text, pairs_format)
    for raw_y, detail in entry.unsafe_y:
        yield rejects.Reject(
            f"{path}:{line}: x={entry.x_id} y={paths.printable(raw_y)}",
            rejects.UNSAFE_PAIR_PATH,
            f"y id: {detail}",
        )
    yield entry
