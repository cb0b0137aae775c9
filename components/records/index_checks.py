"""Checks of a record set at open and while it is read: its offset index against `shards.json`
and the shard sizes (`check_offsets`), its shards against what the run recorded of them
(`check_shard_contents`), and the run a reader opened, checked again whenever it opens the
shards (`RunPin`). Shared by the TensorFlow record store and the reader without TensorFlow
(`RunRecords`), which calls them inside `layout.filesystem.without_tensorflow()`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records.frames import frames_fit

# Rows of the offset index checked at a time: the checks' temporaries stay a few MB at any N.
_CHECK_CHUNK_ROWS = 1 << 18


def check_offsets(
    offsets: np.ndarray, num_records: int, shard_bytes: np.ndarray, where: str
) -> np.ndarray:
    """Checks an offset index (int64 [N, 3]: shard, frame offset, payload length) at open.

    Vectorized over chunks of rows, so the cost is a few ms per million records.

    Args:
      offsets: int64 [N, 3], as read from `offsets.npy`.
      num_records: N as `shards.json` gives it.
      shard_bytes: int64 [S], the size of each shard.
      where: the offsets file, named in errors.

    Returns:
      int64 [K]: the records whose frame (payload + 16 bytes of framing) does not fit in their
      shard: a truncated shard, or a damaged length or offset. The readers report those as
      damaged records without reading them.

    Raises:
      layout.IndexFileError: naming `where` and the first bad record, when the row count
        disagrees with `num_records`, or a row names no shard or holds a negative offset or
        length.
    """
    if len(offsets) != num_records:
        raise layout.IndexFileError(
            f"{where}: {len(offsets)} rows but {layout.SHARDS_FILE} says num_records={num_records}"
        )
    num_shards = len(shard_bytes)
    past_end = []
    for start in range(0, num_records, _CHECK_CHUNK_ROWS):
        rows = np.asarray(offsets[start : start + _CHECK_CHUNK_ROWS])
        # The min of the whole block and the max of one column are the fast checks (a row mask
        # costs several times more); the mask is built only to name a bad row.
        if rows.min() < 0 or rows[:, 0].max() >= num_shards:
            bad = (rows[:, 0] >= num_shards) | (rows < 0).any(axis=1)
            first = int(np.flatnonzero(bad)[0])
            shard, offset, length = (int(v) for v in rows[first])
            raise layout.IndexFileError(
                f"{where}: record {start + first} has shard {shard} (the run has {num_shards} "
                f"shards), offset {offset}, length {length}"
            )
        fits = frames_fit(rows, shard_bytes)
        if not fits.all():
            past_end.append(np.flatnonzero(~fits) + start)
    return np.concatenate(past_end).astype(np.int64) if past_end else np.zeros(0, np.int64)


def check_shard_contents(
    manifest: layout.ShardManifest,
    shard_bytes: np.ndarray,
    where: str,
    read_crcs: layout.ReadCrcs,
) -> None:
    """Refuses a shard that is not the one the run wrote, by what `shards.json` recorded of it.

    A shard cut short is damage, not another run's: the readers report its records that no
    longer fit as damaged records. Damaged offsets do not matter here: the recorded positions
    are checked, not `offsets.npy`.

    Args:
      manifest: the run's `shards.json`, with the shard sizes and sampled CRCs
        (`layout.sampled_crcs`) it recorded (an index without them is not checked).
      shard_bytes: int64 [S], the shard sizes now.
      where: the `shards.json`, named in errors.
      read_crcs: reads the 4 bytes at each of a list of positions of a shard, joined
        (`layout.ReadCrcs`: through `tf.io.gfile`, or `os.pread` on the shards a reader holds).

    Raises:
      layout.RunCommitError: a shard larger than recorded, or whose sampled frames all hold
        other CRCs than recorded, naming the shard, `where` and the run.
    """
    if manifest.shard_bytes is None and manifest.shard_crcs is None:
        return  # an index written before they were recorded
    for shard, path in enumerate(manifest.shard_paths):
        size = int(shard_bytes[shard])
        problem = None
        if manifest.shard_bytes is not None and size > manifest.shard_bytes[shard]:
            problem = f"it holds {size} bytes, the run wrote {manifest.shard_bytes[shard]}"
        elif manifest.shard_crcs is not None:
            sampled = [
                (p, c) for p, c in manifest.shard_crcs[shard] if p + layout.CRC_BYTES <= size
            ]
            if sampled:
                found = np.frombuffer(read_crcs(path, [p for p, _ in sampled]), "<u4")
                if np.all(found != np.array([c for _, c in sampled], np.int64)):
                    problem = (
                        f"none of the {len(sampled)} frames sampled holds the CRC the run recorded"
                    )
        if problem:
            raise layout.RunCommitError(
                f"{where}: shard {path} is not the one {_run_name(manifest.run_id)} wrote "
                f"({problem}): a shard of another run was copied in, or the folder was "
                "overwritten; materialize the run again"
            )


@dataclasses.dataclass(frozen=True)
class RunPin:
    """The run a disk reader was opened on: whenever it opens the shards (the Python reader on
    its first read, the native op every epoch) it checks that `summary.json` of `output_dir`
    still commits `run_id` (when the store is a run) and that every shard still has the size it
    had at open, so it never serves another run's files under the index it opened.

    Args:
      output_dir: the run's folder (holds `summary.json`).
      run_id: the run id `summary.json` must commit, or None when the store is not a run.
      shard_bytes: the size of each shard at open.
    """

    output_dir: str
    run_id: str | None
    shard_bytes: tuple[int, ...]

    @property
    def summary_path(self) -> str:
        """The path of the run's `summary.json`."""
        return os.path.join(self.output_dir, layout.SUMMARY_FILE)

    def check(self, shard_paths: list[str], sizes: list[int]) -> None:
        """Checks that the run is still committed and the shards still have their sizes.

        Args:
          shard_paths: the shards, in index order.
          sizes: their sizes now, in bytes.

        Raises:
          layout.RunCommitError: the run or a shard changed since open.
        """
        if self.run_id is not None:
            layout.check_committed(
                self.output_dir, self.run_id, f"the record store opened on run {self.run_id}"
            )
        for path, size, opened in zip(shard_paths, sizes, self.shard_bytes, strict=True):
            if size != opened:
                raise layout.RunCommitError(
                    f"shard {path} holds {size} bytes, {opened} when the store was opened on "
                    f"{_run_name(self.run_id)}: it was replaced since; open the run again"
                )


def _run_name(run_id: str | None) -> str:
    return f"run {run_id}" if run_id else "a store that is not a run"
