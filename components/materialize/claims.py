"""The claim on a run folder: `.claim` names the job writing it, so a second job fails fast."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket

from tfx_dynamic_inputs.layout import CLAIM_FILE, IndexFileError, gfile, load_json


@dataclasses.dataclass(frozen=True)
class Claim:
    """Who holds a run folder: the job's run id, and the host, pid and start time (UTC, ISO
    8601) of its launcher."""

    run_id: str
    host: str
    pid: int
    started: str

    @classmethod
    def of_this_process(cls, run_id: str) -> Claim:
        """The claim of this process (host, pid, now) for run `run_id`.

        Args:
            run_id: the job's run id.

        Returns:
            The `Claim`.
        """
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return cls(run_id, socket.gethostname(), os.getpid(), started)

    def describe(self) -> str:
        """A one-line description for error messages: run id, pid, host and start time."""
        return f"run {self.run_id} (pid {self.pid} on {self.host}, started {self.started})"


def claim_path(output_dir: str) -> str:
    """The path of the claim file of `output_dir`.

    Args:
        output_dir: the run folder.

    Returns:
        `<output_dir>/.claim`.
    """
    return os.path.join(output_dir, CLAIM_FILE)


def try_claim(output_dir: str, claim: Claim) -> bool:
    """Creates the claim file of `output_dir` (an existing folder) unless there is one; returns
    whether `claim` now holds the folder.

    Locally the file is created exclusively (O_CREAT | O_EXCL) and written in one call. Object
    stores have no exclusive create: the claim is written when absent and read back, so of two
    jobs writing at once the one overwritten backs off (best effort).

    Args:
        output_dir: the run folder, which exists.
        claim: the claim to make.

    Returns:
        True when `claim` holds the folder; False when another claim does.

    Example:
        try_claim(run_dir, Claim.of_this_process(run_id))
    """
    path = claim_path(output_dir)
    data = json.dumps(dataclasses.asdict(claim), sort_keys=True).encode()
    if "://" not in path:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return True
    if gfile().exists(path):
        return False
    with gfile().GFile(path, "wb") as f:
        f.write(data)
    holder = load_claim(output_dir)
    return holder is not None and holder.run_id == claim.run_id


def load_claim(output_dir: str) -> Claim | None:
    """The claim on `output_dir`; None when unclaimed. `IndexFileError` naming the file when it
    is not a claim (empty while its job is writing it, or damaged).

    Args:
        output_dir: the run folder.

    Returns:
        Its `Claim`, or None when there is no claim file.

    Raises:
        IndexFileError: when the claim file is not a claim.
    """
    path = claim_path(output_dir)
    if not gfile().exists(path):
        return None
    value = load_json(path)
    try:
        return Claim(**value)
    except TypeError as error:  # not an object, or other fields
        raise IndexFileError(f"{path}: not a claim: {value!r:.200}") from error


def claimed_run_id(output_dir: str) -> str:
    """The run id of the job that holds `output_dir`: the Beam writers stamp it into the parts
    they write, read when the pipeline is built (so workers of a killed job keep theirs).

    Args:
        output_dir: the run folder.

    Returns:
        The run id of its claim.

    Raises:
        FileNotFoundError: when no job claims `output_dir`.
        IndexFileError: when the claim file is not a claim.
    """
    claim = load_claim(output_dir)
    if claim is None:
        raise FileNotFoundError(
            f"no job claims {output_dir} (no {claim_path(output_dir)}): run the pipeline through "
            "tfx_dynamic_inputs.materialize.stages.run_job"
        )
    return claim.run_id


def release_claim(output_dir: str, run_id: str) -> None:
    """Removes the claim on `output_dir` when `run_id` holds it (never another job's).

    Args:
        output_dir: the run folder.
        run_id: the job whose claim is removed.

    Raises:
        IndexFileError: when the claim file is not a claim.
    """
    claim = load_claim(output_dir)
    if claim is not None and claim.run_id == run_id:
        gfile().remove(claim_path(output_dir))
