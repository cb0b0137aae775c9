"""Shared fixtures: materialize component runs on real data, as executor calls in a temp dir."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
from PIL import Image
from tfx.dsl.components.base import base_beam_component

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.materialize_component import MaterializeAudio, MaterializePairs
from tfx_dynamic_inputs.pipeline import config
from tfx_dynamic_inputs.pipeline.sample_data import write_digit_domains

DIGIT_IMAGE_SIZE = 8
# A subset of the bundled corpus keeps the audio job short: 10 speakers x 5 utterances.
NUM_SPEAKERS = 10
UTTERANCES_PER_SPEAKER = 5


def make_artifact(artifact_type, uri: str, split_names: list[str] | None = None):
    artifact = artifact_type()
    artifact.uri = uri
    if split_names is not None:
        artifact.split_names = json.dumps(split_names)
    return artifact


def materialize(
    component_class: type[base_beam_component.BaseBeamComponent],
    root: str,
    exec_properties: dict,
    beam_pipeline_args: tuple[str, ...] = (),
):
    """Runs a materialize component's executor into fresh artifacts under `root` (one per
    output of its spec); returns the output dict."""
    outputs = {
        key: [make_artifact(output.type, os.path.join(root, key))]
        for key, output in component_class.SPEC_CLASS.OUTPUTS.items()
    }
    # As under the Kubeflow entrypoint, output folders do not exist beforehand.
    executor_class = component_class.EXECUTOR_SPEC.executor_class
    context = executor_class.Context(beam_pipeline_args=list(beam_pipeline_args))
    executor_class(context).Do({}, outputs, exec_properties)
    return {key: value[0] for key, value in outputs.items()}


@pytest.fixture(scope="session")
def digit_domains(tmp_path_factory):
    return write_digit_domains(str(tmp_path_factory.mktemp("digits")), image_size=DIGIT_IMAGE_SIZE)


def pairs_properties(digit_domains) -> dict:
    return {
        keys.X_DIR_KEY: digit_domains.x_dir,
        keys.Y_DIR_KEY: digit_domains.y_dir,
        keys.PAIRS_KEY: digit_domains.pairs_path,
        keys.IMAGE_STORAGE_KEY: "raw",
        keys.RAW_HEIGHT_KEY: DIGIT_IMAGE_SIZE,
        keys.RAW_WIDTH_KEY: DIGIT_IMAGE_SIZE,
        keys.RAW_CHANNELS_KEY: 1,
        keys.NUM_SHARDS_KEY: 3,
        keys.PAIRS_FORMAT_KEY: None,
    }


@pytest.fixture(scope="session")
def pairs_run(digit_domains, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pairs_run"))
    return materialize(MaterializePairs, root, pairs_properties(digit_domains))


@pytest.fixture(scope="session")
def speaker_manifest(tmp_path_factory):
    """A manifest over part of the bundled corpus (paths stay relative to its folder)."""
    with open(config.SPEAKER_MANIFEST) as f:
        rows = list(csv.DictReader(f))
    speakers = sorted({r["speaker"] for r in rows})[:NUM_SPEAKERS]
    kept = [
        r
        for speaker in speakers
        for r in [r for r in rows if r["speaker"] == speaker][:UTTERANCES_PER_SPEAKER]
    ]
    path = tmp_path_factory.mktemp("manifest") / "manifest.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "speaker"])
        writer.writeheader()
        writer.writerows({"path": r["path"], "speaker": r["speaker"]} for r in kept)
    return str(path)


@pytest.fixture(scope="session")
def audio_run(speaker_manifest, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("audio_run"))
    return materialize(
        MaterializeAudio,
        root,
        {
            keys.MANIFEST_KEY: speaker_manifest,
            keys.ROOT_KEY: config.SPEAKER_CORPUS_DIR,
            keys.SAMPLE_RATE_KEY: 16000,
            keys.SPLIT_MODE_KEY: "speaker",
            keys.EVAL_FRACTION_KEY: 0.3,
            keys.NUM_SHARDS_KEY: 2,
        },
    )


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()
