"""The wheel is the product (issue 47): built from this working tree (sdist, then the wheel from
it), installed with each extra into a clean venv of its own (`tests/helpers/wheel_venvs.py`: the
extra's distributions at the lock's versions, from uv's cache), it runs the README's Python
blocks and each command's main use from an empty folder outside the checkout, every default
output lands below that folder, and nothing is written into the installation.

- core: `tfx-dynamic-inputs --help`/`--version`, every command's `--help` (or the one line
  naming the extra it needs), the native op built (`native`), and a tf.data service worker
  (`data-service-worker`) serving a dispatcher of this process.
- `[beam]`: `materialize audio` of a tiny generated corpus.
- `[tfx]`: every README block (`tests/docs/snippets.py`, the wheel's python), `run-local
  speaker` for one epoch on the bundled corpus with the default work dir.
- `[kubeflow]`: `kubeflow` compiling both pipelines with the default output dir.

Cost, measured on the shared 2-core machine at load 3.5-4: 185 s wall, 131 s of CPU; of the wall
time, the `[tfx]` venv's README blocks and speaker run 96 s, the `[kubeflow]` compile 31 s, each
venv 2-6 s (hard links from uv's cache), the sdist and wheel 3-6 s. The venvs (about 3 GB each,
mostly those links, plus the bytecode their runs write) are removed at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import wave
import zipfile

import numpy as np
import pytest

from tests.docs import snippets
from tests.helpers import wheel_venvs
from tests.helpers.installs import CORE_INSTALL
from tests.helpers.paths import REPO_ROOT
from tfx_dynamic_inputs import commands

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CORE_INSTALL or not wheel_venvs.uv_available(),
        reason="builds its venvs from the full install's lock and uv (make setup)",
    ),
]

PROGRAM = commands.PROGRAM
OUTPUT_DIR = "tfx-dynamic-inputs-out"
# The native op's build, which goes beside its source where the package folder is writable
# (tfx_dynamic_inputs.native): an installation's build of its own op, like bytecode.
NATIVE_BUILD_PREFIXES = ("native/_native_ops_", "native/.build")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheel-product")
    yield folder
    for venv in folder.glob("venv-*"):
        shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(work) -> str:
    return wheel_venvs.build_wheel(str(work / "build"))


@pytest.fixture(scope="module")
def environment(work) -> dict[str, str]:
    """The commands' environment: no PYTHONPATH (the checkout is not importable), bytecode
    written (each venv compiles TensorFlow's modules once, not in every process)."""
    dropped = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["TFX_DYNAMIC_INPUTS_CACHE"] = str(work / "user-cache")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _venv(work, wheel: str, extras: tuple[str, ...]) -> wheel_venvs.WheelVenv:
    return wheel_venvs.make_venv(wheel, extras, str(work / f"venv-{'-'.join(extras) or 'core'}"))


def _installed_files(venv: wheel_venvs.WheelVenv) -> dict[str, int]:
    """The installed package's files and sizes, but for bytecode and the native op's build."""
    root = venv.package_dir()
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.relpath(os.path.join(folder, name), root)
            if not path.startswith(NATIVE_BUILD_PREFIXES):
                found[path] = os.path.getsize(os.path.join(folder, name))
    return found


def _run(
    venv: wheel_venvs.WheelVenv, argv: list[str], cwd, env, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [venv.script(PROGRAM), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _empty_folder(work, name: str):
    folder = work / name
    folder.mkdir()
    assert not str(folder).startswith(REPO_ROOT)
    return folder


def test_the_wheel_carries_the_data_the_metadata_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        manifest = archive.read("tfx_dynamic_inputs/sample_data/speakers/manifest.csv").decode()
        entry_points = next(archive.read(n) for n in names if n.endswith("entry_points.txt"))
    assert {"tfx_dynamic_inputs/schemas/image_record.pbtxt"} <= names
    assert {"tfx_dynamic_inputs/schemas/audio_record.pbtxt"} <= names
    clips = [line.split(",")[0] for line in manifest.splitlines()[1:]]
    assert len(clips) == 264
    assert {f"tfx_dynamic_inputs/sample_data/speakers/{clip}" for clip in clips} <= names
    assert not [n for n in names if n.startswith("tests/") or "make_speaker_corpus" in n]
    assert f"{PROGRAM} = tfx_dynamic_inputs.commands:main" in entry_points.decode()
    info = wheel_venvs.wheel_metadata(wheel)
    assert info["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Programming Language :: Python :: 3.10" in info.get_all("Classifier")
    assert info["Description-Content-Type"] == "text/markdown"
    assert "## Install" in info.get_payload()
    # The speaker corpus is most of it; a wheel far under PyPI's 100 MB.
    assert os.path.getsize(wheel) < 10 * 2**20


def test_the_core_install_answers_every_command_builds_its_op_and_serves(work, wheel, environment):
    venv = _venv(work, wheel, ())
    before = _installed_files(venv)
    folder = _empty_folder(work, "core-commands")
    done = _run(venv, ["--help"], folder, environment)
    assert done.returncode == 0 and all(name in done.stdout for name in commands.COMMANDS)
    done = _run(venv, ["--version"], folder, environment)
    assert done.stdout.strip() == f"{PROGRAM} {wheel_venvs.wheel_metadata(wheel)['Version']}"
    for name in commands.COMMANDS:
        done = _run(venv, [name, "--help"], folder, environment)
        if name in ("data-service-worker", "native"):
            assert done.returncode == 0 and "usage:" in done.stdout, (name, done.stderr)
        else:  # one line naming the extra that brings it
            assert done.returncode == 2, (name, done.stdout, done.stderr)
            [line] = done.stderr.splitlines()
            assert line.startswith(f"{PROGRAM} {name}: error: ") and "pip install 'tfx-" in line
    done = _run(venv, ["native"], folder, environment)
    assert done.returncode == 0, done.stderr[-3000:]
    _serve_a_dataset(venv, folder, environment)
    assert os.listdir(folder) == []
    assert _installed_files(venv) == before


def _serve_a_dataset(venv: wheel_venvs.WheelVenv, folder, environment) -> None:
    """The installed worker command serves a dataset of a dispatcher of this process."""
    import tensorflow as tf

    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    address = dispatcher.target.split("://")[1]
    worker = subprocess.Popen(
        [venv.script(PROGRAM), "data-service-worker", "--dispatcher_address", address],
        cwd=folder,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().startswith("tf.data service worker at ")
        served = tf.data.Dataset.range(10).apply(
            tf.data.experimental.service.distribute("parallel_epochs", dispatcher.target)
        )
        assert sorted(int(v) for v in served) == list(range(10))
        worker.send_signal(signal.SIGINT)  # Ctrl-C: the worker stops with status 0
        assert worker.wait(timeout=60) == 0, worker.stderr.read()[-3000:]
    finally:
        worker.kill()
        dispatcher._stop()


def test_the_beam_install_materializes_a_generated_corpus(work, wheel, environment):
    venv = _venv(work, wheel, ("beam",))
    before = _installed_files(venv)
    folder = _empty_folder(work, "beam-materialize")
    rng = np.random.default_rng(0)
    rows = ["path,speaker"]
    for speaker in ("a", "b", "c"):
        (folder / "audio" / speaker).mkdir(parents=True)
        for utterance in range(3):
            path = f"{speaker}/{utterance}.wav"
            with wave.open(str(folder / "audio" / path), "wb") as clip:
                clip.setnchannels(1)
                clip.setsampwidth(2)
                clip.setframerate(16000)
                clip.writeframes(rng.integers(-3000, 3000, 8000, dtype=np.int16).tobytes())
            rows.append(f"{path},{speaker}")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    argv = ["materialize", "audio", "--manifest", "manifest.csv", "--root", "audio"]
    done = _run(venv, [*argv, "--output_dir", "run"], folder, environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "run" / "summary.json").exists()
    assert _installed_files(venv) == before


def test_the_tfx_install_runs_the_readme_and_a_local_run_from_an_empty_folder(
    work, wheel, environment
):
    venv = _venv(work, wheel, ("tfx",))
    before = _installed_files(venv)
    folder = _empty_folder(work, "tfx-readme")
    # snippets.py as a script (it imports nothing of the checkout): the wheel's python runs every
    # block of the README, page by page in empty folders of its own.
    readme = subprocess.run(
        [venv.python, snippets.__file__, os.path.join(REPO_ROOT, "README.md")],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert readme.returncode == 0, readme.stdout + readme.stderr[-6000:]
    assert os.listdir(folder) == []
    folder = _empty_folder(work, "tfx-run-local")
    done = _run(venv, ["run-local", "speaker", "--num_epochs", "1"], folder, environment)
    assert done.returncode == 0, done.stderr[-3000:]
    local = folder / OUTPUT_DIR / "local"
    assert os.listdir(folder) == [OUTPUT_DIR]
    assert (local / "metadata.sqlite").exists()
    assert list((local / "pipeline_root" / "serving" / "speaker-class-balanced").iterdir())
    assert _installed_files(venv) == before


def test_the_kubeflow_install_compiles_both_pipelines_into_the_current_folder(
    work, wheel, environment
):
    venv = _venv(work, wheel, ("kubeflow",))
    before = _installed_files(venv)
    folder = _empty_folder(work, "kubeflow-compile")
    done = _run(venv, ["kubeflow"], folder, environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.listdir(folder) == [OUTPUT_DIR]
    specs = sorted(os.listdir(folder / OUTPUT_DIR / "kubeflow"))
    assert [s for s in specs if s.endswith(".json")] == [
        "cyclegan-dynamic-pairs.json",
        "speaker-class-balanced.json",
    ]
    assert _installed_files(venv) == before
