"""Benchmark: the keyed elementwise permutation (`inputs.index_shuffle`) vs whole-epoch shuffles.

One epoch's order of N records, computed:

* `native_chunks` / `tensorflow_chunks`: ours (the `PermutePositions` op / its TensorFlow-ops
  form), `--chunk` positions per call, as a sampler computes batches from their numbers (nothing
  of size N is held);
* `tf_index_shuffle_chunks`: TensorFlow's `tf.random.experimental.index_shuffle`, the same way
  (not a bijection at some sizes, see the module);
* `stateless_shuffle_epoch`: `tf.random.experimental.stateless_shuffle` of the whole epoch (the
  [N] int64 order the plans build today), the baseline;
* `native_batch_us`: one batch of 256 positions, as a single call.

Repeats are interleaved (each repeat runs every method once), the median is printed with the
ratio to the baseline and the load average. Then the quality figures of ours and of a true
random permutation (NumPy's) over `--seeds` seeds of a 100-record permutation: mean displacement
(a true permutation's expectation 33.33), neighbour correlation (-1/99 = -0.0101), neighbours in
order (0.5) and the smallest chi-square p-value of where each position lands (100 bins).

N: 10M (`--quick`: 1M). Prints a JSON result (also to `--output`).
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
from scipy import stats  # noqa: E402

from tfx_dynamic_inputs.inputs.epoch_plan import epoch_seed  # noqa: E402
from tfx_dynamic_inputs.inputs.index_shuffle import permuted_positions  # noqa: E402

BATCH = 256


def _chunked(fn, num_records: int, chunk: int) -> float:
    started = time.perf_counter()
    for start in range(0, num_records, chunk):
        fn(tf.constant(start, tf.int64), tf.constant(min(chunk, num_records - start), tf.int64))
    return time.perf_counter() - started


def methods(num_records: int, chunk: int) -> dict:
    seed = epoch_seed(0, 1)
    n = tf.constant(num_records, tf.int64)
    spec = [tf.TensorSpec([], tf.int64)] * 2

    def ours(implementation: str):
        @tf.function(input_signature=spec)
        def run(start, count):
            return permuted_positions(
                tf.range(start, start + count), n, seed, implementation=implementation
            )

        return run

    @tf.function(input_signature=spec)
    def tf_index_shuffle(start, count):
        return tf.random.experimental.index_shuffle(tf.range(start, start + count), seed, n - 1)

    @tf.function
    def whole_epoch():
        return tf.random.experimental.stateless_shuffle(tf.range(n), seed=seed)

    native, tensorflow_ops = ours("native"), ours("tensorflow")
    one_batch = tf.constant(num_records // 2, tf.int64), tf.constant(BATCH, tf.int64)
    return {
        "stateless_shuffle_epoch_s": lambda: _timed(lambda: whole_epoch().numpy()),
        "native_chunks_s": lambda: _chunked(native, num_records, chunk),
        "tensorflow_chunks_s": lambda: _chunked(tensorflow_ops, num_records, chunk),
        "tf_index_shuffle_chunks_s": lambda: _chunked(tf_index_shuffle, num_records, chunk),
        "native_batch_us": lambda: 1e6 * _timed(lambda: native(*one_batch).numpy()),
    }


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def quality(permutations: np.ndarray) -> dict:
    seeds, size = permutations.shape
    p_values = [stats.chisquare(np.bincount(c, minlength=size)).pvalue for c in permutations.T]
    return {
        "mean_displacement": round(float(np.abs(permutations - np.arange(size)).mean()), 3),
        "neighbour_correlation": round(
            float(np.corrcoef(permutations[:, :-1].ravel(), permutations[:, 1:].ravel())[0, 1]),
            4,
        ),
        "neighbours_in_order": round(float((permutations[:, 1:] > permutations[:, :-1]).mean()), 4),
        "min_chi_square_p": float(min(p_values)),
        "share_of_positions_p_below_0.01": float(np.mean(np.array(p_values) < 0.01)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M records, 3 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=1 << 16, help="positions per call")
    parser.add_argument("--seeds", type=int, default=4000, help="seeds of the quality figures")
    parser.add_argument("--output", default="bench/results/index_shuffle.json")
    args = parser.parse_args()
    num_records = 1_000_000 if args.quick else 10_000_000
    repeats = 3 if args.quick else args.repeats
    runs = methods(num_records, args.chunk)
    for run in runs.values():  # warm-up: traces, the native library
        run()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    medians = {name: statistics.median(values) for name, values in times.items()}
    baseline = medians["stateless_shuffle_epoch_s"]
    size = 100
    traced = tf.function(
        lambda seed: permuted_positions(tf.range(size, dtype=tf.int64), size, seed),
        input_signature=[tf.TensorSpec([2], tf.int64)],
    )
    ours = np.stack([traced(epoch_seed(s, 0)).numpy() for s in range(args.seeds)])
    rng = np.random.default_rng(0)
    true = np.stack([rng.permutation(size) for _ in range(args.seeds)])
    report = {
        "num_records": num_records,
        "chunk": args.chunk,
        "repeats": repeats,
        "load_average": os.getloadavg(),
        "median": {name: round(value, 4) for name, value in medians.items()},
        "speedup_vs_stateless_shuffle": {
            name: round(baseline / value, 2)
            for name, value in medians.items()
            if name.endswith("_chunks_s")
        },
        "quality": {"ours": quality(ours), "numpy_permutation": quality(true)},
    }
    write_report(args.output, report)


if __name__ == "__main__":
    main()
