"""Remote Beam workers get the project as a staged wheel (`tfx_dynamic_inputs.materialize.staging`).

The slow tests run the jobs on Beam's portable runner: the Python job service and an EXTERNAL
worker pool whose workers boot as in Beam's SDK container (`remote_worker_boot.py`), in an
interpreter where the project is importable only from what the launch staged.
"""

from __future__ import annotations

import ast
import base64
import csv
import glob
import hashlib
import importlib.util
import io
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import types
import zipfile
from importlib import metadata

import grpc
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers.subprocesses import run_python
from tests.materialize import generate, readback
from tests.materialize.test_worker_imports import AUDIO_WORKER_MODULES, PAIRS_WORKER_MODULES
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize import staging

BOOT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote_worker_boot.py")
TFX_EPHEMERAL = "--extra_package=/tmp/tmpab12/build/tfx/dist/tfx_ephemeral-1.16.0.tar.gz"
_SERVICE_START_TIMEOUT_S = 90
_JOB_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory):
    """Wheels go to a temporary cache, not the user's ~/.cache."""
    cache = str(tmp_path_factory.mktemp("cache"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", cache)
        yield cache


@pytest.fixture(scope="module")
def wheel(wheel_cache) -> str:
    return staging.project_wheel()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--runner=DirectRunner", "--direct_num_workers=2"],
        ["--runner=direct"],
        ["--runner=apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"],
        ["--runner=PortableRunner", "--job_endpoint=localhost:1", "--environment_type=LOOPBACK"],
        ["--runner=FlinkRunner", "--environment_type=LOOPBACK"],
        ["--runner=PrismRunner"],
    ],
)
def test_runs_with_local_workers_are_left_alone(args):
    assert staging.with_project_staged(args) == args


