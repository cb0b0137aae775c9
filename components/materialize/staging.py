"""Ship this project's code to remote Beam workers as a wheel staged with `--extra_package`.

The jobs' DoFns live in `tfx_dynamic_inputs.materialize`, so every SDK worker must import this
project. Local runs have it already (the DirectRunner's workers, a LOOPBACK environment). Remote
workers (Dataflow, Flink, Spark, a portable runner's DOCKER, PROCESS or EXTERNAL environment) have
only what the launch stages, and Beam's `--setup_file` would build an sdist that requires the
project's whole dependency list (below). `with_project_staged` therefore builds a wheel of the
project with its PEP 517 backend and adds it as `--extra_package`, unless the arguments ship the
code already:

- `--sdk_container_image` / `--worker_harness_container_image`: an image that has the project
  (the `beam-sdk` target of kubeflow/Dockerfile);
- `--setup_file`, or this project in `--extra_package` or in `--requirements_file`.

Beam's SDK container installs an extra package with `pip install`, which also installs its
`Requires-Dist`. The project's own list (TFX, TensorFlow, KFP: about 3 GB) is for the launcher;
a worker imports only Beam, NumPy, google-crc32c, Pillow and the audio decoders
(`tests/materialize/test_worker_imports.py`), so the staged wheel declares only those
(`WORKER_DISTRIBUTIONS`, with the ranges the core, `[beam]` and `[tfx]` give them), and
TFX's own `tfx_ephemeral` sdist, which TFX's Beam executors add to non-empty Beam arguments, is
left out: no worker of these jobs imports TFX.

Wheels are cached under `$XDG_CACHE_HOME/tfx-dynamic-inputs/wheels/` (default `~/.cache`) by a
hash of the files they are built from, so launches of unchanged code do not rebuild.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import importlib.util
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.portability import python_urns

from tfx_dynamic_inputs.materialize.errors import MaterializeError

DISTRIBUTION = "tfx-dynamic-inputs"
# What the jobs' workers import besides the standard library and this project (PEP 503 names);
# their version ranges come from pyproject.toml.
WORKER_DISTRIBUTIONS = frozenset(
    {"apache-beam", "av", "google-crc32c", "numpy", "pillow", "soundfile", "soxr"}
)
# The extras whose requirements of worker distributions hold for the workers too: `[beam]`
# brings the decoders, `[tfx]` pins Beam and NumPy to the launcher's stack.
WORKER_EXTRAS = frozenset({"beam", "tfx"})

# Runners whose SDK workers run on this machine with this interpreter (lower case, as Beam
# matches `--runner`, with the `Runner` suffix it adds to a bare name).
_LOCAL_RUNNERS = frozenset(
    {
        "directrunner",
        "switchingdirectrunner",
        "bundlebaseddirectrunner",
        "testdirectrunner",
        "interactiverunner",
    }
)
_LOOPBACK = frozenset({"LOOPBACK", python_urns.EMBEDDED_PYTHON_LOOPBACK})
# The packages whose folders the wheel is built from (the import names of setup.py's folders).
_IMPORT_ROOTS = ("tfx_dynamic_inputs", "tfx_dynamic_inputs.pipeline", "tfx_dynamic_inputs.kubeflow")
# The project folder's own files that a setuptools build reads (metadata, package selection).
_BUILD_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README*", "LICENSE*")
# Compiled ops and bytecode are built per machine; no package data names them.
_NOT_PACKAGED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
_BUILD_TIMEOUT_S = 600
# Runs the PEP 517 backend of pyproject.toml in the source copy (the working directory):
# setuptools writes its build/ and egg-info there, never into the project's own tree.
_BUILD_WHEEL = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
_TFX_EPHEMERAL = re.compile(r"--extra_packages?=.*/tfx_ephemeral-[^/]*")

_log = logging.getLogger(__name__)


def with_project_staged(beam_pipeline_args: Iterable[str]) -> list[str]:
    """`beam_pipeline_args`, plus `--extra_package=<wheel of this project>` when the runner's
    SDK workers are remote and the arguments do not ship the project already (module doc).

    Args:
        beam_pipeline_args: Beam's command-line options.

    Returns:
        The options to build the pipeline with (TFX's tfx_ephemeral package replaced by the
        wheel when one is added).

    Raises:
        MaterializeError: when the wheel cannot be built: the project is not installed from
            a source tree (`pip install -e .`), or its build fails.

    Example:
        with_project_staged(["--runner=DirectRunner"])  # unchanged: the workers are local
    """
    args = list(beam_pipeline_args)
    options = PipelineOptions(args)
    if _workers_are_local(options) or _ships_project(options):
        return args
    wheel = project_wheel()
    kept = [arg for arg in args if not _TFX_EPHEMERAL.fullmatch(arg)]
    _log.info(
        "remote Beam workers get this project as --extra_package=%s%s",
        wheel,
        "" if len(kept) == len(args) else " (instead of TFX's tfx_ephemeral sdist)",
    )
    return [*kept, f"--extra_package={wheel}"]


def project_wheel() -> str:
    """Path of a wheel of this project for Beam workers (module doc), built on a cache miss."""
    root, packages = _source_tree()
    files = _source_files(root, packages)
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(relative.encode() + b"\0")
        with open(files[relative], "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        DISTRIBUTION,
        "wheels",
    )
    entry = os.path.join(cache, digest.hexdigest()[:20])
    if not os.path.isdir(entry):
        os.makedirs(cache, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as scratch:
            built = _build_wheel(files, os.path.join(scratch, "src"), os.path.join(scratch, "out"))
            _keep_worker_requirements(built)
            try:
                # Atomic, so concurrent launches never see a half-written entry.
                os.rename(os.path.dirname(built), entry)
            except OSError:
                if not os.path.isdir(entry):  # not a concurrent launch that won the race
                    raise
    [name] = [name for name in os.listdir(entry) if name.endswith(".whl")]
    return os.path.join(entry, name)


def _workers_are_local(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return True
    name = runner.rsplit(".", 1)[-1].lower()
    name = name if name.endswith("runner") else f"{name}runner"
    if name in _LOCAL_RUNNERS:
        return True
    # Prism, unlike the other portable runners (DOCKER), defaults to LOOPBACK.
    default = "LOOPBACK" if name == "prismrunner" else "DOCKER"
    return (options.view_as(PortableOptions).environment_type or default) in _LOOPBACK


def _ships_project(options: PipelineOptions) -> bool:
    setup = options.view_as(SetupOptions)
    worker = options.view_as(WorkerOptions)
    if setup.setup_file or worker.sdk_container_image or worker.worker_harness_container_image:
        return True
    if any(_names_project(package) for package in setup.extra_packages or ()):
        return True
    if setup.requirements_file:
        with open(setup.requirements_file) as f:
            lines = [line.split("#", 1)[0].strip() for line in f]
        return any(line and _names_project(line) for line in lines)
    return False


def _names_project(entry: str) -> bool:
    """Whether a package file (`dist/tfx_dynamic_inputs-0.1.0-py3-none-any.whl`) or a
    requirement (`tfx-dynamic-inputs==0.1.0`, `tfx-dynamic-inputs @ URL`) is this project."""
    for text in (entry, os.path.basename(entry)):
        token = re.match(r"[A-Za-z0-9._-]*", text).group()
        if _canonical(re.split(r"-(?=\d)", token)[0]) == DISTRIBUTION:
            return True
    return False


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _source_tree() -> tuple[str, list[str]]:
    """The project folder of the running code and its package folders, relative to it (setup.py
    maps `tfx_dynamic_inputs` and its `pipeline` and `kubeflow` onto three folders of it)."""
    specs = [importlib.util.find_spec(name) for name in _IMPORT_ROOTS]
    folders = [os.path.dirname(s.origin) for s in specs if s is not None and s.origin]
    root = os.path.dirname(folders[0])
    if (
        len(folders) != len(specs)
        or any(os.path.dirname(f) != root for f in folders)
        or not os.path.isfile(os.path.join(root, "setup.py"))
    ):
        raise MaterializeError(
            f"remote Beam workers need this project's code, and {root} is not an installed "
            f"source tree of {DISTRIBUTION} to build it from (pip install -e .): pass "
            "--extra_package=<its wheel> or --sdk_container_image=<an image that has it>"
        )
    return root, [os.path.basename(f) for f in folders]


def _source_files(root: str, packages: list[str]) -> dict[str, str]:
    """Relative path -> path of every file the wheel is built from: the build's own files in the
    project folder (pyproject.toml, the README its metadata embeds) and its packages' files."""
    files = {
        name: os.path.join(root, name)
        for name in os.listdir(root)
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in _BUILD_FILES)
        and os.path.isfile(os.path.join(root, name))
    }
    for package in packages:
        for directory, subdirectories, names in os.walk(os.path.join(root, package)):
            ignored = _NOT_PACKAGED(directory, subdirectories + names)
            subdirectories[:] = sorted(d for d in subdirectories if d not in ignored)
            for name in names:
                if name not in ignored:
                    path = os.path.join(directory, name)
                    files[os.path.relpath(path, root)] = path
    return files


