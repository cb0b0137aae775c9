"""Benchmark: speaker augmentation's cost per batch, and the EER it buys on a noisy held-out set.

1. **Cost.** One batch of `n_c x n_p` 2 s segments of the bundled speakers (16 kHz): the log-mel
   front end alone (`audio_features`, crop + log-mel + mean normalization) against the same plus
   noise, RIR reverberation, speed perturbation, and all three (`SpeakerAugmenter.features_of`,
   every augmentation at probability 1), each a `tf.function`; medians of `--repeats`
   interleaved repeats (ms per batch) and the ratios to the front end alone.
2. **EER.** The bundled corpus (22 espeak-ng voices x 12 utterances) split by speaker as the
   pipeline does (30 % held out); the project's speaker model (`SpeakerEmbeddingModel`, GE2E)
   trained `--epochs` epochs on class-balanced batches without and with augmentation (noise
   from a generated set of white, pink and babble clips, the babble mixed from training
   speakers' utterances; generated RIRs; speed perturbation 0.9 / 1.0 / 1.1 as new classes), the
   same seed; and without it for 3x the epochs (the batches speed perturbation's 3x classes
   make). The held-out speakers' utterances are scored clean and corrupted with held-out
   noise (other generated clips, babble of held-out speakers) at a fixed SNR and held-out RIRs
   (numpy), every pair of utterances a trial (`verification`'s EER). Noise and RIR sets are
   generated with numpy (seeded), written as WAV and materialized by the real audio job.

    .venv/bin/python bench/bench_augment.py [--quick] [--repeats R] [--epochs E] [--snr_db S]

Prints a table and a JSON result (also written to bench/results/bench_augment.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import keras
import numpy as np
import soundfile
import tensorflow as tf
from json_report import write_report

from tfx_dynamic_inputs.inputs import (
    AdditiveNoise,
    AudioFeatureConfig,
    ClassBalancedSampler,
    Reverberation,
    SpeakerAugmentConfig,
    open_run,
)
from tfx_dynamic_inputs.inputs.audio_features import audio_features, parse_audio_examples
from tfx_dynamic_inputs.inputs.speaker_augment import SpeakerAugmenter
from tfx_dynamic_inputs.materialize import AudioConfig, run_audio
from tfx_dynamic_inputs.models import speaker, verification
from tfx_dynamic_inputs.pipeline import config

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RATE = 16000
N_C, N_P = 8, 4
SPEEDS = (1.0, 0.9, 1.1)
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _materialize(root: str, output_dir: str, **settings) -> str:
    run_audio(
        AudioConfig(
            root=root, output_dir=output_dir, beam_pipeline_args=tuple(IN_MEMORY), **settings
        )
    )
    return output_dir


def _write(path: str, signal: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    soundfile.write(path, 0.5 * signal / max(np.abs(signal).max(), 1e-9), RATE)


def _pcm(run: str, record_set: str) -> tuple[list[np.ndarray], np.ndarray]:
    """The waveforms (float) and labels of a record set of a run."""
    store = open_run(run).store(record_set)
    parsed = parse_audio_examples(store.read(tf.range(store.num_records, dtype=tf.int64)), RATE)
    audio = [np.frombuffer(a, "<i2").astype(np.float32) / 32768 for a in parsed["audio"].numpy()]
    return audio, parsed["label"].numpy()


def make_clip_sets(root: str, train: list[np.ndarray], held_out: list[np.ndarray], seed: int):
    """Noise (white, pink, babble) and RIR folders: one pair for training, one held out."""
    rng = np.random.default_rng(seed)
    folders = {}
    for name, speech in (("train", train), ("held_out", held_out)):
        noise_dir, rir_dir = os.path.join(root, f"noise_{name}"), os.path.join(root, f"rir_{name}")
        for i in range(4):
            white = rng.standard_normal(3 * RATE)
            _write(f"{noise_dir}/white/{i}.wav", white)
            pink = np.fft.irfft(
                np.fft.rfft(white) / np.sqrt(np.arange(1.5 * RATE + 1) + 1), 3 * RATE
            )
            _write(f"{noise_dir}/pink/{i}.wav", pink)
            babble = np.zeros(3 * RATE)
            for j in rng.choice(len(speech), 5, replace=False):
                clip = np.resize(speech[j], 3 * RATE)
                babble += clip / (np.std(clip) + 1e-9)
            _write(f"{noise_dir}/babble/{i}.wav", babble)
        for i in range(6):
            n = int(rng.uniform(0.2, 0.6) * RATE)
            rir = rng.standard_normal(n) * np.exp(-np.arange(n) / (rng.uniform(0.03, 0.15) * RATE))
            rir[0] = 1.0 + abs(rir).max()
            rir = np.concatenate([np.zeros(int(rng.integers(0, 160))), rir])
            _write(f"{rir_dir}/room{i % 2}/{i}.wav", rir)
        folders[name] = {
            "noise": _materialize(
                noise_dir, noise_dir + "_run", speaker_from_path=True, eval_fraction=0.0
            ),
            "rirs": _materialize(
                rir_dir, rir_dir + "_run", speaker_from_path=True, eval_fraction=0.0
            ),
        }
    return folders


def corrupt(waves, noise, rirs, snr_db: float, seed: int) -> list[np.ndarray]:
    """Each waveform reverberated by a random held-out RIR (unit energy, from its peak) and mixed
    with a random held-out noise window at `snr_db`."""
    rng = np.random.default_rng(seed)
    out = []
    for wave in waves:
        rir = rirs[rng.integers(len(rirs))]
        rir = rir[np.argmax(np.abs(rir)) :]
        wet = np.convolve(wave, rir / np.sqrt(np.sum(rir**2)))[: len(wave)]
        clip = np.resize(noise[rng.integers(len(noise))], len(wave) + RATE)
        start = rng.integers(RATE)
        window = clip[start : start + len(wave)]
        gain = np.sqrt(np.mean(wet**2) / (np.mean(window**2) * 10 ** (snr_db / 10)))
        out.append((wet + gain * window).astype(np.float32))
    return out


def eval_batches(waves, labels, features: AudioFeatureConfig, batch: int = 16):
    """Whole utterances in pad mode, as the trainer's eval split."""
    pad = AudioFeatureConfig(mode="pad", num_mel_bins=features.num_mel_bins)
    batches = []
    for start in range(0, len(waves), batch):
        pcm = [
            np.clip(w * 32768, -32768, 32767).astype("<i2").tobytes()
            for w in waves[start : start + batch]
        ]
        out = audio_features(tf.constant(pcm), pad)
        batches.append(
            {**{k: out[k] for k in ("features", "lengths")}, "label": labels[start : start + batch]}
        )
    return batches


