"""Where a local run of a compiled spec finds what the spec names by its paths in the task image.

`make kubeflow` compiles the specs for the task image (kubeflow/Dockerfile) and a cluster: their
schema and data paths are the image's (`KubeflowConfig.schemas_dir`, `KubeflowConfig.data_root`:
`/app/schemas/...`, `/app/sample_data/...`) and their pipeline root the cluster's (the
PipelineJob's `runtimeConfig.gcsOutputDirectory`, `gs://YOUR_BUCKET/...` by default), which the
Pusher's destination is under. `tfx_dynamic_inputs.kubeflow.local_run` runs that same file on
this host, so what is tested is what is uploaded; each task gets the spec's parameters with
every path the image holds replaced by where this installation holds the same files, as the
Dockerfile puts them in the image:

- `/app/schemas` is this installation's schemas folder (`config.SCHEMAS_DIR`), which the
  Dockerfile copies;
- `/app/sample_data` is its bundled sample data folder (the speaker corpus), copied too;
- `/app/sample_data/digits` is written when the image is built (`write_image_digits`); the run
  writes the same digits with the same call under its own root (`<root>/image-data/digits`),
  never into the installation;
- any other path in the image (`/app/...`) is there only: it is refused before a task runs;
- the compiled pipeline root is the run's root, so the Pusher pushes under it, never to the
  cluster's bucket.

A run in the image itself (`local_run --container-engine`) has the image's folders: only the
pipeline root is replaced. Paths outside these (data compiled at its own paths) are passed as
compiled. The task parameters are mapped, also paths inside a JSON text parameter (the Pusher's
`push_destination`); the container command and its Beam arguments are not. Before any task
runs, every input the mapping names must exist: a missing one is one line naming the spec's
path and the host's. Nothing here imports TFX.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from tfx_dynamic_inputs.kubeflow.runner import DIGITS_DIR
from tfx_dynamic_inputs.pipeline import config

# The image's folders, as `KubeflowConfig`'s defaults name them in the specs.
IMAGE_SCHEMAS_DIR = config.KubeflowConfig.schemas_dir
IMAGE_DATA_DIR = config.KubeflowConfig.data_root
IMAGE_DIGITS_DIR = posixpath.join(IMAGE_DATA_DIR, DIGITS_DIR)
# This installation's copies of what the Dockerfile copies into the image.
HOST_DATA_DIR = os.path.dirname(config.SPEAKER_CORPUS_DIR)
# Where a run writes the data the image generates at build time, below the run's root.
GENERATED_DIR = "image-data"

INPUT = "input"
GENERATED = "generated"
IMAGE_ONLY = "image only"
PIPELINE_ROOT = "pipeline root"


def write_image_digits(digits_dir: str) -> None:
    """Writes the digit domains the task image holds at `IMAGE_DIGITS_DIR`: the Dockerfile
    calls this when the image is built, a local run (`mapped_job`) to stand in for it.

    Args:
      digits_dir: the folder to write (kept when it holds these digits already).
    """
    from tfx_dynamic_inputs.pipeline.sample_data import write_digit_domains

    write_digit_domains(digits_dir, image_size=config.DIGITS_IMAGE_SIZE)


@dataclasses.dataclass(frozen=True)
class Substitution:
    """One folder of a compiled spec and where a local run finds it.

    Args:
      spec_path: the folder (or URI) as the spec names it.
      host_path: where this run finds it ("" for `IMAGE_ONLY`).
      kind: `INPUT` (must exist before the run), `GENERATED` (written before the run by
        `write_image_digits`), `IMAGE_ONLY` (refused) or `PIPELINE_ROOT` (the run's root).
    """

    spec_path: str
    host_path: str
    kind: str

    def covers(self, path: str) -> bool:
        """Whether `path` is `spec_path` or below it."""
        return path == self.spec_path or path.startswith(self.spec_path + "/")


@dataclasses.dataclass(frozen=True)
class Use:
    """A parameter of a compiled task whose path a local run replaced.

    Args:
      task: the task's name ("runtimeConfig" for a pipeline parameter).
      parameter: the parameter's name.
      spec_path: the path as compiled.
      host_path: the path the task gets.
      substitution: the rule that replaced it.
    """

    task: str
    parameter: str
    spec_path: str
    host_path: str
    substitution: Substitution


def substitutions(
    job: Mapping[str, Any], run_root: str, *, in_container: bool
) -> tuple[Substitution, ...]:
    """The folders a local run of `job` replaces, longest first (a path takes the first that
    covers it).

    Args:
      job: the compiled PipelineJob.
      run_root: the local run's pipeline root.
      in_container: the tasks run in their image (which holds its own folders).

    Returns:
      The substitutions.
    """
    root = os.path.abspath(run_root)
    found = []
    compiled_root = job.get("runtimeConfig", {}).get("gcsOutputDirectory", "").rstrip("/")
    if compiled_root and compiled_root != root:
        found.append(Substitution(compiled_root, root, PIPELINE_ROOT))
    if not in_container:
        found += [
            Substitution(
                IMAGE_DIGITS_DIR, os.path.join(root, GENERATED_DIR, DIGITS_DIR), GENERATED
            ),
            Substitution(IMAGE_DATA_DIR, HOST_DATA_DIR, INPUT),
            Substitution(IMAGE_SCHEMAS_DIR, config.SCHEMAS_DIR, INPUT),
            Substitution(config.IMAGE_REPO_ROOT, "", IMAGE_ONLY),
        ]
    return tuple(sorted(found, key=lambda s: len(s.spec_path), reverse=True))


def mapped_job(
    job: Mapping[str, Any], run_root: str, *, in_container: bool
) -> tuple[dict[str, Any], list[Use]]:
    """`job` with its task parameters' paths replaced for a local run (`substitutions`), once the
    generated data is written and every input checked.

    Args:
      job: the compiled PipelineJob.
      run_root: the local run's pipeline root.
      in_container: the tasks run in their image.

    Returns:
      A copy of `job` with the paths replaced, and each replacement made.

    Raises:
      FileNotFoundError: an input the spec names is not on this host, or a path is in the
        image only; one line naming it.

    Example:

        job, uses = mapped_job(local_run.load_pipeline_job(path), "/tmp/root", in_container=False)
    """
    rules = substitutions(job, run_root, in_container=in_container)
    mapped = copy.deepcopy(dict(job))
    uses: list[Use] = []
    for name, task in mapped["pipelineSpec"]["root"]["dag"]["tasks"].items():
        for key, source in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in source:
                source["runtimeValue"] = _mapped_value(
                    source["runtimeValue"], rules, name, key, uses
                )
    runtime = mapped.get("runtimeConfig", {})
    for field in ("parameters", "parameterValues"):
        for key, value in runtime.get(field, {}).items():
            runtime[field][key] = _mapped_value(value, rules, "runtimeConfig", key, uses)
    _prepare(uses)
    return mapped, uses


def _prepare(uses: list[Use]) -> None:
    """Writes the generated data `uses` reads, then checks every input exists."""
    for use in uses:
        if use.substitution.kind == IMAGE_ONLY:
            raise FileNotFoundError(
                f"task {use.task!r} parameter {use.parameter!r}: {use.spec_path!r} is in the "
                f"task image only (this host stands in for its {IMAGE_SCHEMAS_DIR} and "
                f"{IMAGE_DATA_DIR}): run the spec in the image with --container-engine podman"
            )
    for generated in {u.substitution for u in uses if u.substitution.kind == GENERATED}:
        write_image_digits(generated.host_path)
    for use in uses:
        if use.substitution.kind in (INPUT, GENERATED) and not os.path.exists(use.host_path):
            raise FileNotFoundError(
                f"task {use.task!r} parameter {use.parameter!r}: {use.host_path!r} does not "
                f"exist (the spec's {use.spec_path!r}, which the task image holds)"
            )


def _mapped_value(
    value: Any, rules: tuple[Substitution, ...], task: str, parameter: str, uses: list[Use]
) -> Any:
    """`value` (a parameter's JSON value) with each path in its strings replaced."""
    if isinstance(value, dict):
        return {k: _mapped_value(v, rules, task, parameter, uses) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped_value(v, rules, task, parameter, uses) for v in value]
    if not isinstance(value, str):
        return value
    # A local path as the image resolves it (`/app/schemas/../x` is not in the schemas folder);
    # POSIX keeps a leading `//`, the image's file system does not.
    path = "/" + posixpath.normpath(value).lstrip("/") if value.startswith("/") else value
    rule = next((rule for rule in rules if rule.covers(path)), None)
    if rule is not None:
        host_path = rule.host_path + path[len(rule.spec_path) :] if rule.host_path else ""
        uses.append(Use(task, parameter, value, host_path, rule))
        return host_path or value
    if value.lstrip()[:1] in ("{", "["):  # a JSON text parameter (the Pusher's destination)
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        found = len(uses)
        replaced = _mapped_value(parsed, rules, task, parameter, uses)
        return json.dumps(replaced, indent=2) if len(uses) > found else value
    return value
