"""`run_local speaker --mix FILE`: more corpora mixed by weight, checked before TFX loads, and
a short run of the speaker pipeline over two corpora."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.pipeline.test_speaker_augment_pipeline import write_noise_and_rir_folders
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import open_run
from tfx_dynamic_inputs.pipeline import cli, config, mixed_corpora, run_local


def _subset_manifest(path, speakers: int, utterances: int) -> str:
    """A manifest of the bundled corpus's first `speakers` x `utterances` (a short run)."""
    with open(config.SPEAKER_MANIFEST) as f:
        rows = list(csv.DictReader(f))
    names = sorted({r["speaker"] for r in rows})[:speakers]
    kept = [r for name in names for r in [r for r in rows if r["speaker"] == name][:utterances]]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "speaker"])
        writer.writeheader()
        writer.writerows({"path": r["path"], "speaker": r["speaker"]} for r in kept)
    return str(path)


def _mix_file(tmp_path, entries) -> str:
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(entries))
    return str(path)


def _speaker_config(mix: str, **fields) -> config.SpeakerConfig:
    return config.SpeakerConfig(mix=mix, **{"epoch_mode": "classes", **fields})


@pytest.mark.parametrize(
    "entries, fields, message",
    [
        ([], {}, "must be a non-empty JSON list of corpora"),
        ([{"audio_root": "."}], {}, "corpus 0: give an object with audio_root and manifest"),
        ([{"audio_root": ".", "manifest": "m.csv", "wieght": 2}], {}, "unknown keys ['wieght']"),
        ([{"audio_root": "nowhere", "manifest": "m.csv"}], {}, "audio_root: no such folder"),
        ([{"audio_root": ".", "manifest": "none.csv"}], {}, "manifest: no such file"),
        ([{"audio_root": ".", "manifest": "m.csv", "weight": 0}], {}, "weight must be > 0"),
        ([{"audio_root": ".", "manifest": "m.csv"}], {"epoch_mode": "samples"}, "--epoch_mode"),
    ],
)
def test_a_bad_mix_file_is_one_line_naming_it(tmp_path, entries, fields, message):
    (tmp_path / "m.csv").write_text("path,speaker\n")
    path = _mix_file(tmp_path, entries)
    with pytest.raises(cli.ConfigError) as bad:
        mixed_corpora.mixed_corpora(_speaker_config(path, **fields))
    assert message in str(bad.value) and path in str(bad.value)
    assert "\n" not in str(bad.value)


def test_mix_entries_resolve_against_the_files_folder(tmp_path):
    (tmp_path / "m.csv").write_text("path,speaker\n")
    path = _mix_file(tmp_path, [{"audio_root": ".", "manifest": "m.csv", "weight": 2}])
    [corpus] = mixed_corpora.mixed_corpora(_speaker_config(path))
    assert corpus == mixed_corpora.MixedCorpus(str(tmp_path), str(tmp_path / "m.csv"), 2)
    assert cli.parse_local_args(["speaker", "--mix", path]).settings["mix"] == path


def test_the_cli_refuses_a_bad_mix_before_tfx_loads(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", "speaker"]
        + ["--mix", str(tmp_path / "none.json"), "--epoch_mode", "classes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"--mix {tmp_path / 'none.json'}: no such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_speaker_pipeline_trains_on_two_corpora_mixed_by_weight(tmp_path):
    """With noise and reverberation mixed into the training segments of both corpora."""
    noise_dir, rir_dir = write_noise_and_rir_folders(str(tmp_path))
    own = _subset_manifest(tmp_path / "own.csv", speakers=8, utterances=4)
    other = _subset_manifest(tmp_path / "other.csv", speakers=6, utterances=4)
    path = _mix_file(
        tmp_path, [{"audio_root": config.SPEAKER_CORPUS_DIR, "manifest": other, "weight": 2.0}]
    )
    work_dir = str(tmp_path / "work")
    done = subprocess.run(
        [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", "speaker"]
        + ["--manifest", own, "--audio_root", config.SPEAKER_CORPUS_DIR, "--mix", path]
        + ["--noise_dir", noise_dir, "--rir_dir", rir_dir]
        + ["--epoch_mode", "classes", "--n_classes_per_batch", "3", "--n_samples_per_class", "2"]
        + ["--num_epochs", "1", "--crop_seconds", "0.5", "--blessing_threshold", "1.0"]
        + ["--work_dir", work_dir],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = run_local.run_config(work_dir)
    results = run_local.latest_run(run.metadata_path, config.SpeakerConfig().pipeline_name)
    for node in ("MaterializeAudio_mix1", "MaterializeNoise", "MaterializeRirs"):
        assert results[node].state == "COMPLETE", node
    [trainer] = [r for node, r in results.items() if node.startswith("ClassBalancedTrainer")]
    assert trainer.state == "COMPLETE"
    # The two corpora are two runs: the same voices, other run ids (namespaced classes).
    runs = [
        open_run(results[node].uri(keys.CLASS_INDEX_KEY))
        for node in ("MaterializeAudio", "MaterializeAudio_mix1")
    ]
    assert runs[0].run_id != runs[1].run_id
    with open(os.path.join(trainer.uri(keys.MODEL_RUN_KEY), "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["draws_epoch_max"] >= 1
