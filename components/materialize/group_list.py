"""Groups-file entries: JSON Lines `{"id": id, "group": name}` or CSV `id,group`, the group of
each image when the pairs job pairs by group (`--x_groups`, `--y_groups`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NamedTuple

from components.materialize import pair_list, paths, rejects

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
    try:
        record_id = paths.normalize_id(raw_id)
    except rejects.RejectedInput as error:
        raise rejects.RejectedInput(
            rejects.UNSAFE_GROUP_PATH, f"id {paths.printable(raw_id)!r}: {error.detail}"
        ) from error
    return record_id, group


def read_group_list(path: str, groups_format: str) -> paths.ReadParsedRecords:
    """PBegin -> `paths.ParsedRecords` of `GroupEntry`s: the groups file read and parsed; a
    reject names its line number."""
    is_csv = groups_format == "csv"
    data = paths.read_if_stream(path)  # a pipe is read once: for the header and the records
    return paths.ReadParsedRecords(
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
