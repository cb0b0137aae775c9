"""The output directory of one run: claiming it, preparing it and reading back its summary.

All of it runs in the launcher only; `tf.io.gfile` comes from `layout.gfile()` on use because the
pipeline modules import this one, and Beam workers importing those must not import TensorFlow.
"""

from __future__ import annotations

import logging
import os

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, commit_file, owned_files, preflight
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.pictures import PICTURES_DIR
from tfx_dynamic_inputs.materialize.spill import remove_spill_dir, spill_dir

_log = logging.getLogger(__name__)

# What a run writes in its folder (and its spill folder, named by its run id: `spill_dir`).
_RUN_ENTRIES = (
    layout.EXAMPLES_DIR,
    layout.INDEX_DIR,
    layout.SUMMARY_FILE,
    layout.REJECTS_FILE,
    PICTURES_DIR,
)
# The runs of this process that ended without a whole summary and kept their claim
# (`release_output_dir`): this process is alive, so `claims.take_claim` would not judge their
# claims stale, but they are.
_kept_here: set[str] = set()


def claim_output_dir(output_dir: str, run_id: str) -> list[str]:
    """Creates `output_dir` and claims it for run `run_id` (`claims.take_claim`); returns the run
    ids of the stale claims taken over (see below), which `prepare_output_dir` may overwrite.

    A claim held by a live job (or by a process on another host, which cannot be checked) raises
    MaterializeError naming that job. A claim left by a process of this host that is gone, or
    kept by a run of this process that failed (`release_output_dir`), is stale: it is taken
    over, with a warning, and the dead run's orphan spill files and commit staging folder are
    removed (`spill.remove_spill_dir`, `commit_file.remove_staging`: only what that run's id
    names).

    Args:
        output_dir: the run folder (local or object store), created when missing.
        run_id: the id of the run claiming it.

    Returns:
        The run ids of the stale claims taken over.

    Raises:
        MaterializeError: when `output_dir` is a file or a bad output path, the claim cannot be
            written (a full disk), or another job holds (or keeps taking) the claim.

    Example:
        stale = claim_output_dir("/tmp/run", run_id); prepare_output_dir("/tmp/run", True, stale)
    """
    gfile = layout.gfile()
    preflight.check_output_path(output_dir)
    if gfile.exists(output_dir) and not gfile.isdir(output_dir):
        raise MaterializeError(f"--output_dir is a file: {output_dir}")
    gfile.makedirs(output_dir)
    kept = _kept_claim(output_dir)
    if kept is not None:
        _log.warning("%s: taking over the claim run %s kept when it failed", output_dir, kept)
        claims.release_claim(output_dir, kept)
        _kept_here.discard(kept)
    try:
        stale_run_ids = claims.take_claim(output_dir, claims.Claim.of_this_process(run_id))
    except claims.FolderInUse as error:
        raise MaterializeError(f"--output_dir {error}") from None
    except OSError as error:
        raise MaterializeError(
            f"--output_dir {output_dir}: cannot write its claim "
            f"{claims.claim_path(output_dir)}: {error}"
        ) from None
    stale_run_ids = ([kept] if kept is not None else []) + stale_run_ids
    for stale_run_id in stale_run_ids:
        _log.info("%s: removing the spill files of run %s", output_dir, stale_run_id)
        remove_spill_dir(output_dir, stale_run_id)
        commit_file.remove_staging(output_dir, stale_run_id)
    return stale_run_ids


def _kept_claim(output_dir: str) -> str | None:
    """The run id of the claim on `output_dir` when a run of this process kept it after failing
    (`release_output_dir`); None otherwise (no claim, an unreadable one, another holder's)."""
    try:
        holder = claims.load_claim(output_dir)
    except layout.IndexFileError:
        return None  # `claims.take_claim` says it in one line
    if holder is None or holder.pid != os.getpid() or holder.run_id not in _kept_here:
        return None
    return holder.run_id


def release_output_dir(output_dir: str, run_id: str, keep_claim: bool) -> None:
    """Ends run `run_id`'s hold on `output_dir`: removes its claim, unless `keep_claim` (the run
    failed without a whole `summary.json` naming it: the claim is then what proves the folder's
    parts are a run's, and the next run on the folder takes it over as stale, in this process
    or after it exits).

    Args:
        output_dir: the run folder.
        run_id: the run that ended.
        keep_claim: whether the claim stays.

    Raises:
        IndexFileError: when the claim file is not a claim.
    """
    if keep_claim:
        _kept_here.add(run_id)
    else:
        claims.release_claim(output_dir, run_id)


