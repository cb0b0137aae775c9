"""Hand payloads from one Beam stage to a later one: through files, or through the runner.

With spill files (`--spill files`), a decode worker appends each payload as a TFRecord frame
to a spill file of its bundle in the run's spill folder and passes on only a `SpillRef`
(path, frame offset, length); the stage that needs the bytes reads them back by offset.
Runners move every element between stages through their own channels (the DirectRunner's gRPC
data plane or in-memory lists, Dataflow's shuffle), so a payload emitted by a decoder and
grouped by shard would otherwise be encoded and copied about four times; a ref is about 100
bytes whatever the payload, and keeps the DirectRunner's multi-process mode clear of the
payload sizes at which it loses elements (`stages.run_job`). Spill files hold whole frames, so
a shard writer copies a record's frame, CRCs included, without computing it again.

Where every stage runs in the launcher's process (the DirectRunner in memory or multi-threaded),
`--spill auto` first holds payloads there, in memory, up to a budget (`held_payloads`), and
spills only the rest to files.

Spill files need a file system that every worker sees. On a distributed runner (Dataflow,
Flink, Spark) `--spill none` hands the payloads themselves to the runner, whose shuffle is made
for that; `--spill auto` (the default) spills on the local runners only (`resolve_spill_root`).
Either way a stage gets a `Payload` for each record, the bytes or their ref, and
`read_frames` / `read_payloads` resolve both, so the jobs have one code path.

The spill folder is `<output folder>/.spill-<run id>`, or with `--temp_location` the folder
`<temp location>/materialize-spill-<run id>` (Beam's place for a job's temporary files, e.g. a
bucket the workers share); the output folder then holds a pointer file `.spill-<run id>`
naming it, so the launcher, or the next run on the folder when it takes a stale claim over
(`run_dir.claim_output_dir`), finds what to remove. Both names carry the run id: what
`remove_spill_dir` deletes is provably this run's (a pointer naming any other folder is left
alone, and a link is never followed), never a user's `.spill` folder.

Spill file names are random: a retried bundle writes a new file and its refs, while the failed
attempt's file is never referenced. A ref may only be read by a later stage (one behind a
GroupByKey or a side input): object stores make a file readable only once its writer closes it,
at the end of the bundle. `stages.run_job` removes the spill files when the job ends (once an
interrupted job is cancelled); a launcher killed outright leaves them to the next run on the
folder, which takes over its stale claim.
"""

from __future__ import annotations

import itertools
import logging
import posixpath
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import apache_beam as beam
import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, held_payloads, owned_files
from tfx_dynamic_inputs.materialize.config import SPILL_MODES
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.held_payloads import HeldRef

if TYPE_CHECKING:
    from apache_beam.runners.runner import PipelineRunner

# The spill folder (or pointer file) of one run in its output folder: `<prefix><run id>`.
SPILL_PREFIX = ".spill-"
# The folder of one run's spill files below --temp_location: `<prefix><run id>`.
TEMP_ROOT_PREFIX = "materialize-spill-"
_MAX_GAP_BYTES = 1 << 16  # read through a gap this small rather than seek past it

_log = logging.getLogger(__name__)


class SpillRef(NamedTuple):
    """Where one payload was spilled: its frame starts at `offset` in `path` and the payload
    is `length` bytes (the frame is `length + layout.FRAME_OVERHEAD_BYTES`)."""

    path: str
    offset: int
    length: int


# What a stage hands on for one payload: the bytes themselves (`--spill none`), or their ref: in
# a spill file, or held in the launcher's process.
Payload = bytes | SpillRef | HeldRef


def spill_dir(output_dir: str, run_id: str) -> str:
    """The spill folder, or the pointer file to it, of run `run_id` in its `output_dir`.

    Args:
        output_dir: the run's output folder.
        run_id: the run's id.

    Returns:
        `<output_dir>/.spill-<run_id>`.
    """
    return layout.resolve(output_dir, SPILL_PREFIX + run_id)


