"""What `python -m tfx_dynamic_inputs.kubeflow.runner` checks before it imports TFX or touches a
file: the image reference, the trainer retries, the pods' paths, both pipeline names and the spec
files they name (`spec_files`), and the speaker pipeline's mix. Each bad value is one line naming
it; nothing here imports TFX.
"""

from __future__ import annotations

import re

from tfx_dynamic_inputs.kubeflow import spec_files
from tfx_dynamic_inputs.pipeline import cli, config, mixed_corpora

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


def check_trainer_retries(trainer_retries: object) -> int:
    """`trainer_retries` if it is a retry count KFP takes: an int from 0 to
    `MAX_TRAINER_RETRIES`.

    Args:
      trainer_retries: retries of a failed trainer pod.

    Returns:
      `trainer_retries`.

    Raises:
      TypeError: not an int (a bool is not one here).
      ValueError: out of range; one line naming the value and the range.
    """
    if isinstance(trainer_retries, bool) or not isinstance(trainer_retries, int):
        raise TypeError(f"trainer_retries: expected an int, got {trainer_retries!r}")
    if not 0 <= trainer_retries <= MAX_TRAINER_RETRIES:
        raise ValueError(
            f"trainer_retries must be 0 to {MAX_TRAINER_RETRIES} (retries of a failed trainer "
            f"pod), got {trainer_retries}"
        )
    return trainer_retries


def check_image(image: object) -> str:
    """`image` if it is a container image reference (`IMAGE_REFERENCE_PATTERN`).

    Args:
      image: e.g. "REGISTRY.example/tfx-dynamic-inputs:TAG".

    Returns:
      `image`.

    Raises:
      TypeError: not a string.
      ValueError: not a reference; one line naming it.
    """
    if not isinstance(image, str):
        raise TypeError(f"image: expected a string, got {image!r}")
    if not IMAGE_REFERENCE_PATTERN.fullmatch(image):
        raise ValueError(
            f"image {spec_files.shown_name(image)} is not a container image reference "
            "([registry[:port]/]name[:tag][@digest], the name in lower case)"
        )
    return image


def check_compile(
    kubeflow_config: config.KubeflowConfig,
    cyclegan: config.CycleGanConfig,
    speaker: config.SpeakerConfig,
) -> None:
    """Checks what `compile_all` would compile and write, touching no file and importing no
    TFX: the image, trainer retries and paths of `kubeflow_config`, both pipeline names (legal
    KFP names, two different ones: each names its files) and their spec paths, and the mix.

    Args:
      kubeflow_config: image, output folder, pipeline root, retries.
      cyclegan: the CycleGAN pipeline's config.
      speaker: the speaker pipeline's config.

    Raises:
      cli.ConfigError: the first bad value, in one line naming it.
    """
    try:
        check_image(kubeflow_config.image)
        check_trainer_retries(kubeflow_config.trainer_retries)
        for field in ("pipeline_root", "data_root", "schemas_dir"):
            value = getattr(kubeflow_config, field)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{field}: expected a path, got {value!r}")
        names = {}
        for section, pipeline_config in (("cyclegan", cyclegan), ("speaker", speaker)):
            name = spec_files.check_pipeline_name(
                pipeline_config.pipeline_name, f"{section} pipeline_name"
            )
            if name in names:
                raise ValueError(
                    f"{section} pipeline_name {name!r} is also the {names[name]} pipeline's: "
                    "each pipeline's specs are named after it; give them different names"
                )
            names[name] = section
            spec_files.spec_paths(kubeflow_config.output_dir, name)
    except (TypeError, ValueError) as error:
        raise cli.ConfigError(str(error)) from None
    further = mixed_corpora.mixed_corpora(speaker)
    if len(further) > 1:
        # TFX's KFP v2 compiler takes one channel an input; the trainer's mixed runs are one.
        raise cli.ConfigError(
            f"mix: {len(further)} further corpora do not compile for Kubeflow (KFP v2 takes one "
            "channel an input): mix one, or run them with run_local"
        )
