"""Benchmark: the audio job's decode + resample + write, and soxr against tensorflow-io's resampler.

1. Materialization rate of `run_audio` (`--speaker_from_path`, the DirectRunner in memory, and
   with 2 worker processes: `JOB_MODES`) on a corpus of 16-bit WAV clips of 3-8 s, half at
   44.1 kHz (resampled to 16 kHz) and half at 16 kHz (stored as they are), against a plain
   Python loop that lists, decodes (the same `audio.decode_audio`), builds the same Examples
   and writes the same shards and class index;
   the outputs are asserted byte-identical (run ids aside). Medians of `--repeats` interleaved
   runs, after a warm-up job; the job's fixed start-up (a 4-clip run, in each mode) is reported
   beside it, and the same comparison runs once more on `--scale_clips` clips, where it is
   amortized.
2. The resampler alone, 44.1 -> 16 kHz on a 4 s clip: soxr (HQ, what the job uses) against
   `tfio.audio.resample`, which takes hundreds of ms per clip, so only `--tfio_clips` clips.

Rates are clips/s and hours of audio per CPU hour (CPU time of this process, where the in-memory
runner runs, and of its finished children, the worker processes).

    .venv/bin/python bench/bench_audio.py [--quick] [--clips N] [--repeats R] [--scale_clips N]

Prints ratios and a JSON result (also written to bench/results/bench_audio.json).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import soundfile
import soxr

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    AudioConfig,
    ShardingConfig,
    audio,
    manifest,
    paths,
    pictures,
    run_audio,
)
from tfx_dynamic_inputs.materialize.audio_pipeline import audio_example
from tfx_dynamic_inputs.materialize.splits import TRAIN

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAMPLE_RATE = 16000
NUM_SHARDS = 4
NUM_SPEAKERS = 20
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
# The job's runs, by name: its Beam pipeline arguments.
JOB_MODES = {"beam_in_memory": IN_MEMORY, "beam_2_processes": TWO_PROCESSES}


def make_corpus(root: str, num_clips: int, seed: int = 0) -> float:
    """`num_clips` WAV clips of 3-8 s in VoxCeleb layout (`id1xxxx/<video>/<n>.wav`), every
    other one at 44.1 kHz; returns their total duration in seconds."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for i in range(num_clips):
        rate = 44100 if i % 2 else SAMPLE_RATE
        seconds = rng.uniform(3, 8)
        t = np.arange(int(seconds * rate)) / rate
        # Voiced-like: a gliding harmonic tone under a syllable-rate envelope, plus noise.
        pitch = rng.uniform(90, 250) * (1 + 0.1 * np.sin(2 * np.pi * 0.5 * t))
        phase = 2 * np.pi * np.cumsum(pitch) / rate
        voiced = sum(np.sin(k * phase) / k for k in range(1, 6))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3, 6) * t) ** 2
        signal = 0.2 * envelope * voiced + rng.normal(0, 0.01, len(t))
        path = os.path.join(root, f"id1{i % NUM_SPEAKERS:04d}", f"video{i % 7}", f"{i:05d}.wav")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        soundfile.write(path, signal.astype(np.float32), rate, subtype="PCM_16")
        total += len(t) / rate
    return total


def plain_loop(root: str, output_dir: str) -> int:
    """The baseline: one process, one pass; the same listing, decode, Examples, shard plan
    (`NUM_SHARDS` equal shards) and index files as the Beam job, on clean input."""
    utterances = {}
    for path in paths.list_files(root):
        row = manifest.row_of_path(paths.relative_id(root, path))
        with paths.open_input(root, path) as file:
            waveform = audio.decode_audio_file(file, row.id, SAMPLE_RATE)
        utterances[row.id] = (row.speaker, waveform.samples.astype("<i2").tobytes())
    ids = sorted(utterances, key=str.encode)
    vocabulary = sorted({speaker for speaker, _ in utterances.values()})
    class_of = {speaker: i for i, speaker in enumerate(vocabulary)}
    class_ids = np.array([class_of[utterances[i][0]] for i in ids], np.int64)
    records = [
        audio_example(
            i, utterances[i][1], SAMPLE_RATE, class_of[utterances[i][0]], utterances[i][0]
        )
        for i in ids
    ]
    num_shards = min(NUM_SHARDS, len(ids))
    starts = (np.arange(num_shards + 1) * len(ids)) // num_shards
    layout.write_record_set(
        output_dir,
        TRAIN,
        (records[start:end] for start, end in zip(starts[:-1], starts[1:], strict=True)),
        num_shards,
        ids,
    )
    layout.save_class_index(output_dir, TRAIN, class_ids, len(vocabulary), vocabulary)
    return len(ids)


