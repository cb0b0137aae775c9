"""The output directory of one run: claiming it, preparing it and reading back its summary.

All of it runs in the launcher only; `tf.io.gfile` comes from `layout.gfile()` on use because the
pipeline modules import this one, and Beam workers importing those must not import TensorFlow.
"""

from __future__ import annotations

import logging
import os
import socket

from components import layout
from components.materialize.errors import MaterializeError
from components.materialize.pictures import PICTURES_DIR
from components.materialize.spill import SPILL_DIR, remove_spill_dir

_log = logging.getLogger(__name__)

_RUN_ENTRIES = (
    layout.EXAMPLES_DIR,
    layout.INDEX_DIR,
    layout.SUMMARY_FILE,
    layout.REJECTS_FILE,
    SPILL_DIR,
    PICTURES_DIR,
)
# A holder may release its claim, or another job take over a stale one, between our tries.
_CLAIM_ATTEMPTS = 3


def claim_output_dir(output_dir: str, run_id: str) -> None:
    """Creates `output_dir` and claims it for run `run_id` (`layout.try_claim`).

    A claim held by a live job (or by a process on another host, which cannot be checked) raises
    MaterializeError naming that job. A claim left by a process of this host that is gone is
    stale: it is taken over, with a warning, and the dead run's orphan spill files are removed.
    """
    gfile = layout.gfile()
    if gfile.exists(output_dir) and not gfile.isdir(output_dir):
        raise MaterializeError(f"--output_dir is a file: {output_dir}")
    gfile.makedirs(output_dir)
    claim = layout.Claim.of_this_process(run_id)
    path = layout.claim_path(output_dir)
    took_over = False
    for _ in range(_CLAIM_ATTEMPTS):
        if layout.try_claim(output_dir, claim):
            if took_over:
                remove_spill_dir(output_dir)
            return
        try:
            holder = layout.load_claim(output_dir)
        except layout.IndexFileError as error:
            raise MaterializeError(
                f"--output_dir {output_dir} is in use: {error} (another job may be starting; "
                f"remove {path} if none is)"
            ) from None
        if holder is None:
            continue
        if not _is_stale(holder):
            raise MaterializeError(
                f"--output_dir {output_dir} is in use by {holder.describe()}, claim {path}: wait "
                f"for that job to end, or remove {path} if it is gone"
            )
        _log.warning(
            "%s: taking over the stale claim of %s: that process is gone; removing its spill files",
            output_dir,
            holder.describe(),
        )
        layout.release_claim(output_dir, holder.run_id)
        took_over = True
    raise MaterializeError(f"--output_dir {output_dir}: could not claim {path}; other jobs keep it")


def _is_stale(claim: layout.Claim) -> bool:
    """Whether the process holding `claim` is known to be gone (only one of this host is)."""
    if claim.host != socket.gethostname():
        return False
    try:
        os.kill(claim.pid, 0)  # signal 0: checks that the process exists, sends nothing
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user
        return False
    return False


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Readies `output_dir`, which `claim_output_dir` made and claimed: refuses it when it holds
    more than the claim unless `overwrite`, which then removes the files of a previous run (so no
    stale shard survives next to new ones)."""
    gfile = layout.gfile()
    in_use = [name for name in gfile.listdir(output_dir) if name.rstrip("/") != layout.CLAIM_FILE]
    if in_use:
        if not overwrite:
            raise MaterializeError(
                f"--output_dir {output_dir} is not empty (pass --overwrite to replace a run)"
            )
        for entry in _RUN_ENTRIES:
            path = os.path.join(output_dir, entry)
            if gfile.isdir(path):
                gfile.rmtree(path)
            elif gfile.exists(path):
                gfile.remove(path)


def read_summary(output_dir: str, run_id: str) -> dict:
    """Loads `summary.json` of run `run_id`; raises MaterializeError with the run's error when
    it failed, or when the summary there commits another run."""
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
