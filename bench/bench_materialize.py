"""Benchmark: the Beam pairs job against a plain single-process loop, and encoded vs raw images.

1. Materialization rate (records/s, x + y records) of `run_pairs` on DirectRunner, in memory
   and with two worker processes, against a plain Python loop that writes the same shards and
   indexes from the same input (asserted byte-identical). Medians of `--repeats` runs.
   Two-worker runs also pay a fixed start-up (worker processes importing Beam); it is
   measured on a 40-image job and reported separately.
2. The same two-worker comparison at each size of `--scale_records` (comma-separated), where
   that start-up is amortized (one run each, outputs asserted byte-identical; 0 skips it).
3. Training read rate (records/s) of the two image storages: a tf.data pass (TFRecordDataset
   -> parse_example -> decode to uint8 [H, W, 3]) over the same images stored encoded and raw.

    .venv/bin/python bench/bench_materialize.py [--quick] [--records N] [--repeats R]
        [--scale_records N[,N...]]

Prints ratios and a JSON result (also written to bench/results/bench_materialize.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf
from PIL import Image

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    PairsConfig,
    ShardingConfig,
    images,
    pair_list,
    paths,
    pictures,
    run_pairs,
)
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.shards import IdTable, plan_shards

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MAX_SHARD_BYTES = 8 << 20
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def make_images(directory: str, names: list[str], size: int, rng: np.random.Generator) -> None:
    """Smooth gradients plus noise: PNGs that compress like photos, not like pure noise."""
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    for name in names:
        base = ramp[None, :, None] * rng.uniform(0.2, 1.0, 3) + ramp[:, None, None] * 0.3
        pixels = np.clip(base + rng.normal(0, 12, (size, size, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(directory, name))


def make_inputs(root: str, num_records: int, size: int, degree: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_x = num_records // 2
    n_y = num_records - n_x
    x_names = [f"x{i:07d}.png" for i in range(n_x)]
    y_names = [f"y{i:07d}.png" for i in range(n_y)]
    for side, names in (("x", x_names), ("y", y_names)):
        os.makedirs(os.path.join(root, side))
        make_images(os.path.join(root, side), names, size, rng)
    with open(os.path.join(root, "pairs.jsonl"), "w") as f:
        for x in x_names:
            ys = rng.choice(n_y, degree, replace=False)
            f.write(json.dumps({"x": x, "y": [y_names[i] for i in ys]}) + "\n")
    return os.path.join(root, "x"), os.path.join(root, "y"), os.path.join(root, "pairs.jsonl")


def plain_loop(x_dir: str, y_dir: str, pairs_path: str, output_dir: str, storage) -> int:
    """The baseline: one process, one pass; the same per-file work (id and root checks, read,
    decode, Example), shard plan and index writing as the Beam job, on clean input."""
    sharding = ShardingConfig(max_shard_bytes=MAX_SHARD_BYTES)
    records = {}
    for record_set, root in (("x", x_dir), ("y", y_dir)):
        records[record_set] = {}
        for path in paths.list_files(root):
            record_id = paths.normalize_id(paths.relative_id(root, path))
            data = paths.read_bytes(root, path)
            records[record_set][record_id] = images.image_example(record_id, data, storage)
    edges = {}
    with open(pairs_path) as f:
        for line in f:
            entry = pair_list.parse_entry(line, "jsonl")
            edges.setdefault(entry.x_id, set()).update(y for y in entry.y_ids if y in records["y"])
    records["x"] = {x: r for x, r in records["x"].items() if edges.get(x)}
    record_numbers = {}
    for record_set, by_id in records.items():
        ids = sorted(by_id, key=str.encode)
        record_numbers[record_set] = {record_id: i for i, record_id in enumerate(ids)}
        table = IdTable(IdIndex.from_ids(ids), np.array([len(by_id[i]) for i in ids], np.int64))
        starts = plan_shards(record_set, table, sharding).shard_starts
        layout.write_record_set(
            output_dir,
            record_set,
            (
                [by_id[i] for i in ids[start:end]]
                for start, end in zip(starts[:-1], starts[1:], strict=True)
            ),
            len(starts) - 1,
            ids,
        )
    x_ids = sorted(records["x"], key=str.encode)
    rows = [sorted(record_numbers["y"][y] for y in edges[x]) for x in x_ids]
    row_splits = np.concatenate([[0], np.cumsum([len(row) for row in rows])])
    values = np.concatenate([np.array(row, np.int64) for row in rows])
    layout.save_csr(layout.pairs_index_dir(output_dir), row_splits, values)
    return len(records["x"]) + len(records["y"])


def comparable_files(output_dir: str) -> dict[str, str]:
    """SHA-256 of the shards and indexes (not summary.json / rejects.jsonl, which the baseline
    skips, nor the run id a Beam run names in run.json and shards.json, nor its TensorBoard
    pictures), by path relative to the run; digests keep a 200k-record run's bytes out of
    memory."""
    files = {}
    for relative, path in pictures.data_files(output_dir):
        name = os.path.basename(path)
        if name == layout.RUN_FILE or relative in (layout.SUMMARY_FILE, layout.REJECTS_FILE):
            continue
        if name == layout.SHARDS_FILE:
            shards = layout.load_json(path)
            shards.pop(layout.RUN_ID_KEY, None)
            data = json.dumps(shards, sort_keys=True).encode()
        else:
            with open(path, "rb") as f:
                data = f.read()
        files[relative] = hashlib.sha256(data).hexdigest()
    return files


def beam_job(x_dir, y_dir, pairs_path, output_dir, beam_args, storage_mode="encoded", size=32):
    summary = run_pairs(
        PairsConfig(
            x_dir=x_dir,
            y_dir=y_dir,
            pairs=pairs_path,
            output_dir=output_dir,
            image_storage=storage_mode,
            raw_height=size,
            raw_width=size,
            sharding=ShardingConfig(max_shard_bytes=MAX_SHARD_BYTES),
            overwrite=True,
            beam_pipeline_args=tuple(beam_args),
        )
    )
    return sum(s["num_records"] for s in summary["record_sets"].values())


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def scale_run(
    workdir: str, num_records: int, size: int, degree: int, storage: images.ImageStorage
) -> dict:
    """The plain loop against two Beam worker processes on `num_records` fresh images, one run
    each (a repeat would cost minutes at this size); the outputs must be byte-identical."""
    root = os.path.join(workdir, "scale")
    inputs = make_inputs(os.path.join(root, "in"), num_records, size, degree, seed=2)
    plain_dir, beam_dir = os.path.join(root, "plain"), os.path.join(root, "beam_2_processes")
    seconds = {}
    seconds["plain_loop"], written = timed(lambda: plain_loop(*inputs, plain_dir, storage), 1)
    seconds["beam_2_processes"], beam_written = timed(
        lambda: beam_job(*inputs, beam_dir, TWO_PROCESSES), 1
    )
    assert beam_written == written, (beam_written, written)
    assert comparable_files(beam_dir) == comparable_files(plain_dir), (
        f"beam_2_processes output differs from the plain loop at {num_records} records"
    )
    shutil.rmtree(root)
    rates = {name: written / s for name, s in seconds.items()}
    return {
        "records": written,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "records_per_s": {k: round(v, 1) for k, v in rates.items()},
        "ratio_vs_plain": {
            "beam_2_processes": round(rates["beam_2_processes"] / rates["plain_loop"], 3)
        },
        "outputs_byte_identical": True,
    }


def read_rate(output_dir: str, record_set: str, size: int, repeats: int) -> float:
    """records/s of a tf.data pass that yields decoded uint8 [batch, size, size, 3] images."""
    shards = [
        os.path.join(output_dir, p)
        for p in layout.load_json(
            os.path.join(layout.index_dir(output_dir, record_set), layout.SHARDS_FILE)
        )["shards"]
    ]
    spec = {
        layout.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        layout.IMAGE_FORMAT_KEY: tf.io.FixedLenFeature([], tf.string),
    }

    def decode(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        encoded = tf.io.decode_image(parsed[layout.IMAGE_KEY], channels=3, expand_animations=False)
        raw = tf.io.decode_raw(parsed[layout.IMAGE_KEY], tf.uint8)
        return tf.cond(
            tf.equal(parsed[layout.IMAGE_FORMAT_KEY], b"raw"),
            lambda: tf.reshape(raw, [size, size, 3]),
            lambda: tf.reshape(encoded, [size, size, 3]),
        )

    dataset = (
        tf.data.TFRecordDataset(shards)
        .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(256)
        .prefetch(2)
    )
    rates = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        count = sum(int(batch.shape[0]) for batch in dataset)
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates[1:])  # the first pass warms the page cache and the graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k records, one repeat")
    parser.add_argument("--records", type=int, default=24000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--degree", type=int, default=4)
    parser.add_argument(
        "--scale_records",
        default=None,
        help="comma-separated record counts of the plain loop vs 2-process run, one repeat "
        "each; 0 skips it (default 200000, 4000 with --quick)",
    )
    args = parser.parse_args()
    num_records = 2000 if args.quick else args.records
    repeats = 1 if args.quick else args.repeats
    scale_records = args.scale_records
    if scale_records is None:
        scale_records = "4000" if args.quick else "200000"
    scale_sizes = [int(n) for n in scale_records.split(",") if int(n) > 0]
    size = args.image_size
    workdir = tempfile.mkdtemp(prefix="bench_materialize_")
    try:
        x_dir, y_dir, pairs_path = make_inputs(
            os.path.join(workdir, "in"), num_records, size, args.degree
        )
        storage = images.ImageStorage("encoded")
        plain_dir = os.path.join(workdir, "plain")

        def fresh_plain():
            shutil.rmtree(plain_dir, ignore_errors=True)
            return plain_loop(x_dir, y_dir, pairs_path, plain_dir, storage)

        plain_s, written = timed(fresh_plain, repeats)
        expected = comparable_files(plain_dir)
        modes = {"beam_in_memory": IN_MEMORY, "beam_2_processes": TWO_PROCESSES}
        seconds = {"plain_loop": plain_s}
        for name, beam_args in modes.items():
            out = os.path.join(workdir, name)
            seconds[name], beam_written = timed(
                lambda out=out, beam_args=beam_args: beam_job(
                    x_dir, y_dir, pairs_path, out, beam_args
                ),
                repeats,
            )
            assert beam_written == written, (name, beam_written, written)
            assert comparable_files(out) == expected, f"{name} output differs from the plain loop"
        tiny = make_inputs(os.path.join(workdir, "tiny"), 40, size, 2, seed=1)
        startup_s, _ = timed(
            lambda: beam_job(*tiny, os.path.join(workdir, "tiny_out"), TWO_PROCESSES),
            repeats,
        )
        scale = [scale_run(workdir, n, size, args.degree, storage) for n in scale_sizes]

        rates = {name: written / s for name, s in seconds.items()}
        steady_2p = written / max(seconds["beam_2_processes"] - startup_s, 1e-9)
        raw_dir = os.path.join(workdir, "raw")
        beam_job(x_dir, y_dir, pairs_path, raw_dir, IN_MEMORY, "raw", size)
        read = {
            "encoded_png": read_rate(os.path.join(workdir, "beam_in_memory"), "y", size, repeats),
            "raw_uint8": read_rate(raw_dir, "y", size, repeats),
        }
        bytes_per_record = {
            "encoded_png": _bytes_per_record(os.path.join(workdir, "beam_in_memory"), "y"),
            "raw_uint8": _bytes_per_record(raw_dir, "y"),
        }
        result = {
            "records": written,
            "image_size": size,
            "repeats": repeats,
            "seconds_median": {k: round(v, 3) for k, v in seconds.items()},
            "records_per_s": {k: round(v, 1) for k, v in rates.items()},
            "ratio_vs_plain": {
                "beam_in_memory": round(rates["beam_in_memory"] / rates["plain_loop"], 3),
                "beam_2_processes": round(rates["beam_2_processes"] / rates["plain_loop"], 3),
                "beam_2_processes_without_startup": round(steady_2p / rates["plain_loop"], 3),
            },
            "beam_2_processes_startup_s": round(startup_s, 3),
            "outputs_byte_identical": True,
            "scale": scale,
            "train_read_records_per_s": {k: round(v, 1) for k, v in read.items()},
            "train_read_raw_over_encoded": round(read["raw_uint8"] / read["encoded_png"], 3),
            "bytes_per_record": bytes_per_record,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for name in ("beam_in_memory", "beam_2_processes", "beam_2_processes_without_startup"):
        label = f"{name}, {written} records"
        print(f"{label:50s} {result['ratio_vs_plain'][name]:.2f}x the plain loop")
    for run in scale:
        label = f"beam_2_processes, {run['records']} records"
        print(f"{label:50s} {run['ratio_vs_plain']['beam_2_processes']:.2f}x the plain loop")
    print(f"{'train read, raw vs encoded':50s} {result['train_read_raw_over_encoded']:.2f}x")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bench_materialize.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


def _bytes_per_record(output_dir: str, record_set: str) -> int:
    offsets = layout.load_npy(
        os.path.join(layout.index_dir(output_dir, record_set), layout.OFFSETS_FILE)
    )
    return int(np.mean(offsets[:, 2]))


if __name__ == "__main__":
    main()
