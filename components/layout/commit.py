"""Run ids and the commit protocol: `summary.json` commits a run; every part names its run, and
readers refuse a part of a run that is not the committed, ok one.
"""

from __future__ import annotations

import os
import uuid

from tfx_dynamic_inputs.layout.files import load_json, save_json
from tfx_dynamic_inputs.layout.filesystem import gfile
from tfx_dynamic_inputs.layout.names import (
    RUN_FILE,
    RUN_ID_KEY,
    SUMMARY_FILE,
    IndexFileError,
    RunCommitError,
)


def new_run_id() -> str:
    """A new run id: a random uuid4, 32 hex digits, that every part of the run will name.

    Returns:
        The run id.

    Example:
        run_id = new_run_id()
    """
    return uuid.uuid4().hex


def save_run_file(directory: str, run_id: str) -> None:
    """Writes `<directory>/run.json`, naming the run that wrote the index in `directory`.

    Args:
        directory: An index folder (the pair index, a class index).
        run_id: The run writing it.
    """
    save_json(os.path.join(directory, RUN_FILE), {RUN_ID_KEY: run_id})


def load_run_file(directory: str) -> str | None:
    """The run id in `<directory>/run.json`.

    Args:
        directory: An index folder.

    Returns:
        The run id; None when there is no `run.json` (a store, not a run).

    Raises:
        IndexFileError: `run.json` is not a JSON object with a non-empty string `"run_id"`.
    """
    path = os.path.join(directory, RUN_FILE)
    if not gfile().exists(path):
        return None
    value = load_json(path)
    if not isinstance(value, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(value).__name__}")
    run_id = run_id_field(value, path)
    if run_id is None:
        raise IndexFileError(f'{path}: no "{RUN_ID_KEY}"')
    return run_id


def run_id_field(obj: dict, path: str) -> str | None:
    """The `"run_id"` of a JSON object read from `path`, checked.

    Args:
        obj: The decoded object (`summary.json`, `shards.json`, `run.json`).
        path: Its file, named in the error.

    Returns:
        The run id; None when the object has none.

    Raises:
        IndexFileError: `"run_id"` is present but not a non-empty printable string (a run id is
            named in messages, which are one line).
    """
    run_id = obj.get(RUN_ID_KEY)
    if run_id is not None and (
        not isinstance(run_id, str) or not run_id or not run_id.isprintable()
    ):
        raise IndexFileError(
            f'{path}: "{RUN_ID_KEY}" must be a non-empty printable string, got {run_id!r:.200}'
        )
    return run_id


def committed_run_id(summary: object, path: str) -> str | None:
    """The run a decoded `summary.json` commits as ok.

    Args:
        summary: The value decoded from `path`.
        path: The `summary.json`, named in errors.

    Returns:
        The run id; None when the summary names none (a run written before run ids).

    Raises:
        IndexFileError: `summary` is not a JSON object, its `"ok"` is not true or false, or its
            `"run_id"` is malformed.
        RunCommitError: `"ok"` is false: the run failed (the message gives its `"error"`).
    """
    if not isinstance(summary, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(summary).__name__}")
    run_id = run_id_field(summary, path)
    ok = summary.get("ok")
    if not isinstance(ok, bool):
        raise IndexFileError(f'{path}: "ok" must be true or false, got {ok!r:.200}')
    if not ok:
        error = " ".join(str(summary.get("error") or "not ok").split())
        raise RunCommitError(f"{path}: {_run_name(run_id)} failed ({error:.300})")
    return run_id


def commit_run(output_dir: str, run_id: str, summary: dict | None = None) -> dict:
    """Writes `summary.json` naming `run_id`: the last file of a run, which commits it.

    Args:
        output_dir: The run directory.
        run_id: The run every part was written by.
        summary: What to commit; defaults to `{"ok": True}` (a run written outside the Beam
            job, as tests do). The Beam job passes its own, with `"ok"` false for a failed run.

    Returns:
        What was written: a copy of `summary` with `"run_id"` set.

    Example:
        commit_run(run, run_id)  # {"ok": True, "run_id": run_id}
    """
    committed = {"ok": True} if summary is None else dict(summary)
    committed[RUN_ID_KEY] = run_id
    save_json(os.path.join(output_dir, SUMMARY_FILE), committed)
    return committed


def check_committed(output_dir: str, part_run_id: str | None, part: str) -> str | None:
    """Refuses `part` of the run at `output_dir` unless `summary.json` commits its run as ok.

    A part that names no run in a folder without `summary.json` is a store that is not a run
    (`record_store_from` caches from user data): accepted.

    Args:
        output_dir: The run directory, holding `summary.json`.
        part_run_id: The run the part names; None when it names none.
        part: The part's file or folder, named in errors.

    Returns:
        The committed run id; None for a store that is not a run.

    Raises:
        RunCommitError: `summary.json` is missing while the part names a run, says the run
            failed, or commits another run than `part_run_id`.
        IndexFileError: `summary.json` is not a JSON object, its `"ok"` is not a bool, or its
            `"run_id"` is malformed.
    """
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    if not gfile().exists(summary_path):
        if part_run_id is None:
            return None
        raise RunCommitError(
            f"{part} belongs to run {part_run_id}, which was never committed: {summary_path} is "
            "missing (the job was killed or still runs); run the job again with --overwrite"
        )
    try:
        committed = committed_run_id(load_json(summary_path), summary_path)
    except RunCommitError as failed:
        raise RunCommitError(f"{failed}; {part} is not readable") from None
    if part_run_id != committed:
        raise RunCommitError(
            f"{output_dir} mixes parts of two runs: {part} names {_run_name(part_run_id)} but "
            f"{summary_path} commits {_run_name(committed)}"
        )
    return committed


def _run_name(run_id: str | None) -> str:
    return f"run {run_id}" if run_id else "no run id"


def check_part(output_dir: str, directory: str) -> str | None:
    """`check_committed` for an index folder that names its run in a `run.json`.

    Args:
        output_dir: The run directory, holding `summary.json`.
        directory: The index folder (the pair index, a class index).

    Returns:
        The committed run id; None for a store that is not a run.

    Raises:
        RunCommitError: as `check_committed`.
        IndexFileError: `run.json` or `summary.json` is malformed.

    Example:
        check_part(run, pairs_index_dir(run))
    """
    return check_committed(output_dir, load_run_file(directory), directory)


def check_same_run(run_dir: str, other_dir: str) -> None:
    """Refuses two folders of one run whose summaries name different runs.

    The TFX `offset_index` and `pair_index` (or `class_index`) artifacts each hold a copy of
    `summary.json`; a folder without one names no run.

    Args:
        run_dir: One folder of the run (the `offset_index` artifact).
        other_dir: The other folder.

    Raises:
        RunCommitError: the two `summary.json` name different runs (or only one names a run).
        IndexFileError: a `summary.json` is not JSON, or its `"run_id"` is malformed.
    """
    run_ids = []
    for directory in (run_dir, other_dir):
        path = os.path.join(directory, SUMMARY_FILE)
        summary = load_json(path) if gfile().exists(path) else {}
        run_ids.append(run_id_field(summary, path) if isinstance(summary, dict) else None)
    if run_ids[0] != run_ids[1]:
        raise RunCommitError(
            f"parts of two runs: {run_dir} holds {_run_name(run_ids[0])} but {other_dir} holds "
            f"{_run_name(run_ids[1])}"
        )