@pytest.mark.parametrize(
    "shipping",
    [
        ["--sdk_container_image=registry/tfx-dynamic-inputs-beam:1"],
        ["--worker_harness_container_image=registry/tfx-dynamic-inputs-beam:1"],
        ["--setup_file=/src/setup.py"],
        ["--extra_package=/dist/tfx_dynamic_inputs-0.1.0-py3-none-any.whl"],
        ["--extra_packages=/dist/tfx-dynamic-inputs-0.1.0.tar.gz"],
        ["--requirements_file={requirements}"],
    ],
)
def test_args_that_ship_the_project_are_left_alone(shipping, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nsoxr==0.5.0\ntfx-dynamic-inputs==0.1.0  # this project\n")
    args = ["--runner=DataflowRunner"] + [a.format(requirements=requirements) for a in shipping]
    assert staging.with_project_staged(args) == args


@pytest.mark.parametrize(
    "remote",
    [
        ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"],
        ["--runner=FlinkRunner", "--flink_master=flink:8081"],
        ["--runner=SparkRunner", "--environment_type=PROCESS"],
        ["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=w:1"],
        ["--runner=PrismRunner", "--environment_type=DOCKER"],
    ],
)
def test_remote_workers_get_the_wheel(remote, wheel, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("soxr==0.5.0\n")
    other = "--extra_package=/dist/helpers-1.0-py3-none-any.whl"
    args = [*remote, other, f"--requirements_file={requirements}"]
    staged = staging.with_project_staged([*args, TFX_EPHEMERAL])
    # TFX's sdist is dropped (no worker imports TFX); the user's own packages stay.
    assert staged == [*args, f"--extra_package={wheel}"]
    assert PipelineOptions(staged).view_as(SetupOptions).extra_packages == [
        "/dist/helpers-1.0-py3-none-any.whl",
        wheel,
    ]


def test_the_wheel_requires_only_what_workers_import(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        wheel_metadata = archive.read(metadata_name).decode()
        [record_name] = [n for n in names if n.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
        # Every hash and size in RECORD matches its file (pip installs only a consistent wheel).
        for path, digest, size in rows:
            if path != record_name:
                data = archive.read(path)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), path
    assert "tfx_dynamic_inputs/materialize/staging.py" in names
    header = wheel_metadata.partition("\n\n")[0].splitlines()
    requirements = [
        Requirement(line.split(":", 1)[1]) for line in header if "Requires-Dist" in line
    ]
    assert {canonicalize_name(r.name) for r in requirements} == staging.WORKER_DISTRIBUTIONS
    assert not [line for line in header if line.startswith("Provides-Extra")]

    # What the workers' modules import, beyond the standard library and the project, comes with
    # those requirements (or with what they require in turn).
    owners = metadata.packages_distributions()
    imported = _third_party_imports(PAIRS_WORKER_MODULES + AUDIO_WORKER_MODULES)
    assert {"apache_beam", "numpy", "PIL", "av", "soundfile", "soxr"} <= imported
    # Some wheels (soxr) declare no top_level.txt: their module is named as they are.
    needed = {canonicalize_name(d) for module in imported for d in owners.get(module, [module])}
    missing = needed - _installed_closure(requirements)
    assert not missing, f"workers import {sorted(missing)}: add them to WORKER_DISTRIBUTIONS"


def _third_party_imports(modules: tuple[str, ...]) -> set[str]:
    """Top-level names of what `modules`, and the project modules they import, import when they
    are imported: their module-level imports (a function's own imports are left out, as the
    launcher-only TensorFlow imports are; so are `if TYPE_CHECKING:` blocks)."""
    found: set[str] = set()
    pending, seen = list(modules), set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _module_level_imports(module):
            if name.split(".")[0] != "tfx_dynamic_inputs":
                found.add(name.split(".")[0])
            elif _is_module(name):
                pending.append(name)
    return found - set(sys.stdlib_module_names)


def _module_level_imports(module: str) -> set[str]:
    with open(importlib.util.find_spec(module).origin) as f:
        statements = list(ast.parse(f.read()).body)
    names = set()
    while statements:
        node = statements.pop()
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If) and ast.unparse(node.test) != "TYPE_CHECKING":
            statements.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            statements.extend(node.body + node.orelse + node.finalbody)
            statements.extend(line for handler in node.handlers for line in handler.body)
    return names


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # an attribute: `from tfx_dynamic_inputs.layout import RUN_ID_KEY`
        return False


def _installed_closure(requirements: list[Requirement]) -> set[str]:
    """Canonical names of `requirements` and, transitively, of what their installed
    distributions require (extras included)."""
    seen: set[str] = set()
    pending = [(r, frozenset(r.extras)) for r in requirements]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(requirement.name) or ():
            child = Requirement(line)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(e) for e in environments):
                pending.append((child, frozenset(child.extras)))
    return seen


@pytest.mark.slow
def test_unchanged_code_is_built_once_and_edits_rebuild(tmp_path):
    """On a copy of the project (an edit must not touch the real tree), in fresh launchers."""
    source = tmp_path / "project"
    source.mkdir()
    root = readback.REPO_ROOT
    for name in os.listdir(root):
        if os.path.isfile(os.path.join(root, name)):
            shutil.copy(os.path.join(root, name), source / name)
    for package in ("components", "pipeline", "kubeflow"):
        shutil.copytree(
            os.path.join(root, package),
            source / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.so"),
        )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # The copy stands in for the installed project: its folders under the import names that the
    # editable install maps onto the real ones (setup.py).
    script = (
        "import importlib.util, os, sys\n"
        "for name, folder in [('tfx_dynamic_inputs', 'components'),\n"
        "                     ('tfx_dynamic_inputs.pipeline', 'pipeline'),\n"
        "                     ('tfx_dynamic_inputs.kubeflow', 'kubeflow')]:\n"
        "    folder = os.path.abspath(folder)\n"
        "    spec = importlib.util.spec_from_file_location(\n"
        "        name, os.path.join(folder, '__init__.py'), submodule_search_locations=[folder])\n"
        "    sys.modules[name] = module = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(module)\n"
        "from tfx_dynamic_inputs.materialize import staging\n"
        "print(staging.__file__); print(staging.project_wheel())\n"
    )

    def launch() -> tuple[str, float]:
        completed = run_python(script, cwd=str(source), env=env, check=True)
        module, wheel = completed.stdout.split()
        assert module == str(source / "components" / "materialize" / "staging.py")
        return wheel, os.stat(wheel).st_mtime_ns

    first = launch()
    assert launch() == first  # the same file, not rebuilt
    with open(source / "components" / "materialize" / "paths.py", "a") as f:
        f.write("\nEDITED = True\n")
    edited, _ = launch()
    assert edited != first[0]
    with zipfile.ZipFile(edited) as archive:
        assert b"EDITED = True" in archive.read("tfx_dynamic_inputs/materialize/paths.py")
    assert os.path.exists(first[0])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


class _Cluster(types.SimpleNamespace):
    """A job service and a worker pool without the project: `job_args` runs a job on them."""

    job_args: list[str]
    worker_dir: str
    env: dict[str, str]
    cwd: str
    logs: list[str]

    def log_tail(self) -> str:
        tails = []
        for path in self.logs:
            with open(path, errors="replace") as f:
                tails.append(f"--- {path}\n{f.read()[-3000:]}")
        return "\n".join(tails)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    cwd, worker_dir = root / "cwd", root / "workers"
    cwd.mkdir()
    worker_dir.mkdir()
    # `-S` and a PYTHONPATH of the venv's site-packages: the dependencies without the .pth
    # files, so without the editable install's finder; the working folder is not the checkout.
    env = {
        **os.environ,
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
        "BOOT_WORK_DIR": str(worker_dir),
    }
    boot = root / "boot"
    boot.write_text(f'#!/bin/sh\nexec {shlex.join([sys.executable, "-S", BOOT_SCRIPT])} "$@"\n')
    boot.chmod(0o755)
    port_file, worker_port = root / "job_port", _free_port()
    commands = {
        "job_service": [
            *("-m", "apache_beam.runners.portability.local_job_service_main"),
            *("--port", "0", "--port_file", str(port_file)),
            *("--staging_dir", str(root / "staging")),
        ],
        "worker_pool": [
            *("-m", "apache_beam.runners.worker.worker_pool_main"),
            *(f"--service_port={worker_port}", f"--container_executable={boot}"),
        ],
    }
    processes, logs = [], []
    try:
        for name, command in commands.items():
            logs.append(str(root / f"{name}.log"))
            with open(logs[-1], "w") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-S", *command],
                        cwd=cwd,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its workers too are ended with its group
                    )
                )
        deadline = time.monotonic() + _SERVICE_START_TIMEOUT_S
        while not port_file.exists():
            assert time.monotonic() < deadline and processes[0].poll() is None, "no job service"
            time.sleep(0.2)
        job_endpoint = f"localhost:{port_file.read_text()}"
        for endpoint in (job_endpoint, f"localhost:{worker_port}"):
            with grpc.insecure_channel(endpoint) as channel:
                grpc.channel_ready_future(channel).result(timeout=_SERVICE_START_TIMEOUT_S)
        yield _Cluster(
            job_args=[
                "--runner=PortableRunner",
                f"--job_endpoint={job_endpoint}",
                "--environment_type=EXTERNAL",
                f"--environment_config=localhost:{worker_port}",
            ],
            worker_dir=str(worker_dir),
            env=env,
            cwd=str(cwd),
            logs=logs,
        )
    finally:
        for process in processes:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _staged_installs(cluster: _Cluster) -> set[str]:
    """The worker folders where the boot installed this project from what the job staged."""
    return {
        name
        for name in os.listdir(cluster.worker_dir)
        if glob.glob(
            os.path.join(cluster.worker_dir, name, "site", "tfx_dynamic_inputs-*.dist-info")
        )
        and os.path.isdir(os.path.join(cluster.worker_dir, name, "site", "tfx_dynamic_inputs"))
    }


