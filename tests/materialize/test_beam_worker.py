"""Local multi-process runs use the lean SDK worker; other runs are left to Beam."""

from __future__ import annotations

import os
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tfx_dynamic_inputs.materialize import beam_worker, common

TWO_PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _worker_facts(_):
    return (
        os.getpid(),
        all(
            sys.modules.get(name, "not imported") is None
            for name in ("google.cloud.bigquery", "pandas")
        ),
        "tfx_dynamic_inputs.materialize.beam_worker" in sys.modules,
    )


def test_multi_processing_runs_on_lean_worker_processes(tmp_path):
    pipeline = common.make_default_pipeline(TWO_PROCESSES)
    with pipeline:
        _ = (
            pipeline
            | beam.Create(range(64))
            | beam.Reshuffle()
            | beam.Map(_worker_facts)
            | beam.combiners.ToList()
            | beam.Map(_write_facts, str(tmp_path / "facts.txt"))
        )
    with open(tmp_path / "facts.txt") as f:
        facts = [tuple(int(v) for v in line.split()) for line in f]
    assert len(facts) == 64
    pids = {pid for pid, _, _ in facts}
    assert os.getpid() not in pids  # ran in worker processes, not the launcher
    # BigQuery and pandas hidden by our entry point.
    assert all(hidden and lean for _, hidden, lean in facts)
    # The launcher itself keeps every client importable.
    assert sys.modules.get("google.cloud.bigquery", "not imported") is not None


def _write_facts(rows, path: str) -> None:
    with open(path, "w") as f:
        f.writelines(f"{pid} {int(hidden)} {int(lean)}\n" for pid, hidden, lean in rows)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--direct_running_mode=in_memory"],
        ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
        ["--runner=FlinkRunner", *TWO_PROCESSES],
    ],
)
def test_other_runs_keep_beams_own_runner(args, unrun_pipelines):
    pipeline = beam_worker.local_pipeline(PipelineOptions(args))
    unrun_pipelines.append(pipeline)
    assert not type(pipeline.runner).__name__.startswith("LeanWorkers")


def test_multi_processing_gets_the_lean_runner(unrun_pipelines):
    options = PipelineOptions(["--runner=DirectRunner", *TWO_PROCESSES])
    pipeline = beam_worker.local_pipeline(options)
    unrun_pipelines.append(pipeline)
    assert type(pipeline.runner).__name__ == "LeanWorkersRunner"
