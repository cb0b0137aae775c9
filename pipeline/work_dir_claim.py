"""The claim on a local run's work dir: one `run_local` at a time in a `--work_dir`.

Two runs in one work dir share its sqlite ML Metadata and pipeline root: both gated and pushed,
and each printed the newest run's nodes, whichever run that was. So `run_local` claims the work
dir as the materialize job claims its output folder (`materialize.claims.take_claim`: a `.claim`
file naming run id, host, pid and start time, created exclusively): a second run is refused in
one line naming the holder, before anything is written there or TensorFlow is imported. A claim
left by a process of this host that is gone (killed with SIGKILL, say) is stale and taken over
with a warning; one of another host is never judged stale.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

from tfx_dynamic_inputs.materialize import claims
from tfx_dynamic_inputs.pipeline.cli import ConfigError


@contextlib.contextmanager
def claimed(work_dir: str) -> Iterator[claims.Claim]:
    """Holds the claim on `work_dir` (created when missing) while the block runs.

    Args:
        work_dir: the local run's work dir.

    Yields:
        This run's `Claim`.

    Raises:
        ConfigError: `work_dir` cannot be made, or another live run holds it; one line naming
            the holder and its claim file.

    Example:
        with claimed("out/local"):
            ...  # run the pipeline
    """
    try:
        os.makedirs(work_dir, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--work_dir {work_dir}: {error.strerror}") from None
    claim = claims.Claim.of_this_process(uuid.uuid4().hex)
    try:
        claims.take_claim(work_dir, claim)
    except claims.FolderInUse as error:
        raise ConfigError(f"--work_dir {error}") from None
    except OSError as error:  # e.g. a read-only work dir
        raise ConfigError(f"--work_dir {work_dir}: {error.strerror}") from None
    try:
        yield claim
    finally:
        claims.release_claim(work_dir, claim.run_id)