def _build_wheel(files: dict[str, str], source: str, out: str) -> str:
    """Builds a wheel of `files` (copied to `source`) into `out`; returns its path."""
    for relative, path in files.items():
        target = os.path.join(source, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(path, target)
    os.makedirs(out)
    try:
        completed = subprocess.run(
            [sys.executable, "-c", _BUILD_WHEEL, out],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise MaterializeError(
            f"building the wheel of {DISTRIBUTION} for remote Beam workers took over "
            f"{_BUILD_TIMEOUT_S} s"
        ) from None
    wheels = [name for name in os.listdir(out) if name.endswith(".whl")]
    if completed.returncode != 0 or len(wheels) != 1:
        detail = (completed.stderr.strip() or completed.stdout.strip()).splitlines()[-1:]
        raise MaterializeError(
            f"building the wheel of {DISTRIBUTION} for remote Beam workers failed "
            f"(status {completed.returncode}): {' '.join(detail) or 'no wheel written'}"
        )
    return os.path.join(out, wheels[0])


def _keep_worker_requirements(wheel: str) -> None:
    """Rewrites `wheel` in place so that its metadata requires only `WORKER_DISTRIBUTIONS`
    (with the ranges pyproject.toml gives them) and declares no extras."""
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    names = [info.filename for info, _ in entries]
    [metadata_name] = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
    record_name = metadata_name.rsplit("/", 1)[0] + "/RECORD"
    contents = dict(zip(names, (data for _, data in entries), strict=True))

    header, separator, body = contents[metadata_name].decode().partition("\n\n")
    kept = [kept for line in header.splitlines() if (kept := _worker_line(line)) is not None]
    new_metadata = ("\n".join(kept) + separator + body).encode()
    contents[metadata_name] = new_metadata

    # RECORD holds each file's hash and size: a wheel whose RECORD disagrees is invalid.
    digest = base64.urlsafe_b64encode(hashlib.sha256(new_metadata).digest()).rstrip(b"=")
    rows = list(csv.reader(io.StringIO(contents[record_name].decode())))
    for row in rows:
        if row[0] == metadata_name:
            row[1:] = [f"sha256={digest.decode()}", str(len(new_metadata))]
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows(rows)
    contents[record_name] = record.getvalue().encode()

    rewritten = f"{wheel}.tmp"
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
        for info, _ in entries:
            target.writestr(info, contents[info.filename])
    os.replace(rewritten, wheel)


def _worker_line(line: str) -> str | None:
    """A METADATA header line as it stays in the workers' wheel, or None to leave it out.

    Requirements of worker distributions stay, those of `WORKER_EXTRAS` without their marker
    (the workers need them unconditionally); every other requirement and extra goes.
    """
    if line.startswith("Provides-Extra:"):
        return None
    if not line.startswith("Requires-Dist:"):
        return line
    requirement, _, marker = line.partition(":")[2].strip().partition(";")
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group()
    if _canonical(name) not in WORKER_DISTRIBUTIONS:
        return None
    extra = re.fullmatch(r"\s*extra\s*==\s*[\"']([^\"']+)[\"']\s*", marker)
    if marker and (extra is None or extra.group(1) not in WORKER_EXTRAS):
        return None
    return f"Requires-Dist: {requirement.strip()}"
