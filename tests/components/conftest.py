"""Shared fixtures: materialize component runs on real data, as executor calls in a temp dir."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
from PIL import Image
from tfx.types import standard_artifacts

from components import artifacts
from components.component_keys import (
    CLASS_INDEX_KEY,
    EVAL_FRACTION_KEY,
    EXAMPLES_KEY,
    IMAGE_STORAGE_KEY,
    MANIFEST_KEY,
    NUM_SHARDS_KEY,
    OFFSET_INDEX_KEY,
    PAIR_INDEX_KEY,
    PAIRS_FORMAT_KEY,
    PAIRS_KEY,
    RAW_CHANNELS_KEY,
    RAW_HEIGHT_KEY,
    RAW_WIDTH_KEY,
    ROOT_KEY,
    SAMPLE_RATE_KEY,
    SPLIT_MODE_KEY,
    X_DIR_KEY,
    Y_DIR_KEY,
)
from components.materialize_component import executor as materialize_executor
from pipeline import config
from pipeline.sample_data import write_digit_domains

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
    executor_class,
    root: str,
    index_key: str,
    index_type,
    exec_properties: dict,
    beam_pipeline_args: tuple[str, ...] = (),
):
    """Runs a materialize executor into fresh artifacts under `root`; returns the output dict."""
    outputs = {
        EXAMPLES_KEY: [
            make_artifact(standard_artifacts.Examples, os.path.join(root, EXAMPLES_KEY))
        ],
        OFFSET_INDEX_KEY: [
            make_artifact(artifacts.OffsetIndex, os.path.join(root, OFFSET_INDEX_KEY))
        ],
        index_key: [make_artifact(index_type, os.path.join(root, index_key))],
    }
    # As under the Kubeflow entrypoint, output folders do not exist beforehand.
    context = executor_class.Context(beam_pipeline_args=list(beam_pipeline_args))
    executor_class(context).Do({}, outputs, exec_properties)
    return {key: value[0] for key, value in outputs.items()}


@pytest.fixture(scope="session")
def digit_domains(tmp_path_factory):
    return write_digit_domains(str(tmp_path_factory.mktemp("digits")), image_size=DIGIT_IMAGE_SIZE)


def pairs_properties(digit_domains) -> dict:
    return {
        X_DIR_KEY: digit_domains.x_dir,
        Y_DIR_KEY: digit_domains.y_dir,
        PAIRS_KEY: digit_domains.pairs_path,
        IMAGE_STORAGE_KEY: "raw",
        RAW_HEIGHT_KEY: DIGIT_IMAGE_SIZE,
        RAW_WIDTH_KEY: DIGIT_IMAGE_SIZE,
        RAW_CHANNELS_KEY: 1,
        NUM_SHARDS_KEY: 3,
        PAIRS_FORMAT_KEY: None,
    }


@pytest.fixture(scope="session")
def pairs_run(digit_domains, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pairs_run"))
    return materialize(
        materialize_executor.PairsExecutor,
        root,
        PAIR_INDEX_KEY,
        artifacts.PairIndex,
        pairs_properties(digit_domains),
    )


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
        materialize_executor.AudioExecutor,
        root,
        CLASS_INDEX_KEY,
        artifacts.ClassIndex,
        {
            MANIFEST_KEY: speaker_manifest,
            ROOT_KEY: config.SPEAKER_CORPUS_DIR,
            SAMPLE_RATE_KEY: 16000,
            SPLIT_MODE_KEY: "speaker",
            EVAL_FRACTION_KEY: 0.3,
            NUM_SHARDS_KEY: 2,
        },
    )


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()
