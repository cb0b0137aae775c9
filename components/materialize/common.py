"""Pipeline pieces shared by the pairs and audio jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from components.materialize import beam_worker, run_dir, spill
from components.materialize.config import ShardingConfig
from components.materialize.errors import MaterializeError
from components.materialize.id_index import IdIndex
from components.materialize.shards import LOST_RECORDS, IdTable

REJECTED = "rejected"

EMPTY_TABLE = IdTable(IdIndex.from_ids([]), np.zeros([0], np.int64))


def make_default_pipeline(beam_pipeline_args: Iterable[str]) -> beam.Pipeline:
    return beam_worker.local_pipeline(PipelineOptions(list(beam_pipeline_args)))


def run_job(
    build: Callable[[beam.Pipeline], object],
    output_dir: str,
    overwrite: bool,
    beam_pipeline_args: Iterable[str],
    make_pipeline: Callable[[], beam.Pipeline] | None,
) -> dict:
    """Prepares `output_dir`, runs the pipeline `build` adds to, and returns the summary.

    Raises MaterializeError when a shard writer finds its records differ from the plan: the
    runner lost or repeated elements between stages. Beam 2.59's DirectRunner does that with
    `--direct_num_workers` > 1 (multi_processing and multi_threading) on about 1.3 GB of
    payloads, intermittently (`bench/direct_runner_loss_repro.py` shows it without this
    project's code); the jobs now send only spill refs through the runner, far below that.

    The spill files are removed when the pipeline ends, whether it succeeded or not.
    """
    run_dir.prepare_output_dir(output_dir, overwrite)
    pipeline = make_pipeline() if make_pipeline else make_default_pipeline(beam_pipeline_args)
    try:
        with pipeline:
            build(pipeline)
    except Exception as error:
        lost = next((line for line in str(error).splitlines() if LOST_RECORDS in line), None)
        if lost is None:
            raise
        detail = lost.split("RuntimeError: ")[-1].split(" [while running")[0].strip()
        raise MaterializeError(
            f"the Beam runner did not deliver every record to its shard writer ({detail}); "
            f"{output_dir} is incomplete (no summary.json). Known with the DirectRunner and "
            "--direct_num_workers > 1 on large inputs: use --direct_running_mode=in_memory "
            "locally, or a distributed runner"
        ) from None
    finally:
        spill.remove_spill_dir(output_dir)
    return run_dir.read_summary(output_dir)


def sharding_summary(sharding: ShardingConfig) -> dict:
    return {"max_shard_bytes": sharding.max_shard_bytes, "num_shards": sharding.num_shards}


def table(tables: dict[str, IdTable], record_set: str) -> IdTable:
    return tables.get(record_set, EMPTY_TABLE)