def _small_pairs_inputs(directory) -> dict[str, str]:
    rng = np.random.default_rng(7)
    x_names = [f"d{i % 2}/x{i:02d}.{'jpg' if i % 3 == 0 else 'png'}" for i in range(9)]
    y_names = [f"y{i:02d}.png" for i in range(6)]
    generate.write_images(str(directory / "x"), x_names, rng)
    generate.write_images(str(directory / "y"), y_names, rng)
    pairs = {
        x: [y_names[i % 6], y_names[(i * 5 + 1) % 6], "ghost.png"] for i, x in enumerate(x_names)
    }
    generate.write_pairs_jsonl(str(directory / "pairs.jsonl"), pairs)
    return {
        "x_dir": str(directory / "x"),
        "y_dir": str(directory / "y"),
        "pairs": str(directory / "pairs.jsonl"),
    }


@pytest.mark.slow
def test_cli_job_on_remote_workers_writes_what_the_direct_runner_writes(cluster, tmp_path):
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import apache_beam, PIL, av, soxr; import tfx_dynamic_inputs",
        ],
        cwd=cluster.cwd,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No module named 'tfx_dynamic_inputs'" in probe.stderr, probe.stderr[-2000:]

    inputs = _small_pairs_inputs(tmp_path)
    flags = [f"--{key}={value}" for key, value in inputs.items()] + ["--max_shard_bytes=3000"]
    runs = {}
    # The remote run spills payloads to files, which its workers share on this one machine: spill
    # refs cross the remote workers (the executor test's run hands the payloads to the runner).
    remote_args = ["--spill=files", *cluster.job_args]
    for name, beam_args in (("direct", []), ("remote", remote_args)):
        output_dir = str(tmp_path / name)
        completed = subprocess.run(
            [sys.executable, "-m", "tfx_dynamic_inputs.materialize", "pairs", *flags]
            + [f"--output_dir={output_dir}", *beam_args],
            cwd=readback.REPO_ROOT,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
            capture_output=True,
            text=True,
            timeout=_JOB_TIMEOUT_S,
        )
        assert completed.returncode == 0, completed.stderr[-4000:] + cluster.log_tail()
        runs[name] = readback.run_files(output_dir)
    assert sum(name.endswith(".tfrecord") for name in runs["direct"]) > 2
    assert runs["remote"] == runs["direct"]
    assert _staged_installs(cluster), cluster.log_tail()


