"""What a job checks before it imports Beam or TensorFlow: a bad folder is one line at once.

Pure `os` on local paths (object-store paths are left to the job, which reaches them through
`tf.io.gfile`), so the CLI answers in well under a second where importing the job costs 4-5 s.
The job checks the same again (`run_dir`), for callers that do not come through the CLI.
"""

from __future__ import annotations

import os

from tfx_dynamic_inputs.materialize import owned_files
from tfx_dynamic_inputs.materialize.errors import MaterializeError


def not_empty(output_dir: str) -> MaterializeError:
    """The error (returned, not raised) for a non-empty `--output_dir` without `--overwrite`.

    Args:
        output_dir: the output folder.

    Returns:
        The `MaterializeError`.
    """
    return MaterializeError(
        f"--output_dir {output_dir} is not empty (pass --overwrite to replace a run)"
    )


def check_output_path(output_dir: str) -> None:
    """Refuses a dangling `--output_dir` link (and says where it points).

    Args:
        output_dir: the output folder (an object-store path is never a link).

    Raises:
        MaterializeError: when it is a symbolic link to nothing.
    """
    if owned_files.is_link(output_dir) and not os.path.exists(output_dir):
        raise MaterializeError(
            f"--output_dir {output_dir} is a symbolic link to {os.readlink(output_dir)!r}, "
            "which does not exist"
        )


def check_output_dir(output_dir: str, overwrite: bool, input_dirs: dict[str, str]) -> None:
    """The checks of `run_dir.claim_output_dir` / `prepare_output_dir` that need no claim, made
    early on a local `output_dir`: a dangling link, a file, a folder that is not empty without
    `overwrite`, and one that is, holds or lies inside an input folder (`check_apart`).

    Args:
        output_dir: the output folder.
        overwrite: whether `--overwrite` was given.
        input_dirs: flag -> input folder, e.g. {"--x_dir": "/data/x"}.

    Raises:
        MaterializeError: for any of the above.

    Example:
        check_output_dir("/tmp/run", False, {"--input_dir": "/data/images"})
    """
    check_apart(output_dir, input_dirs)
    if not owned_files.is_local(output_dir):
        return
    check_output_path(output_dir)
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise MaterializeError(f"--output_dir is a file: {output_dir}")
    entries = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    # A folder with a claim is a job's (live, or stale): the claim logic judges it, naming it.
    if entries and not overwrite and ".claim" not in entries:
        raise not_empty(output_dir)


def check_apart(output_dir: str, input_dirs: dict[str, str]) -> None:
    """Refuses an `output_dir` that is, holds or lies inside one of `input_dirs` (flag -> folder):
    the job would read its own files as inputs, and `--overwrite` could delete inputs.

    Args:
        output_dir: the output folder.
        input_dirs: flag -> input folder; empty or object-store folders are skipped.

    Raises:
        MaterializeError: naming the flag and how the folders overlap.
    """
    if not owned_files.is_local(output_dir):
        return
    output = os.path.realpath(output_dir)
    for flag, input_dir in input_dirs.items():
        if not input_dir or not owned_files.is_local(input_dir):
            continue
        source = os.path.realpath(input_dir)
        common = os.path.commonpath([output, source])
        if common in (output, source):
            relation = "is" if output == source else "lies inside" if common == source else "holds"
            raise MaterializeError(
                f"--output_dir {output_dir} {relation} {flag} {input_dir}: the job would read "
                f"its own output as input; choose an --output_dir outside the inputs"
            )


def check_holds_inputs(
    input_dirs: dict[str, str], input_files: dict[str, tuple[str, tuple[str, ...]]]
) -> None:
    """Refuses a local input folder that holds no file of its job's kind, before the job starts
    (it would reject nothing and fail with "nothing left to materialize" after its imports).

    Stops at the first file with one of the extensions (any case), so a full folder costs one
    directory listing; object-store folders are left to the job.

    Args:
        input_dirs: flag -> input folder (`config.input_dirs()`).
        input_files: flag -> (kind, extensions) of what the folder must hold
            (`config.input_files()`); flags not in it are not checked.

    Raises:
        MaterializeError: naming the flag, the folder and the extensions looked for.

    Example:
        check_holds_inputs({"--root": "/data/audio"}, {"--root": ("audio", (".wav", ".flac"))})
    """
    for flag, (kind, extensions) in input_files.items():
        folder = input_dirs[flag]
        if not owned_files.is_local(folder) or _holds_a_file(folder, extensions):
            continue
        raise MaterializeError(f"no {kind} files ({' '.join(extensions)}) under {flag} {folder}")


def _holds_a_file(folder: str, extensions: tuple[str, ...]) -> bool:
    # Not `paths.list_files`, the job's lister: it imports Beam. This walk follows folder links,
    # which the job does not, so a root of links only passes here and the job records each
    # link as a reject, saying more than "no files" would.
    for _, _, names in os.walk(folder, followlinks=True):
        if any(os.path.splitext(name)[1].lower() in extensions for name in names):
            return True
    return False
