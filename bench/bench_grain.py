"""Benchmark: our Grain samplers against Grain's own shuffle + batch and against our tf.data path.

One committed run (written with the tests' helpers, `tests/inputs/runs.py`) of N raw 32x32x3
image Examples (about 3.1 KB each) in record set ``x``, labelled in N / 50 classes (a class
index), N / 4 ``y`` records and a pair index of average degree 8. N = 100k (`--quick`: 10k).
Every contender reads the serialized records (no decoding), B = 256 records a batch (pairs: 256
pairs, 512 records), a new epoch each pass:

* `grain_class_balanced`: our `GrainClassBalanced(run, record_set="x", decode="bytes")`,
  `n_c = 32` x `n_p = 8`, `epoch_mode="samples"` (every record at least once), `.epoch(e)`;
* `grain_pairs`: our `GrainPairs(run, decode="bytes")`, `.epoch(e)`;
* `grain_shuffle_batch_run`: Grain's own `MapDataset.source(RunRecordSource(run, "x",
  decode="bytes")).shuffle(seed=e).batch(B)` over the same records;
* `grain_shuffle_batch_array_record`: the same over an ArrayRecord file of the same payloads
  (`grain.sources.ArrayRecordDataSource`, `group_size:1`), where `array_record` is installed
  (grain 0.2.18 depends on it on Linux), read record by record as Grain's `batch` reads a
  source, and `grain_shuffle_batch_array_record_getitems`: shuffled keys batched, then read with
  the source's batched `__getitems__`;
* `tf_class_balanced`, `tf_pairs`: our tf.data `class_balanced(..., features=None)` and
  `dynamic_pairs` (disk backend) over the same run, consumed inside TensorFlow
  (`Dataset.reduce`).

The Grain contenders run in the Grain venv (`.venv-grain`, or `$GRAIN_PYTHON`: no TensorFlow;
`tfx_dynamic_inputs` is the wheel `make grain-venv` installed), the tf.data ones in the full
install (`.venv`, or `$TFX_DYNAMIC_INPUTS_TF_PYTHON`), each in one long-lived worker process the
driver asks for one pass at a time: repeats interleave every contender (after one untimed pass
each). Records per second and CPU microseconds per record (`time.process_time`, all threads) of
each pass; medians, per-repeat ratios' medians and the load average are printed, with a JSON
result (also to `--output`). Without the Grain venv it says so and exits 0.

The plan alone (NumPy against TensorFlow, 1M records / 7,000 classes) is
`bench/bench_numpy_plans.py`.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from json_report import write_report  # noqa: E402

BATCH_SIZE = 256
N_CLASSES_PER_BATCH, N_SAMPLES_PER_CLASS = 32, 8
RECORDS_PER_CLASS = 50
AVERAGE_DEGREE = 8
SIDE = 32


# --------------------------------------------------------------------------------- the run


def write_run(run_dir: str, num_records: int) -> dict:
    """The run of the module docstring (in the full install: the helpers build Examples with
    TensorFlow); returns what it holds."""
    sys.path.insert(0, REPO)
    from tests.inputs.runs import image_example, run_id_of, write_pairs, write_record_set
    from tfx_dynamic_inputs import layout

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(SIDE, SIDE, 3), dtype=np.uint8)
    num_classes = max(N_CLASSES_PER_BATCH, num_records // RECORDS_PER_CLASS)
    labels = rng.integers(0, num_classes, size=num_records).astype(np.int64)
    labels[:num_classes] = np.arange(num_classes)  # every class holds a record
    for record_set, size in (("x", num_records), ("y", num_records // 4)):
        records = []
        for number in range(size):
            # The first bytes vary, so records differ without drawing every pixel.
            image = pixels.copy()
            image.reshape(-1)[:8] = np.frombuffer(number.to_bytes(8, "little"), np.uint8)
            label = int(labels[number]) if record_set == "x" else None
            records.append(image_example(f"{record_set}{number:08d}", image, label))
        write_record_set(run_dir, record_set, records, num_shards=8)
    degrees = rng.integers(1, 2 * AVERAGE_DEGREE, size=num_records)
    write_pairs(run_dir, [rng.integers(0, num_records // 4, size=d).tolist() for d in degrees])
    layout.save_class_index(run_dir, "x", labels, num_classes, None, run_id_of(run_dir))
    layout.commit_run(run_dir, run_id_of(run_dir))
    shards = layout.examples_dir(run_dir, "x")
    shard_bytes = sum(os.path.getsize(os.path.join(shards, name)) for name in os.listdir(shards))
    return {
        "num_records": num_records,
        "record_bytes": shard_bytes // num_records,
        "num_classes": num_classes,
        "num_y": num_records // 4,
        "num_pairs": int(degrees.sum()),
    }


# --------------------------------------------------------------------------------- workers


def grain_contenders(run_dir: str, scratch: str) -> dict:
    """name -> (epoch -> a Grain dataset, records a batch of it)."""
    import grain

    from tfx_dynamic_inputs.grain import GrainClassBalanced, GrainPairs
    from tfx_dynamic_inputs.records import RunRecordSource

    balanced = GrainClassBalanced(
        run_dir,
        record_set="x",
        decode="bytes",
        n_classes_per_batch=N_CLASSES_PER_BATCH,
        n_samples_per_class=N_SAMPLES_PER_CLASS,
        epoch_mode="samples",
    )
    pairs = GrainPairs(run_dir, batch_size=BATCH_SIZE, decode="bytes")
    source = RunRecordSource(run_dir, "x", decode="bytes")
    contenders = {
        "grain_class_balanced": (balanced.epoch, lambda batch: len(batch["index"])),
        "grain_pairs": (pairs.epoch, lambda batch: 2 * len(batch["x_index"])),
        "grain_shuffle_batch_run": (
            lambda epoch: grain.MapDataset.source(source).shuffle(seed=epoch).batch(BATCH_SIZE),
            len,
        ),
    }
    try:
        from array_record.python.array_record_module import ArrayRecordWriter
    except ImportError:
        return contenders
    path = os.path.join(scratch, "x.array_record")
    writer = ArrayRecordWriter(path, "group_size:1")
    for number in range(len(source)):
        writer.write(source[number])
    writer.close()
    array_records = grain.sources.ArrayRecordDataSource(path)
    contenders["grain_shuffle_batch_array_record"] = (
        lambda epoch: grain.MapDataset.source(array_records).shuffle(seed=epoch).batch(BATCH_SIZE),
        len,
    )
    # Grain's batch reads a source record by record; an ArrayRecord reader's one-record read
    # costs more the more records the file holds, its batched read (`__getitems__`) does not.
    contenders["grain_shuffle_batch_array_record_getitems"] = (
        lambda epoch: (
            grain.MapDataset.range(len(array_records))
            .shuffle(seed=epoch)
            .batch(BATCH_SIZE)
            .map(lambda keys: array_records.__getitems__(keys.tolist()))
        ),
        len,
    )
    return contenders


def tf_contenders(run_dir: str) -> dict:
    """name -> (epoch -> a tf.data dataset: each pass is the next epoch, records a row)."""
    import tensorflow as tf

    from tfx_dynamic_inputs.inputs import (
        StoreOptions,
        class_balanced,
        dynamic_pairs,
        open_pairs_run,
    )

    options = StoreOptions(backend="disk")
    balanced = class_balanced(
        run_dir,
        record_set="x",
        features=None,
        n_classes_per_batch=N_CLASSES_PER_BATCH,
        n_samples_per_class=N_SAMPLES_PER_CLASS,
        epoch_mode="samples",
        store_options=options,
    )
    pairs = dynamic_pairs(*open_pairs_run(run_dir, store_options=options), batch_size=BATCH_SIZE)

    def rows(key: str):
        return lambda total, batch: total + tf.shape(batch[key], out_type=tf.int64)[0]

    return {
        "tf_class_balanced": (lambda _: balanced, 1, rows("index")),
        "tf_pairs": (lambda _: pairs, 2, rows("x_index")),
    }


def timed_grain(dataset, records_of) -> tuple[float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    records = sum(records_of(batch) for batch in dataset)
    return records / (time.perf_counter() - start), (time.process_time() - cpu) / records * 1e6


def timed_tf(dataset, records_per_row: int, add_rows) -> tuple[float, float]:
    import tensorflow as tf

    cpu, start = time.process_time(), time.perf_counter()
    records = int(dataset.reduce(tf.constant(0, tf.int64), add_rows)) * records_per_row
    return records / (time.perf_counter() - start), (time.process_time() - cpu) / records * 1e6


def worker(kind: str, run_dir: str, scratch: str) -> None:
    """Answers each stdin line "<contender> <epoch>" with one JSON line: one timed pass."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries' prints stay off the protocol
    if kind == "grain":
        contenders = grain_contenders(run_dir, scratch)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        contenders = tf_contenders(run_dir)
    print(json.dumps({"contenders": sorted(contenders)}), file=protocol, flush=True)
    for line in sys.stdin:
        name, epoch = line.split()
        make, *counting = contenders[name]
        timer = timed_grain if kind == "grain" else timed_tf
        rate, cpu_us = timer(make(int(epoch)), *counting)
        print(json.dumps({"rate": rate, "cpu_us": cpu_us}), file=protocol, flush=True)


