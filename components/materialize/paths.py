"""Input paths: record ids, root-escape checks, directory listing, reading file bytes, and
reading the records of a text input (pair list, manifest).

Files are read with Beam's `FileSystems`, so local paths and object stores (gs://, s3://,
hdfs://) work alike. Local folders are listed with `os.scandir`; other roots with `tf.io.gfile`
(`layout.gfile()`, imported on use), so a worker of a local run never imports TensorFlow.
Symlinks, FIFOs and devices exist only on local file systems; there the resolved path must stay
below the resolved root, and only regular files are opened.
"""

from __future__ import annotations

import csv
import errno
import io
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from components import layout
from components.materialize import rejects

_FORBIDDEN_CHARACTERS = frozenset("\n\r\0")
# Put by `list_files` before the id of a file whose name is not UTF-8 and whose printable form
# does not name it alone (another file has that name, or other bytes print alike): a NUL, which
# no file name holds, so `normalize_id` rejects it as NON_UTF8_NAME before it becomes an id.
_AMBIGUOUS_NAME = "\0"
_UTF8_BOM = b"\xef\xbb\xbf"
_UNDECODABLE = "rejected"  # the output of `ReadParsedRecords`' steps that holds rejects
# How `printable` writes a byte that is not UTF-8; `_undo_printable` reverses it.
_ESCAPED_BYTE = re.compile(rb"\\x([89a-f][0-9a-f])")
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def normalize_id(raw_path: str) -> str:
    """Returns the record id of a path given relative to a root (posix, without `.` parts).

    Raises `RejectedInput(UNSAFE_PATH)` for absolute paths, paths leaving the root through
    `..`, empty paths and ids that cannot be stored one per line (newlines, NUL, invalid UTF-8),
    and `RejectedInput(NON_UTF8_NAME)` for a listed name `list_files` marked as not UTF-8.
    """
    if raw_path.startswith(_AMBIGUOUS_NAME):
        raise rejects.RejectedInput(rejects.NON_UTF8_NAME, _ambiguous_detail(raw_path))
    if not raw_path or not raw_path.strip():
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "empty path")
    if _FORBIDDEN_CHARACTERS.intersection(raw_path):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path contains a newline or NUL")
    try:
        raw_path.encode("utf-8")
    except UnicodeEncodeError as error:
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path is not valid UTF-8") from error
    if raw_path.startswith(("/", "\\")) or "://" in raw_path or _has_drive(raw_path):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "absolute path")
    record_id = posixpath.normpath(raw_path)
    if record_id == ".." or record_id.startswith("../"):
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path leaves the root through '..'")
    if record_id == ".":
        raise rejects.RejectedInput(rejects.UNSAFE_PATH, "path names the root itself")
    return record_id


def _ambiguous_detail(marked: str) -> str:
    shown = marked[len(_AMBIGUOUS_NAME) :]
    return (
        f"the file name is not valid UTF-8; printed it reads {shown!r}, as another file's name "
        "(or other bytes) also reads, so it cannot be an id"
    )


