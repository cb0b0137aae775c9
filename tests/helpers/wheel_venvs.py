"""The wheel as its users get it: built from the working tree, installed with one extra into a
clean venv of its own.

The venv gets exactly the distributions `pip install "tfx-dynamic-inputs[EXTRA]"` resolves,
pinned to the versions of the full install (`make setup`'s `.venv`, which holds
`requirements.lock`): the extra's requirements are followed through the installed metadata,
each version checked against the requirement that asked for it. uv installs them from its cache
(hard links: about 5 s for the 250 distributions of `[tfx]`), so no registry is asked; then it
installs the wheel with the extra, which it resolves against what is installed, as a user's
installer would.
"""

from __future__ import annotations

import dataclasses
import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers.paths import REPO_ROOT

# What the wheel is built from (pyproject.toml, setup.py); copied, so the build writes nothing
# into the checkout (a concurrent `make core-venv` builds there).
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "components",
    "pipeline",
    "kubeflow",
)
# Left in the checkout: this machine's build outputs.
BUILD_LEFTOVERS = ("__pycache__", "*.pyc", "*.so", "*.so.sha256", ".build.lock", "*.egg-info")
UV = os.path.join(os.path.dirname(sys.executable), "uv")


def uv_available() -> bool:
    """Whether the full install's uv (`make setup`) is there."""
    return os.path.exists(UV)


def build_wheel(work_dir: str) -> str:
    """Builds the sdist from a copy of the working tree's sources and the wheel from that sdist
    (`uv build`), so the wheel holds only what a published sdist carries.

    Args:
      work_dir: an empty folder for the copy and the built files.

    Returns:
      The wheel's path.
    """
    source = os.path.join(work_dir, "source")
    for name in SOURCES:
        origin = os.path.join(REPO_ROOT, name)
        if os.path.isdir(origin):
            ignore = shutil.ignore_patterns(*BUILD_LEFTOVERS)
            shutil.copytree(origin, os.path.join(source, name), ignore=ignore)
        else:
            os.makedirs(source, exist_ok=True)
            shutil.copy2(origin, source)
    dist = os.path.join(work_dir, "dist")
    subprocess.run([UV, "build", "--quiet", "--offline", "--out-dir", dist, source], check=True)
    [wheel] = [os.path.join(dist, name) for name in os.listdir(dist) if name.endswith(".whl")]
    return wheel


def wheel_metadata(wheel: str) -> email.message.Message:
    """The wheel's METADATA, parsed."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def pinned_requirements(wheel: str, extras: tuple[str, ...]) -> list[str]:
    """`name==version` of every distribution `wheel` with `extras` needs, at the full install's
    versions.

    Args:
      wheel: the built wheel.
      extras: its extras to include (() for the core).

    Returns:
      The pins, sorted.

    Raises:
      AssertionError: a requirement the full install does not satisfy (the lock and
        pyproject.toml disagree).
    """
    own = wheel_metadata(wheel)
    own_name = canonicalize_name(own["Name"])
    pins: dict[str, str] = {}
    todo, seen = [(own_name, frozenset(extras))], set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        if name == own_name:
            requires = own.get_all("Requires-Dist") or []
        else:
            requires = metadata.distribution(name).requires or []
        for text in requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": e}) for e in wanted or {""}):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency != own_name:
                version = metadata.version(dependency)
                assert requirement.specifier.contains(version, prereleases=True), (
                    f"{name} needs {text}; the full install has {dependency} {version}"
                )
                pins[dependency] = version
            todo.append((dependency, frozenset(requirement.extras)))
    return sorted(f"{name}=={version}" for name, version in pins.items())


@dataclasses.dataclass(frozen=True)
class WheelVenv:
    """A clean venv with the wheel installed.

    Args:
      root: the venv's folder.
      extras: the extras installed with the wheel.
    """

    root: str
    extras: tuple[str, ...]

    @property
    def python(self) -> str:
        return os.path.join(self.root, "bin", "python")

    def script(self, name: str) -> str:
        """The path of the console script `name`."""
        return os.path.join(self.root, "bin", name)

    def package_dir(self) -> str:
        """Where the venv holds the installed `tfx_dynamic_inputs`."""
        [site_packages] = [
            os.path.join(self.root, "lib", name, "site-packages")
            for name in os.listdir(os.path.join(self.root, "lib"))
        ]
        return os.path.join(site_packages, "tfx_dynamic_inputs")


def make_venv(wheel: str, extras: tuple[str, ...], root: str) -> WheelVenv:
    """A venv at `root` with `wheel[extras]` (module doc), checked consistent (`uv pip check`).

    Args:
      wheel: the built wheel.
      extras: the extras to install with it.
      root: the venv's folder (not there yet).

    Returns:
      The venv.
    """
    base_python = os.path.realpath(os.path.join(sys.base_prefix, "bin", "python3"))
    subprocess.run([UV, "venv", "--quiet", "--python", base_python, root], check=True)
    venv = WheelVenv(root, extras)
    pins = os.path.join(root, "pins.txt")
    with open(pins, "w") as f:
        f.write("\n".join(pinned_requirements(wheel, extras)) + "\n")
    uv_pip = [UV, "pip"]
    target = ["--python", venv.python, "--offline", "--quiet"]
    subprocess.run([*uv_pip, "sync", *target, pins], check=True)
    spec = f"tfx-dynamic-inputs[{','.join(extras)}] @ file://{wheel}" if extras else wheel
    subprocess.run([*uv_pip, "install", *target, spec], check=True)
    subprocess.run([*uv_pip, "check", "--python", venv.python, "--quiet"], check=True)
    return venv
