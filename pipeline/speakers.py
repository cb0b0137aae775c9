"""The speaker pipeline's batch geometry checked against its data, before TFX or Beam load.

`ClassBalancedTrainer` needs `n_classes_per_batch` distinct training speakers. Which speakers
train is decided by the audio job (`tfx_dynamic_inputs.materialize.splits`: `eval_fraction` of them
held out by seeded rank, unless the manifest names each row's split), so it can be said from the
manifest (or the folders, with `speaker_from_path`) in a second, instead of after the Beam stage
as `larger than the number of usable classes`. Rows the job would reject still count here: a
check that passes can still fail later, one that fails would fail there too.
"""

from __future__ import annotations

import csv
import json
import os

from tfx_dynamic_inputs.materialize.splits import TRAIN, held_out_speakers
from tfx_dynamic_inputs.pipeline import cli, config

_SPEAKER, _SPLIT = "speaker", "split"


def check_speakers(pipeline_config: config.SpeakerConfig) -> None:
    """Raises `cli.ConfigError` when the data cannot fill a batch of `n_classes_per_batch`.

    Args:
      pipeline_config: the speaker pipeline's config (its manifest or audio root, split and
        batch settings).

    Raises:
      cli.ConfigError: one speaker only, or fewer training speakers than
        `n_classes_per_batch` (saying how many the eval split held out and which flag to change).

    Example:

        check_speakers(config.SpeakerConfig(n_classes_per_batch=20))  # 17 of 24 train: error
    """
    rows = _speaker_rows(pipeline_config)
    if rows is None:
        return
    speakers = {speaker for speaker, _ in rows}
    if len(speakers) < 2:
        raise cli.ConfigError(
            f"{_source(pipeline_config)} names {len(speakers)} speaker(s): class-balanced "
            "training and the equal error rate need at least 2 (one to train, one held out)"
        )
    if any(split for _, split in rows):
        training = {speaker for speaker, split in rows if split == TRAIN}
        held = f"the manifest's split column puts {len(speakers) - len(training)} elsewhere"
        change = "change the manifest's splits"
    else:
        held_out = held_out_speakers(
            speakers, pipeline_config.eval_fraction, pipeline_config.split_seed
        )
        training = speakers - held_out
        held = f"--eval_fraction {pipeline_config.eval_fraction:g} holds {len(held_out)} out"
        change = "lower --eval_fraction"
    n_c = pipeline_config.n_classes_per_batch
    if len(training) < n_c:
        raise cli.ConfigError(
            f"--n_classes_per_batch {n_c} is more than the {len(training)} training speakers of "
            f"{_source(pipeline_config)} ({len(speakers)} speakers; {held}): lower "
            f"--n_classes_per_batch or {change}"
        )


def _source(pipeline_config: config.SpeakerConfig) -> str:
    if pipeline_config.speaker_from_path:
        return f"--audio_root {pipeline_config.audio_root}"
    return f"--manifest {pipeline_config.manifest}"


def _speaker_rows(pipeline_config: config.SpeakerConfig) -> list[tuple[str, str]] | None:
    """(speaker, split) of every row (split "" when none is named); None when the input is not
    a local file or folder this check can read (a remote path: the job checks it)."""
    if pipeline_config.speaker_from_path:
        root = pipeline_config.audio_root
        if "://" in root or not os.path.isdir(root):
            return None
        with os.scandir(root) as entries:
            return [(entry.name, "") for entry in entries if entry.is_dir()]
    path = pipeline_config.manifest
    if "://" in path or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        if path.endswith((".jsonl", ".json")):
            return [row for row in map(_jsonl_row, f) if row is not None]
        return [
            (row.get(_SPEAKER) or "", row.get(_SPLIT) or "")
            for row in csv.DictReader(f)
            if row.get(_SPEAKER)
        ]


def _jsonl_row(line: str) -> tuple[str, str] | None:
    try:
        fields = json.loads(line)
    except ValueError:
        return None  # the job rejects it, counted
    if not isinstance(fields, dict) or not isinstance(fields.get(_SPEAKER), str):
        return None
    split = fields.get(_SPLIT)
    return fields[_SPEAKER], split if isinstance(split, str) else ""