@pytest.mark.slow
def test_tfx_executor_stages_the_wheel_for_remote_workers(
    cluster, wheel, tmp_path, unrun_pipelines
):
    """TFX's Beam executor takes the same path (`_make_beam_pipeline` ->
    `common.make_default_pipeline`), after TFX has added its own sdist to the arguments."""
    from tests.components.conftest import make_artifact, materialize, pairs_properties
    from tfx_dynamic_inputs.materialize_component import MaterializePairs
    from tfx_dynamic_inputs.materialize_component import executor as materialize_executor

    inputs = _small_pairs_inputs(tmp_path)
    domains = types.SimpleNamespace(
        x_dir=inputs["x_dir"], y_dir=inputs["y_dir"], pairs_path=inputs["pairs"]
    )
    properties = {**pairs_properties(domains), keys.IMAGE_STORAGE_KEY: "encoded"}
    local = materialize(MaterializePairs, str(tmp_path / "local"), properties)

    executor = materialize_executor.PairsExecutor(
        materialize_executor.PairsExecutor.Context(beam_pipeline_args=list(cluster.job_args))
    )
    [ephemeral] = [arg for arg in executor._beam_pipeline_args if "tfx_ephemeral" in arg]
    try:
        unrun_pipelines.append(executor._make_beam_pipeline())
        options = unrun_pipelines[-1].options.view_as(SetupOptions)
        assert options.extra_packages == [wheel]
        remote = {
            key: [make_artifact(output.type, str(tmp_path / "remote" / key))]
            for key, output in MaterializePairs.SPEC_CLASS.OUTPUTS.items()
        }
        before = _staged_installs(cluster)
        executor.Do({}, remote, properties)
        assert _staged_installs(cluster) - before, cluster.log_tail()
    finally:
        # TFX leaves the folder it builds its sdist in (a 49 MB copy of the tfx package).
        shutil.rmtree(ephemeral.split("=", 1)[1].split("/build/tfx/")[0])
    for key, [artifact] in remote.items():
        assert readback.run_files(artifact.uri) == readback.run_files(local[key].uri), key