def train_and_score(run, augment, features, epochs, eval_sets, seed=0) -> dict:
    keras.utils.set_random_seed(seed)
    sampler = ClassBalancedSampler(
        run,
        record_set="train",
        n_classes_per_batch=N_C,
        n_samples_per_class=N_P,
        epoch_mode="samples",
        features=features,
        seed=seed,
        augment=augment,
    )
    dataset = sampler.dataset().map(
        lambda b: {
            "features": b["features"],
            "lengths": tf.cast(b["lengths"], tf.int32),
            "label": b["label"],
        }
    )
    model = speaker.SpeakerEmbeddingModel(
        features.num_mel_bins, n_samples_per_class=N_P, channels=64, embedding_dim=64
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    start = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, verbose=0)
    result = {
        "train_s": time.perf_counter() - start,
        "classes": sampler.report.num_classes,
        "batches_per_epoch": sampler.num_batches,
        "loss_last_epoch": float(history.history["loss"][-1]),
    }
    for name, batches in eval_sets.items():
        trials = verification.verification_trials(model.embedding_model, batches)
        result[f"eer_{name}"] = verification.verification_metrics(trials)["eer"]
    return result


def time_costs(run, folders, repeats: int) -> dict:
    features = AudioFeatureConfig(crop_seconds=2.0, num_mel_bins=80)
    store = open_run(run).store("train")
    index = tf.range(N_C * N_P, dtype=tf.int64)
    records = parse_audio_examples(store.read(index), RATE)["audio"]
    labels = index % 5 + (index % 3) * 1000  # every speed factor, with C = 1000
    noise = AdditiveNoise(folders["noise"], probability=1.0)
    reverb = Reverberation(folders["rirs"], probability=1.0)
    configs = {
        "noise": SpeakerAugmentConfig(noise=noise),
        "rir": SpeakerAugmentConfig(reverb=reverb),
        "speed": SpeakerAugmentConfig(speed_factors=SPEEDS),
        "all": SpeakerAugmentConfig(noise=noise, reverb=reverb, speed_factors=SPEEDS),
    }
    functions = {
        "front_end": tf.function(
            lambda seed: audio_features(records, features, seed, positions=index)["features"]
        )
    }
    for name, augment in configs.items():
        augmenter = SpeakerAugmenter(augment, features, num_classes=1000)
        functions[name] = tf.function(
            lambda seed, a=augmenter: a.features_of(records, labels, seed, index)["features"]
        )
    times = {name: [] for name in functions}
    for function in functions.values():
        function(tf.constant([0, 0], tf.int64)).numpy()  # trace and warm up
    for repeat in range(repeats):
        for name, function in functions.items():
            seed = tf.constant([repeat + 1, 0], tf.int64)
            start = time.perf_counter()
            for _ in range(5):
                function(seed).numpy()
            times[name].append((time.perf_counter() - start) / 5 * 1000)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return {
        "batch": f"{N_C * N_P} x 2 s at 16 kHz, 80 mel bins",
        "ms_per_batch": medians,
        "ratio_to_front_end": {n: medians[n] / medians["front_end"] for n in medians},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and epochs")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--snr_db", type=float, default=5.0, help="SNR of the noisy held-out set")
    parser.add_argument("--output", default=os.path.join(RESULTS, "bench_augment.json"))
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    epochs = args.epochs or (3 if args.quick else 12)
    report: dict = {"load_average_at_start": os.getloadavg(), "repeats": repeats, "epochs": epochs}
    with tempfile.TemporaryDirectory() as root:
        run = _materialize(
            config.SPEAKER_CORPUS_DIR,
            os.path.join(root, "speakers"),
            manifest=config.SPEAKER_MANIFEST,
            eval_fraction=0.3,
        )
        train_waves, _ = _pcm(run, "train")
        eval_waves, eval_labels = _pcm(run, "eval")
        folders = make_clip_sets(root, train_waves, eval_waves, seed=0)
        report["cost"] = time_costs(run, folders["train"], repeats)
        features = AudioFeatureConfig(crop_seconds=1.0, num_mel_bins=40)
        noise, _ = _pcm(folders["held_out"]["noise"], "train")
        rirs, _ = _pcm(folders["held_out"]["rirs"], "train")
        eval_sets = {
            "clean": eval_batches(eval_waves, eval_labels, features),
            "noisy": eval_batches(
                corrupt(eval_waves, noise, rirs, args.snr_db, 1), eval_labels, features
            ),
        }
        augment = SpeakerAugmentConfig(
            noise=AdditiveNoise(folders["train"]["noise"], snr_db=(0.0, 15.0), probability=0.6),
            reverb=Reverberation(folders["train"]["rirs"], probability=0.5),
            speed_factors=SPEEDS,
        )
        report["eer"] = {
            "held_out_speakers": int(np.unique(eval_labels).size),
            "held_out_utterances": len(eval_waves),
            "noisy_snr_db": args.snr_db,
            "without_augmentation": train_and_score(run, None, features, epochs, eval_sets),
            "with_augmentation": train_and_score(run, augment, features, epochs, eval_sets),
            # Speed perturbation triples the batches of an epoch: the same steps without it.
            "without_augmentation_same_steps": train_and_score(
                run, None, features, epochs * len(SPEEDS), eval_sets
            ),
        }
    report["load_average_at_end"] = os.getloadavg()
    cost = report["cost"]["ms_per_batch"]
    print(f"load average at start {report['load_average_at_start']}")
    print(f"load average at end {report['load_average_at_end']}")
    print(f"cost per batch ({report['cost']['batch']}), median of {repeats}:")
    for name, ms in cost.items():
        print(f"  {name:10s} {ms:8.1f} ms  {report['cost']['ratio_to_front_end'][name]:5.2f}x")
    print(f"EER after {epochs} epochs, held-out speakers clean / noisy ({args.snr_db:g} dB + RIR):")
    for name in ("without_augmentation", "with_augmentation", "without_augmentation_same_steps"):
        row = report["eer"][name]
        print(
            f"  {name:32s} clean {row['eer_clean']:.3f}  noisy {row['eer_noisy']:.3f}  "
            f"({row['classes']} classes, {row['batches_per_epoch']} batches an epoch, "
            f"{row['train_s']:.0f} s)"
        )
    write_report(args.output, report)


if __name__ == "__main__":
    main()