# --------------------------------------------------------------------------------- driver


class Worker:
    """A worker process of one install, asked for one pass at a time."""

    def __init__(self, python: str, kind: str, run_dir: str, scratch: str):
        self._process = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", kind, run_dir, scratch],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=scratch,  # the Grain venv imports the installed wheel, not the checkout
        )
        self.contenders = self._answer()["contenders"]

    def _answer(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self._process.args[3]} worker exited (its stderr above)")
        return json.loads(line)

    def time(self, name: str, epoch: int) -> tuple[float, float]:
        self._process.stdin.write(f"{name} {epoch}\n")
        self._process.stdin.flush()
        answer = self._answer()
        return answer["rate"], answer["cpu_us"]

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait(timeout=60)


def measure(workers: list[Worker], repeats: int) -> dict:
    """Every contender once a repeat (the first repeat untimed), a new epoch each repeat."""
    order = [(worker, name) for worker in workers for name in worker.contenders]
    rates: dict[str, list[float]] = {name: [] for _, name in order}
    cpu: dict[str, list[float]] = {name: [] for _, name in order}
    for epoch in range(repeats + 1):
        for worker, name in order:
            rate, cpu_us = worker.time(name, epoch)
            if epoch:
                rates[name].append(rate)
                cpu[name].append(cpu_us)
    result: dict = {"repeats_records_per_s": rates, "repeats_cpu_us_per_record": cpu}
    for name in rates:
        result[f"{name}_records_per_s"] = statistics.median(rates[name])
        result[f"{name}_cpu_us_per_record"] = statistics.median(cpu[name])
    for ours, against in (
        ("grain_class_balanced", "grain_shuffle_batch_run"),
        ("grain_pairs", "grain_shuffle_batch_run"),
        ("grain_shuffle_batch_array_record", "grain_shuffle_batch_run"),
        ("grain_shuffle_batch_array_record_getitems", "grain_shuffle_batch_run"),
        ("grain_class_balanced", "tf_class_balanced"),
        ("grain_pairs", "tf_pairs"),
    ):
        if ours in rates and against in rates:
            result[f"{ours}_over_{against}"] = statistics.median(
                [a / b for a, b in zip(rates[ours], rates[against], strict=True)]
            )
    return result