def _has_drive(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


def is_local(path: str) -> bool:
    return "://" not in path


def check_inside_root(root: str, path: str) -> None:
    """Raises `RejectedInput(SYMLINK_ESCAPES_ROOT)` if a local `path` resolves outside `root`.

    `path` is `root` joined with a normalized id. Only a symlink below `root` can lead out, so
    the full resolution runs only when one of the id's components is a link.
    """
    if not is_local(path):
        return
    relative = os.path.relpath(path, root)
    current = root
    for part in relative.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            break
    else:
        return
    real_root = os.path.realpath(root)
    real_path = os.path.realpath(path)
    if real_path != real_root and not real_path.startswith(real_root.rstrip(os.sep) + os.sep):
        raise rejects.RejectedInput(
            rejects.SYMLINK_ESCAPES_ROOT, f"resolves to {real_path}, outside {real_root}"
        )


def read_bytes(root: str, path: str) -> bytes:
    """Reads a whole file below `root`, after the root-escape check; a local path must be a
    regular file (after following links) before it is opened.

    Raises `RejectedInput` with MISSING_FILE, SYMLINK_ESCAPES_ROOT, SYMLINK_LOOP,
    NOT_REGULAR_FILE, NON_UTF8_NAME, UNSUPPORTED_FORMAT (a directory) or READ_ERROR.
    """
    if _AMBIGUOUS_NAME in path:
        marked = path[path.index(_AMBIGUOUS_NAME) :]
        raise rejects.RejectedInput(rejects.NON_UTF8_NAME, _ambiguous_detail(marked))
    check_inside_root(root, path)
    if is_local(path):
        _check_regular_file(path)
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()
    except Exception as error:  # Beam wraps file-system errors in several types.
        # Object stores have no directories: a prefix there does not exist as a file.
        if not FileSystems.exists(path):
            raise rejects.RejectedInput(rejects.MISSING_FILE, "file not found") from error
        raise rejects.RejectedInput(rejects.READ_ERROR, _one_line(error)) from error


def _check_regular_file(path: str) -> None:
    # Opening a FIFO blocks until a writer appears, and opening a device can have side effects:
    # only what `stat` (which follows links) calls a regular file is opened.
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise rejects.RejectedInput(
                rejects.SYMLINK_LOOP, "symbolic links form a loop"
            ) from error
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise rejects.RejectedInput(rejects.READ_ERROR, _one_line(error)) from error
        if os.path.lexists(path):
            raise rejects.RejectedInput(
                rejects.MISSING_FILE, "broken symbolic link: its target does not exist"
            ) from error
        if _ESCAPED_BYTE.search(os.fsencode(path)) and os.path.lexists(_undo_printable(path)):
            raise rejects.RejectedInput(
                rejects.NON_UTF8_NAME, "the file name is not valid UTF-8"
            ) from error
        raise rejects.RejectedInput(rejects.MISSING_FILE, "file not found") from error
    if stat.S_ISDIR(mode):
        raise rejects.RejectedInput(rejects.UNSUPPORTED_FORMAT, "a directory")
    if not stat.S_ISREG(mode):
        kind = next((name for is_kind, name in _FILE_KINDS if is_kind(mode)), "a special file")
        raise rejects.RejectedInput(
            rejects.NOT_REGULAR_FILE, f"{kind}, not a regular file: not opened"
        )


def printable(text: str) -> str:
    """`text` with each byte that was not UTF-8 (a lone surrogate from `os.fsdecode` or a
    `surrogateescape` decode) written as `\\xNN`, so it can pass through Beam's coders and be
    written to JSON; other lone surrogates (from a JSON escape) are written as `\\uNNNN`."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # A surrogate that no undecodable byte stands for.
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _undo_printable(path: str) -> bytes:
    return _ESCAPED_BYTE.sub(lambda match: bytes([int(match[1], 16)]), os.fsencode(path))


def list_files(root: str) -> Iterator[str]:
    """Yields the path of every file below `root` (any gfile path), in no particular order.

    Local symlinks to directories are not followed: one resolving inside `root` is an alias of
    a directory listed under its real path; one resolving outside is yielded itself, so the
    reader rejects it as escaping the root instead of it vanishing silently. A link that cannot
    be followed (a loop) and anything that is not a regular file is yielded too, for the reader
    to reject. A local name that is not valid UTF-8 is yielded as `printable` writes it: the
    reader rejects it as NON_UTF8_NAME (such a name cannot be a record id). When that printable
    form does not lead back to this file alone (a file is named so: `a\\xff.png` beside the
    non-UTF-8 `a<FF>.png`; or other bytes print alike), the id part is yielded behind a NUL
    marker, so `normalize_id` rejects it as NON_UTF8_NAME and the other file keeps its own id.
    """
    if is_local(root):
        yield from _list_local_files(root)
        return
    gfile = layout.gfile()
    pending = [root]
    while pending:
        directory = pending.pop()
        for name in gfile.listdir(directory):
            path = posixpath.join(directory, name.rstrip("/"))
            if gfile.isdir(path):
                pending.append(path)
            else:
                yield path


def _list_local_files(root: str) -> Iterator[str]:
    # os.scandir reads the entry types with the listing; a gfile.isdir per entry costs a
    # stat each (~80 us), as much as reading a small image.
    pending = [root]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                path = posixpath.join(directory, entry.name)
                if not _is_dir(entry):
                    yield _listed(root, path)
                elif not entry.is_symlink():
                    pending.append(path)
                elif not _resolves_inside(root, path):
                    yield _listed(root, path)


def _listed(root: str, path: str) -> str:
    """How `list_files` yields a local `path` below `root`: as it is when its name is UTF-8,
    else in its printable form, marked when that form does not name this file alone."""
    if path.isascii():
        return path
    shown = printable(path)
    if shown == path:
        return path
    if _undo_printable(shown) == os.fsencode(path) and not os.path.lexists(shown):
        return shown  # `read_bytes` finds no such file and rejects it as NON_UTF8_NAME
    start = len(shown) - len(printable(relative_id(root, path)))
    return shown[:start] + _AMBIGUOUS_NAME + shown[start:]


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # A link that cannot be followed (ELOOP): `read_bytes` says why.
        return False


def _resolves_inside(root: str, path: str) -> bool:
    try:
        check_inside_root(root, path)
    except rejects.RejectedInput:
        return False
    return True


def relative_id(root: str, path: str) -> str:
    """The record id of a file `list_files(root)` yielded: its path relative to `root`.

    `list_files` joins names onto `root` as given, so the id is what follows that prefix; this
    runs once per file in the serial listing step, where `posixpath.relpath` (two `abspath`
    calls) cost more than the listing itself.
    """
    return path[len(root) :].lstrip("/")


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
    """
    if not is_local(path):
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
    `a.png, b.png` names `b.png`, and `" b.png"` names ` b.png`). Raises `csv.Error`."""
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
    """None when `record` is valid UTF-8; otherwise which line and byte are not."""
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


class ReadParsedRecords(beam.PTransform):
    """PBegin -> `ParsedRecords`: the records of a pair list or manifest, parsed, with line
    numbers in every reject.

    The file is read by one worker in one pass (line numbers and CSV records that span lines
    need it; a million rows take seconds) and its records are then spread over the workers and
    parsed there by `parse(text, line)`. `skip_header` drops the first non-blank record; records
    that are not valid UTF-8 become rejects with `bad_encoding_reason`. `data`: the file's
    content when it was read already (`read_if_stream`); the records are read from it.
    """

    def __init__(
        self,
        path: str,
        parse: RecordParser,
        *,
        csv_records: bool,
        skip_header: bool,
        bad_encoding_reason: str,
        data: bytes | None = None,
    ):
        super().__init__()
        self._path = path
        self._parse = parse
        self._csv_records = csv_records
        self._skip_header = skip_header
        self._bad_encoding_reason = bad_encoding_reason
        self._data = data

    def expand(self, begin: beam.pvalue.PBegin) -> ParsedRecords:
        read = (
            begin
            | "Path" >> beam.Create([self._path], reshuffle=False)
            | "Read"
            >> beam.FlatMap(
                _read_records,
                self._csv_records,
                self._skip_header,
                self._bad_encoding_reason,
                self._data,
            ).with_outputs(_UNDECODABLE, main="records")
        )
        parsed = (
            read.records
            | "Spread" >> beam.Reshuffle()
            | "Parse"
            >> beam.FlatMap(_parse_record, self._path, self._parse).with_outputs(
                _UNDECODABLE, main="parsed"
            )
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
            _UNDECODABLE, rejects.Reject.of_line(path, printable(record.text), error, record.line)
        )


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
