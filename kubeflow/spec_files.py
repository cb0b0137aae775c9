"""Where the runner writes a compiled pipeline: `<output dir>/<pipeline name>.json` and `.yaml`,
checked before any file is touched.

A pipeline name becomes a file name, so it is checked first against the rule KFP v2 (and TFX's
KFP v2 compiler) holds pipeline names to: 1 to 128 of `a-z`, `0-9` and `-`, not starting with
`-`. No such name holds a path separator or `..`, and every spec path is also resolved and must
lie in the resolved output folder; a spec path that is a symbolic link or not a regular file is
refused, never written through. Files are written beside their final name and renamed over it,
so a failed write leaves the previous spec, and a link planted there meanwhile is replaced, not
followed. Nothing here imports TFX: the runner checks these before its import.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets

from tfx_dynamic_inputs.pipeline.kubeflow_checks import shown

# The name rule of KFP v2 pipelines, as TFX's KFP v2 compiler checks it
# (`tfx.orchestration.kubeflow.v2.pipeline_builder._LEGAL_NAME_PATTERN`; a test keeps them equal).
PIPELINE_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
PIPELINE_NAME_RULE = "1-128 characters of a-z, 0-9 and '-', not starting with '-'"
JOB_SUFFIX = ".json"
PACKAGE_SUFFIX = ".yaml"


def check_pipeline_name(name: object, where: str = "pipeline_name") -> str:
    """`name` if it is a legal KFP v2 pipeline name (`PIPELINE_NAME_PATTERN`).

    Args:
      name: the pipeline name.
      where: what the message calls it (e.g. "speaker pipeline_name").

    Returns:
      `name`.

    Raises:
      TypeError: `name` is not a string.
      ValueError: `name` breaks the rule; one line naming it and the rule.

    Example:

        check_pipeline_name("speaker-class-balanced")
    """
    if not isinstance(name, str):
        raise TypeError(f"{where}: expected a string, got {name!r}")
    if not PIPELINE_NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{where} {shown(name)} is not a legal Kubeflow pipeline name: {PIPELINE_NAME_RULE}"
        )
    return name


@dataclasses.dataclass(frozen=True)
class SpecPaths:
    """The two files one compiled pipeline is written to.

    Args:
      job: the Vertex `PipelineJob` JSON, `<output dir>/<pipeline name>.json`.
      package: the bare `PipelineSpec` YAML the KFP client uploads, beside it.
    """

    job: str
    package: str


def spec_paths(output_dir: str, pipeline_name: str) -> SpecPaths:
    """The spec files of pipeline `pipeline_name` in `output_dir`, checked; touches no file.

    Args:
      output_dir: the folder the specs go to (created when written, if missing).
      pipeline_name: the pipeline's name, which names its files.

    Returns:
      The two paths.

    Raises:
      TypeError: `pipeline_name` is not a string.
      ValueError: an illegal pipeline name, an output folder that is not a folder, or a spec
        path that leaves the resolved output folder, is a symbolic link or is not a regular
        file; one line naming it.

    Example:

        spec_paths("kubeflow", "speaker-class-balanced").job  # kubeflow/speaker-class-balanced.json
    """
    check_pipeline_name(pipeline_name)
    if not isinstance(output_dir, str) or not output_dir or "\0" in output_dir:
        raise ValueError(f"--output-dir: expected a folder, got {output_dir!r}")
    # The folder, or the nearest part of it that exists: a file there fails the write late.
    existing = os.path.abspath(output_dir)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"--output-dir {output_dir}: {existing} is not a folder")
    folder = os.path.realpath(output_dir)
    paths = SpecPaths(
        job=os.path.join(output_dir, pipeline_name + JOB_SUFFIX),
        package=os.path.join(output_dir, pipeline_name + PACKAGE_SUFFIX),
    )
    for path in (paths.job, paths.package):
        if os.path.islink(path):
            raise ValueError(
                f"{path} is a symbolic link (to {os.readlink(path)}): the runner writes only "
                "regular files in --output-dir; remove the link"
            )
        if os.path.lexists(path) and not os.path.isfile(path):
            raise ValueError(
                f"{path} is not a regular file: the runner would replace it; remove it"
            )
        if os.path.dirname(os.path.realpath(path)) != folder:
            raise ValueError(f"{path} resolves outside --output-dir {output_dir} ({folder})")
    return paths


def write_spec_file(path: str, text: str) -> None:
    """Writes `text` to `path` (a path `spec_paths` returned): to a new file in the same folder,
    renamed over `path`, so `path` is replaced whole and a link there is not followed.

    Args:
      path: the spec file.
      text: its content.

    Raises:
      OSError: the folder cannot be created or written; `path` is then left as it was.
    """
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    # A new name (O_EXCL), not followed if a link (O_NOFOLLOW), its mode from the umask as any
    # file the user writes (tempfile's are 0600).
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