def beam_job(root: str, output_dir: str, pipeline_args: list[str] = IN_MEMORY) -> int:
    summary = run_audio(
        AudioConfig(
            root=root,
            output_dir=output_dir,
            speaker_from_path=True,
            sample_rate=SAMPLE_RATE,
            eval_fraction=0.0,
            sharding=ShardingConfig(num_shards=NUM_SHARDS),
            overwrite=True,
            beam_pipeline_args=tuple(pipeline_args),
        )
    )
    return sum(s["num_records"] for s in summary["record_sets"].values())


def comparable_files(output_dir: str) -> dict[str, str]:
    """SHA-256 of the shards and indexes by path relative to the run; JSON files without their
    run id, and not the files the baseline does not write (summary, rejects, run marks, the
    TensorBoard pictures)."""
    skipped = {layout.SUMMARY_FILE, layout.REJECTS_FILE, layout.RUN_FILE, layout.CLAIM_FILE}
    files = {}
    for relative, path in pictures.data_files(output_dir):
        name = os.path.basename(path)
        if name in skipped:
            continue
        with open(path, "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            content = json.loads(data)
            content.pop(layout.RUN_ID_KEY, None)
            data = json.dumps(content, sort_keys=True).encode()
        files[relative] = hashlib.sha256(data).hexdigest()
    return files


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """Median wall and CPU seconds of `repeats` calls, and the last result. CPU is this
    process's and its finished children's (the worker processes of `TWO_PROCESSES`)."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), _cpu_seconds()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu_seconds() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def resampler_rates(num_soxr: int, num_tfio: int) -> dict:
    """ms per 4 s clip (44.1 -> 16 kHz, float32 mono) of soxr and of tensorflow-io."""
    import tensorflow as tf  # only here: the job itself never imports TensorFlow
    import tensorflow_io as tfio

    rng = np.random.default_rng(1)
    clips = [rng.normal(0, 0.1, 4 * 44100).astype(np.float32) for _ in range(4)]
    soxr.resample(clips[0], 44100, SAMPLE_RATE, quality="HQ")  # warm-up
    wall_soxr, cpu_soxr, _ = timed(
        lambda: [soxr.resample(clips[i % 4], 44100, SAMPLE_RATE, "HQ") for i in range(num_soxr)],
        3,
    )
    tensors = [tf.constant(clip[:, None]) for clip in clips]
    tfio.audio.resample(tensors[0], rate_in=44100, rate_out=SAMPLE_RATE)  # builds the op
    wall_tfio, cpu_tfio, _ = timed(
        lambda: [
            tfio.audio.resample(tensors[i % 4], rate_in=44100, rate_out=SAMPLE_RATE).numpy()
            for i in range(num_tfio)
        ],
        1,
    )
    ms = {"soxr": 1000 * wall_soxr / num_soxr, "tensorflow_io": 1000 * wall_tfio / num_tfio}
    cpu_s = {"soxr": cpu_soxr / num_soxr, "tensorflow_io": cpu_tfio / num_tfio}
    return {
        "clip_seconds": 4.0,
        "clips_timed": {"soxr": num_soxr, "tensorflow_io": num_tfio},
        "ms_per_clip": {k: round(v, 3) for k, v in ms.items()},
        "audio_hours_per_cpu_hour": {k: round(4.0 / v, 1) for k, v in cpu_s.items()},
        "soxr_speedup": round(ms["tensorflow_io"] / ms["soxr"], 1),
    }


def compare(root: str, workdir: str, repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of the plain loop and of the Beam job in each of `JOB_MODES`,
    interleaved so that load from other processes hits them alike; asserts their outputs
    byte-identical."""
    plain_dir = os.path.join(workdir, "plain")

    def fresh_plain() -> int:
        shutil.rmtree(plain_dir, ignore_errors=True)
        return plain_loop(root, plain_dir)

    runs: dict[str, list[tuple[float, float]]] = {"plain_loop": [], **{m: [] for m in JOB_MODES}}
    for _ in range(repeats):
        wall, cpu, written = timed(fresh_plain, 1)
        runs["plain_loop"].append((wall, cpu))
        for mode, pipeline_args in JOB_MODES.items():
            output_dir = os.path.join(workdir, mode)
            wall, cpu, beam_written = timed(
                functools.partial(beam_job, root, output_dir, pipeline_args), 1
            )
            runs[mode].append((wall, cpu))
            assert beam_written == written, (mode, beam_written, written)
    expected = comparable_files(plain_dir)
    for mode in JOB_MODES:
        output_dir = os.path.join(workdir, mode)
        assert comparable_files(output_dir) == expected, (
            f"the Beam job's output ({mode}) differs from the plain loop's"
        )
        shutil.rmtree(output_dir)
    shutil.rmtree(plain_dir)
    return {
        name: (statistics.median(w for w, _ in times), statistics.median(c for _, c in times))
        for name, times in runs.items()
    }


def summarize(num_clips: int, audio_seconds: float, timings: dict, startup_s: float) -> dict:
    rates = {name: num_clips / wall for name, (wall, _) in timings.items()}
    steady = num_clips / max(timings["beam_in_memory"][0] - startup_s, 1e-9)
    return {
        "clips": num_clips,
        "audio_hours": round(audio_seconds / 3600, 4),
        "seconds_median": {name: round(wall, 3) for name, (wall, _) in timings.items()},
        "clips_per_s": {name: round(rate, 1) for name, rate in rates.items()},
        "audio_hours_per_cpu_hour": {
            name: round(audio_seconds / cpu, 1) for name, (_, cpu) in timings.items()
        },
        "ratio_vs_plain": {
            **{mode: round(rates[mode] / rates["plain_loop"], 3) for mode in JOB_MODES},
            "beam_in_memory_without_startup": round(steady / rates["plain_loop"], 3),
        },
        "outputs_byte_identical": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 clips, one repeat")
    parser.add_argument("--clips", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--scale_clips",
        type=int,
        default=None,
        help="clips of a second comparison, where the job's start-up is amortized "
        "(default 2000, 0 with --quick; 0 skips it)",
    )
    parser.add_argument("--tfio_clips", type=int, default=5)
    args = parser.parse_args()
    num_clips = 40 if args.quick else args.clips
    repeats = 1 if args.quick else args.repeats
    scale_clips = args.scale_clips if args.scale_clips is not None else 0 if args.quick else 2000
    tfio_clips = 2 if args.quick else args.tfio_clips
    workdir = tempfile.mkdtemp(prefix="bench_audio_")
    try:
        tiny = os.path.join(workdir, "tiny")
        make_corpus(tiny, 4, seed=1)
        # The first job in a process pays one-time imports (TensorFlow, for the config's path
        # checks): a warm-up run, then the start-up of a 4-clip job.
        tiny_out = os.path.join(workdir, "tiny_out")
        beam_job(tiny, tiny_out)
        startup_s, _, _ = timed(lambda: beam_job(tiny, tiny_out), repeats)
        startup_2_s, _, _ = timed(lambda: beam_job(tiny, tiny_out, TWO_PROCESSES), repeats)
        root = os.path.join(workdir, "vox")
        audio_seconds = make_corpus(root, num_clips)
        result = {
            "inputs": "16-bit mono WAV, 3-8 s, half at 44.1 kHz (resampled), half at 16 kHz",
            "repeats": repeats,
            **summarize(num_clips, audio_seconds, compare(root, workdir, repeats), startup_s),
            "beam_startup_s": round(startup_s, 3),
            "beam_2_processes_startup_s": round(startup_2_s, 3),
        }
        shutil.rmtree(root)
        if scale_clips:
            root = os.path.join(workdir, "scale")
            scale_seconds = make_corpus(root, scale_clips, seed=2)
            timings = compare(root, workdir, repeats)
            result["scale"] = summarize(scale_clips, scale_seconds, timings, startup_s)
        result["resampling_44k1_to_16k"] = resampler_rates(num_soxr=200, num_tfio=tfio_clips)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    runs = [result] + ([result["scale"]] if "scale" in result else [])
    for run in runs:
        for name in (*JOB_MODES, "beam_in_memory_without_startup"):
            label = f"{name}, {run['clips']} clips"
            print(f"{label:50s} {run['ratio_vs_plain'][name]:.2f}x the plain loop")
    label = "resampling a 4 s clip, soxr vs tensorflow-io"
    print(f"{label:50s} {result['resampling_44k1_to_16k']['soxr_speedup']:.0f}x")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_audio.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
