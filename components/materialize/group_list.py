"""Groups-file entries: JSON Lines `{"id": id, "group": name}` or CSV `id,group`, the group of
each image when the pairs job pairs by group (`--x_groups`, `--y_groups`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs.materialize import pair_list, paths, rejects, text_records

CSV_HEADER = ("id", "group")


class GroupEntry(NamedTuple):
    """One parsed line: the normalized image id, its group name, and the line number."""

    id: str
    group: str
    line: int


def parse_entry(line: str, groups_format: str) -> tuple[str, str]:
    """Parses one line into (normalized id, group name).

    Raises `RejectedInput(MALFORMED_GROUP_ENTRY)` for lines that do not parse or whose group is
    empty or not printable (`groups.txt` holds one name a line), and
    `RejectedInput(UNSAFE_GROUP_PATH)` when the id leaves its root. The id is taken as written,
    as in a pair list (`pair_list.parse_entry`); the group loses its surrounding spaces.

    Args:
        line: one record of the groups file.
        groups_format: "jsonl" or "csv".

    Returns:
        `(id, group)`.

    Raises:
        RejectedInput: MALFORMED_GROUP_ENTRY or UNSAFE_GROUP_PATH, as above.

    Example:
        parse_entry('{"id": "cat/1.png", "group": 3}', "jsonl")  # ("cat/1.png", "3")
    """
    if groups_format == "jsonl":
        entry = pair_list.json_line(line, rejects.MALFORMED_GROUP_ENTRY)
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise rejects.RejectedInput(
                rejects.MALFORMED_GROUP_ENTRY, 'expected {"id": "<id>", "group": "<group>"}'
            )
        group = entry.get("group")
        # A JSON integer names a group as well as a string does (class 3); true does not.
        if isinstance(group, int) and not isinstance(group, bool):
            group = str(group)
        if not isinstance(group, str):
            raise rejects.RejectedInput(
                rejects.MALFORMED_GROUP_ENTRY, '"group" must be a string or an integer'
            )
        raw_id = entry["id"]
    else:
        raw_id, group = pair_list.two_csv_fields(line, rejects.MALFORMED_GROUP_ENTRY, "id,group")
    group = group.strip()
    if not group or not group.isprintable():
        raise rejects.RejectedInput(
            rejects.MALFORMED_GROUP_ENTRY,
            f"group {paths.printable(group)!r} is empty or not printable",
        )
    return paths.normalize_listed_id(raw_id, rejects.UNSAFE_GROUP_PATH, "id"), group


def read_group_list(path: str, groups_format: str) -> beam.PTransform:
    """PBegin -> `text_records.ParsedRecords` of `GroupEntry`s: the groups file read and parsed; a
    reject names its line number.

    Args:
        path: the groups file (local, object store or a pipe).
        groups_format: "jsonl" or "csv".

    Returns:
        The reading PTransform.
    """
    is_csv = groups_format == "csv"
    data = text_records.read_if_stream(path)  # a pipe is read once: for the header and the records
    return text_records.ReadParsedRecords(
        path,
        functools.partial(_parse_record, groups_format=groups_format),
        csv_records=is_csv,
        skip_header=is_csv and pair_list.has_csv_header(path, CSV_HEADER, data),
        bad_encoding_reason=rejects.GROUP_BAD_ENCODING,
        data=data,
    )


def _parse_record(text: str, line: int, *, groups_format: str) -> Iterator[GroupEntry]:
    record_id, group = parse_entry(text, groups_format)
    yield GroupEntry(record_id, group, line)
