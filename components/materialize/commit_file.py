"""Writing a run's commit, `summary.json`, whole or not at all.

A job's last file commits its run (`layout.commit_run`), and a failed job's `summary.json` that
says so is what lets `--overwrite` prove the folder's parts are a run's (`run_dir`). Written in
place, a write that fails part-way (a full disk, a quota) left a 0-byte or cut `summary.json`:
neither a commit readers accept nor a run id `--overwrite` can read, so the folder needed
cleaning by hand. Here the summary is written in a staging folder of the run, flushed to disk,
and renamed into place: a reader sees no summary or a whole one. The staging folder,
`<output folder>/.commit-<run id>`, carries the run id, so whatever a killed job leaves of it is
provably that run's (`remove_staging`).

No TensorFlow: the commit is written by a Beam worker (`stages.Commit`). Local folders are
renamed and flushed with `os`; object stores write an object whole when it is closed, and the
copy that renames it is whole too.
"""

from __future__ import annotations

import logging
import os
import shutil

from apache_beam.io.filesystems import FileSystems

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.layout.filesystem import replace
from tfx_dynamic_inputs.materialize import owned_files

_log = logging.getLogger(__name__)

# The staging folder of one run's commit in its output folder: `<prefix><run id>`.
STAGING_PREFIX = ".commit-"


def staging_dir(output_dir: str, run_id: str) -> str:
    """The folder `commit_whole` writes run `run_id`'s summary in before renaming it.

    Args:
        output_dir: the run folder.
        run_id: the run.

    Returns:
        `<output_dir>/.commit-<run_id>`.
    """
    return os.path.join(output_dir, STAGING_PREFIX + run_id)


def commit_whole(output_dir: str, run_id: str, summary: dict) -> dict:
    """Writes `summary.json` of run `run_id` in `output_dir` as `layout.commit_run` does (the
    same bytes), but whole or not at all: written in `staging_dir`, flushed to disk, then renamed
    into place (and the folder's entry flushed). A failure leaves `output_dir` without the new
    summary (and without the staging folder, unless removing it fails too) and raises.

    Args:
        output_dir: the run folder.
        run_id: the run the summary commits.
        summary: what to commit (`"ok"`, the record sets' stats, ...).

    Returns:
        What was written: a copy of `summary` with `"run_id"` set.

    Raises:
        OSError: (or the file system's own error) when a write or the rename fails; e.g.
            `ENOSPC` on a full disk, `EFBIG` past a file size limit.

    Example:
        commit_whole(run_dir, run_id, {"ok": False, "error": "the job was interrupted"})
    """
    staging = staging_dir(output_dir, run_id)
    target = os.path.join(output_dir, layout.SUMMARY_FILE)
    try:
        committed = layout.commit_run(staging, run_id, summary)
        staged = os.path.join(staging, layout.SUMMARY_FILE)
        if owned_files.is_local(output_dir):
            _flush(staged)
            os.replace(staged, target)
            _flush(output_dir)
        else:
            replace(staged, target)
    finally:
        remove_staging(output_dir, run_id)
    return committed


def _flush(path: str) -> None:
    """fsync: the data of the file at `path`, or the entries of the folder at `path`, reach
    the disk before the rename (or its caller) goes on."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_staging(output_dir: str, run_id: str) -> None:
    """Removes the staging folder of run `run_id`'s commit, if any, without TensorFlow (a Beam
    worker calls it); a link there is left, not followed. Never raises: the caller's own error
    is what matters.

    Args:
        output_dir: the run folder.
        run_id: the run whose staging folder goes.
    """
    path = staging_dir(output_dir, run_id)
    try:
        if owned_files.is_link(path):
            _log.warning(
                "%s is a symbolic link, not a commit's staging folder: left as it is", path
            )
        elif owned_files.is_local(path):
            if os.path.isdir(path):
                shutil.rmtree(path)
        elif FileSystems.exists(staged := os.path.join(path, layout.SUMMARY_FILE)):
            FileSystems.delete([staged])  # an object store's folder is its objects
    except OSError as error:  # BeamIOError is one
        _log.warning("%s: could not remove %s: %r", output_dir, path, error)
