"""Paths inside a run: `shards.json`'s relative shard paths resolved and confined to the run (or
to the `Examples` artifact of the same component execution).
"""

from __future__ import annotations

import os
import posixpath

from tfx_dynamic_inputs.layout.names import SPLIT_PREFIX, IndexFileError


def resolve(output_dir: str, relative_path: str) -> str:
    """The path of `relative_path` (as stored in `shards.json`) under the run `output_dir`.

    `..` segments are folded here because object stores (gs://, s3://) do not resolve them, and
    `os.path.normpath` would collapse the `//` of a URI scheme. Nothing is confined here: see
    `resolve_shard`.

    Args:
        output_dir: The run directory, a local path or a URI (`scheme://...`).
        relative_path: A path relative to `output_dir`; it may hold `..` segments.

    Returns:
        The normalized path, with `output_dir`'s scheme kept.

    Example:
        resolve("gs://b/run", "examples/../examples/Split-x/a")  # "gs://b/run/examples/Split-x/a"
    """
    if "://" in output_dir:
        scheme, rest = output_dir.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, relative_path))}"
    return os.path.normpath(os.path.join(output_dir, relative_path))


def resolve_shard(output_dir: str, record_set: str, shard_path: object, where: str) -> str:
    """The path of a shard listed in `where` (the `shards.json` of `record_set`), confined.

    A shard path must be relative and resolve inside the run directory, or into the
    `Split-<record_set>` folder of another artifact of the same TFX component execution: the
    materialize component moves the shards into its `Examples` artifact
    (`../../examples/<execution>/Split-x/...` from the `offset_index` artifact, the run
    directory). Anything else (an absolute path, `../../etc/passwd`, `../elsewhere/Split-x/...`)
    is refused, so a damaged or forged index cannot make a reader open files outside the data it
    describes.

    Args:
        output_dir: The run directory whose `shards.json` lists the shard.
        record_set: The record set the shard belongs to (names the allowed `Split-*` folder).
        shard_path: The entry as read from `shards.json` (any JSON value: it is checked).
        where: What the entry comes from, for the error message (the `shards.json` path).

    Returns:
        The resolved path of the shard (as `resolve` writes it).

    Raises:
        IndexFileError: `shard_path` is not a non-empty printable string, is absolute, or
            resolves outside the run and outside the sibling `Split-<record_set>` folder.
    """
    if not isinstance(shard_path, str) or not shard_path:
        raise IndexFileError(
            f"{where}: a shard path must be a non-empty string, got {shard_path!r:.200}"
        )
    # Control characters, NUL and lone surrogates would fail (unnamed) in the file layer.
    if not shard_path.isprintable():
        raise IndexFileError(f"{where}: shard path {shard_path!r} holds unprintable characters")
    if "://" in shard_path or posixpath.isabs(shard_path) or os.path.isabs(shard_path):
        raise IndexFileError(
            f"{where}: shard path {shard_path!r} is absolute; shard paths are relative to the run "
            f"directory {output_dir}"
        )
    resolved = resolve(output_dir, shard_path)
    if not (
        _is_within(resolved, output_dir) or _in_sibling_split(resolved, output_dir, record_set)
    ):
        raise IndexFileError(
            f"{where}: shard path {shard_path!r} resolves to {resolved}, outside the run "
            f"directory {output_dir} and not in the {SPLIT_PREFIX}{record_set} folder of an "
            "artifact of the same component execution"
        )
    return resolved


def _in_sibling_split(path: str, output_dir: str, record_set: str) -> bool:
    """Whether `path` is a file of the `Split-<record_set>` folder of the `Examples` artifact
    beside the `offset_index` artifact `output_dir`, of the same component execution: TFX lays
    out `<component>/<output key>/<execution id>` (executor tests drop the execution id), and
    the materialize and index components move their shards into that artifact."""
    from tfx_dynamic_inputs import component_keys

    run = resolve(output_dir, ".").replace(os.sep, "/").rstrip("/")
    if "://" not in run:
        run, path = os.path.abspath(run), os.path.abspath(path)
    run_parts, parts = run.split("/"), path.split("/")
    if len(parts) != len(run_parts) + 2 or parts[-2] != f"{SPLIT_PREFIX}{record_set}":
        return False
    examples_keys = (component_keys.EXAMPLES_KEY, component_keys.INDEXED_EXAMPLES_KEY)
    for depth in (len(run_parts) - 1, len(run_parts) - 2):  # no execution id, or one
        if (
            depth > 0
            and run_parts[depth] == component_keys.OFFSET_INDEX_KEY
            and parts[depth] in examples_keys
            and parts[:depth] == run_parts[:depth]
            and parts[depth + 1 : len(run_parts)] == run_parts[depth + 1 :]
        ):
            return True
    return False


def _is_within(path: str, directory: str) -> bool:
    """Whether `path` lies strictly below `directory` (both as `resolve` writes them)."""
    if "://" in directory:
        scheme, rest = directory.split("://", 1)
        prefix = f"{scheme}://{posixpath.normpath(rest).rstrip('/')}/"
        return path.startswith(prefix)
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return path != directory and os.path.commonpath([path, directory]) == directory
