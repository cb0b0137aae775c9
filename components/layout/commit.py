"""Run ids and the commit protocol: `summary.json` commits a run; every part names its run, and
readers refuse a part of a run that is not the committed, ok one.
"""

from __future__ import annotations

import os
import uuid

from components.layout.files import load_json, save_json
from components.layout.names import (
    RUN_FILE,
    RUN_ID_KEY,
    SUMMARY_FILE,
    IndexFileError,
    RunCommitError,
    gfile,
)


def new_run_id() -> str:
    return uuid.uuid4().hex


def save_run_file(directory: str, run_id: str) -> None:
    """Writes `<directory>/run.json`, naming the run that wrote the index in `directory`."""
    save_json(os.path.join(directory, RUN_FILE), {RUN_ID_KEY: run_id})


def load_run_file(directory: str) -> str | None:
    """The run id in `<directory>/run.json`; None when there is none (a store, not a run)."""
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
    run_id = obj.get(RUN_ID_KEY)
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise IndexFileError(
            f'{path}: "{RUN_ID_KEY}" must be a non-empty string, got {run_id!r:.200}'
        )
    return run_id


def commit_run(output_dir: str, run_id: str, summary: dict | None = None) -> dict:
    """Writes `summary.json` naming `run_id`: the last file of a run, which commits it.

    `summary` defaults to `{"ok": True}` (a run written outside the Beam job, as tests do);
    the Beam job passes its own, with `"ok"` false for a failed run. Returns what was written.
    """
    committed = {"ok": True} if summary is None else dict(summary)
    committed[RUN_ID_KEY] = run_id
    save_json(os.path.join(output_dir, SUMMARY_FILE), committed)
    return committed


def check_committed(output_dir: str, part_run_id: str | None, part: str) -> str | None:
    """Refuses `part` (a file or folder of the run at `output_dir`, written by `part_run_id`)
    unless `summary.json` there commits that run as ok. Returns the run id.

    A part that names no run in a folder without `summary.json` is a store that is not a run
    (`record_store_from` caches from user data): accepted, None returned. Raises
    `RunCommitError` otherwise.
    """
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    if not gfile().exists(summary_path):
        if part_run_id is None:
            return None
        raise RunCommitError(
            f"{part} belongs to run {part_run_id}, which was never committed: {summary_path} is "
            "missing (the job was killed or still runs); run the job again with --overwrite"
        )
    summary = load_json(summary_path)
    if not isinstance(summary, dict):
        raise IndexFileError(
            f"{summary_path}: expected a JSON object, got {type(summary).__name__}"
        )
    committed = run_id_field(summary, summary_path)
    if summary.get("ok") is not True:
        raise RunCommitError(
            f"{summary_path}: {_run_name(committed)} failed ({summary.get('error') or 'not ok'}); "
            f"{part} is not readable"
        )
    if part_run_id != committed:
        raise RunCommitError(
            f"{output_dir} mixes parts of two runs: {part} names {_run_name(part_run_id)} but "
            f"{summary_path} commits {_run_name(committed)}"
        )
    return committed


def _run_name(run_id: str | None) -> str:
    return f"run {run_id}" if run_id else "no run id"


def check_part(output_dir: str, directory: str) -> str | None:
    """`check_committed` for an index folder of the run at `output_dir` that names its run in a
    `run.json` (the pair index, a class index)."""
    return check_committed(output_dir, load_run_file(directory), directory)


def check_same_run(run_dir: str, other_dir: str) -> None:
    """Refuses two folders of one run (the TFX `offset_index` and `pair_index` artifacts, each
    with its copy of `summary.json`) whose summaries name different runs."""
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
