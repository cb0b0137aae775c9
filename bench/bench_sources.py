"""Benchmark: building a record store from in-memory arrays (`record_store_from`), the way users
hand NumPy arrays to either sampler.

Ours encodes numeric arrays a block of rows at a time (`ExampleEncoder.encode_rows`); the
baseline is the same records made element by element (`ExampleEncoder.encode` of each row, what
`record_store_from` ran before, and what a user's loop of `tf.train.Example(...)
.SerializeToString()` does at best). Both produce the same bytes (checked here on the first
block, and for every record by tests/inputs/test_sources.py). Two sources: int64 record numbers
[N], and {image: uint8 [N, 8, 8], label: int64 [N]}. Medians of `--repeats` interleaved repeats
(seconds), ratios, and the load average.

    .venv/bin/python bench/bench_sources.py [--quick] [--repeats R]

Prints a table and a JSON result (also written to bench/results/bench_sources.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from json_report import write_report

from tfx_dynamic_inputs.inputs import record_store_from
from tfx_dynamic_inputs.inputs.element_codec import ExampleEncoder, declared_components

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def sources(num_rows: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    return {
        "int64 [N]": np.arange(num_rows, dtype=np.int64),
        "{image uint8 [N, 8, 8], label}": {
            "image": rng.integers(0, 256, (num_rows, 8, 8), dtype=np.uint8),
            "label": rng.integers(0, 1000, num_rows),
        },
    }


def element_by_element(source) -> list[bytes]:
    """The baseline: every row's record from `ExampleEncoder.encode`."""
    encoder = ExampleEncoder(declared_components(source))
    arrays = tf.nest.flatten(source)
    return [
        encoder.encode(tf.nest.pack_sequence_as(source, [a[i] for a in arrays]))
        for i in range(len(arrays[0]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k rows instead of 1M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(RESULTS, "bench_sources.json"))
    args = parser.parse_args()
    num_rows = 100_000 if args.quick else 1_000_000
    report: dict = {"rows": num_rows, "repeats": args.repeats, "load_average": os.getloadavg()}
    for name, source in sources(num_rows).items():
        checked = min(num_rows, 4096)
        first = record_store_from(source).read(tf.range(checked, dtype=tf.int64)).numpy()
        head = tf.nest.map_structure(lambda array, n=checked: array[:n], source)
        if first.tolist() != element_by_element(head):
            raise AssertionError(f"{name}: the block encoding differs from encode's bytes")
        contenders = {"ours": record_store_from, "element_by_element": element_by_element}
        times: dict[str, list[float]] = {contender: [] for contender in contenders}
        for _ in range(args.repeats):
            for contender, build in contenders.items():
                start = time.perf_counter()
                build(source)
                times[contender].append(time.perf_counter() - start)
        ours, baseline = (statistics.median(times[c]) for c in contenders)
        report[name] = {
            "ours_s": ours,
            "element_by_element_s": baseline,
            "speedup": baseline / ours,
        }
        print(f"{name}, {num_rows} rows: {ours:.2f} s vs {baseline:.2f} s, {baseline / ours:.1f}x")
    report["load_average_at_end"] = os.getloadavg()
    write_report(args.output, report)


if __name__ == "__main__":
    main()
