"""What `python -m tfx_dynamic_inputs.kubeflow.runner` checks before it imports TFX or touches a
file: the image reference, the trainer retries and the pods' paths (with `KubeflowConfig`'s own
bounds, `pipeline.kubeflow_checks`), both pipeline names and the spec files they name
(`spec_files`), and the speaker pipeline's mix. Each bad value is one line naming it; nothing
here imports TFX.
"""

from __future__ import annotations

from tfx_dynamic_inputs.kubeflow import spec_files
from tfx_dynamic_inputs.pipeline import cli, config, kubeflow_checks, mixed_corpora


def check_compile(
    kubeflow_config: config.KubeflowConfig,
    cyclegan: config.CycleGanConfig,
    speaker: config.SpeakerConfig,
) -> None:
    """Checks what `compile_all` would compile and write, touching no file and importing no
    TFX: the image, trainer retries and paths of `kubeflow_config`, both pipeline names (legal
    KFP names, two different ones: each names its files) and their spec paths, the CycleGAN
    images' side and channels (given: a spec does not infer them), and the mix.

    Args:
      kubeflow_config: image, output folder, pipeline root, retries.
      cyclegan: the CycleGAN pipeline's config.
      speaker: the speaker pipeline's config.

    Raises:
      cli.ConfigError: the first bad value, in one line naming it.
    """
    try:
        kubeflow_checks.check_kubeflow_config(kubeflow_config)
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
    if cyclegan.image_size is None or cyclegan.channels is None:
        raise cli.ConfigError(
            "cyclegan: give image_size and channels: a compiled spec's images are read in the "
            "pods, so they are not inferred from them"
        )
    further = mixed_corpora.mixed_corpora(speaker)
    if len(further) > 1:
        # TFX's KFP v2 compiler takes one channel an input; the trainer's mixed runs are one.
        raise cli.ConfigError(
            f"mix: {len(further)} further corpora do not compile for Kubeflow (KFP v2 takes one "
            "channel an input): mix one, or run them with run_local"
        )
