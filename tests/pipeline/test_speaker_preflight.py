"""The speaker pipeline's batch geometry against its data, said before TFX loads."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest

from tfx_dynamic_inputs.materialize.splits import held_out_speakers
from tfx_dynamic_inputs.pipeline import cli, config, speakers


def _bundled_speakers() -> list[str]:
    with open(config.SPEAKER_MANIFEST, newline="") as f:
        return sorted({row["speaker"] for row in csv.DictReader(f)})


def test_too_many_classes_per_batch_is_one_line_naming_the_split_within_2_s():
    names = _bundled_speakers()
    held = held_out_speakers(names, 0.3, 0)
    n_c = len(names) - len(held) + 1
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfx_dynamic_inputs.pipeline.run_local",
            "speaker",
            "--n_classes_per_batch",
            str(n_c),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line == (
        f"error: --n_classes_per_batch {n_c} is more than the {len(names) - len(held)} training "
        f"speakers of --manifest {config.SPEAKER_MANIFEST} ({len(names)} speakers; "
        f"--eval_fraction 0.3 holds {len(held)} out): lower --n_classes_per_batch or lower "
        "--eval_fraction"
    )
    assert elapsed < 10  # about 1 s here; loaded machines are slower, TFX alone takes 10-25 s


def test_as_many_classes_as_training_speakers_passes():
    names = _bundled_speakers()
    n_c = len(names) - len(held_out_speakers(names, 0.3, 0))
    speakers.check_speakers(config.SpeakerConfig(n_classes_per_batch=n_c))
    speakers.check_speakers(config.SpeakerConfig(n_classes_per_batch=n_c + 1, eval_fraction=0))


def test_a_manifest_with_splits_counts_its_train_rows(tmp_path):
    manifest = tmp_path / "manifest.csv"
    rows = [f"a{i}.wav,spk{i % 5},{'train' if i % 5 < 3 else 'eval'}" for i in range(20)]
    manifest.write_text("path,speaker,split\n" + "\n".join(rows) + "\n")
    settings = {"manifest": str(manifest), "audio_root": str(tmp_path)}
    speakers.check_speakers(config.SpeakerConfig(n_classes_per_batch=3, **settings))
    with pytest.raises(cli.ConfigError, match="more than the 3 training speakers") as error:
        speakers.check_speakers(config.SpeakerConfig(n_classes_per_batch=4, **settings))
    assert "split column puts 2 elsewhere" in str(error.value)


def test_one_speaker_is_refused_from_jsonl_and_from_folders(tmp_path):
    manifest = tmp_path / "manifest.jsonl"
    lines = [json.dumps({"path": f"a{i}.wav", "speaker": "solo"}) for i in range(6)]
    manifest.write_text("\n".join([*lines, "not json", '{"path": "x.wav"}']) + "\n")
    with pytest.raises(cli.ConfigError, match=r"names 1 speaker\(s\)"):
        speakers.check_speakers(
            config.SpeakerConfig(manifest=str(manifest), audio_root=str(tmp_path))
        )
    root = tmp_path / "vox"
    (root / "id10001").mkdir(parents=True)
    (root / "notes.txt").write_text("not a speaker")
    with pytest.raises(cli.ConfigError, match=r"--audio_root .*vox names 1 speaker"):
        speakers.check_speakers(config.SpeakerConfig(speaker_from_path=True, audio_root=str(root)))
    (root / "id10002").mkdir()
    speakers.check_speakers(
        config.SpeakerConfig(speaker_from_path=True, audio_root=str(root), n_classes_per_batch=1)
    )
