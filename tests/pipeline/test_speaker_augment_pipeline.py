"""The speaker pipeline with augmentation: `run_local speaker --noise_dir D --rir_dir D
--speed_perturb` materializes both folders with the audio job in the pipeline and trains with
them on 3 x the training speakers; the held-out EER (embeddings) is computed as without."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import cli, config, run_local, speaker_pipeline


def write_noise_and_rir_folders(root) -> tuple[str, str]:
    """MUSAN-like folders: noise/<source>/*.wav (white, pink) and rirs/<room>/*.wav
    (exponentially decaying noise, some after a direct-path delay), 16 kHz."""
    soundfile = pytest.importorskip("soundfile")
    rng = np.random.default_rng(0)
    noise_dir, rir_dir = os.path.join(root, "noise"), os.path.join(root, "rirs")
    for source in ("white", "pink"):
        os.makedirs(os.path.join(noise_dir, source))
        for i in range(2):
            clip = rng.standard_normal(16000)
            if source == "pink":
                clip = np.fft.irfft(np.fft.rfft(clip) / np.sqrt(np.arange(8001) + 1.0), 16000)
            path = os.path.join(noise_dir, source, f"{i}.wav")
            soundfile.write(path, 0.3 * clip / np.abs(clip).max(), 16000)
    os.makedirs(os.path.join(rir_dir, "room"))
    for i in range(3):
        n = 3200
        rir = rng.standard_normal(n) * np.exp(-np.arange(n) / 400.0)
        rir[0] = 3.0
        rir = np.concatenate([np.zeros(80 * i), rir])
        soundfile.write(
            os.path.join(rir_dir, "room", f"{i}.wav"), 0.9 * rir / np.abs(rir).max(), 16000
        )
    return noise_dir, rir_dir


def test_the_pipeline_materializes_noise_and_rirs_for_the_trainer(tmp_path):
    speaker = config.SpeakerConfig(
        noise_dir=str(tmp_path / "n"), rir_dir=str(tmp_path / "r"), speed_perturb=True
    )
    run = config.RunConfig(pipeline_root=str(tmp_path / "root"), fingerprint_inputs=False)
    nodes = {c.id: c for c in speaker_pipeline.create_pipeline(speaker, run).components}
    trainer = nodes["ClassBalancedTrainer"]
    for key, node, folder in (
        (keys.NOISE_EXAMPLES_KEY, "MaterializeNoise", speaker.noise_dir),
        (keys.RIR_EXAMPLES_KEY, "MaterializeRirs", speaker.rir_dir),
    ):
        assert nodes[node].exec_properties[keys.ROOT_KEY] == folder
        assert trainer.inputs[key].producer_component_id == node
    options = json.loads(trainer.exec_properties[keys.INPUT_OPTIONS_KEY])
    assert options["augment"] == {
        "noise": {"snr_db": [0.0, 15.0]},
        "reverb": {},
        "speed_factors": [1.0, 0.9, 1.1],
    }
    plain = speaker_pipeline.create_pipeline(config.SpeakerConfig(), run).components
    assert not {"MaterializeNoise", "MaterializeRirs"} & {c.id for c in plain}


def test_a_reversed_snr_range_is_refused_in_one_line_before_tensorflow():
    args = cli.parse_local_args(["speaker", "--min_snr_db", "20", "--max_snr_db", "5"])
    with pytest.raises(cli.ConfigError, match="swap them") as raised:
        run_local.local_configs(args)
    assert "\n" not in str(raised.value)


def test_a_mix_with_augmentation_is_refused_in_one_line_before_tensorflow(tmp_path):
    mix = tmp_path / "mix.json"
    mix.write_text("[]")
    args = cli.parse_local_args(["speaker", "--mix", str(mix), "--speed_perturb"])
    with pytest.raises(cli.ConfigError, match="do not run together yet") as raised:
        run_local.local_configs(args)
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_run_local_speaker_trains_with_noise_reverb_and_speed_perturbation(tmp_path):
    noise_dir, rir_dir = write_noise_and_rir_folders(str(tmp_path))
    work_dir = str(tmp_path / "work")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfx_dynamic_inputs.pipeline.run_local",
            "speaker",
            "--noise_dir",
            noise_dir,
            "--rir_dir",
            rir_dir,
            "--speed_perturb",
            "--num_epochs",
            "1",
            "--work_dir",
            work_dir,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for node in ("MaterializeNoise", "MaterializeRirs", "ClassBalancedTrainer"):
        assert f"  {node} [ran]" in done.stdout.splitlines()
    run = run_local.run_config(work_dir)
    results = run_local.latest_run(run.metadata_path, config.SpeakerConfig().pipeline_name)
    with open(
        os.path.join(results["ClassBalancedTrainer"].uri(keys.MODEL_RUN_KEY), "metrics.json")
    ) as f:
        metrics = json.load(f)
    # The bundled 22 speakers less the 30 % held out: each at three speeds.
    train_speakers = 22 - round(0.3 * 22)
    assert metrics["num_train_classes"] == 3 * train_speakers
    # The EER is of the held-out speakers' embeddings, unaffected by the derived classes.
    assert 0.0 <= metrics["eer"] <= metrics["eer_chance"]
    # The clean and augmented log-mels of a few segments, in the ModelRun's TensorBoard.
    model_run = results["ClassBalancedTrainer"].uri(keys.MODEL_RUN_KEY)
    assert os.listdir(os.path.join(model_run, "augmentation"))


def test_the_trainer_options_name_the_channels_and_refuse_bad_augmentation():
    from tfx_dynamic_inputs.trainer_component import ClassBalancedInputOptions

    options = ClassBalancedInputOptions(augment={"noise": {"snr_db": [5, 10]}, "reverb": {}})
    assert set(options.needed_channels()) == {keys.NOISE_EXAMPLES_KEY, keys.RIR_EXAMPLES_KEY}
    built = options.speaker_augment("noise_uri", "rir_uri")
    assert built.noise.run == "noise_uri" and built.noise.snr_db == (5.0, 10.0)
    assert built.reverb.run == "rir_uri" and built.num_speeds == 1
    for augment, message in (
        ({"nois": {}}, "no key 'nois'"),
        ({"noise": {"snr_db": [10, 0]}}, "low <= high"),
        ({"speed_factors": [1.0, 3.0]}, r"in \[0.5, 2\]"),
    ):
        with pytest.raises(ValueError, match=message):
            ClassBalancedInputOptions(augment=augment)
