"""The stage around the pipeline: claim and prepare the output folder, run, record a failure,
release the claim. A `beam.PTransform` cannot hold it: it wraps `pipeline.run()` itself.

The safety rules live here and in the modules it calls: a job deletes only what it wrote
(`run_dir.prepare_output_dir`, `owned_files`, `claims`), a failed pipeline leaves a
`summary.json` that says `"ok": false` (`run_dir.record_failure`), and the summary a successful
job writes last (`stages.Commit`) is what commits the run.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterable

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult, PipelineState

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, common, pictures, preflight, run_dir, spill
from tfx_dynamic_inputs.materialize.config import AudioConfig, PairsConfig
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.shards import LOST_RECORDS

# Writes refused for want of room: a full disk, a quota, a file size limit (RLIMIT_FSIZE).
_FULL_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# How long an interrupted launcher waits for its cancelled job to stop, and how often it looks.
CANCEL_TIMEOUT_S = 60.0
_CANCEL_POLL_S = 0.5

_log = logging.getLogger(__name__)


def run_job(
    build: Callable[[beam.Pipeline], object],
    output_dir: str,
    overwrite: bool,
    beam_pipeline_args: Iterable[str],
    make_pipeline: Callable[[], beam.Pipeline] | None,
    input_dirs: dict[str, str] | None = None,
) -> dict:
    """Claims and prepares `output_dir`, runs the pipeline `build` adds to, and returns the
    summary.

    The job gets a new run id, held in the folder's claim (`run_dir.claim_output_dir`), where
    the writers read it while `build` runs; its `summary.json` commits that run.

    A pipeline that fails leaves a `summary.json` that says so (`"ok": false`, naming this run):
    readers refuse the folder, and a later `--overwrite` can prove the parts are this run's.
    Every summary is written whole or not at all (`commit_file`); where the failure's cannot be
    written (a full disk), the claim stays as that proof, and the next run on the folder takes
    it over as stale. The spill files (in the folder, or below `--temp_location`:
    `spill.remove_spill_dir`) and otherwise the claim are removed when the pipeline ends,
    whether it succeeded or not. On
    KeyboardInterrupt the job is cancelled first (`_cancel`): a portable or remote runner's job
    outlives its launcher, and its shard writers still read the spill files. A job not seen to
    stop keeps both; the next run on the folder takes the claim over as stale and removes them.

    Args:
        build: adds the job's transforms to the pipeline it is given (its result is ignored).
        output_dir: the folder the run is written to.
        overwrite: whether a previous run in `output_dir` may be replaced (only what a run of
            this project wrote is deleted: `run_dir.prepare_output_dir`).
        beam_pipeline_args: Beam options for the default pipeline (unused with `make_pipeline`).
        make_pipeline: returns a fresh `beam.Pipeline`; None builds one from
            `beam_pipeline_args` (`common.make_default_pipeline`).
        input_dirs: flag -> folder, the job's input folders, which `output_dir` must stay apart
            from (`preflight.check_apart`).

    Returns:
        The run's summary (the content of its `summary.json`).

    Raises:
        MaterializeError: on a bad folder, or when a shard writer finds its records differ from
            the plan: the runner lost or repeated elements between stages. Beam 2.59's
            DirectRunner does that with `--direct_num_workers` > 1 (multi_processing and
            multi_threading) on about 1.3 GB of payloads, intermittently
            (`bench/direct_runner_loss_repro.py` shows it without this project's code); on the
            DirectRunner the jobs send only spill refs through the runner (`--spill auto`), far
            below that; `--spill none` there brings it back. Also when storage refused a write
            for want of room (a full disk, a quota: `_storage_full`), or the claim cannot be
            written. Whatever the pipeline raised otherwise passes through.

    Example:
        >>> run_job(lambda p: p | MaterializePairs(config), out, False, (), None)  # doctest: +SKIP
    """
    preflight.check_apart(output_dir, input_dirs or {})
    run_id = layout.new_run_id()
    stale_run_ids = run_dir.claim_output_dir(output_dir, run_id)
    job_stopped = True
    started = False
    recorded = True  # whether a whole summary.json names this run, once it started
    try:
        run_dir.prepare_output_dir(output_dir, overwrite, stale_run_ids)
        started = True
        pipeline = (
            make_pipeline() if make_pipeline else common.make_default_pipeline(beam_pipeline_args)
        )
        build(pipeline)
        # Not `with pipeline:`, which hides the running job's result from an interrupt.
        result = pipeline.run()
        try:
            result.wait_until_finish()
        except KeyboardInterrupt:
            job_stopped = _cancel(result, output_dir)
            raise
    except BaseException as error:
        if started and job_stopped:
            recorded = run_dir.record_failure(output_dir, run_id, error)
        if not isinstance(error, Exception):
            raise
        full = _storage_full(error)
        if full is not None and started:
            proof = (
                f"its {layout.SUMMARY_FILE} says the run failed"
                if recorded
                else f"its claim {claims.claim_path(output_dir)} stays as the run's"
            )
            raise MaterializeError(
                f"could not write the run to {output_dir}: {full}; {proof}: free space, then run "
                "the same command with --overwrite"
            ) from None
        lost = next((line for line in str(error).splitlines() if LOST_RECORDS in line), None)
        if lost is None:
            raise
        detail = lost.split("RuntimeError: ")[-1].split(" [while running")[0].strip()
        raise MaterializeError(
            f"the Beam runner did not deliver every record to its shard writer ({detail}); "
            f"{output_dir} is incomplete (its summary.json says the run failed). Known with the "
            "DirectRunner and --direct_num_workers > 1 on large inputs: use "
            "--direct_running_mode=in_memory locally, or a distributed runner"
        ) from None
    finally:
        if job_stopped:
            spill.remove_spill_dir(output_dir, run_id)
            run_dir.release_output_dir(output_dir, run_id, keep_claim=not recorded)
    return run_dir.read_summary(output_dir, run_id)


def run_materialize(
    transform: beam.PTransform,
    config: PairsConfig | AudioConfig,
    make_pipeline: Callable[[], beam.Pipeline] | None,
) -> dict:
    """Runs a materialize job under `run_job`, then draws the run's pictures.

    Args:
        transform: the job, applied to the pipeline's root (`MaterializePairs`, ...).
        config: the job's config: its output folder, Beam arguments and input folders.
        make_pipeline: as for `run_job`.

    Returns:
        The run's summary.

    Raises:
        MaterializeError: as `run_job`.
    """
    summary = run_job(
        lambda pipeline: pipeline | transform,
        config.output_dir,
        config.overwrite,
        config.beam_pipeline_args,
        make_pipeline,
        config.input_dirs(),
    )
    # In the launcher, after the commit: the pictures need TensorFlow, which workers never load.
    try:
        pictures.write_run_pictures(config.output_dir, summary)
    except Exception as error:
        # The run is committed; storage without room for its pictures does not undo it.
        full = _storage_full(error)
        if full is None:
            raise
        _log.warning("%s: no room for the run's pictures (%s)", config.output_dir, full)
    return summary


def _storage_full(error: Exception) -> str | None:
    """ "[Errno N] reason" when `error` is a write that storage refused for want of room (a full
    disk, a quota, a file size limit), raised or re-raised with its reason in the message (the
    DirectRunner re-raises a worker's OSError as a RuntimeError, TensorFlow's file writers raise
    their own errors); None otherwise."""
    if isinstance(error, OSError) and error.errno in _FULL_STORAGE_ERRNOS:
        return f"[Errno {error.errno}] {error.strerror}"
    text = str(error)
    for number in sorted(_FULL_STORAGE_ERRNOS):
        if os.strerror(number) in text:
            return f"[Errno {number}] {os.strerror(number)}"
    return None


def _cancel(result: PipelineResult, output_dir: str) -> bool:
    """Cancels the job behind `result` and waits up to `CANCEL_TIMEOUT_S` for a terminal state;
    returns whether the job is seen to stop."""
    try:
        result.cancel()
    except Exception as error:  # NotImplementedError, or the job service's own errors
        _log.warning("cancelling the Beam job of %s failed: %r", output_dir, error)
    deadline = time.monotonic() + CANCEL_TIMEOUT_S
    while True:
        try:
            state = result.state
        except Exception as error:  # a job service that went away cannot tell
            _log.warning("the state of the Beam job of %s is unknown: %r", output_dir, error)
            state = PipelineState.UNKNOWN
        if PipelineState.is_terminal(state):
            return True
        if time.monotonic() >= deadline:
            _log.warning(
                "the Beam job of %s did not stop within %.0f s of its cancel (state %s): leaving "
                "its spill files and claim for the next run on the folder to remove",
                output_dir,
                CANCEL_TIMEOUT_S,
                state,
            )
            return False
        time.sleep(_CANCEL_POLL_S)