def resolve_spill_root(mode: str, pipeline: beam.Pipeline, output_dir: str) -> str | None:
    """Where the job on `pipeline` spills payloads under `--spill mode`: the spill folder for
    `SpillingDoFn`, or None when the payloads go through the runner.

    `auto` spills on the runners of this machine (the DirectRunner and Beam's FnApiRunner, in
    memory or in worker processes), whose workers all see its files, and opens the folder's
    `held_payloads` holder in this process: its workers that run here hold payloads in memory
    up to `held_payloads.HELD_BYTES_BUDGET` before they spill; any other runner gets the
    payloads. The folder is `spill_dir(output_dir, run id)`, or a folder of this run below
    the pipeline's `--temp_location` when it has one; for the latter a pointer file is written
    first (so the launcher calls this while it builds the pipeline, under `stages.run_job`'s
    claim, which holds the run id).

    Args:
        mode: "auto", "files" or "none" (`config.SPILL_MODES`).
        pipeline: the pipeline the job is built on (its runner and options are read).
        output_dir: the run's output folder, claimed by this job.

    Returns:
        The spill folder, or None when payloads go through the runner.

    Raises:
        MaterializeError: when `mode` is not one of `SPILL_MODES`.
    """
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    if mode not in SPILL_MODES:
        raise MaterializeError(f"--spill must be one of {', '.join(SPILL_MODES)}; got {mode!r}")
    if mode == "none" or (mode == "auto" and not is_local_runner(pipeline.runner)):
        return None
    run_id = claims.claimed_run_id(output_dir)
    temp_location = pipeline.options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        root = posixpath.join(temp_location, TEMP_ROOT_PREFIX + run_id)
        with layout.gfile().GFile(spill_dir(output_dir, run_id), "w") as pointer:
            pointer.write(root)
    else:
        root = spill_dir(output_dir, run_id)
    if mode == "auto":
        held_payloads.open_holder(root, run_id)
    return root


def is_local_runner(runner: PipelineRunner) -> bool:
    """Whether every worker of `runner` runs on this machine (so sees its local files).

    Args:
        runner: the pipeline's runner.

    Returns:
        True for the DirectRunner (either kind) and Beam's FnApiRunner.
    """
    from apache_beam.runners.direct.direct_runner import (
        BundleBasedDirectRunner,
        SwitchingDirectRunner,
    )
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    return isinstance(runner, (SwitchingDirectRunner, BundleBasedDirectRunner, FnApiRunner))


class SpillWriter:
    """Spills payloads to one new spill file in the folder `spill_root`, opened on the first
    write (after the folder's `held_payloads` holder in this process, if any, has taken what its
    budget allows); with no folder, hands the payloads back as they are, for the runner to carry.

    Args:
        spill_root: the folder for the spill file, or None to hand payloads back as they are.

    Example:
        writer = SpillWriter(root); refs = writer.write([b"a", b"bc"]); writer.close()
    """

    def __init__(self, spill_root: str | None):
        self._directory = spill_root
        self._file = None
        self._path = ""
        self._size = 0

    def write(self, payloads: Sequence[bytes]) -> list[Payload]:
        """The `Payload` of each of `payloads`, in order.

        Args:
            payloads: the serialized payloads.

        Returns:
            A `HeldRef` for each held, a `SpillRef` for each other (appended to this writer's spill
            file), or the payloads themselves when there is no spill folder.
        """
        if self._directory is None:
            return list(payloads)
        holder = held_payloads.holder_of(self._directory)
        refs: list[Payload] = []
        for payload in payloads:
            held = holder.hold(payload) if holder is not None else None
            refs.append(held if held is not None else self._append(payload))
        return refs

    def _append(self, payload: bytes) -> SpillRef:
        """Appends `payload`'s frame to this writer's spill file (made on the first call)."""
        if self._file is None:
            self._path = posixpath.join(self._directory, f"{uuid.uuid4().hex}.tfrecord")
            self._file = layout.create(self._path)
        # The frame's parts, not one joined copy of the payload (`layout.frame_parts`).
        header, footer = layout.frame_parts(payload)
        ref = SpillRef(self._path, self._size, len(payload))
        self._file.write(header)
        self._file.write(payload)
        self._file.write(footer)
        self._size += len(header) + len(payload) + len(footer)
        return ref

    def close(self) -> None:
        """Closes the spill file, if one was opened."""
        if self._file is not None:
            self._file.close()
            self._file = None


class SpillingDoFn(beam.DoFn):
    """A DoFn that hands payloads on through `self.spill`: one spill file per bundle below
    `spill_root`, or none when it is None (`resolve_spill_root`).

    Args:
        spill_root: the spill folder, or None.
    """

    def __init__(self, spill_root: str | None):
        super().__init__()
        self._spill_root = spill_root
        self.spill: SpillWriter | None = None

    def start_bundle(self):
        """Opens a `SpillWriter` for the bundle (its file is made on the first write)."""
        self.spill = SpillWriter(self._spill_root)

    def finish_bundle(self):
        """Closes the bundle's spill file, so that later stages can read it."""
        self.spill.close()


def payload_length(payload: Payload) -> int:
    """The length in bytes of the payload that `payload` is or refers to.

    Args:
        payload: the bytes, or their `SpillRef` or `HeldRef`.

    Returns:
        The payload's length (without frame header and footer).
    """
    return payload.length if isinstance(payload, (SpillRef, HeldRef)) else len(payload)


