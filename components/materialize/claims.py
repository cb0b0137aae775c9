"""The claim on a run folder: `.claim` names the job writing it, so a second job fails fast.

`take_claim` is the whole protocol (claim, else judge the holder, take over a stale claim); the
materialize job claims its output folder with it, `run_local` its work dir. A local claim is read
and written with `os` alone, so a refused command has not imported TensorFlow.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import socket

from tfx_dynamic_inputs.layout import CLAIM_FILE, IndexFileError, gfile, load_json

_log = logging.getLogger(__name__)
# A holder may release its claim, or another job take over a stale one, between our tries.
_CLAIM_ATTEMPTS = 3


class FolderInUse(Exception):
    """Another job holds the folder (or its claim is unreadable); the message is one line that
    names the folder, the holder and its claim file."""


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

    Locally the file is created exclusively (O_CREAT | O_EXCL) and written in one call; when
    the write fails (a full disk) the file this call created is removed before the error is
    raised, so no empty claim is left to block the folder. Object stores have no exclusive
    create: the claim is written when absent and read back, so of two jobs writing at once the
    one overwritten backs off (best effort).

    Args:
        output_dir: the run folder, which exists.
        claim: the claim to make.

    Returns:
        True when `claim` holds the folder; False when another claim does.

    Raises:
        OSError: when the claim cannot be written (nothing of it is left locally).

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
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"{path}: the claim was cut short (is the disk full?)")
            finally:
                os.close(fd)
        except OSError:
            os.remove(path)
            raise
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
    if "://" in path:
        if not gfile().exists(path):
            return None
        value = load_json(path)
    else:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        try:
            value = json.loads(text.decode("utf-8"))
        except ValueError as error:  # as `layout.load_json` says it
            raise IndexFileError(f"{path}: not valid JSON: {error}") from error
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
        path = claim_path(output_dir)
        if "://" in path:
            gfile().remove(path)
        else:
            os.remove(path)


def is_stale(claim: Claim) -> bool:
    """Whether the process holding `claim` is known to be gone: only one of this host can be
    (a pid reused since is taken for the holder, which errs on the side of refusing).

    Args:
        claim: a claim.

    Returns:
        True when its host is this one and no process has its pid.
    """
    if claim.host != socket.gethostname():
        return False
    try:
        os.kill(claim.pid, 0)  # signal 0: checks that the process exists, sends nothing
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user
        return False
    return False


def take_claim(output_dir: str, claim: Claim) -> list[str]:
    """Claims `output_dir` (an existing folder) for `claim`; returns the run ids of the stale
    claims taken over.

    A claim held by a live process (or by a process on another host, which cannot be checked)
    raises FolderInUse naming it. A claim left by a process of this host that is gone is stale:
    it is taken over, with a warning (the caller cleans up what that run left).

    Args:
        output_dir: the folder, which exists.
        claim: the claim to make.

    Returns:
        The run ids of the stale claims taken over, oldest first.

    Raises:
        FolderInUse: another job holds (or keeps taking) the claim, or the claim file is not a
            claim; the message starts with `output_dir`.

    Example:
        stale = take_claim(run_dir, Claim.of_this_process(run_id))
    """
    path = claim_path(output_dir)
    stale_run_ids = []
    for _ in range(_CLAIM_ATTEMPTS):
        if try_claim(output_dir, claim):
            return stale_run_ids
        try:
            holder = load_claim(output_dir)
        except IndexFileError as error:
            raise FolderInUse(
                f"{output_dir} is in use: {error} (another job may be starting; remove {path} if "
                "none is)"
            ) from None
        if holder is None:
            continue
        if not is_stale(holder):
            raise FolderInUse(
                f"{output_dir} is in use by {holder.describe()}, claim {path}: wait for that job "
                f"to end, or remove {path} if it is gone"
            )
        _log.warning(
            "%s: taking over the stale claim of %s: that process is gone",
            output_dir,
            holder.describe(),
        )
        release_claim(output_dir, holder.run_id)
        stale_run_ids.append(holder.run_id)
    raise FolderInUse(f"{output_dir}: could not claim {path}; other jobs keep it")
