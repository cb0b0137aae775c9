"""The `summary.json` of a committed run, checked where it is read: a reader gets the run id it
commits as ok and the fields readers use, of the types the jobs write, or one error line naming
the file and what is wrong with it (a truncated or hand-edited file, a run of an older version).
"""

from __future__ import annotations

import os

from tfx_dynamic_inputs.layout.commit import committed_run_id
from tfx_dynamic_inputs.layout.files import load_json
from tfx_dynamic_inputs.layout.names import SUMMARY_FILE, IndexFileError, RunCommitError
from tfx_dynamic_inputs.layout.record_sets import is_count


def load_summary(output_dir: str) -> dict:
    """The `summary.json` committing the run at `output_dir`, checked.

    Args:
        output_dir: The run directory (or a TFX artifact holding a copy of its summary).

    Returns:
        The decoded summary: an object whose `"run_id"` is a printable string, `"ok"` is true,
        and, where present, `"job"` is a string, `"record_sets"` maps record set names to
        objects with a `"num_records"` count, `"config"` and `"rejects"` are objects, and the
        config's `"sample_rate"`, `"image_storage"` and `"raw_size"` are of their types.

    Raises:
        FileNotFoundError: there is no `summary.json`.
        IndexFileError: `summary.json` is a folder, is not UTF-8 JSON (truncated), is not an
            object, or a field above is of another type; the message names the file and field.
        RunCommitError: the summary says the run failed, or names no run id (a run written
            before run ids, by an older version).

    Example:
        summary = load_summary(run)
        summary["run_id"], summary.get("record_sets", {})
    """
    path = os.path.join(output_dir, SUMMARY_FILE)
    summary = load_json(path)
    run_id = committed_run_id(summary, path)
    if run_id is None:
        raise RunCommitError(
            f'{path} names no "run_id": a run written before runs had ids (by an older '
            "tfx_dynamic_inputs) or a damaged one; materialize it again"
        )
    _check_field(summary, "job", str, "a string", path)
    for key in ("config", "rejects", "record_sets"):
        _check_field(summary, key, dict, "an object", path)
    for name, counts in (summary.get("record_sets") or {}).items():
        if not is_record_set_name(name):
            raise IndexFileError(f'{path}: "record_sets" names {name!r:.200}, not a record set')
        if not isinstance(counts, dict) or not is_count(counts.get("num_records")):
            raise IndexFileError(
                f'{path}: record set {name!r} must be an object with a "num_records" integer '
                f">= 0, got {counts!r:.200}"
            )
    _check_config(summary.get("config") or {}, path)
    return summary


def is_record_set_name(name: object) -> bool:
    """Whether `name` can name a record set's folders: a non-empty printable string that is not
    `.` or `..` and holds no path separator.

    Args:
        name: A value decoded from JSON.

    Returns:
        True for a usable record set name.
    """
    return (
        isinstance(name, str)
        and name.isprintable()
        and name not in ("", ".", "..")
        and not any(separator in name for separator in "/\\")
    )


def _check_field(summary: dict, key: str, kind: type, what: str, path: str) -> None:
    value = summary.get(key)
    if value is not None and not isinstance(value, kind):
        raise IndexFileError(f'{path}: "{key}" must be {what}, got {value!r:.200}')


def _check_config(config: dict, path: str) -> None:
    rate = config.get("sample_rate")
    if rate is not None and not (is_count(rate) and rate > 0):
        raise IndexFileError(
            f'{path}: "config.sample_rate" must be an integer > 0, got {rate!r:.200}'
        )
    storage = config.get("image_storage")
    if storage is not None and not isinstance(storage, str):
        raise IndexFileError(
            f'{path}: "config.image_storage" must be a string, got {storage!r:.200}'
        )
    size = config.get("raw_size")
    if storage == "raw" and not (
        isinstance(size, list) and len(size) == 3 and all(is_count(n) and n > 0 for n in size)
    ):
        raise IndexFileError(
            f'{path}: "config.raw_size" must be [height, width, channels] of integers > 0 for '
            f"raw images, got {size!r:.200}"
        )