def read_frames(payloads: Sequence[Payload]) -> list[bytes | memoryview]:
    """The whole TFRecord frame of each payload, in order: refs read back, bytes framed.

    Args:
        payloads: bytes, `SpillRef`s or `HeldRef`s, mixed.

    Returns:
        One frame (header, payload, footer, CRCs included) per payload; a ref's is a
        memoryview of what was read from its spill file.

    Raises:
        RuntimeError: when a spill file is shorter than its refs say, or a held payload is not
            in this process (`held_payloads.read_held`).
    """
    return _resolve(payloads, frames=True)


def read_payloads(payloads: Sequence[Payload]) -> list[bytes | memoryview]:
    """The bytes of each payload (a ref's frame without header and footer), in order.

    Args:
        payloads: bytes, `SpillRef`s or `HeldRef`s, mixed.

    Returns:
        The payload bytes of each.

    Raises:
        RuntimeError: when a spill file is shorter than its refs say, or a held payload is not
            in this process (`held_payloads.read_held`).
    """
    return _resolve(payloads, frames=False)


def _resolve(payloads: Sequence[Payload], frames: bool) -> list[bytes | memoryview]:
    """Refs are read file by file in offset order, neighbouring frames in one read, so a shard
    whose records came from a few decode bundles costs a few sequential reads."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    resolved: list[bytes | memoryview] = []
    refs: dict[int, SpillRef] = {}
    for i, payload in enumerate(payloads):
        if isinstance(payload, SpillRef):
            refs[i] = payload
            resolved.append(b"")
            continue
        if isinstance(payload, HeldRef):
            payload = held_payloads.read_held(payload)
        resolved.append(layout.tfrecord_frame(payload) if frames else payload)
    # A payload is its frame less the header and the footer.
    head = 0 if frames else layout.FRAME_HEADER_BYTES
    tail = 0 if frames else layout.FRAME_FOOTER_BYTES
    order = sorted(refs, key=lambda i: (refs[i].path, refs[i].offset))
    for path, members in itertools.groupby(order, key=lambda i: refs[i].path):
        members = list(members)
        begins = np.array([refs[i].offset for i in members], np.int64)
        ends = begins + [refs[i].length + layout.FRAME_OVERHEAD_BYTES for i in members]
        run_starts = np.flatnonzero(
            np.concatenate([[True], begins[1:] > np.maximum.accumulate(ends)[:-1] + _MAX_GAP_BYTES])
        )
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for first, last in zip(run_starts, [*run_starts[1:], len(members)], strict=True):
                start, end = int(begins[first]), int(ends[first:last].max())
                f.seek(start)
                data = f.read(end - start)
                if len(data) != end - start:
                    raise RuntimeError(f"spill file {path} is shorter than its refs ({start}+)")
                # Views of the run read, not copies: the writers only write them.
                view = memoryview(data)
                for k in range(first, last):
                    resolved[members[k]] = view[begins[k] - start + head : ends[k] - start - tail]
    return resolved


def remove_spill_dir(output_dir: str, run_id: str) -> None:
    """Deletes the spill files of run `run_id` in `output_dir`, wherever they are, and its
    pointer (launcher side, after the pipeline has finished), and drops the payloads it held
    in this process (`held_payloads.release`).

    Only `spill_dir(output_dir, run_id)` is considered, so nothing of another run or of the
    user's is. It is not followed when it is a link (left, with a warning); a pointer file is
    followed only to a folder named `<TEMP_ROOT_PREFIX><run_id>`, the name this run gave it.

    Args:
        output_dir: the run's output folder.
        run_id: the run whose spill files go.
    """
    held_payloads.release(run_id)
    gfile = layout.gfile()
    local = spill_dir(output_dir, run_id)
    if owned_files.is_link(local):
        _log.warning("%s is a symbolic link, not this run's spill folder: left as it is", local)
        return
    if gfile.isdir(local):
        owned_files.remove_tree(local)
    elif gfile.exists(local):
        with gfile.GFile(local, "r") as pointer:
            root = pointer.read().strip()
        if posixpath.basename(root.rstrip("/")) != TEMP_ROOT_PREFIX + run_id:
            _log.warning(
                "%s names %r, not a spill folder of run %s: that folder is left as it is",
                local,
                root,
                run_id,
            )
        elif owned_files.is_link(root):
            _log.warning("%s is a symbolic link, not a spill folder: left as it is", root)
        elif gfile.exists(root):
            owned_files.remove_tree(root)
        gfile.remove(local)