def prepare_output_dir(
    output_dir: str, overwrite: bool, stale_run_ids: list[str] | tuple[str, ...] = ()
) -> None:
    """Readies `output_dir`, which `claim_output_dir` made and claimed: refuses it when it holds
    more than the claim unless `overwrite`, which then removes the parts of the previous run
    (so no stale shard survives next to new ones).

    Only a run can be overwritten, and only what it wrote: the previous run must be named by
    its `summary.json` or, for a job killed before its summary, by an index part
    (`previous_run_id`) or the stale claim it left (`stale_run_ids`); what is removed is
    `_RUN_ENTRIES` and that run's spill folder and commit staging folder. Other files stay.
    Nothing is removed when any of those entries is a symbolic link (a run never writes one):
    MaterializeError names it, before anything is deleted.

    Args:
        output_dir: the claimed run folder.
        overwrite: whether the previous run's parts may be removed.
        stale_run_ids: the run ids `claim_output_dir` took stale claims from.

    Raises:
        MaterializeError: when the folder holds more than the claim and `overwrite` is off, or
            holds no run, or one of the run's entries is a symbolic link.
    """
    gfile = layout.gfile()
    in_use = sorted(
        name.rstrip("/")
        for name in gfile.listdir(output_dir)
        if name.rstrip("/") != layout.CLAIM_FILE
    )
    if not in_use:
        return
    if not overwrite:
        raise preflight.not_empty(output_dir)
    previous = previous_run_id(output_dir) or next(iter(stale_run_ids), None)
    if previous is None:
        raise MaterializeError(
            f"--overwrite: {output_dir} holds {', '.join(in_use[:5])}"
            f"{', ...' if len(in_use) > 5 else ''} but no run of this job (no "
            f"{layout.SUMMARY_FILE} or index naming a run id): nothing deleted; choose an empty "
            "--output_dir"
        )
    run_parts = [os.path.join(output_dir, entry) for entry in _RUN_ENTRIES]
    scratch = (spill_dir(output_dir, previous), commit_file.staging_dir(output_dir, previous))
    links = [p for p in (*run_parts, *scratch) if owned_files.is_link(p)]
    if links:
        raise MaterializeError(
            f"--overwrite: {links[0]} is a symbolic link, which a run never writes: nothing "
            f"deleted (neither it nor what it points to); remove it yourself to reuse {output_dir}"
        )
    _log.info("%s: --overwrite removes the parts of run %s", output_dir, previous)
    for path in run_parts:
        owned_files.remove_path(path)
    remove_spill_dir(output_dir, previous)
    commit_file.remove_staging(output_dir, previous)


def previous_run_id(output_dir: str) -> str | None:
    """The run id of the run in `output_dir`: the one `summary.json` commits, else (a job killed
    before its summary, or a summary an older version's failed write cut short) the one its
    index parts name; None when nothing there names a run.

    Args:
        output_dir: the run folder.

    Returns:
        The run id, or None.
    """
    gfile = layout.gfile()
    summary_path = os.path.join(output_dir, layout.SUMMARY_FILE)
    if gfile.exists(summary_path) and (run_id := _named_run(summary_path)) is not None:
        return run_id
    index_root = os.path.join(output_dir, layout.INDEX_DIR)
    if not gfile.isdir(index_root) or owned_files.is_link(index_root):
        return None
    for record_set in sorted(gfile.listdir(index_root)):
        directory = os.path.join(index_root, record_set.rstrip("/"))
        for name in (layout.SHARDS_FILE, layout.RUN_FILE):
            path = os.path.join(directory, name)
            if gfile.exists(path) and (run_id := _named_run(path)) is not None:
                return run_id
    return None


def _named_run(path: str) -> str | None:
    """The `"run_id"` string of the JSON object in `path`, or None (not JSON, or none there)."""
    try:
        value = layout.load_json(path)
    except layout.IndexFileError:
        return None
    run_id = value.get(layout.RUN_ID_KEY) if isinstance(value, dict) else None
    return run_id if isinstance(run_id, str) and run_id else None


def record_failure(output_dir: str, run_id: str, error: BaseException) -> bool:
    """Writes a `summary.json` saying run `run_id` failed with `error` (or was interrupted),
    unless the job wrote its own: readers then refuse the folder naming the run, and
    `--overwrite` can prove its parts are a run's. The summary is written whole or not at all
    (`commit_file.commit_whole`). Never raises (the job's own error is what the caller
    reports): returns whether the folder holds a whole summary of this run, without which the
    caller keeps its claim as that proof (`release_output_dir`).

    Args:
        output_dir: the run folder.
        run_id: the run that failed.
        error: what it failed with (a KeyboardInterrupt: interrupted).

    Returns:
        True when `summary.json` names run `run_id`; False when it could not be written (a full
        disk, a folder gone or read-only).
    """
    path = os.path.join(output_dir, layout.SUMMARY_FILE)
    if isinstance(error, KeyboardInterrupt):
        what = "the job was interrupted"
    else:
        first_line = next(iter(str(error).strip().splitlines()), "")[:300]
        what = f"the job failed: {type(error).__name__}" + (f": {first_line}" if first_line else "")
    try:
        if layout.gfile().exists(path):
            return _named_run(path) == run_id
        commit_file.commit_whole(output_dir, run_id, {"ok": False, "error": what})
    except Exception as write_error:  # the folder may be gone, read-only or full
        _log.warning(
            "%s: could not record that run %s failed (%r): its claim stays, as the proof for "
            "the next run's --overwrite that the folder's parts are a run's",
            output_dir,
            run_id,
            write_error,
        )
        return False
    return True


def read_summary(output_dir: str, run_id: str) -> dict:
    """Loads `summary.json` of run `run_id`; raises MaterializeError with the run's error when
    it failed, or when the summary there commits another run.

    Args:
        output_dir: the run folder.
        run_id: the run the summary must commit.

    Returns:
        The summary dict (`"ok": True`, the record sets' stats, ...).

    Raises:
        MaterializeError: when there is no summary, it commits another run, or the run failed.
    """
    gfile = layout.gfile()
    path = os.path.join(output_dir, layout.SUMMARY_FILE)
    if not gfile.exists(path):
        raise MaterializeError(f"the pipeline finished without writing {path}")
    summary = layout.load_json(path)
    if summary.get(layout.RUN_ID_KEY) != run_id:
        raise MaterializeError(
            f"{path} commits run {summary.get(layout.RUN_ID_KEY)}, not this job's run {run_id}"
        )
    if not summary.get("ok"):
        raise MaterializeError(
            f"{summary.get('error', 'failed')}; details in "
            f"{os.path.join(output_dir, layout.REJECTS_FILE)}"
        )
    return summary
