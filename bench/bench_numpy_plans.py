"""Benchmark: one epoch of the class-balanced plan in NumPy (`plans.class_plan`) vs TensorFlow
(`inputs.class_plan`), the same positions bit for bit.

A class index of N records over C classes (sizes lognormal, every class at least one record),
`n_c = 32` classes x `n_p = 4` samples a batch, both epoch modes; one epoch's whole plan
(`plan(epoch)`), computed:

* `numpy`: `plans.class_plan.ClassBalancedPlan` (NumPy alone, one thread);
* `tensorflow_eager` / `tensorflow_function`: `inputs.class_plan.ClassBalancedPlan`, op by op
  and traced once (`tf.function`, as the samplers' datasets run it; the native op where built).

Repeats are interleaved (each repeat runs every method once, on a new epoch) and checked equal;
the median of each is printed with the load average. N, C: 1M, 7,000 (`--quick`: 100k, 700).
Prints a JSON result (also to `--output`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from json_report import write_report  # noqa: E402

from tfx_dynamic_inputs import native  # noqa: E402
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan  # noqa: E402
from tfx_dynamic_inputs.plans import class_plan  # noqa: E402


def class_index(num_records: int, num_classes: int) -> np.ndarray:
    """CSR row splits of lognormal class sizes summing to `num_records`."""
    weights = np.random.default_rng(0).lognormal(0.0, 1.0, num_classes)
    sizes = np.maximum(1, np.floor(weights / weights.sum() * num_records)).astype(np.int64)
    sizes[0] += num_records - sizes.sum()
    return np.concatenate([[0], np.cumsum(sizes)])


def one_mode(row_splits: np.ndarray, epoch_mode: str, repeats: int) -> dict:
    options = dict(n_classes_per_batch=32, n_samples_per_class=4, seed=7, epoch_mode=epoch_mode)
    ours = class_plan.ClassBalancedPlan(row_splits, **options)
    theirs = ClassBalancedPlan(row_splits, **options)
    traced = tf.function(theirs.plan, input_signature=[tf.TensorSpec([], tf.int64)])
    traced(tf.constant(0, tf.int64))
    methods = {
        "numpy": lambda epoch: ours.plan(epoch)["position"],
        "tensorflow_eager": lambda epoch: theirs.plan(epoch)["position"].numpy(),
        "tensorflow_function": lambda epoch: traced(tf.constant(epoch, tf.int64))[
            "position"
        ].numpy(),
    }
    seconds = {name: [] for name in methods}
    for epoch in range(1, repeats + 1):
        positions = []
        for name, method in methods.items():
            started = time.perf_counter()
            positions.append(method(epoch))
            seconds[name].append(time.perf_counter() - started)
        if not all(np.array_equal(p, positions[0]) for p in positions):
            raise AssertionError(f"the plans differ at epoch {epoch} ({epoch_mode})")
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "num_batches": ours.num_batches,
        "samples": ours.num_batches * ours.batch_size,
        "median_seconds": medians,
        "numpy_over_tensorflow_function": medians["numpy"] / medians["tensorflow_function"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k records, 700 classes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default="bench/results/numpy_plans.json")
    args = parser.parse_args()
    num_records, num_classes = (100_000, 700) if args.quick else (1_000_000, 7_000)
    row_splits = class_index(num_records, num_classes)
    report = {
        "records": num_records,
        "classes": num_classes,
        "native_op": native.op_library() is not None,
        "cpus": os.cpu_count(),
        "modes": {
            mode: one_mode(row_splits, mode, args.repeats) for mode in ("classes", "samples")
        },
        "load_average": os.getloadavg(),
    }
    write_report(args.output, report)


if __name__ == "__main__":
    main()
