"""Deleting what a job wrote, and nothing else: never through a link, never a user's folder.

A job deletes only paths whose names carry its run id (`spill.spill_dir`) or the parts of a
previous run it can name by run id (`run_dir.prepare_output_dir`). These helpers add the other
half of the rule: a path that is a symbolic link is never followed, and a folder is removed
without following the links inside it (they are unlinked, their targets kept).

Object stores (`gs://`, `s3://`) have no links; there `tf.io.gfile` removes the objects.
"""

from __future__ import annotations

import os
import shutil

from tfx_dynamic_inputs import layout


def is_local(path: str) -> bool:
    """Whether `path` is on the local file system (it has no `scheme://`).

    Args:
        path: a local path or a URL such as gs://bucket/x.

    Returns:
        True for a local path.
    """
    return "://" not in path


def is_link(path: str) -> bool:
    """Whether `path` is a symbolic link (dangling or not); always False on object stores.

    Args:
        path: a local path or an object-store URL.

    Returns:
        True for a local symbolic link.
    """
    return is_local(path) and os.path.islink(path)


def remove_tree(path: str) -> None:
    """Removes the folder `path` and what is in it; a link inside is unlinked, not followed.

    Raises ValueError when `path` itself is a link: callers check first and say why it is kept.

    Args:
        path: the folder, local or on an object store.

    Raises:
        ValueError: when `path` is a symbolic link.
    """
    if is_link(path):
        raise ValueError(f"{path} is a symbolic link: not removing it or what it points to")
    if is_local(path):
        shutil.rmtree(path)
    else:
        layout.gfile().rmtree(path)


def remove_path(path: str) -> None:
    """Removes the file or folder `path` (see `remove_tree`); a missing one is no error.

    Args:
        path: the file or folder, local or on an object store.

    Raises:
        ValueError: when `path` is a symbolic link.

    Example:
        remove_path(os.path.join(run_dir, ".spill-abc"))
    """
    gfile = layout.gfile()
    if is_link(path):
        raise ValueError(f"{path} is a symbolic link: not removing it or what it points to")
    if gfile.isdir(path):
        remove_tree(path)
    elif gfile.exists(path):
        gfile.remove(path)
