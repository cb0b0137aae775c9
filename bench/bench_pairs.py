"""Benchmark: per-epoch dynamic pairs vs what users run today, on one materialized run.

1. **Plan rate** (pairs planned per second), 100k x of average degree 8 (`--quick`: 20k):
   * baseline: the `Dataset.from_generator` pairing of shared/background/pairing-per-epoch.txt
     (a Python loop over x, `tf.random.shuffle` of each x's valid list, one pair per `yield`),
     reimplemented here yielding indices only. A full epoch takes minutes, so it is timed on the
     first `--baseline-x` x and extrapolated (reported as such);
   * ours: `PairPlanner.plan` (uniform and least_sampled) inside a `tf.function`, whole epoch.
2. **Scale**: one uniform (and one least_sampled) plan of 10M x, average degree 8 (`--quick`: 1M),
   whole epoch (`plan`) and one batch alone (`plan_batches`); and the time to an epoch's first
   plan row, planned whole against a block planned alone (what the datasets run).
3. **End to end** records/s (2 records per pair) of `dynamic_pairs` on the disk backend, reading
   and `parse_example`-ing x and y records by index, vs a sequential `TFRecordDataset` +
   `batch` + `parse_example` pass over the same shards. Page cache warm (one pass first). The disk
   backend with each reader (native `pread`, mapped shards, Python), without CRC checks, and the
   memory backend.
4. **Peak memory** (not with `--quick`): a run of >= 2 GB of shards; one process per
   measurement (peak RSS): the TF baseline (sequential read + parse of every record), the disk
   backend (`pread`, and mapped shards, whose pages count in RSS) and the memory backend (one
   epoch of pairs each). Big files are deleted afterwards.

Prints ratios and a JSON result (also written to `--output`). Medians of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tfx_dynamic_inputs import layout  # noqa: E402
from tfx_dynamic_inputs.inputs import (  # noqa: E402
    StoreOptions,
    ValidPairs,
    dynamic_pairs,
    open_pairs_run,
)
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_dataset  # noqa: E402
from tfx_dynamic_inputs.inputs.epoch_state import EpochState  # noqa: E402
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner  # noqa: E402

BATCH_SIZE = 256
AVERAGE_DEGREE = 8
FEATURES = {
    layout.ID_KEY: tf.io.FixedLenFeature([], tf.string),
    layout.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
    layout.HEIGHT_KEY: tf.io.FixedLenFeature([], tf.int64),
}


# --------------------------------------------------------------------------------- data


def random_csr(num_x: int, num_y: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Degrees uniform in [1, 2 * AVERAGE_DEGREE - 1] (mean AVERAGE_DEGREE), y uniform."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(1, 2 * AVERAGE_DEGREE, size=num_x, dtype=np.int64)
    row_splits = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    values = rng.integers(0, num_y, size=int(row_splits[-1]), dtype=np.int64)
    return row_splits, values


def image_records(num: int, side: int, prefix: str, seed: int) -> list[bytes]:
    """Raw-pixel image Examples, as the Beam stage writes them (`side` x `side` x 3)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=side * side * 3, dtype=np.uint8).tobytes()
    records = []
    for i in range(num):
        # Vary the first bytes so records differ without generating every pixel.
        image = i.to_bytes(8, "little") + pixels[8:]
        feature = {
            layout.ID_KEY: _bytes(f"{prefix}{i:08d}".encode()),
            layout.IMAGE_KEY: _bytes(image),
            layout.IMAGE_FORMAT_KEY: _bytes(b"raw"),
            layout.HEIGHT_KEY: _int(side),
            layout.WIDTH_KEY: _int(side),
            layout.CHANNELS_KEY: _int(3),
        }
        records.append(
            tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        )
    return records


def write_record_set(output_dir, record_set, num, side, num_shards, seed) -> None:
    bounds = np.linspace(0, num, num_shards + 1).astype(int)
    shards = (
        image_records(int(bounds[shard + 1] - bounds[shard]), side, record_set, seed + shard)
        for shard in range(num_shards)
    )
    ids = [f"{record_set}{i:08d}" for i in range(num)]
    layout.write_record_set(output_dir, record_set, shards, num_shards, ids)


