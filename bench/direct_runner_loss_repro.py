"""Reproduces records dropped by Beam 2.59's DirectRunner with 2 workers, without project code.

The pipeline has the shape of the pairs job: batches of payloads are made in parallel, one small
branch counts them (a side input), the payloads are keyed by shard with that side input, grouped
and checked against the exact record numbers each shard must hold. On this 2-core machine, with
50k payloads of 27 KB (about 1.3 GB through the grouping), `--direct_num_workers=2` lost
336-2,304 records in 6 of 9 runs (multi_processing 2 of 5, multi_threading 4 of 4); the
`in_memory` mode (0 of 3) and 50k x 10 KB with multi_processing (0 of 2) lost none.

    .venv/bin/python bench/direct_runner_loss_repro.py [--records N] [--payload_bytes B]
        [--runs R] [--modes multi_processing,in_memory]

Prints, per run, how many shards were incomplete and how many records were missing, then JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import tempfile
import time

BATCH = 256
SHARD = 391


def make_batch(batch: int, num_records: int, payload_bytes: int) -> tuple[list[int], list[bytes]]:
    numbers = list(range(batch * BATCH, min((batch + 1) * BATCH, num_records)))
    return numbers, [n.to_bytes(8, "little") * (payload_bytes // 8) for n in numbers]


def plan_of(total: int) -> dict:
    return {"shard": SHARD, "total": total}


def by_shard(made, plan: dict):
    numbers, payloads = made
    shards: dict[int, list] = {}
    for number, payload in zip(numbers, payloads, strict=True):
        shards.setdefault(number // plan["shard"], []).append((number, payload))
    yield from shards.items()


def missing_in_shard(element, num_records: int) -> tuple[int, int]:
    """(1 if the shard is not exactly its records else 0, records missing from it)."""
    shard, parts = element
    got = sorted(number for part in parts for number, _ in part)
    want = list(range(shard * SHARD, min((shard + 1) * SHARD, num_records)))
    return int(got != want), len(want) - len(got)


def add_up(results) -> tuple[int, int]:
    results = list(results)
    return sum(r[0] for r in results), sum(r[1] for r in results)


def save(result: tuple[int, int], path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f)


def run_once(num_records: int, payload_bytes: int, mode: str, workers: int) -> tuple[int, int]:
    """(incomplete shards, missing records) of one run."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    fns = importlib.import_module("direct_runner_loss_repro")
    fd, result_path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    options = PipelineOptions([f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"])
    with beam.Pipeline(options=options) as pipeline:
        made = (
            pipeline
            | beam.Create(range((num_records + BATCH - 1) // BATCH))
            | beam.Reshuffle()
            | "Make" >> beam.Map(fns.make_batch, num_records, payload_bytes)
        )
        plan = (
            made
            | "Count" >> beam.Map(lambda m: len(m[0]))
            | beam.CombineGlobally(sum)
            | beam.Map(fns.plan_of)
        )
        _ = (
            made
            | "ByShard" >> beam.FlatMap(fns.by_shard, beam.pvalue.AsSingleton(plan))
            | beam.GroupByKey()
            | beam.Map(fns.missing_in_shard, num_records)
            | beam.CombineGlobally(fns.add_up)
            | beam.Map(fns.save, result_path)
        )
    with open(result_path) as f:
        bad, missing = json.load(f)
    os.remove(result_path)
    return bad, missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--payload_bytes", type=int, default=27_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="multi_processing,in_memory")
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    # Worker processes import the functions above from this file by module name.
    sys.path.insert(0, here)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    logging.disable(logging.WARNING)
    results = []
    for mode in args.modes.split(","):
        workers = 1 if mode == "in_memory" else 2
        for run in range(args.runs):
            start = time.perf_counter()
            bad, missing = run_once(args.records, args.payload_bytes, mode, workers)
            results.append(
                {
                    "mode": mode,
                    "workers": workers,
                    "run": run,
                    "incomplete_shards": bad,
                    "missing_records": missing,
                    "seconds": round(time.perf_counter() - start, 1),
                }
            )
            print(results[-1], flush=True)
    print(
        json.dumps({"records": args.records, "payload_bytes": args.payload_bytes, "runs": results})
    )


if __name__ == "__main__":
    main()
