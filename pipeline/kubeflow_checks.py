"""The bounds of `KubeflowConfig`'s values, each stated once: `KubeflowConfig` checks its fields
with them where it is built (from flags, a config file or Python), and the Kubeflow runner
(`tfx_dynamic_inputs.kubeflow.compile_checks`, `runner.compile_pipeline`, which also takes an
image and retries of its own) with the same functions. Each bad value is one line naming it.
Nothing here imports the configs, TFX or TensorFlow.
"""

from __future__ import annotations

import re
from typing import Any

# KFP's `retryPolicy.maxRetryCount` is an int32.
MAX_TRAINER_RETRIES = 2**31 - 1
# A container image reference as the OCI distribution grammar spells it:
# [domain[:port]/]path[/path...][:tag][@digest], path components in lower case.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE_PATTERN = re.compile(
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    rf"(?::\w[\w.-]{{0,127}})?(?:@{_DIGEST})?",
    re.ASCII,
)
# The paths a spec is written to or names as the pods see them.
PATH_FIELDS = ("output_dir", "pipeline_root", "data_root", "schemas_dir")
# How much of a refused value a message shows (a generated one may be megabytes long).
_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """`value` as one line of a message: its repr (escapes keep newlines out), cut after
    `_SHOWN_CHARS` characters with the length of what was cut.

    Args:
      value: any value.

    Returns:
      The text.
    """
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


def check_trainer_retries(trainer_retries: object, where: str = "trainer_retries") -> int:
    """`trainer_retries` if it is a retry count KFP takes: an int from 0 to
    `MAX_TRAINER_RETRIES`.

    Args:
      trainer_retries: retries of a failed trainer pod.
      where: what the message calls it.

    Returns:
      `trainer_retries`.

    Raises:
      TypeError: not an int (a bool is not one here).
      ValueError: out of range; one line naming the value and the range.
    """
    if isinstance(trainer_retries, bool) or not isinstance(trainer_retries, int):
        raise TypeError(f"{where}: expected an int, got {shown(trainer_retries)}")
    if not 0 <= trainer_retries <= MAX_TRAINER_RETRIES:
        raise ValueError(
            f"{where} must be 0 to {MAX_TRAINER_RETRIES} (retries of a failed trainer pod), "
            f"got {trainer_retries}"
        )
    return trainer_retries


def check_image(image: object, where: str = "image") -> str:
    """`image` if it is a container image reference (`IMAGE_REFERENCE_PATTERN`).

    Args:
      image: e.g. "REGISTRY.example/tfx-dynamic-inputs:TAG".
      where: what the message calls it.

    Returns:
      `image`.

    Raises:
      TypeError: not a string.
      ValueError: not a reference; one line naming it.
    """
    if not isinstance(image, str):
        raise TypeError(f"{where}: expected a string, got {shown(image)}")
    if not IMAGE_REFERENCE_PATTERN.fullmatch(image):
        raise ValueError(
            f"{where} {shown(image)} is not a container image reference "
            "([registry[:port]/]name[:tag][@digest], the name in lower case)"
        )
    return image


def check_path(path: object, where: str) -> str:
    """`path` if it can name a folder: a non-empty string of one line.

    Args:
      path: a local path or URI.
      where: what the message calls it.

    Returns:
      `path`.

    Raises:
      TypeError: not a string.
      ValueError: empty, or holding a line break or NUL; one line naming it.
    """
    if not isinstance(path, str):
        raise TypeError(f"{where}: expected a path, got {shown(path)}")
    if not path or any(c in path for c in "\n\r\0"):
        raise ValueError(f"{where}: expected a path, got {shown(path)}")
    return path


def check_kubeflow_config(kubeflow_config: Any) -> None:
    """Checks the image, trainer retries and paths of a `KubeflowConfig` (its
    `__post_init__` calls this; its types are `config_checks.check_types`').

    Args:
      kubeflow_config: the config.

    Raises:
      TypeError: a value of another type, naming `KubeflowConfig.<field>`.
      ValueError: a bad value, naming `KubeflowConfig.<field>`.
    """
    check_image(kubeflow_config.image, "KubeflowConfig.image")
    check_trainer_retries(kubeflow_config.trainer_retries, "KubeflowConfig.trainer_retries")
    for field in PATH_FIELDS:
        check_path(getattr(kubeflow_config, field), f"KubeflowConfig.{field}")
