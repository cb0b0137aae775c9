"""Hand payloads from one Beam stage to a later one through files, not through the runner.

A decode worker appends each payload as a TFRecord frame to a spill file of its bundle under
`<output_dir>/.spill/` and passes on only a `SpillRef` (path, frame offset, length). The stage
that needs the bytes reads them back by offset. Runners move every element between stages
through their own channels (the DirectRunner's gRPC data plane, Dataflow's shuffle), so a
payload emitted by a decoder and grouped by shard would otherwise be encoded and copied about
four times; a ref is about 100 bytes whatever the payload. Spill files hold whole frames, so a
shard writer copies a record's frame, CRCs included, without computing it again.

Spill file names are random: a retried bundle writes a new file and its refs, while the failed
attempt's file is never referenced. A ref may only be read by a later stage (one behind a
GroupByKey or a side input): object stores make a file readable only once its writer closes it,
at the end of the bundle. `common.run_job` removes the folder when the job ends (once an
interrupted job is cancelled); a launcher killed outright leaves it to the next run on the
folder, which takes over its stale claim (`run_dir.claim_output_dir`).
"""

from __future__ import annotations

import itertools
import posixpath
import uuid
from collections.abc import Sequence
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from components import layout

SPILL_DIR = ".spill"
_MAX_GAP_BYTES = 1 << 16  # read through a gap this small rather than seek past it


class SpillRef(NamedTuple):
    """Where one payload was spilled: its frame starts at `offset` in `path` and the payload
    is `length` bytes (the frame is `length + layout.FRAME_OVERHEAD_BYTES`)."""

    path: str
    offset: int
    length: int


def spill_dir(output_dir: str) -> str:
    return layout.resolve(output_dir, SPILL_DIR)


class SpillWriter:
    """Appends payloads to one spill file, opened on the first write."""

    def __init__(self, output_dir: str):
        self._directory = spill_dir(output_dir)
        self._file = None
        self._path = ""
        self._size = 0

    def write(self, payloads: Sequence[bytes]) -> list[SpillRef]:
        if self._file is None:
            self._path = posixpath.join(self._directory, f"{uuid.uuid4().hex}.tfrecord")
            self._file = layout.create(self._path)
        frames = [layout.tfrecord_frame(payload) for payload in payloads]
        refs = []
        for payload, frame in zip(payloads, frames, strict=True):
            refs.append(SpillRef(self._path, self._size, len(payload)))
            self._size += len(frame)
        self._file.write(b"".join(frames))
        return refs

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class SpillingDoFn(beam.DoFn):
    """A DoFn that spills through `self.spill`: one spill file per bundle."""

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir
        self.spill: SpillWriter | None = None

    def start_bundle(self):
        self.spill = SpillWriter(self._output_dir)

    def finish_bundle(self):
        self.spill.close()


def read_frames(refs: Sequence[SpillRef]) -> list[bytes]:
    """The whole TFRecord frame of each ref, in the order of `refs`.

    Refs are read file by file in offset order, neighbouring frames in one read, so a shard
    whose records came from a few decode bundles costs a few sequential reads.
    """
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    frames: list[bytes] = [b""] * len(refs)
    order = sorted(range(len(refs)), key=lambda i: (refs[i].path, refs[i].offset))
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
                for k in range(first, last):
                    frames[members[k]] = data[begins[k] - start : ends[k] - start]
    return frames


def read_payloads(refs: Sequence[SpillRef]) -> list[bytes]:
    """The payload of each ref (its frame without header and footer), in the order of `refs`."""
    header, footer = layout.FRAME_HEADER_BYTES, layout.FRAME_FOOTER_BYTES
    return [frame[header : len(frame) - footer] for frame in read_frames(refs)]


def remove_spill_dir(output_dir: str) -> None:
    """Deletes the spill files of a run (launcher side, after the pipeline has finished)."""
    gfile = layout.gfile()
    directory = spill_dir(output_dir)
    if gfile.exists(directory):
        gfile.rmtree(directory)
