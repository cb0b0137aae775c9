"""Benchmark: group pairing without edges (`ValidPairs.from_groups`) at 10M x 10M.

"x may pair with any y of its group" over N_x x and N_y y in G equal groups is
N_x * N_y / G explicit edges (10M x 10M in 1,000 groups: 10^11 edges, 800 GB as an int64 CSR,
which no machine here holds). `GroupPairs` holds the groups instead. For each size this prints:

* the bytes `GroupPairs` holds and the bytes the same relation would take as an edge CSR;
* the time to build it (from the group of every record) and to build the planner;
* the time of one epoch's plan (`PairPlanner.plan`, uniform and least_sampled), median of
  `--repeats`, after one warm-up plan; goal: <= 1 s per epoch at 10M x 10M (issue 24);
* the process's peak RSS growth over the size before it (linear in N is the goal).

Sizes: 1M and 10M (`--quick`: 100k and 1M). Prints a JSON result (also to `--output`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tfx_dynamic_inputs.inputs import ValidPairs  # noqa: E402
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner  # noqa: E402

NUM_GROUPS = 1000
BATCH_SIZE = 256


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(num_records: int, repeats: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x_groups = rng.integers(0, NUM_GROUPS, num_records, dtype=np.int64)
    y_groups = rng.integers(0, NUM_GROUPS, num_records, dtype=np.int64)
    started = time.perf_counter()
    pairs = ValidPairs.from_groups(x_groups, y_groups)
    build_s = time.perf_counter() - started
    held = pairs.x_group.nbytes + pairs.group_row_splits.nbytes + pairs.group_values.nbytes
    held += pairs.planned_x.nbytes
    result = {
        "num_x": num_records,
        "num_y": num_records,
        "num_groups": NUM_GROUPS,
        "num_pairs": pairs.num_pairs,
        "bytes_held": int(held),
        "edge_csr_bytes": int(8 * (pairs.num_pairs + num_records + 1)),
        "build_s": round(build_s, 3),
    }
    for strategy in ("uniform", "least_sampled"):
        started = time.perf_counter()
        planner = PairPlanner(pairs, strategy=strategy, seed=seed, batch_size=BATCH_SIZE)
        plan = tf.function(planner.plan)
        init_s = time.perf_counter() - started
        plan(tf.constant(0, tf.int64))["x_index"].numpy()  # trace and warm up
        times = []
        for epoch in range(1, repeats + 1):
            started = time.perf_counter()
            plan(tf.constant(epoch, tf.int64))["y_index"].numpy()
            times.append(time.perf_counter() - started)
        result[strategy] = {
            "planner_init_s": round(init_s, 3),
            "plan_s_median": round(statistics.median(times), 3),
            "plan_s_all": [round(t, 3) for t in times],
        }
        del planner, plan
    result["peak_rss_bytes"] = peak_rss_bytes()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k and 1M records")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="bench/results/group_pairs.json")
    args = parser.parse_args()
    sizes = [100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000]
    baseline_rss = peak_rss_bytes()
    results = []
    for size in sizes:
        result = measure(size, args.repeats, args.seed)
        result["rss_growth_bytes"] = result["peak_rss_bytes"] - baseline_rss
        results.append(result)
        print(
            f"{size:>11,} x {size:,} y, {NUM_GROUPS} groups: {result['num_pairs']:.3g} pairs; "
            f"held {result['bytes_held'] / 2**20:,.0f} MiB vs edge CSR "
            f"{result['edge_csr_bytes'] / 2**30:,.0f} GiB; build {result['build_s']} s; "
            f"plan/epoch uniform {result['uniform']['plan_s_median']} s, least_sampled "
            f"{result['least_sampled']['plan_s_median']} s; peak RSS growth "
            f"{result['rss_growth_bytes'] / 2**20:,.0f} MiB",
            flush=True,
        )
    ratio = results[-1]["rss_growth_bytes"] / max(results[0]["rss_growth_bytes"], 1)
    summary = {
        "sizes": results,
        "rss_growth_ratio_last_to_first": round(ratio, 2),
        "size_ratio_last_to_first": sizes[-1] / sizes[0],
        "goal_plan_s": 1.0,
        "goal_met": all(
            r[s]["plan_s_median"] <= 1.0 for r in results[-1:] for s in ("uniform", "least_sampled")
        ),
    }
    print(json.dumps(summary, indent=1))
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
