"""`host_paths`: a local run replaces exactly the paths the task image holds (as the image would
resolve them) and the compiled pipeline root, never a path beside them, and keeps every
replaced path inside the host folder that stands in."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.kubeflow import host_paths
from tfx_dynamic_inputs.pipeline import config

COMPILED_ROOT = "gs://bucket/root"
SEGMENTS = st.sampled_from(
    ["app", "schemas", "sample_data", "digits", "speakers", "..", ".", "", "apple", "x.csv"]
)
PATHS = st.one_of(
    st.lists(SEGMENTS, min_size=1, max_size=6).map(lambda parts: "/" + "/".join(parts)),
    st.lists(SEGMENTS, max_size=4).map(lambda parts: "/".join([COMPILED_ROOT, *parts])),
    st.text(max_size=30),
)


def _job(value: str) -> dict:
    """A compiled job whose one task takes `value` as its one string parameter."""
    return {
        "runtimeConfig": {"gcsOutputDirectory": COMPILED_ROOT},
        "pipelineSpec": {
            "root": {
                "dag": {
                    "tasks": {
                        "T": {
                            "inputs": {
                                "parameters": {
                                    "p": {"runtimeValue": {"constantValue": {"stringValue": value}}}
                                }
                            }
                        }
                    }
                }
            }
        },
    }


def _parameter(job: dict) -> str:
    parameters = job["pipelineSpec"]["root"]["dag"]["tasks"]["T"]["inputs"]["parameters"]
    return parameters["p"]["runtimeValue"]["constantValue"]["stringValue"]


def _image_resolved(path: str) -> str:
    """`path` as the image's file system resolves it (`..`, `.`, repeated slashes)."""
    if not path.startswith("/"):
        return path
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


def _expected(resolved: str, root: str, in_container: bool) -> tuple[str, str | None] | None:
    """(the spec's folder that holds `resolved`, the host folder standing in; None: refused),
    or None where the path is passed as compiled: the rule stated again, independently."""
    folders = {COMPILED_ROOT: root}
    if not in_container:
        folders.update(
            {
                "/app": None,
                "/app/schemas": config.SCHEMAS_DIR,
                "/app/sample_data": os.path.dirname(config.SPEAKER_CORPUS_DIR),
                "/app/sample_data/digits": os.path.join(root, "image-data", "digits"),
            }
        )
    holding = [f for f in folders if resolved == f or resolved.startswith(f + "/")]
    if not holding:
        return None
    folder = max(holding, key=len)
    return folder, folders[folder]


@pytest.fixture(scope="module")
def run_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("root"))


@settings(max_examples=50, deadline=None)
@given(value=PATHS, in_container=st.booleans(), as_json=st.booleans())
def test_only_the_images_folders_and_the_pipeline_root_are_replaced_and_stay_inside(
    run_root, value, in_container, as_json
):
    text = json.dumps({"filesystem": {"base_directory": value}}) if as_json else value
    expected = _expected(_image_resolved(value), run_root, in_container)
    try:
        job, uses = host_paths.mapped_job(_job(text), run_root, in_container=in_container)
    except FileNotFoundError as error:
        # Refused: in the image only, or an input missing here; one line naming the path.
        assert expected is not None and expected[0] != COMPILED_ROOT
        assert "\n" not in str(error) and repr(value) in str(error)
        if expected[1] is not None:
            assert not os.path.exists(expected[1] + _image_resolved(value)[len(expected[0]) :])
        return
    if expected is None:
        assert (_parameter(job), uses) == (text, [])
        return
    folder, host_folder = expected
    assert host_folder is not None, "a path in the image only was passed"
    host_path = host_folder + _image_resolved(value)[len(folder) :]
    [use] = uses
    assert (use.spec_path, use.host_path) == (value, host_path)
    assert os.path.commonpath([host_path, host_folder]) == host_folder
    if as_json:
        assert json.loads(_parameter(job)) == {"filesystem": {"base_directory": host_path}}
    else:
        assert _parameter(job) == host_path


def test_paths_beside_the_images_folders_are_passed_as_compiled(tmp_path):
    root = str(tmp_path / "root")
    beside = ["/apple/x", "/app2/x", "/data/app/schemas", "gs://bucket/root2/x", "app"]
    for value in [*beside, "/app/schemas/../../etc/passwd"]:
        job, uses = host_paths.mapped_job(_job(value), root, in_container=False)
        assert (_parameter(job), uses) == (value, []), value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "/app/schemas/../schemas/audio_record.pbtxt",
            os.path.join(config.SCHEMAS_DIR, "audio_record.pbtxt"),
        ),
        ("//app/sample_data/./speakers/", os.path.join(host_paths.HOST_DATA_DIR, "speakers")),
    ],
)
def test_a_path_is_replaced_as_the_image_resolves_it(tmp_path, value, expected):
    job, [use] = host_paths.mapped_job(_job(value), str(tmp_path), in_container=False)
    assert _parameter(job) == use.host_path == expected
