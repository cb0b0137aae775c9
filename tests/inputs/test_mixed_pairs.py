"""Dynamic pairs over several real pairs runs: namespaced x and y, pairs only within a run,
every x of every run once an epoch, coverage per run, resume, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.inputs import runs as run_files
from tfx_dynamic_inputs.inputs.epoch_state import StateRunError
from tfx_dynamic_inputs.inputs.mixed_pairs import MixedPairsSampler, combined_pairs
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs

# (num_x, num_y) of each run.
RUNS = {"horses": (9, 4), "zebras": (14, 6)}


def valid_rows(num_x: int, num_y: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [
        sorted(rng.choice(num_y, size=int(rng.integers(1, num_y + 1)), replace=False).tolist())
        for _ in range(num_x)
    ]


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory) -> dict[str, str]:
    folders = {}
    for seed, (name, (num_x, num_y)) in enumerate(RUNS.items()):
        folder = str(tmp_path_factory.mktemp(name))
        for record_set, count in (("x", num_x), ("y", num_y)):
            records = [f"{name}-{record_set}-{i}".encode() for i in range(count)]
            run_files.write_record_set(folder, record_set, records, num_shards=2)
        run_files.write_pairs(folder, valid_rows(num_x, num_y, seed))
        folders[name] = folder
    return folders


def epoch(sampler, **kwargs) -> list[dict[str, np.ndarray]]:
    return [{k: v.numpy() for k, v in b.items()} for b in sampler.dataset(**kwargs)]


def test_pairs_stay_within_a_run_and_every_x_of_every_run_is_paired_each_epoch(pair_runs):
    sampler = MixedPairsSampler(pair_runs, batch_size=5, strategy="least_sampled", seed=2)
    names = list(RUNS)
    coverage = sampler.coverage()
    for _ in range(3):
        coverage.start_epoch()
        batches = epoch(sampler)
        x_index = np.concatenate([b["x_index"] for b in batches])
        # Every x of both runs once (the plan wraps the last batch with repeats).
        assert set(x_index.tolist()) == set(range(sum(n for n, _ in RUNS.values())))
        for batch in batches:
            coverage.update(batch["x_index"], batch["y_index"])
            for x, y, run, x_record, y_record in zip(
                batch["x_index"],
                batch["y_index"],
                batch["run"],
                batch["x"],
                batch["y"],
                strict=True,
            ):
                name = names[run]
                local_x = x - sampler.x_offsets[run]
                local_y = y - sampler.y_offsets[run]
                assert x_record.decode() == f"{name}-x-{local_x}"
                assert y_record.decode() == f"{name}-y-{local_y}"
                rows = valid_rows(*RUNS[name], names.index(name))
                assert local_y in rows[local_x], "a pair across runs or not valid"
    result = coverage.result()
    assert set(result) == set(names)
    for name in names:
        assert 0 < result[name]["pair_coverage_total"] <= 1
        assert result[name]["invalid_pairs"] == 0


def test_a_resume_continues_the_stream_and_refuses_another_mix(pair_runs, tmp_path):
    make = lambda: MixedPairsSampler(pair_runs, batch_size=4, seed=9)
    uninterrupted = make()
    expected = epoch(uninterrupted) + epoch(uninterrupted)
    stopped = make()
    epoch(stopped)
    iterator = iter(stopped.dataset())
    next(iterator), next(iterator)
    path = tf.train.Checkpoint(sampler=stopped.state).write(str(tmp_path / "ckpt"))
    resumed = make()
    tf.train.Checkpoint(sampler=resumed.state).read(path).assert_consumed()
    rest = epoch(resumed, initial_step=2)
    per_epoch = len(expected) // 2
    for a, b in zip(rest, expected[per_epoch + 2 :], strict=True):
        for key in ("x_index", "y_index", "x", "y"):
            np.testing.assert_array_equal(a[key], b[key])

    one_run = MixedPairsSampler({"horses": pair_runs["horses"]}, batch_size=4, seed=9)
    tf.train.Checkpoint(sampler=one_run.state).read(path)
    with pytest.raises(StateRunError, match="another run") as refused:
        one_run.dataset(initial_step=1)
    assert "\n" not in str(refused.value)


def test_the_same_run_twice_is_refused(pair_runs):
    with pytest.raises(ValueError, match="twice"):
        MixedPairsSampler({"a": pair_runs["horses"], "b": pair_runs["horses"]}, batch_size=2)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=4))
def test_the_combined_index_is_each_runs_rows_moved_by_its_offsets(sizes):
    per_run = [valid_rows(num_x, num_y, k) for k, (num_x, num_y) in enumerate(sizes)]
    pairs, x_offsets, y_offsets = combined_pairs(
        [
            ValidPairs.build(rows, num_y=num_y)
            for rows, (_, num_y) in zip(per_run, sizes, strict=True)
        ],
        [num_y for _, num_y in sizes],
    )
    assert pairs.num_x == x_offsets[-1] == sum(n for n, _ in sizes)
    assert pairs.num_y == y_offsets[-1] == sum(n for _, n in sizes)
    for k, rows in enumerate(per_run):
        for local_x, row in enumerate(rows):
            x = x_offsets[k] + local_x
            got = pairs.values[pairs.row_splits[x] : pairs.row_splits[x + 1]]
            assert got.tolist() == [y + y_offsets[k] for y in row]
