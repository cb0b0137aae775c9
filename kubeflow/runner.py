"""`make kubeflow`: compiles both pipelines to KFP v2 specs with KubeflowV2DagRunner.

    python -m tfx_dynamic_inputs.kubeflow.runner [--config FILE] [--image IMAGE]
        [--pipeline-root gs://...] [--output-dir DIR] [--data-root /app/sample_data]
        [--schemas-dir /app/schemas] [--beam-arg=--runner=DataflowRunner]

Writes `<output-dir>/<pipeline name>.json` (the output dir is `tfx-dynamic-inputs-out/kubeflow`
below the current folder unless given; `make kubeflow` gives `kubeflow`): a `PipelineJob` whose
`pipelineSpec` runs every task as
`python -m tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor` in `--image`
(Vertex AI's `PipelineJob(template_path=...)` takes it). Beside it `<pipeline name>.yaml`, the
bare `PipelineSpec`: the file to upload to Kubeflow Pipelines (its UI, or
`kfp.Client().upload_pipeline`, which refuses a `.json`), as the runner prints for each pipeline.
Paths in the spec are read inside the pods: by default the bundled sample data at the image's
`/app/sample_data` (the Dockerfile generates the digit domains there) and a `gs://` pipeline root
to replace with yours.
Input fingerprints are not computed at compile time (the data need not be reachable from here);
the cluster's own caching keys on parameters. `python -m tfx_dynamic_inputs.kubeflow.local_run
<pipeline name>.json ROOT` runs the same file on this host (`host_paths`: the image's paths and
the pipeline root are replaced by this host's).

Both pipeline names must be legal KFP names within TFX's limit (1-63 of a-z, 0-9 and '-'): they
name the files, which are written only in the output folder, never through a link
(`spec_files`). Every value is checked before TFX is imported or a file touched
(`compile_checks`): a bad one is one line and exit status 2.

`--config FILE` is the file `python -m tfx_dynamic_inputs.pipeline.run_local` reads
(`tfx_dynamic_inputs.pipeline.cli`): its `kubeflow` section sets `KubeflowConfig` fields (the flags
above override them), its `cyclegan` and `speaker` sections replace fields of the compiled pipelines
(data paths as the pods see them); its `run` section is for local runs and is not used here.

The standard-TFX composition (`tfx_dynamic_inputs.pipeline.standard_pipeline`) runs on the user's
Examples, Transform `preprocessing_fn` and trainer module, none of which the image ships, so it is
not compiled here: build it with `run_config(kubeflow_config)` and compile it with
`compile_pipeline` for an image that holds those modules.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from tfx_dynamic_inputs.cli_flags import FlagError, FlagParser, parse_int, quiet
from tfx_dynamic_inputs.kubeflow import compile_checks, spec_files
from tfx_dynamic_inputs.pipeline import cli, config, kubeflow_checks
from tfx_dynamic_inputs.pipeline.sample_data import PAIRS_FILE, X_DIR, Y_DIR

if TYPE_CHECKING:
    from tfx.orchestration.pipeline import Pipeline

DIGITS_DIR = "digits"
SPEAKERS_DIR = "speakers"
# What `main` says of each file it wrote.
UPLOAD_NOTE = "upload it to Kubeflow Pipelines (the UI, or kfp.Client().upload_pipeline)"
JOB_NOTE = "the Vertex AI PipelineJob, and what kubeflow.local_run runs"


def compile_pipeline(
    pipeline: Pipeline,
    output_dir: str,
    image: str,
    trainer_retries: int = config.KubeflowConfig.trainer_retries,
    resources: Mapping[str, config.TaskResources] | None = None,
) -> str:
    """Compiles `pipeline` to `<output_dir>/<pipeline name>.json` (and the KFP package beside
    it, `kfp_package_path`), replacing the files a previous compile wrote.

    Every trainer task (`PairsTrainer`, `ClassBalancedTrainer`) gets a KFP `retryPolicy` of
    `trainer_retries` retries (0: none): a preempted or killed trainer pod is started again with
    the same executor input, and resumes from its checkpoints
    (`tfx_dynamic_inputs.trainer_component.checkpoints`). TFX's compiler sets no retry policy, so it
    is added to the compiled spec.

    The pipeline name, the spec paths (`spec_files.spec_paths`), the image and `trainer_retries`
    are checked before any file is touched; the files are then written only in `output_dir`.

    Args:
      pipeline: the TFX pipeline.
      output_dir: the folder the specs go to.
      image: the container image every task runs in.
      trainer_retries: retries of a failed trainer pod.
      resources: node id -> the requests and limits of its pod (`KubeflowConfig.resources`),
        written into the task's container spec; None or empty for the cluster's defaults.

    Returns:
      The path of the PipelineJob JSON.

    Raises:
      TypeError: `trainer_retries` is not an int, or the pipeline name not a string.
      ValueError: an illegal pipeline name or image, a spec path that is not ours to write,
        `trainer_retries` out of range, or `resources` naming a node that is not a container
        task of the pipeline.

    Example:

        compile_pipeline(cyclegan_pipeline.create_pipeline(cyclegan, run), "kubeflow", image)
    """
    kubeflow_checks.check_trainer_retries(trainer_retries)
    kubeflow_checks.check_image(image)
    paths = spec_files.spec_paths(output_dir, pipeline.pipeline_info.pipeline_name)
    # Imported here: the runner's checks answer a bad config before TFX's import (seconds).
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=image)
    )
    # Not written by TFX (which refuses an existing file): `spec_files` writes only checked paths.
    job = runner.run(pipeline, write_out=False)
    for task in trainer_tasks(job) if trainer_retries else ():
        task["retryPolicy"] = {"maxRetryCount": trainer_retries}
    set_resources(job, resources or {})
    spec_files.write_spec_file(paths.job, json.dumps(job, sort_keys=True))
    write_kfp_package(job, paths.package)
    return paths.job


def kfp_package_path(job_path: str) -> str:
    """Where `compile_pipeline` writes the KFP package beside the PipelineJob JSON at `job_path`.

    Args:
      job_path: the PipelineJob JSON's path.

    Returns:
      The same path ending in `.yaml`.

    Example:

        kfp_package_path("kubeflow/speaker.json")  # "kubeflow/speaker.yaml"
    """
    return os.path.splitext(job_path)[0] + ".yaml"


def write_kfp_package(job: dict[str, Any], path: str) -> None:
    """Writes the bare `PipelineSpec` of the Vertex `PipelineJob` `job` as YAML at `path`: what the
    KFP client loads (`kfp.Client().create_run_from_pipeline_package(path)`), which refuses a
    `.json` name and, given the whole job, fails on its `displayName` field.

    Args:
      job: the compiled PipelineJob, as JSON.
      path: the YAML file to write.
    """
    spec_files.write_spec_file(path, yaml.safe_dump(job["pipelineSpec"], sort_keys=True))


def set_resources(job: dict[str, Any], resources: Mapping[str, config.TaskResources]) -> None:
    """Writes each node's requests and limits into its task's container spec in `job` (KFP's
    `PipelineContainerSpec.resources`: cores, GB, an accelerator type and count).

    Args:
      job: the compiled PipelineJob, as JSON (changed in place).
      resources: node id -> its `TaskResources`.

    Raises:
      ValueError: a node id that is not a container task of `job` (resolvers run none).
    """
    spec = job["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    labels = {
        name: spec["components"][task["componentRef"]["name"]]["executorLabel"]
        for name, task in spec["root"]["dag"]["tasks"].items()
    }
    containers = {name: label for name, label in labels.items() if "container" in executors[label]}
    for node, wanted in resources.items():
        if node not in containers:
            close = difflib.get_close_matches(node, list(containers), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"resources: {node!r} is not a container task of {spec['pipelineInfo']['name']}"
                f"{hint}; tasks: {', '.join(sorted(containers))}"
            )
        amounts = {
            "cpuRequest": wanted.cpu_request,
            "cpuLimit": wanted.cpu_limit,
            "memoryRequest": wanted.memory_request,
            "memoryLimit": wanted.memory_limit,
        }
        container_resources: dict[str, Any] = {k: v for k, v in amounts.items() if v is not None}
        if wanted.accelerator_type is not None:
            container_resources["accelerator"] = {
                "type": wanted.accelerator_type,
                "count": str(wanted.accelerator_count),
            }
        executors[containers[node]]["container"]["resources"] = container_resources


def trainer_tasks(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of compiled `job` that run a trainer's executor (`PairsTrainer`,
    `ClassBalancedTrainer`).

    Args:
      job: the compiled PipelineJob, as JSON.

    Returns:
      The task dicts of `job` itself (changing one changes `job`).
    """
    from tfx_dynamic_inputs.trainer_component import (  # imports TensorFlow: see compile_pipeline
        ClassBalancedTrainer,
        PairsTrainer,
    )

    # The trainers' executors as a compiled task names them (`--executor_class_path`).
    executors_run = [
        trainer.EXECUTOR_SPEC.class_path for trainer in (PairsTrainer, ClassBalancedTrainer)
    ]
    spec = job["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    found = []
    for task in spec["root"]["dag"]["tasks"].values():
        label = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        args = executors[label].get("container", {}).get("args", [])
        if any(executor in args for executor in executors_run):
            found.append(task)
    return found


def pipeline_configs(
    data_root: str,
    schemas: str,
    *,
    cyclegan: Mapping[str, Any] | None = None,
    speaker: Mapping[str, Any] | None = None,
) -> tuple[config.CycleGanConfig, config.SpeakerConfig]:
    """The two pipelines' configs over sample data laid out under `data_root` as in the image.

    Args:
      data_root: the folder holding `digits/` and `speakers/`, as the pods see it.
      schemas: the folder holding the record schemas, as the pods see it.
      cyclegan: fields of the CycleGAN config to replace, the data paths and schema file
        included.
      speaker: the same for the speaker config.

    Returns:
      The CycleGAN and speaker configs.

    Raises:
      TypeError: an override names no field of its config.
    """
    digits = os.path.join(data_root, DIGITS_DIR)
    speakers = os.path.join(data_root, SPEAKERS_DIR)
    # The digits' shape, unless other images are named: a spec cannot infer theirs (the pods
    # read them), so `compile_checks` then asks for image_size and channels.
    digits_shape = (
        {}
        if {"x_dir", "y_dir"} & set(cyclegan or {})
        else {"image_size": config.DIGITS_IMAGE_SIZE, "channels": config.DIGITS_CHANNELS}
    )
    cyclegan_config = config.CycleGanConfig(
        **{
            "x_dir": os.path.join(digits, X_DIR),
            "y_dir": os.path.join(digits, Y_DIR),
            "pairs": os.path.join(digits, PAIRS_FILE),
            "schema_file": os.path.join(schemas, config.IMAGE_SCHEMA),
            **digits_shape,
            **(cyclegan or {}),
        }
    )
    speaker_config = config.SpeakerConfig(
        **{
            "manifest": os.path.join(speakers, os.path.basename(config.SPEAKER_MANIFEST)),
            "audio_root": speakers,
            "schema_file": os.path.join(schemas, config.AUDIO_SCHEMA),
            **(speaker or {}),
        }
    )
    return cyclegan_config, speaker_config


def run_config(kubeflow_config: config.KubeflowConfig) -> config.RunConfig:
    """The `RunConfig` a pipeline is built with for `kubeflow_config`'s specs: its pipeline
    root and Beam arguments, the cluster's ML Metadata, no input fingerprints.

    Args:
      kubeflow_config: the compile settings.

    Returns:
      The run settings.
    """
    return config.RunConfig(
        pipeline_root=kubeflow_config.pipeline_root,
        metadata_path=None,
        beam_pipeline_args=kubeflow_config.beam_pipeline_args,
        fingerprint_inputs=False,
    )


def compile_all(
    kubeflow_config: config.KubeflowConfig,
    cyclegan: config.CycleGanConfig,
    speaker: config.SpeakerConfig,
) -> list[str]:
    """Compiles both pipelines into `kubeflow_config.output_dir`, once
    `compile_checks.check_compile` passed.

    Args:
      kubeflow_config: image, output folder, pipeline root, retries.
      cyclegan: the CycleGAN pipeline's config.
      speaker: the speaker pipeline's config.

    Returns:
      The PipelineJob paths, CycleGAN's first.

    Raises:
      cli.ConfigError: a bad value (`compile_checks.check_compile`; no file is touched then), or
        `kubeflow_config.resources` naming a node of neither pipeline.
      OSError: the output folder cannot be written.
    """
    compile_checks.check_compile(kubeflow_config, cyclegan, speaker)
    from tfx_dynamic_inputs.pipeline import (  # they import TFX: see compile_pipeline
        cyclegan_pipeline,
        speaker_pipeline,
    )

    run = run_config(kubeflow_config)
    pipelines = [
        cyclegan_pipeline.create_pipeline(cyclegan, run),
        speaker_pipeline.create_pipeline(speaker, run),
    ]
    # One `resources` for both: each pipeline takes its own nodes'; a name in neither is an error.
    node_ids = [{component.id for component in p.components} for p in pipelines]
    unknown = sorted(set(kubeflow_config.resources) - set().union(*node_ids))
    if unknown:
        raise cli.ConfigError(
            f"resources: {unknown[0]!r} is a node of neither pipeline; nodes: "
            f"{', '.join(sorted(set().union(*node_ids)))}"
        )
    return [
        compile_pipeline(
            pipeline,
            kubeflow_config.output_dir,
            kubeflow_config.image,
            trainer_retries=kubeflow_config.trainer_retries,
            resources={k: v for k, v in kubeflow_config.resources.items() if k in ids},
        )
        for pipeline, ids in zip(pipelines, node_ids, strict=True)
    ]


def parse_args(
    argv: list[str] | None = None,
) -> tuple[config.KubeflowConfig, config.CycleGanConfig, config.SpeakerConfig]:
    """What `argv` asks to compile: the config file's sections, then the flags over them; each
    config is built (its own checks run) before anything is compiled or written.

    Args:
      argv: the command-line arguments (None: `sys.argv[1:]`).

    Returns:
      The Kubeflow config and the two pipelines' configs.

    Raises:
      SystemExit: a bad flag, config file or config value (one line on stderr, exit status 2).
    """
    parser = FlagParser(
        prog="python -m tfx_dynamic_inputs.kubeflow.runner", description=__doc__.split("\n")[0]
    )
    defaults = config.KubeflowConfig()
    parser.add_argument("--config", metavar="FILE", help="JSON or YAML config file (see above)")
    # Defaults are None: an absent flag leaves the config file's value, else KubeflowConfig's.
    parser.add_argument("--image", dest="image", help=f"default: {defaults.image}")
    parser.add_argument(
        "--pipeline-root", dest="pipeline_root", help=f"default: {defaults.pipeline_root}"
    )
    parser.add_argument("--output-dir", dest="output_dir", help=f"default: {defaults.output_dir}")
    parser.add_argument(
        "--data-root",
        dest="data_root",
        help=f"folder holding {DIGITS_DIR}/ and {SPEAKERS_DIR}/ as seen from the pods; "
        f"default: {defaults.data_root}",
    )
    parser.add_argument(
        "--schemas-dir",
        dest="schemas_dir",
        help=f"folder holding the record schemas as seen from the pods; "
        f"default: {defaults.schemas_dir}",
    )
    parser.add_argument(
        "--trainer-retries",
        dest="trainer_retries",
        type=parse_int,
        help=f"retries of a failed trainer pod (it resumes from its checkpoints); "
        f"default: {defaults.trainer_retries}",
    )
    parser.add_argument(
        "--beam-arg",
        dest="beam_pipeline_args",
        action="append",
        help="a Beam pipeline argument for every Beam component (repeat)",
    )
    parser.add_verbose_flag()
    try:
        args = vars(parser.parse_args(argv))
    except FlagError as error:
        cli.fail(cli.ConfigError(str(error)))
    quiet(args.pop("verbose"))  # before TFX's import
    path = args.pop("config")
    try:
        sections = cli.load_file(path) if path else {}
    except cli.ConfigError as error:
        cli.fail(error)
    flags: dict[str, Any] = {k: v for k, v in args.items() if v is not None}
    if "beam_pipeline_args" in flags:
        flags["beam_pipeline_args"] = tuple(flags["beam_pipeline_args"])
    try:
        kubeflow_config = config.KubeflowConfig(
            **{**sections.get(cli.KUBEFLOW_SECTION, {}), **flags}
        )
        cyclegan, speaker = pipeline_configs(
            kubeflow_config.data_root,
            kubeflow_config.schemas_dir,
            cyclegan=sections.get("cyclegan", {}),
            speaker=sections.get("speaker", {}),
        )
    except (TypeError, ValueError) as error:  # the configs' own checks
        cli.fail(cli.ConfigError(" ".join(str(error).split("\n"))))
    return kubeflow_config, cyclegan, speaker


def main(argv: list[str] | None = None) -> None:
    """`python -m tfx_dynamic_inputs.kubeflow.runner`: compiles both pipelines and prints each file
    written and what it is for: the `.yaml` to upload to Kubeflow Pipelines, the `.json` for
    Vertex AI and `local_run`.

    Args:
      argv: the command-line arguments (None: `sys.argv[1:]`), as `parse_args` reads them.

    Raises:
      SystemExit: a bad flag, config file or value (`parse_args`,
        `compile_checks.check_compile`: before TFX is imported or a file touched), `resources`
        naming a node of neither pipeline, or an output folder that cannot be written: one
        line, status 2.

    Example:
      main(["--image", "REGISTRY/tfx-dynamic-inputs:TAG", "--output-dir", "out/kubeflow"])
    """
    configs = parse_args(argv)
    try:
        paths = compile_all(*configs)
    except cli.ConfigError as error:
        cli.fail(error)
    except OSError as error:
        cli.fail(cli.ConfigError(f"--output-dir {configs[0].output_dir}: {error}"))
    for path in paths:
        print(f"wrote {kfp_package_path(path)}: {UPLOAD_NOTE}")
        print(f"wrote {path}: {JOB_NOTE}")


if __name__ == "__main__":
    main()