def interpreter(variable: str, venv: str) -> str | None:
    path = os.environ.get(variable) or os.path.join(REPO, venv, "bin", "python")
    return path if os.access(path, os.X_OK) else None


def print_summary(report: dict) -> None:
    result = report["result"]
    print(
        f"{report['run']['num_records']} records of {report['run']['record_bytes']} bytes, "
        f"B = {BATCH_SIZE}, "
        f"{report['repeats']} interleaved repeats, load {report['load_average_at_start'][0]:.2f}"
        f" -> {report['load_average_at_end'][0]:.2f}:"
    )
    for name in result["repeats_records_per_s"]:
        print(
            f"  {name:42s} {result[f'{name}_records_per_s']:10.0f} records/s "
            f"{result[f'{name}_cpu_us_per_record']:8.1f} us CPU a record"
        )
    for key, value in result.items():
        if "_over_" in key:
            print(f"  {key}: {value:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k records, 3 repeats")
    parser.add_argument("--records", type=int, default=None, help="records in x (default 100k)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--output", default=os.path.join(os.path.dirname(__file__), "results", "grain.json")
    )
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--write-run", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.write_run:
        print(json.dumps(write_run(args.write_run[0], int(args.write_run[1]))))
        return

    grain_python = interpreter("GRAIN_PYTHON", ".venv-grain")
    tf_python = interpreter("TFX_DYNAMIC_INPUTS_TF_PYTHON", ".venv")
    if grain_python is None or tf_python is None:
        missing = ".venv-grain (make grain-venv)" if grain_python is None else ".venv (make setup)"
        print(f"bench_grain: not built: {missing}; nothing measured")
        return
    num_records = args.records or (10_000 if args.quick else 100_000)
    if num_records < 4 * N_CLASSES_PER_BATCH:
        parser.error(f"--records must be at least {4 * N_CLASSES_PER_BATCH}, got {num_records}")
    repeats = args.repeats or (3 if args.quick else 5)
    scratch = tempfile.mkdtemp(prefix="bench-grain-")
    workers: list[Worker] = []
    try:
        run_dir = os.path.join(scratch, "run")
        started = time.perf_counter()
        written = subprocess.run(
            [tf_python, __file__, "--write-run", run_dir, str(num_records)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
        report = {
            "quick": args.quick,
            "run": json.loads(written.strip().splitlines()[-1]),
            "repeats": repeats,
            "batch_size": BATCH_SIZE,
            "cpus": os.cpu_count(),
            "grain_python": grain_python,
            "tf_python": tf_python,
            "load_average_at_start": os.getloadavg(),
        }
        workers = [
            Worker(grain_python, "grain", run_dir, scratch),
            Worker(tf_python, "tf", run_dir, scratch),
        ]
        report["result"] = measure(workers, repeats)
        report["seconds"] = time.perf_counter() - started
        report["load_average_at_end"] = os.getloadavg()
    finally:
        for process in workers:
            process.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print_summary(report)
    write_report(args.output, report)


if __name__ == "__main__":
    main()
