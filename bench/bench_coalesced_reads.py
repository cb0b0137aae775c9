"""Benchmark: the native disk reader's one pread per run of adjacent records, against one a record.

`ReadRecordsByIndex` sorts a batch by (shard, offset) and reads frames that follow each other in
their shard with one `pread` (each frame still checked alone, CRCs on); `coalesce=False` is its
one-pread-a-record path. Both read the same batches from the same page-cached shards, interleaved
(`--repeats` rounds, each round every pattern with and without coalescing), per pattern:

* `random`: 256 record numbers drawn uniformly (pairs' x: few neighbours);
* `runs_of_16`: 16 runs of 16 adjacent records at random starts (contiguous classes or clips);
* `sequential`: 256 adjacent records (a scan in record order).

Records are 3,072-byte payloads (32x32x3 images), 200k of them in 8 shards (`--quick`: 20k).
Prints records/s medians, the same-run ratios, the load average and a JSON result (also to
`--output`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tfx_dynamic_inputs import layout  # noqa: E402
from tfx_dynamic_inputs.inputs.record_store import RecordStore  # noqa: E402

BATCH = 256
PAYLOAD_BYTES = 3072
BATCHES_PER_TIMING = 100


def write_records(output_dir: str, num_records: int, num_shards: int) -> None:
    rng = np.random.default_rng(0)
    payloads = [rng.bytes(PAYLOAD_BYTES) for _ in range(num_records)]
    bounds = np.linspace(0, num_records, num_shards + 1).astype(int)
    run_id = layout.new_run_id()
    layout.write_record_set(
        output_dir,
        "x",
        (payloads[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)),
        num_shards,
        [f"x-{i:07d}" for i in range(num_records)],
        run_id,
    )
    layout.commit_run(output_dir, run_id)


def batches(pattern: str, num_records: int, rng: np.random.Generator) -> list[tf.Tensor]:
    out = []
    for _ in range(BATCHES_PER_TIMING):
        if pattern == "random":
            batch = rng.integers(0, num_records, BATCH)
        elif pattern == "runs_of_16":
            starts = rng.integers(0, num_records - 16, BATCH // 16)
            batch = (starts[:, None] + np.arange(16)).ravel()
        else:
            start = int(rng.integers(0, num_records - BATCH))
            batch = np.arange(start, start + BATCH)
        out.append(tf.constant(batch, tf.int64))
    return out


def records_per_s(read, batch_list: list[tf.Tensor]) -> tuple[float, float]:
    """Records per second and CPU microseconds per record (all threads) of reading the batches."""
    started, cpu_started = time.perf_counter(), time.process_time()
    for batch in batch_list:
        read(batch)[0].numpy()
    records = BATCH * len(batch_list)
    cpu_us = (time.process_time() - cpu_started) / records * 1e6
    return records / (time.perf_counter() - started), cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k records, 3 repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--output", default="bench/results/coalesced_reads.json")
    args = parser.parse_args()
    num_records = 20_000 if args.quick else 200_000
    repeats = args.repeats or (3 if args.quick else 7)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-coalesce-") as scratch:
        write_records(scratch, num_records, num_shards=8)
        store = RecordStore.open(scratch, "x", backend="disk", reader="native")
        # Eager calls: each one the op's kernel, as a tf.data map runs it per batch.
        readers = {
            "coalesced": store._native_reader,
            "one_pread_each": lambda indices: store._native_reader(indices, coalesce=False),
        }
        rng = np.random.default_rng(1)
        patterns = {
            name: batches(name, num_records, rng) for name in ("random", "runs_of_16", "sequential")
        }
        for batch_list in patterns.values():  # warm the page cache
            for read in readers.values():
                records_per_s(read, batch_list)
        rates = {f"{p}_{m}": [] for p in patterns for m in readers}
        cpu = {f"{p}_{m}": [] for p in patterns for m in readers}
        for repeat in range(repeats):
            for name, batch_list in patterns.items():
                # Alternate which goes first, so that neither always follows the other.
                for mode in list(readers)[:: 1 if repeat % 2 else -1]:
                    rate, cpu_us = records_per_s(readers[mode], batch_list)
                    rates[f"{name}_{mode}"].append(rate)
                    cpu[f"{name}_{mode}"].append(cpu_us)
    result = {
        "num_records": num_records,
        "payload_bytes": PAYLOAD_BYTES,
        "batch": BATCH,
        "repeats": repeats,
        "load_average": [load_start, os.getloadavg()],
        "records_per_s_median": {k: round(statistics.median(v)) for k, v in rates.items()},
        "cpu_us_per_record_median": {k: round(statistics.median(v), 2) for k, v in cpu.items()},
        "ratio_coalesced_to_one_each": {
            p: round(
                statistics.median(
                    [
                        a / b
                        for a, b in zip(
                            rates[f"{p}_coalesced"], rates[f"{p}_one_pread_each"], strict=True
                        )
                    ]
                ),
                2,
            )
            for p in patterns
        },
    }
    for p in patterns:
        print(
            f"{p:>11}: coalesced {result['records_per_s_median'][f'{p}_coalesced']:,} records/s, "
            f"one pread each {result['records_per_s_median'][f'{p}_one_pread_each']:,}: "
            f"{result['ratio_coalesced_to_one_each'][p]}x; CPU us/record "
            f"{result['cpu_us_per_record_median'][f'{p}_coalesced']} vs "
            f"{result['cpu_us_per_record_median'][f'{p}_one_pread_each']} "
            f"(load {load_start[0]:.1f})"
        )
    print(json.dumps(result, indent=1))
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
