"""Claims, run ids and `summary.json` as a run's commit marker; interrupted and killed jobs.

A job claims its folder (a second one fails fast), every index part names its run id, and the
readers refuse a run that was never committed, failed, or mixes parts of two runs. On Ctrl-C
the launcher cancels the Beam job before it removes the spill files; a later run removes the
spill files a killed one left.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import threading

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState

from tests.class_balanced.runs import write_audio_run
from tests.materialize import generate
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs import RecordStore, ValidPairs, open_pairs_run, record_store_from
from tfx_dynamic_inputs.inputs.labelled_sources import labelled_records
from tfx_dynamic_inputs.materialize import (
    MaterializeError,
    PairsConfig,
    ShardingConfig,
    claims,
    run_pairs,
    spill,
    stages,
)
from tfx_dynamic_inputs.materialize.stages import run as stage_run

PAIRS_READERS = {
    "RecordStore.open": lambda run: RecordStore.open(run, layout.X_RECORD_SET),
    "ValidPairs.load": lambda run: ValidPairs.load(run),
    "open_pairs_run": lambda run: open_pairs_run(run),
}


def _committing(output_dir: str, before_run=lambda: None):
    """A `run_job` build that commits the run of the job claiming `output_dir`."""

    def build(pipeline: beam.Pipeline) -> None:
        before_run()
        run_id = claims.claimed_run_id(output_dir)
        _ = (
            pipeline
            | beam.Create([None])
            | beam.Map(lambda _: layout.commit_run(output_dir, run_id, {"ok": True}))
        )

    return build


def _never_built(pipeline: beam.Pipeline) -> None:
    raise AssertionError("a job refused its folder must not build its pipeline")


def _spill_something(output_dir: str) -> str:
    writer = spill.SpillWriter(spill.spill_dir(output_dir, claims.claimed_run_id(output_dir)))
    [ref] = writer.write([b"payload of a run" * 64])
    writer.close()
    return ref.path


# ------------------------------------------------------------------------------------ claims


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_second_job_on_a_folder_in_use_fails_fast_naming_the_claim(tmp_path, overwrite):
    output_dir = str(tmp_path / "out")
    first_running, first_may_finish = threading.Event(), threading.Event()
    outcome = {}

    def first_job():
        def hold() -> None:
            first_running.set()
            first_may_finish.wait(timeout=120)

        outcome["summary"] = stages.run_job(
            _committing(output_dir, before_run=hold), output_dir, False, (), None
        )

    thread = threading.Thread(target=first_job)
    thread.start()
    try:
        assert first_running.wait(timeout=120)
        holder = claims.load_claim(output_dir)
        assert holder.pid == os.getpid() and holder.host == socket.gethostname()
        with pytest.raises(MaterializeError) as refused:
            stages.run_job(_never_built, output_dir, overwrite, (), None)
        message = str(refused.value)
        assert f"is in use by run {holder.run_id} (pid {os.getpid()} on " in message
        assert claims.claim_path(output_dir) in message
        assert claims.load_claim(output_dir) == holder  # the refused job left it alone
    finally:
        first_may_finish.set()
        thread.join(timeout=120)
    assert outcome["summary"][layout.RUN_ID_KEY] == holder.run_id
    assert not os.path.exists(claims.claim_path(output_dir))


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_claim_left_by_a_killed_launcher_is_taken_over_and_its_spill_files_removed(
    tmp_path, caplog, overwrite
):
    output_dir = str(tmp_path / "out")
    os.makedirs(output_dir)
    launcher = subprocess.Popen(["sleep", "120"])
    try:
        claim = claims.Claim("a1" * 16, socket.gethostname(), launcher.pid, "2026-01-01T00:00:00")
        assert claims.try_claim(output_dir, claim)
        orphan = _spill_something(output_dir)
        # While its launcher lives the folder is in use, --overwrite or not.
        with pytest.raises(MaterializeError, match=f"in use by run {claim.run_id} "):
            stages.run_job(_never_built, output_dir, overwrite, (), None)
        assert os.path.exists(orphan)
    finally:
        launcher.kill()  # SIGKILL: no cleanup runs, the claim and the spill files stay
        launcher.wait()

    with caplog.at_level(logging.WARNING):
        summary = stages.run_job(_committing(output_dir), output_dir, overwrite, (), None)
    assert f"taking over the stale claim of run {claim.run_id} (pid {launcher.pid}" in caplog.text
    assert summary["ok"] and summary[layout.RUN_ID_KEY] != claim.run_id
    assert os.listdir(output_dir) == [layout.SUMMARY_FILE]


def test_claims_that_cannot_be_judged_stale_are_refused(tmp_path):
    output_dir = str(tmp_path / "out")
    os.makedirs(output_dir)
    elsewhere = claims.Claim("b2" * 16, "another-host", 1, "2026-01-01T00:00:00")
    assert claims.try_claim(output_dir, elsewhere)
    with pytest.raises(MaterializeError, match=rf"in use by run {elsewhere.run_id} \(pid 1 on "):
        stages.run_job(_never_built, output_dir, True, (), None)

    # A claim being written (or left empty by a crash in that instant) names no holder.
    with open(claims.claim_path(output_dir), "w"):
        pass
    with pytest.raises(MaterializeError, match=f"is in use: {claims.claim_path(output_dir)}"):
        stages.run_job(_never_built, output_dir, True, (), None)


# ------------------------------------------------------------------------- committed runs


@pytest.fixture(scope="module")
def pairs_runs(tmp_path_factory) -> dict[str, str]:
    """Two real pairs runs of one input (so of the same shape), with different run ids."""
    root = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    x_ids, y_ids = [f"x{i}.png" for i in range(6)], [f"y{i}.png" for i in range(4)]
    generate.write_images(str(root / "x"), x_ids, rng)
    generate.write_images(str(root / "y"), y_ids, rng)
    generate.write_pairs_jsonl(
        str(root / "pairs.jsonl"),
        {x: [y_ids[i % 4], y_ids[(i + 1) % 4]] for i, x in enumerate(x_ids)},
    )
    runs = {}
    for name in ("a", "b"):
        runs[name] = str(root / name)
        run_pairs(
            PairsConfig(
                x_dir=str(root / "x"),
                y_dir=str(root / "y"),
                pairs=str(root / "pairs.jsonl"),
                output_dir=runs[name],
                sharding=ShardingConfig(num_shards=2),
            )
        )
    return runs


def _run_id(run: str) -> str:
    return layout.load_json(os.path.join(run, layout.SUMMARY_FILE))[layout.RUN_ID_KEY]


def _copy(run: str, tmp_path) -> str:
    copy = str(tmp_path / "run")
    shutil.copytree(run, copy)
    return copy


def test_every_index_part_of_a_run_names_the_run_its_summary_commits(pairs_runs):
    run = pairs_runs["a"]
    run_id = _run_id(run)
    assert len(run_id) == 32 and run_id != _run_id(pairs_runs["b"])
    for record_set in (layout.X_RECORD_SET, layout.Y_RECORD_SET):
        shards = layout.load_json(os.path.join(layout.index_dir(run, record_set), "shards.json"))
        assert shards[layout.RUN_ID_KEY] == run_id
    assert layout.load_run_file(layout.pairs_index_dir(run)) == run_id
    assert not os.path.exists(claims.claim_path(run))
    for read in PAIRS_READERS.values():
        read(run)


@pytest.mark.parametrize("reader", sorted(PAIRS_READERS))
def test_a_run_killed_before_its_summary_is_refused(pairs_runs, tmp_path, reader):
    run = _copy(pairs_runs["a"], tmp_path)
    os.remove(os.path.join(run, layout.SUMMARY_FILE))  # both indexes written, no summary yet
    with pytest.raises(layout.RunCommitError) as refused:
        PAIRS_READERS[reader](run)
    message = str(refused.value)
    assert f"run {_run_id(pairs_runs['a'])}, which was never committed" in message
    assert os.path.join(run, layout.SUMMARY_FILE) in message


@pytest.mark.parametrize("reader", sorted(PAIRS_READERS))
def test_a_failed_run_is_refused(pairs_runs, tmp_path, reader):
    run = _copy(pairs_runs["a"], tmp_path)
    path = os.path.join(run, layout.SUMMARY_FILE)
    layout.save_json(path, {**layout.load_json(path), "ok": False, "error": "too many rejects"})
    with pytest.raises(layout.RunCommitError, match=r"failed \(too many rejects\)"):
        PAIRS_READERS[reader](run)


@pytest.mark.parametrize(
    ("part", "readers"),
    [
        (os.path.join(layout.INDEX_DIR, layout.PAIRS_INDEX), ["ValidPairs.load", "open_pairs_run"]),
        (
            os.path.join(layout.INDEX_DIR, layout.X_RECORD_SET),
            ["RecordStore.open", "open_pairs_run"],
        ),
    ],
)
def test_parts_of_two_runs_are_refused_naming_both(pairs_runs, tmp_path, part, readers):
    run = _copy(pairs_runs["a"], tmp_path)
    shutil.rmtree(os.path.join(run, part))
    shutil.copytree(os.path.join(pairs_runs["b"], part), os.path.join(run, part))
    for reader in readers:
        with pytest.raises(layout.RunCommitError) as refused:
            PAIRS_READERS[reader](run)
        message = str(refused.value)
        assert f"names run {_run_id(pairs_runs['b'])}" in message
        assert f"commits run {_run_id(pairs_runs['a'])}" in message


def test_artifact_folders_of_two_runs_are_refused_naming_both(pairs_runs):
    with pytest.raises(layout.RunCommitError) as refused:
        open_pairs_run(pairs_runs["a"], pair_index_dir=pairs_runs["b"])
    assert _run_id(pairs_runs["a"]) in str(refused.value)
    assert _run_id(pairs_runs["b"]) in str(refused.value)


def test_the_class_index_reader_refuses_uncommitted_failed_and_mixed_runs(tmp_path):
    runs = {name: str(tmp_path / name) for name in ("a", "b")}
    for name, run in runs.items():
        write_audio_run(run, [3, 4], seed=len(name), num_shards=2)
    assert labelled_records(runs["a"]).classes == ["spk00000", "spk00001"]
    run_a, run_b = (_run_id(run) for run in runs.values())
    summary_path = os.path.join(runs["a"], layout.SUMMARY_FILE)
    summary = layout.load_json(summary_path)

    class_dir = layout.class_records_dir(runs["a"], "train")
    shutil.rmtree(class_dir)
    shutil.copytree(layout.class_records_dir(runs["b"], "train"), class_dir)
    with pytest.raises(
        layout.RunCommitError, match=f"names run {run_b} but .* commits run {run_a}"
    ):
        labelled_records(runs["a"])

    layout.save_json(summary_path, {**summary, "ok": False, "error": "nothing left"})
    with pytest.raises(layout.RunCommitError, match=r"failed \(nothing left\)"):
        labelled_records(runs["a"])

    os.remove(summary_path)
    with pytest.raises(layout.RunCommitError, match=f"run {run_b}, which was never committed"):
        labelled_records(runs["a"])


def test_a_store_cached_from_user_data_is_not_a_run_and_reads_as_it_is(tmp_path):
    cache = str(tmp_path / "cache")
    values = np.arange(40, dtype=np.float32).reshape(20, 2)
    store = record_store_from(values, cache_dir=cache, memory_budget_bytes=0)
    assert store.backend == "disk"
    assert not os.path.exists(os.path.join(cache, layout.SUMMARY_FILE))
    again = record_store_from(values, cache_dir=cache)  # the cache, reopened
    assert again.num_records == 20


# ------------------------------------------------------------------------- interrupted jobs


class _InterruptedResult(PipelineResult):
    """A running job whose launcher gets Ctrl-C while it waits; `stops`: whether the job
    reaches a terminal state once cancelled."""

    def __init__(self, events: list[str], stops: bool):
        super().__init__(PipelineState.RUNNING)
        self._events = events
        self._stops = stops

    def wait_until_finish(self, duration=None):
        raise KeyboardInterrupt

    def cancel(self):
        self._events.append("cancel")
        if self._stops:
            self._state = PipelineState.CANCELLED


class _SubmittingRunner(PipelineRunner):
    """Runs nothing: hands back `result`, as a remote runner hands back its submitted job."""

    def __init__(self, result: PipelineResult):
        self._result = result

    def run_pipeline(self, pipeline, options):
        return self._result


def _interrupted_job(tmp_path, monkeypatch, stops: bool):
    output_dir = str(tmp_path / "out")
    events: list[str] = []
    result = _InterruptedResult(events, stops)
    remove_spill_dir, release_claim = spill.remove_spill_dir, claims.release_claim

    def removing_spill(directory: str, run_id: str) -> None:
        events.append(f"remove spill files ({result.state})")
        remove_spill_dir(directory, run_id)

    def releasing(directory: str, run_id: str) -> None:
        events.append("release claim")
        release_claim(directory, run_id)

    monkeypatch.setattr(spill, "remove_spill_dir", removing_spill)
    monkeypatch.setattr(claims, "release_claim", releasing)
    spilled = []

    def build(pipeline: beam.Pipeline) -> None:
        spilled.append(_spill_something(output_dir))  # what the job's decoders wrote so far
        _ = pipeline | beam.Create([b"p"]) | beam.Map(len)

    with pytest.raises(KeyboardInterrupt):
        stages.run_job(
            build, output_dir, False, (), lambda: beam.Pipeline(runner=_SubmittingRunner(result))
        )
    return output_dir, events, spilled[0]


def test_ctrl_c_cancels_the_job_before_removing_its_spill_files(tmp_path, monkeypatch):
    output_dir, events, spilled = _interrupted_job(tmp_path, monkeypatch, stops=True)
    assert events == ["cancel", "remove spill files (CANCELLED)", "release claim"]
    assert not os.path.exists(spilled)
    # Left: the summary of the run that did not finish, so readers refuse the folder by name.
    assert os.listdir(output_dir) == [layout.SUMMARY_FILE]
    summary = layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))
    assert summary["ok"] is False and summary["error"] == "the job was interrupted"


def test_a_job_that_does_not_stop_keeps_its_spill_files_for_the_next_run(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(stage_run, "CANCEL_TIMEOUT_S", 0.3)
    with caplog.at_level(logging.WARNING):
        output_dir, events, spilled = _interrupted_job(tmp_path, monkeypatch, stops=False)
    # Its workers may still read them: nothing is removed, and the claim marks the folder.
    assert events == ["cancel"]
    assert os.path.exists(spilled)
    with open(claims.claim_path(output_dir)) as f:
        assert json.load(f)["pid"] == os.getpid()
    assert "did not stop within 0 s of its cancel (state RUNNING)" in caplog.text
