"""A record set's index: `offsets.npy`, `shards.json` (with what identifies each shard: its size
and sampled frame CRCs) and `ids.txt`; written by `write_record_set` / `save_record_set_index`,
read by `load_shards`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

import numpy as np

from tfx_dynamic_inputs.layout import filesystem
from tfx_dynamic_inputs.layout.commit import check_committed, run_id_field
from tfx_dynamic_inputs.layout.files import load_json, save_json, save_lines, save_npy
from tfx_dynamic_inputs.layout.filesystem import gfile
from tfx_dynamic_inputs.layout.framing import write_shard
from tfx_dynamic_inputs.layout.names import (
    FRAME_HEADER_BYTES,
    IDS_FILE,
    OFFSETS_FILE,
    RUN_ID_KEY,
    SHARDS_FILE,
    IndexFileError,
    examples_dir,
    index_dir,
    shard_name,
)
from tfx_dynamic_inputs.layout.paths import resolve_shard


def save_record_set_index(
    output_dir: str,
    record_set: str,
    shard_paths: list[str],
    offsets: np.ndarray,
    ids: list[str],
    run_id: str | None = None,
) -> None:
    """Writes `offsets.npy`, `shards.json` and `ids.txt` of a record set, in that order.

    `shards.json` also records each shard's size and its `sampled_crcs`, read back from the
    shards, which must therefore be written already.

    Args:
        output_dir: The run directory.
        record_set: The record set's name.
        shard_paths: The paths of its shards, in shard order; stored relative to `output_dir`.
        offsets: int64 [N, 3] (shard, frame offset, payload length) in record order.
        ids: The N source ids, in record order.
        run_id: The run writing it (stored in `shards.json`); None for a store that is not a
            run (a `record_store_from` cache).
    """
    directory = index_dir(output_dir, record_set)
    save_npy(os.path.join(directory, OFFSETS_FILE), np.asarray(offsets, np.int64).reshape(-1, 3))
    offsets = np.asarray(offsets, np.int64).reshape(-1, 3)
    shard_crcs = sampled_crcs(shard_paths, offsets, _read_crcs)
    manifest = {
        "record_set": record_set,
        "num_records": int(len(ids)),
        "shards": [os.path.relpath(p, output_dir) for p in shard_paths],
        "shard_bytes": _file_sizes(shard_paths),
        "shard_crcs": shard_crcs,
    }
    if run_id is not None:
        manifest[RUN_ID_KEY] = run_id
    save_json(os.path.join(directory, SHARDS_FILE), manifest)
    save_lines(os.path.join(directory, IDS_FILE), ids)


# What `shards.json` records of each shard's content: the stored payload CRCs of up to this many
# of its frames, evenly spaced (`sampled_records`).
SAMPLED_FRAMES = 8


CRC_BYTES = 4


def sampled_records(offsets: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """For each shard, the record numbers whose payload CRCs `shards.json` records.

    Up to `SAMPLED_FRAMES` of them, evenly spaced from the shard's first record to its last.

    Args:
        offsets: int64 [N, 3] (shard, frame offset, payload length); a shard's records need not
            be contiguous.
        num_shards: How many shards there are (a shard without records gets none).

    Returns:
        One int64 [k] array of record numbers per shard, k <= `SAMPLED_FRAMES`, ascending.
    """
    shard_of = np.asarray(offsets[:, 0], np.int64)
    if np.all(shard_of[1:] >= shard_of[:-1]):
        order = np.arange(len(shard_of))  # records in shard order, as every writer here writes
    else:
        order = np.argsort(shard_of, kind="stable")
    bounds = np.searchsorted(shard_of[order], np.arange(num_shards + 1), side="left")
    chosen = []
    for shard in range(num_shards):
        first, end = int(bounds[shard]), int(bounds[shard + 1])
        count = min(SAMPLED_FRAMES, end - first)
        positions = np.unique(np.linspace(first, end - 1, count).round().astype(np.int64))
        chosen.append(order[positions])
    return chosen


# `read_crcs(path, positions)`: the 4 bytes at each of `positions` (ints) of file `path`, joined.
ReadCrcs = Callable[[str, list[int]], bytes]


def sampled_crcs(
    shard_paths: list[str], offsets: np.ndarray, read_crcs: ReadCrcs
) -> list[list[list[int]]]:
    """The stored payload CRCs of each shard's `sampled_records`, and where they lie.

    What `shards.json` keeps (with the shard sizes), so a reader tells a shard of another run
    (copied in, or left by an overwrite) from the one this run wrote, at one small read per
    sampled frame, whatever later happens to `offsets.npy`.

    Args:
        shard_paths: The shard files, in shard order.
        offsets: int64 [N, 3] (shard, frame offset, payload length) of every record.
        read_crcs: Reads the 4 bytes at each of a list of positions of a file, joined
            (`ReadCrcs`; `save_record_set_index` reads through Beam's `FileSystems`).

    Returns:
        Per shard, a list of `[position, crc]`: the byte position in the shard and the stored
        masked CRC (uint32), as ints.
    """
    sampled = []
    for shard, records in enumerate(sampled_records(offsets, len(shard_paths))):
        rows = np.asarray(offsets[records], np.int64).reshape(-1, 3)
        positions = (rows[:, 1] + FRAME_HEADER_BYTES + rows[:, 2]).tolist()
        crcs = np.frombuffer(read_crcs(shard_paths[shard], positions), "<u4").tolist()
        sampled.append([[position, crc] for position, crc in zip(positions, crcs, strict=True)])
    return sampled


def _file_sizes(paths: list[str]) -> list[int]:
    return [filesystem.size(path) for path in paths]


def _read_crcs(path: str, positions: list[int]) -> bytes:
    """`ReadCrcs` through the writers' file system (they run in Beam workers)."""
    return filesystem.read_at(path, positions, CRC_BYTES)


def write_record_set(
    output_dir: str,
    record_set: str,
    shards: Iterable[list[bytes]],
    num_shards: int,
    ids: list[str],
    run_id: str | None = None,
) -> list[str]:
    """Writes a whole record set: `num_shards` shards in order, then its index.

    Args:
        output_dir: The run directory.
        record_set: The record set's name.
        shards: The serialized records of each shard in turn (a generator keeps only one shard
            in memory).
        num_shards: How many shards `shards` yields.
        ids: The source ids of all records, in record order.
        run_id: As in `save_record_set_index`; a run written outside the Beam job is then
            committed with `commit_run`.

    Returns:
        The shard paths, in shard order.

    Raises:
        ValueError: `shards` yields another number of shards than `num_shards`.

    Example:
        write_record_set(run, "x", [records[:5], records[5:]], 2, ids, run_id)
        commit_run(run, run_id)
    """
    directory = examples_dir(output_dir, record_set)
    paths, rows = [], []
    for shard, records in enumerate(shards):
        path = os.path.join(directory, shard_name(shard, num_shards))
        offsets = write_shard(path, records)
        paths.append(path)
        rows.append(np.column_stack([np.full(len(offsets), shard, np.int64), offsets]))
    if len(paths) != num_shards:
        raise ValueError(f"{record_set}: got {len(paths)} shards, expected {num_shards}")
    offsets = np.concatenate(rows) if rows else np.zeros([0, 3], np.int64)
    save_record_set_index(output_dir, record_set, paths, offsets, ids, run_id)
    return paths


@dataclasses.dataclass(frozen=True)
class ShardManifest:
    """What `shards.json` says of a record set, checked (`load_shards`).

    Attributes:
        shard_paths: The shard files, resolved and confined (`resolve_shard`).
        num_records: How many records the record set holds.
        run_id: The run that wrote it, committed by `summary.json` (None for a store that is
            not a run).
        shard_bytes: The size of each shard as written; None in an index written before sizes
            were recorded.
        shard_crcs: The `sampled_crcs` of each shard; None in an index written before they
            were recorded.
    """

    shard_paths: list[str]
    num_records: int
    run_id: str | None
    shard_bytes: list[int] | None
    shard_crcs: list[list[list[int]]] | None


def load_shards(output_dir: str, record_set: str) -> ShardManifest:
    """The checked `shards.json` of `record_set` in the run at `output_dir`.

    Args:
        output_dir: The run directory (or a store that is not a run).
        record_set: The record set's name.

    Returns:
        The manifest, its shard paths resolved.

    Raises:
        FileNotFoundError: the record set has no `shards.json`.
        IndexFileError: `shards.json` is not an object with `"shards"` (a list of relative
            paths confined to the run), `"num_records"` (an integer >= 0) and, where present,
            `"shard_bytes"` (one integer >= 0 per shard) and `"shard_crcs"` (one list of
            `[position, crc]` pairs per shard); the message names it.
        RunCommitError: its `"run_id"` is not the run `summary.json` commits as ok (see
            `check_committed`).

    Example:
        manifest = load_shards(run, "x")
        first_shard = manifest.shard_paths[0]
    """
    path = os.path.join(index_dir(output_dir, record_set), SHARDS_FILE)
    if not gfile().exists(path):
        raise FileNotFoundError(f"record set {record_set!r} not found in {output_dir}: no {path}")
    manifest = load_json(path)
    if not isinstance(manifest, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    shards, num_records = manifest.get("shards"), manifest.get("num_records")
    if not isinstance(shards, list):
        raise IndexFileError(f'{path}: "shards" must be a list of paths, got {shards!r:.200}')
    if not is_count(num_records):
        raise IndexFileError(
            f'{path}: "num_records" must be an integer >= 0, got {num_records!r:.200}'
        )
    per_shard = {}
    for key, is_entry in (("shard_bytes", is_count), ("shard_crcs", _is_crc_list)):
        values = manifest.get(key)
        if values is not None and not (
            isinstance(values, list) and len(values) == len(shards) and all(map(is_entry, values))
        ):
            raise IndexFileError(
                f'{path}: "{key}" must hold one entry per shard ({len(shards)}) of integers >= 0, '
                f"got {values!r:.200}"
            )
        per_shard[key] = values
    resolved = [resolve_shard(output_dir, record_set, shard, path) for shard in shards]
    run_id = check_committed(output_dir, run_id_field(manifest, path), path)
    return ShardManifest(resolved, num_records, run_id, **per_shard)


def is_count(value: object) -> bool:
    """Whether a JSON value is a count: an int >= 0, and not a bool.

    Args:
        value: A value decoded from JSON.

    Returns:
        True for an int >= 0; False for anything else, `true` and `false` included.
    """
    # bool is an int subclass: `true` is not a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_crc_list(value: object) -> bool:
    """Whether `value` is a list of `[position, crc]` pairs of counts (`sampled_crcs`)."""
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(map(is_count, pair)) for pair in value
    )