def write_run(output_dir, num_x, num_y, side, num_shards) -> dict:
    write_record_set(output_dir, "x", num_x, side, num_shards, seed=1)
    write_record_set(output_dir, "y", num_y, side, max(1, num_shards // 4), seed=1000)
    row_splits, values = random_csr(num_x, num_y, seed=0)
    layout.save_csr(layout.pairs_index_dir(output_dir), row_splits, values)
    return {
        "num_x": num_x,
        "num_y": num_y,
        "num_pairs": len(values),
        "shard_bytes": shard_bytes(output_dir),
    }


def shard_bytes(output_dir: str) -> int:
    total = 0
    for record_set in ("x", "y"):
        directory = layout.examples_dir(output_dir, record_set)
        total += sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    return total


def all_shards(output_dir: str) -> list[str]:
    paths = []
    for record_set in ("x", "y"):
        directory = layout.examples_dir(output_dir, record_set)
        paths += sorted(os.path.join(directory, f) for f in os.listdir(directory))
    return paths


# --------------------------------------------------------------------------------- plan rate


def baseline_from_generator(valid_pairs: tf.RaggedTensor, num_x: int) -> tf.data.Dataset:
    """The background write-up's pairing, yielding (x index, y index) one pair at a time."""

    def pair_generator():
        for x_idx in range(num_x):
            curr_valid_y = valid_pairs[x_idx]
            selected_y_idx = tf.random.shuffle(curr_valid_y)[0]
            yield x_idx, selected_y_idx

    ds = tf.data.Dataset.from_generator(
        pair_generator,
        output_signature=(
            tf.TensorSpec(shape=[], dtype=tf.int64),
            tf.TensorSpec(shape=[], dtype=tf.int64),
        ),
    )
    return ds.shuffle(2048).batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)


def time_baseline(row_splits, values, subset_x: int, repeats: int) -> float:
    ragged = tf.RaggedTensor.from_row_splits(values, row_splits)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        pairs = sum(int(b[0].shape[0]) for b in baseline_from_generator(ragged, subset_x))
        times.append(time.perf_counter() - start)
        assert pairs == subset_x
    return subset_x / statistics.median(times)


def time_plan(valid: ValidPairs, strategy: str, repeats: int) -> float:
    """Median seconds of one epoch plan, traced once (as inside the tf.data graph)."""
    planner = PairPlanner(valid, strategy=strategy, seed=0, batch_size=BATCH_SIZE)
    plan = tf.function(planner.plan)
    plan(tf.constant(0, tf.int64))["y_index"].numpy()  # trace
    times = []
    for epoch in range(1, repeats + 1):
        start = time.perf_counter()
        plan(tf.constant(epoch, tf.int64))["y_index"].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_batch_plan(valid: ValidPairs, strategy: str, repeats: int) -> float:
    """Median seconds to plan one batch alone (`plan_batches`, what the datasets run per batch),
    at batch numbers spread over the epoch, interleaved over epochs."""
    planner = PairPlanner(valid, strategy=strategy, seed=0, batch_size=BATCH_SIZE)
    plan = tf.function(planner.plan_batches)
    plan(tf.constant(0, tf.int64), tf.constant([0], tf.int64))["y_index"].numpy()  # trace
    numbers = np.linspace(0, planner.num_batches - 1, 5 * repeats).astype(np.int64)
    times = []
    for epoch, number in enumerate(numbers, start=1):
        start = time.perf_counter()
        plan(tf.constant(epoch, tf.int64), tf.constant([number], tf.int64))["y_index"].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_first_rows(valid: ValidPairs, strategy: str, repeats: int) -> dict[str, float]:
    """Median seconds to an epoch's first plan row from a fresh iterator of `epoch_dataset`
    (what every epoch of the pairs datasets starts with), planned whole (`plan`) against a block
    planned alone (`plan_batches`), interleaved."""
    planner = PairPlanner(valid, strategy=strategy, seed=0, batch_size=BATCH_SIZE)
    forms = {
        "whole_epoch": {"plan_fn": planner.plan},
        "blocks_alone": {"batch_plan_fn": planner.plan_batches},
    }
    datasets = {
        form: epoch_dataset(**plan, num_batches=planner.num_batches, state=EpochState())
        for form, plan in forms.items()
    }
    times: dict[str, list[float]] = {form: [] for form in forms}
    for attempt in range(repeats + 1):
        for form, dataset in datasets.items():
            start = time.perf_counter()
            next(iter(dataset))
            if attempt:  # the first is the warm-up (tracing)
                times[form].append(time.perf_counter() - start)
    return {form: statistics.median(seconds) for form, seconds in times.items()}


def plan_rate(run_dir: str, baseline_x: int, repeats: int) -> dict:
    row_splits, values = layout.load_csr(layout.pairs_index_dir(run_dir), mmap=False)
    num_x = len(row_splits) - 1
    valid = ValidPairs.build((row_splits, values))
    baseline = time_baseline(row_splits, values, min(baseline_x, num_x), max(1, repeats // 2))
    result = {
        "num_x": num_x,
        "num_pairs": len(values),
        "baseline_from_generator_pairs_per_s": baseline,
        "baseline_timed_on_x": min(baseline_x, num_x),
        "baseline_epoch_s_extrapolated": num_x / baseline,
    }
    for strategy in ("uniform", "least_sampled"):
        seconds = time_plan(valid, strategy, repeats)
        result[f"{strategy}_epoch_s"] = seconds
        result[f"{strategy}_pairs_per_s"] = num_x / seconds
        result[f"{strategy}_speedup"] = num_x / seconds / baseline
    return result


def scale(num_x: int, repeats: int) -> dict:
    row_splits, values = random_csr(num_x, num_x // 4, seed=3)
    valid = ValidPairs.build((row_splits, values), num_y=num_x // 4)
    del row_splits, values
    result = {"num_x": num_x, "num_pairs": valid.num_pairs}
    for strategy in ("uniform", "least_sampled"):
        result[f"{strategy}_plan_s"] = time_plan(valid, strategy, repeats)
        result[f"{strategy}_batch_plan_s"] = time_batch_plan(valid, strategy, repeats)
        first_rows = time_first_rows(valid, strategy, repeats)
        result[f"{strategy}_first_row_whole_epoch_s"] = first_rows["whole_epoch"]
        result[f"{strategy}_first_row_blocks_alone_s"] = first_rows["blocks_alone"]
    return result


# --------------------------------------------------------------------------------- end to end


def parse(serialized):
    return tf.io.parse_example(serialized, FEATURES)


def sequential_baseline(paths: list[str]) -> tf.data.Dataset:
    return tf.data.TFRecordDataset(paths).batch(BATCH_SIZE).map(parse).prefetch(tf.data.AUTOTUNE)


def pairs_dataset(
    run_dir: str, backend: str, verify_crc: bool = True, reader: str = "auto"
) -> tf.data.Dataset:
    options = StoreOptions(
        backend=backend, memory_budget_bytes=1 << 40, verify_crc=verify_crc, reader=reader
    )
    x_store, y_store, valid = open_pairs_run(run_dir, store_options=options)
    return dynamic_pairs(x_store, y_store, valid, batch_size=BATCH_SIZE, parse_fn=parse)


def records_per_s(dataset: tf.data.Dataset, records_per_row: int) -> tuple[float, float]:
    """(records per second, CPU microseconds per record) of one pass, consumed inside the TF
    runtime (as a training loop would), so Python iteration overhead counts against neither
    contender. CPU time (all threads, user + system) shows the cost independently of how many
    cores other work on the machine leaves free."""
    cpu, start = time.process_time(), time.perf_counter()
    rows = dataset.reduce(tf.constant(0, tf.int64), lambda total, batch: total + _rows(batch))
    records = int(rows) * records_per_row
    return records / (time.perf_counter() - start), (time.process_time() - cpu) / records * 1e6


def _rows(batch) -> tf.Tensor:
    first = batch["x_index"] if "x_index" in batch else batch[layout.IMAGE_KEY]
    return tf.shape(first, out_type=tf.int64)[0]


def end_to_end(run_dir: str, repeats: int) -> dict:
    """Interleaved repeats (baseline, then each contender), so that load changes on the machine
    hit all of them alike; ratios are medians of the per-repeat ratios."""
    contenders = {
        "disk": (pairs_dataset(run_dir, "disk"), 2),
        "disk_mapped": (pairs_dataset(run_dir, "disk", reader="mapped"), 2),
        "disk_no_crc": (pairs_dataset(run_dir, "disk", verify_crc=False), 2),
        "disk_python_reader": (pairs_dataset(run_dir, "disk", reader="python"), 2),
        "memory": (pairs_dataset(run_dir, "memory"), 2),
    }
    baseline = sequential_baseline(all_shards(run_dir))
    records_per_s(baseline, 1)  # warm the page cache
    names = ["baseline", *contenders]
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            dataset, per_row = contenders.get(name, (baseline, 1))
            rate, cpu_us = records_per_s(dataset, per_row)
            rates[name].append(rate)
            cpu[name].append(cpu_us)
    disk_store = open_pairs_run(run_dir, store_options=StoreOptions(backend="disk"))[0]
    result = {
        "disk_reader": disk_store.disk_reader,
        "baseline_sequential_records_per_s": statistics.median(rates["baseline"]),
        "baseline_cpu_us_per_record": statistics.median(cpu["baseline"]),
        "repeats_records_per_s": rates,
        "repeats_cpu_us_per_record": cpu,
    }
    for name in contenders:
        result[f"{name}_records_per_s"] = statistics.median(rates[name])
        result[f"{name}_ratio"] = statistics.median(
            [ours / base for ours, base in zip(rates[name], rates["baseline"], strict=True)]
        )
        result[f"{name}_cpu_us_per_record"] = statistics.median(cpu[name])
    return result


# --------------------------------------------------------------------------------- memory


def peak_rss_worker(mode: str, run_dir: str) -> None:
    """Runs one measurement in this (fresh) process and prints its peak RSS in bytes."""
    if mode == "baseline":
        records_per_s(sequential_baseline(all_shards(run_dir)), 1)
    elif mode == "mapped":
        records_per_s(pairs_dataset(run_dir, "disk", reader="mapped"), 2)
    else:
        records_per_s(pairs_dataset(run_dir, mode), 2)
    print(json.dumps({"peak_rss_bytes": peak_rss_bytes()}))


def peak_rss_bytes() -> int:
    """VmHWM of this process. Not getrusage's ru_maxrss: Linux carries that over fork and exec
    from the parent, so a child started by a big parent would report the parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_memory(scratch: str, target_bytes: int) -> dict:
    side = 52  # 8 KB raw images
    record_bytes = side * side * 3 + 120
    num_x = int(target_bytes / record_bytes * 0.95)
    run_dir = os.path.join(scratch, "big")
    try:
        info = write_run(run_dir, num_x, max(1, num_x // 20), side, num_shards=16)
        result = {"shard_bytes": info["shard_bytes"], "num_x": num_x}
        for mode in ("baseline", "disk", "mapped", "memory"):
            output = subprocess.run(
                [sys.executable, __file__, "--peak-rss-worker", mode, run_dir],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result[f"{mode}_peak_rss_bytes"] = json.loads(output.strip().splitlines()[-1])[
                "peak_rss_bytes"
            ]
        for mode in ("disk", "mapped", "memory"):
            extra = result[f"{mode}_peak_rss_bytes"] - result["baseline_peak_rss_bytes"]
            result[f"{mode}_over_baseline_fraction_of_shards"] = extra / info["shard_bytes"]
        return result
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


# --------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--baseline-x", type=int, default=None, help="x timed for the baseline")
    parser.add_argument("--memory-gb", type=float, default=2.2, help="shard bytes, memory test")
    parser.add_argument(
        "--output", default=os.path.join(os.path.dirname(__file__), "results", "pairs.json")
    )
    parser.add_argument(
        "--parts",
        default="plan,scale,end_to_end,memory",
        help="comma-separated parts to run (memory runs only without --quick)",
    )
    parser.add_argument("--peak-rss-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_rss_worker:
        peak_rss_worker(*args.peak_rss_worker)
        return

    repeats = args.repeats or (3 if args.quick else 5)
    num_x = 20_000 if args.quick else 100_000
    baseline_x = args.baseline_x or (2_000 if args.quick else 10_000)
    scratch = tempfile.mkdtemp(prefix="bench-pairs-")
    try:
        run_dir = os.path.join(scratch, "run")
        started = time.perf_counter()
        report = {
            "quick": args.quick,
            "repeats": repeats,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        }
        parts = set(args.parts.split(","))
        if parts & {"plan", "end_to_end"}:
            report["run"] = write_run(run_dir, num_x, num_x // 5, side=32, num_shards=8)
        if "plan" in parts:
            report["plan_rate"] = plan_rate(run_dir, baseline_x, repeats)
        if "scale" in parts:
            report["scale"] = scale(1_000_000 if args.quick else 10_000_000, max(3, repeats // 2))
        if "end_to_end" in parts:
            report["end_to_end"] = end_to_end(run_dir, repeats)
        if "memory" in parts and not args.quick:
            report["peak_memory"] = peak_memory(scratch, int(args.memory_gb * (1 << 30)))
        report["seconds"] = time.perf_counter() - started
        report["load_average_at_end"] = os.getloadavg()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print_summary(report)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(report, f, indent=2, default=float)
    print(json.dumps(report, indent=2, default=float))


def print_summary(report: dict) -> None:
    if "plan_rate" in report:
        plan = report["plan_rate"]
        print(
            f"plan rate, {plan['num_x']} x: uniform {plan['uniform_speedup']:.0f}x, "
            f"least_sampled {plan['least_sampled_speedup']:.0f}x the from_generator baseline "
            f"({plan['baseline_from_generator_pairs_per_s']:.0f} pairs/s, timed on "
            f"{plan['baseline_timed_on_x']} x, extrapolated)"
        )
    if "scale" in report:
        scale_result = report["scale"]
        print(
            f"scale, {scale_result['num_x']} x: uniform plan "
            f"{scale_result['uniform_plan_s']:.2f} s, least_sampled "
            f"{scale_result['least_sampled_plan_s']:.2f} s; one batch of {BATCH_SIZE} alone "
            f"{scale_result['uniform_batch_plan_s'] * 1e3:.2f} / "
            f"{scale_result['least_sampled_batch_plan_s'] * 1e3:.2f} ms"
        )
        print(
            "  an epoch's first plan row: uniform {:.3f} s planned in blocks vs {:.3f} s whole, "
            "least_sampled {:.3f} vs {:.3f} s".format(
                scale_result["uniform_first_row_blocks_alone_s"],
                scale_result["uniform_first_row_whole_epoch_s"],
                scale_result["least_sampled_first_row_blocks_alone_s"],
                scale_result["least_sampled_first_row_whole_epoch_s"],
            )
        )
    if "end_to_end" in report:
        e2e = report["end_to_end"]
        print(
            f"end to end: disk backend ({e2e['disk_reader']} reader) {e2e['disk_ratio']:.2f}x "
            f"sequential TFRecordDataset ({e2e['disk_records_per_s']:.0f} vs "
            f"{e2e['baseline_sequential_records_per_s']:.0f} records/s); mapped shards "
            f"{e2e['disk_mapped_ratio']:.2f}x ({e2e['disk_mapped_records_per_s']:.0f}); "
            f"without CRC checks {e2e['disk_no_crc_ratio']:.2f}x; Python reader "
            f"{e2e['disk_python_reader_ratio']:.2f}x; memory backend {e2e['memory_ratio']:.2f}x"
        )
        print(
            "  CPU per record: baseline {:.1f} us, disk {:.1f} us, mapped shards {:.1f} us, disk "
            "without CRC {:.1f} us, Python reader {:.1f} us, memory {:.1f} us".format(
                e2e["baseline_cpu_us_per_record"],
                e2e["disk_cpu_us_per_record"],
                e2e["disk_mapped_cpu_us_per_record"],
                e2e["disk_no_crc_cpu_us_per_record"],
                e2e["disk_python_reader_cpu_us_per_record"],
                e2e["memory_cpu_us_per_record"],
            )
        )
    if "peak_memory" in report:
        memory = report["peak_memory"]
        print(
            f"peak memory over the TF baseline, {memory['shard_bytes'] / 2**30:.2f} GB of shards: "
            f"disk {memory['disk_over_baseline_fraction_of_shards']:.1%}, mapped shards "
            f"{memory['mapped_over_baseline_fraction_of_shards']:.1%} (page cache), memory "
            f"{memory['memory_over_baseline_fraction_of_shards']:.1%} of the shard bytes"
        )


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


if __name__ == "__main__":
    main()
