"""The task image's Dockerfile: multi-stage, no compiler at run time, an unprivileged user.

No Docker daemon runs on CI machines, so the file is checked as text: its stages, what the
runtime stage installs and who it runs as, and that the build context keeps what it copies.
"""

from __future__ import annotations

import fnmatch
import os
import pathlib
import re

from tfx_dynamic_inputs.kubeflow import host_paths

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "kubeflow" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip()
    ]


def _global_args() -> dict[str, str]:
    """The ARGs before the first FROM (those a FROM line may use): name -> default."""
    found = {}
    for kind, args in _instructions(DOCKERFILE.read_text()):
        if kind == "FROM":
            break
        assert kind == "ARG", f"{kind} before the first FROM"
        name, _, default = args.partition("=")
        found[name.strip()] = default.strip()
    return found


def _stages() -> list[list[tuple[str, str]]]:
    """Each stage's instructions, from its FROM, the named stage `uv` (the uv binary) left out."""
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions(DOCKERFILE.read_text()):
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return [stage for stage in stages if stage[0][1].split()[-2:] != ["AS", "uv"]]


def _stage(name: str) -> list[tuple[str, str]]:
    [stage] = [stage for stage in _stages() if stage[0][1].split()[-2:] == ["AS", name]]
    return stage


def _runtime_stage() -> list[tuple[str, str]]:
    """The Kubeflow task image's stage: the one named `runtime`, which a plain `docker build`
    (the last stage, `FROM runtime`) builds."""
    assert _stages()[-1] == [("FROM", "runtime")], "a plain build must build the runtime stage"
    return _stage("runtime")


def test_the_base_images_are_build_arguments_with_public_defaults():
    """A machine that reaches no registry builds on local images (`make image`); the defaults
    are the public ones, and only the beam-sdk target needs Beam's SDK image."""
    defaults = _global_args()
    assert defaults["BASE_IMAGE"] == "python:3.10-slim"
    assert defaults["BEAM_BOOT_IMAGE"] == "apache/beam_python3.10_sdk:2.59.0"
    assert defaults["UV_IMAGE"].startswith("ghcr.io/astral-sh/uv:")
    for name in ("builder", "runtime"):
        assert _stage(name)[0] == ("FROM", f"${{BASE_IMAGE}} AS {name}")
    assert _stage("beam-boot")[0] == ("FROM", "${BEAM_BOOT_IMAGE} AS beam-boot")
    assert ("COPY", "--from=uv /uv /usr/local/bin/uv") in _stage("builder")


def test_the_image_is_built_in_two_stages_and_the_runtime_has_no_compiler():
    stages = _stages()
    assert len(stages) >= 2
    builder, runtime = stages[0], _runtime_stage()
    assert any("g++" in args for kind, args in builder if kind == "RUN")
    runtime_runs = " ".join(args for kind, args in runtime if kind == "RUN")
    assert "g++" not in runtime_runs and "apt-get install" not in runtime_runs
    copies = [args for kind, args in runtime if kind == "COPY"]
    assert copies and all(args.startswith("--from=") for args in copies)


def test_the_runtime_stage_runs_as_an_unprivileged_user():
    runtime = _runtime_stage()
    users = [args.strip() for kind, args in runtime if kind == "USER"]
    assert users, "the runtime stage sets no USER (it would run as root)"
    assert users[-1] not in {"root", "0", "0:0"}
    assert any(users[-1] in args for kind, args in runtime if kind == "RUN")  # the user is made


def test_the_build_context_keeps_what_the_builder_copies_and_drops_local_state():
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {".git", ".venv"} <= set(patterns)

    def ignored(path: str) -> bool:
        return any(
            fnmatch.fnmatch(path, p)
            or fnmatch.fnmatch(path, p.removeprefix("**/"))
            or path.split("/")[0] == p
            for p in patterns
        )

    builder = _stages()[0]
    sources = [
        source
        for kind, args in builder
        if kind == "COPY" and not args.startswith("--from=")
        for source in args.split()[:-1]
    ]
    assert "components/" in sources and "requirements.lock" in sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source.rstrip("/")), f".dockerignore drops {source}, which is copied"


def test_the_image_holds_the_folders_a_local_run_stands_in_for():
    """`host_paths` replaces the image's `/app/schemas` and `/app/sample_data` by this checkout's
    copies and writes the digits with the call the image's build makes: the Dockerfile must copy
    those folders to those paths and write the digits so."""
    builder = _stages()[0]
    assert ("WORKDIR", host_paths.config.IMAGE_REPO_ROOT) in builder
    copies = [args.split() for kind, args in builder if kind == "COPY"]
    for image_folder, host_folder in (
        (host_paths.IMAGE_SCHEMAS_DIR, host_paths.config.SCHEMAS_DIR),
        (host_paths.IMAGE_DATA_DIR, host_paths.HOST_DATA_DIR),
    ):
        source = os.path.relpath(host_folder, ROOT) + "/"
        target = os.path.relpath(image_folder, host_paths.config.IMAGE_REPO_ROOT) + "/"
        assert [source, target] in copies, (source, target)
    runs = " ".join(args for kind, args in builder if kind == "RUN")
    assert "host_paths.write_image_digits(host_paths.IMAGE_DIGITS_DIR)" in runs
