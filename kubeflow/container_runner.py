"""Runs a compiled task's container command in its image with a local container engine.

`tfx_dynamic_inputs.kubeflow.local_run` plays the Kubeflow launcher; given a `ContainerRunner` it
starts each task as the pod would, in the image its spec names:

    podman run --rm --runtime runc --network none -v ROOT:ROOT:U IMAGE python -m ... {ExecutorInput}

Artifact URIs in the `ExecutorInput` are host paths under the local pipeline root, so the root is
mounted at the same path inside (`pipeline_root_mount`), owned by the image's user while the task
runs (podman's `U`: the image runs as an unprivileged user, the host folder is root's). The
container's `python` is the image's (its PATH), not this interpreter.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

# Engines whose `run` takes the options below; docker's `-v` has no `U` (chown to the user).
ENGINES = ("podman",)


@dataclasses.dataclass(frozen=True)
class Mount:
    """A host folder seen inside the container.

    Args:
      source: the host path (absolute).
      target: the path inside the container (absolute).
      read_only: mounted read-only; else read-write and owned by the container's user while it
        runs (podman's `U` option), so an unprivileged image user can write a root-owned folder.
    """

    source: str
    target: str
    read_only: bool = True

    def __post_init__(self) -> None:
        for name in ("source", "target"):
            path = getattr(self, name)
            if not os.path.isabs(path):
                raise ValueError(f"Mount.{name} must be an absolute path, got {path!r}")
            if ":" in path or "," in path:
                # The engine's `-v SOURCE:TARGET:OPTIONS` cannot quote them.
                raise ValueError(f"Mount.{name} must hold no ':' or ',', got {path!r}")

    def option(self) -> str:
        """The engine's `-v` value.

        Returns:
          `SOURCE:TARGET:ro` or `SOURCE:TARGET:U`.
        """
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'U'}"


@dataclasses.dataclass(frozen=True)
class ContainerRunner:
    """How `local_run` starts a task's container.

    Args:
      engine: the container engine's executable (`ENGINES`).
      runtime: its OCI runtime (`--runtime`); None for the engine's default. These machines need
        `runc`: crun refuses their hybrid cgroups.
      network: the container's network (`--network`); `none` proves a task needs none.
      mounts: host folders besides the pipeline root (input data outside the image).
      image: the image every task runs in; None for each task's compiled image.
    """

    engine: str = "podman"
    runtime: str | None = "runc"
    network: str = "none"
    mounts: tuple[Mount, ...] = ()
    image: str | None = None

    def __post_init__(self) -> None:
        if os.path.basename(self.engine) not in ENGINES:
            raise ValueError(
                f"ContainerRunner.engine must be one of {ENGINES}, got {self.engine!r}"
            )
        if not self.network:
            raise ValueError("ContainerRunner.network must name a network (e.g. 'none')")
        if not all(isinstance(mount, Mount) for mount in self.mounts):
            raise TypeError(f"ContainerRunner.mounts must be Mounts, got {self.mounts!r}")

    def argv(self, image: str, command: list[str]) -> list[str]:
        """The engine command that runs `command` in `image` (or `self.image`).

        Args:
          image: the task's compiled image.
          command: the task's container command, placeholders replaced.

        Returns:
          The argv for `subprocess.run`.
        """
        argv = [self.engine, "run", "--rm", "--network", self.network]
        if self.runtime is not None:
            argv += ["--runtime", self.runtime]
        for mount in self.mounts:
            argv += ["-v", mount.option()]
        return [*argv, self.image or image, *command]


def pipeline_root_mount(pipeline_root: str) -> Mount:
    """The pipeline root mounted read-write at its own path (the `ExecutorInput` names host paths).

    Args:
      pipeline_root: the local run's root.

    Returns:
      The mount.
    """
    root = os.path.abspath(pipeline_root)
    return Mount(source=root, target=root, read_only=False)


def image_exists(image: str, engine: str = "podman") -> bool:
    """Whether `engine` is installed and holds `image` locally.

    Args:
      image: the image's name.
      engine: the container engine's executable.

    Returns:
      False when the engine is missing or has no such image.
    """
    if shutil.which(engine) is None:
        return False
    completed = subprocess.run(
        [engine, "image", "inspect", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return completed.returncode == 0
