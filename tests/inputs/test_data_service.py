"""The samplers under tf.data service.

A dispatcher runs in this process and two workers in their own processes, started the way users
start them (`python -m tfx_dynamic_inputs.data_service_worker`), so the native reader must be loaded
there. Both samplers run in both processing modes over runs read from disk by the native op and
are compared with what the same sampler yields in this process; what cannot run on a worker
fails when the dataset is built. Every process and every read is bounded in time.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tests.helpers.installs import NEWEST_TENSORFLOW_ONLY
from tests.helpers.keras_callbacks import BatchesPerEpoch
from tests.helpers.paths import REPO_ROOT
from tests.inputs import runs
from tfx_dynamic_inputs import data_service_worker, layout, native
from tfx_dynamic_inputs.inputs import (
    AudioFeatureConfig,
    ClassBalancedSampler,
    DynamicPairsSampler,
    RecordStore,
    ServiceUnsupportedError,
    StoreOptions,
    ValidPairs,
    epoch_plan,
)
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_dataset, epoch_range_dataset
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler
from tfx_dynamic_inputs.inputs.run_mix import RunMix, WeightedRun

WORKERS = 2
MODES = ("distributed_epoch", "parallel_epochs")
EPOCHS = 3
# Two TensorFlow imports on two shared cores take 15-20 s.
STARTUP_TIMEOUT_S = 120
READ_TIMEOUT_S = 90

NUM_X, NUM_Y, BATCH = 24, 9, 4  # 6 whole batches: every x exactly once per epoch
CLASS_SIZES = [5, 3, 1, 8, 6, 4, 7]  # class 2 is small (1 < n_p): filled by repetition
N_C, N_P = 3, 2
NOWHERE = "grpc://localhost:1"  # the errors come before any connection


# ----------------------------------------------------------------------------- fixtures


def start_workers(
    dispatcher: tf.data.experimental.service.DispatchServer, count: int, logs
) -> list[subprocess.Popen]:
    """Starts `count` more worker processes of `dispatcher` and waits until they registered."""
    address = dispatcher.target.split("://")[1]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=REPO_ROOT)
    registered = dispatcher._num_workers()  # no public API counts the registered workers
    processes, log_paths = [], []
    for _ in range(count):
        log_paths.append(logs / f"worker{registered + len(processes)}.log")
        with open(log_paths[-1], "wb") as log:
            command = [sys.executable, "-m", "tfx_dynamic_inputs.data_service_worker"]
            processes.append(
                subprocess.Popen(
                    [*command, "--dispatcher_address", address],
                    cwd=REPO_ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while dispatcher._num_workers() < registered + count:
        for process, path in zip(processes, log_paths, strict=True):
            if process.poll() is not None:
                stop_workers(processes)
                pytest.fail(f"a worker exited ({process.returncode}):\n{path.read_text()}")
        if time.monotonic() > deadline:
            stop_workers(processes)
            pytest.fail(f"{count} workers did not register in {STARTUP_TIMEOUT_S} s")
        time.sleep(0.2)
    return processes


def stop_workers(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A dispatcher in this process and `WORKERS` worker processes: the dispatcher's address."""
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    processes = start_workers(dispatcher, WORKERS, tmp_path_factory.mktemp("worker_logs"))
    try:
        yield dispatcher.target
    finally:
        stop_workers(processes)
        dispatcher._stop()


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    """A materialized pairs run: (directory, valid lists, x records, y records)."""
    output_dir = str(tmp_path_factory.mktemp("pairs_run"))
    rng = np.random.default_rng(7)
    x_records = [
        runs.image_example(f"x{i}", p) for i, p in enumerate(runs.random_images(rng, NUM_X))
    ]
    y_records = [
        runs.image_example(f"y{i}", p) for i, p in enumerate(runs.random_images(rng, NUM_Y))
    ]
    runs.write_record_set(output_dir, layout.X_RECORD_SET, x_records)
    runs.write_record_set(output_dir, layout.Y_RECORD_SET, y_records)
    valid = [
        sorted(rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist())
        for _ in range(NUM_X)
    ]
    runs.write_pairs(output_dir, valid)
    return output_dir, valid, x_records, y_records


@pytest.fixture(scope="module")
def audio_run(tmp_path_factory):
    """A materialized labelled audio run: (directory, class id of each record)."""
    output_dir = str(tmp_path_factory.mktemp("audio_run"))
    info = write_audio_run(output_dir, CLASS_SIZES, seed=5, min_samples=400, max_samples=1600)
    return output_dir, info["class_ids"]


# ----------------------------------------------------------------------------- helpers


def collect(dataset: tf.data.Dataset, timeout_s: float = READ_TIMEOUT_S) -> list[dict]:
    """All elements of `dataset` as numpy dicts; fails the test when reading takes too long."""
    result: dict[str, object] = {}

    def read() -> None:
        try:
            result["batches"] = list(dataset.as_numpy_iterator())
        except Exception as error:  # reported in the test's thread
            result["error"] = error

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        pytest.fail(f"reading the dataset took over {timeout_s} s")
    if "error" in result:
        raise result["error"]
    return result["batches"]


def by_epoch(batches: list[dict]) -> dict[int, list[dict]]:
    grouped = collections.defaultdict(list)
    for batch in batches:
        grouped[int(batch["epoch"])].append(batch)
    return dict(grouped)


def local_epochs(sampler, num_epochs: int) -> list[list[dict]]:
    """The sampler's first `num_epochs` epochs, read in this process (`dataset()`)."""
    dataset = sampler.dataset()
    return [list(dataset.as_numpy_iterator()) for _ in range(num_epochs)]


def keys(batches: list[dict], *names: str) -> list[tuple]:
    """Each batch as a hashable tuple of the named index arrays, sorted (a multiset)."""
    return sorted(tuple(tuple(batch[name].tolist()) for name in names) for batch in batches)


def pairs_sampler(
    run_dir: str,
    seed: int,
    strategy: str = "uniform",
    x_parse_fn=None,
    **store_options,
) -> DynamicPairsSampler:
    store = StoreOptions(**{"backend": "disk", **store_options})
    return DynamicPairsSampler(
        run_dir,
        batch_size=BATCH,
        seed=seed,
        strategy=strategy,
        x_parse_fn=x_parse_fn,
        store_options=store,
    )


def class_sampler(run_dir: str, seed: int, **options) -> ClassBalancedSampler:
    options.setdefault("store_options", StoreOptions(backend="disk"))
    options.setdefault("features", None)
    return ClassBalancedSampler(
        run_dir, n_classes_per_batch=N_C, n_samples_per_class=N_P, seed=seed, **options
    )


# ----------------------------------------------------------------------------- elastic resume


def _halves(batches: list[dict], names: tuple[str, ...], half: int) -> list[dict]:
    """Half `half` of each global batch: what input pipeline `half` of two holds of it."""
    return [{name: np.array_split(b[name], 2)[half] for name in names} for b in batches]


@NEWEST_TENSORFLOW_ONLY
def test_a_run_resumes_on_three_service_workers_and_two_input_pipelines(
    pairs_run, audio_run, tmp_path
):
    """Epochs 0-1 on one input pipeline and 2 service workers, checkpointed; epochs 2-3 resumed
    from the checkpoint on 2 input pipelines (half the batch each) and 3 service workers. Each
    epoch's batches are the uninterrupted run's global batches, split in two from the resume on
    (a multiset per epoch: distributed_epoch hands batches out in no fixed order)."""
    pairs_dir, classes_dir = pairs_run[0], audio_run[0]

    def make(kind: str, pipelines: int, index: int):
        where = dict(worker_index=index, num_workers=pipelines)
        store = StoreOptions(backend="disk")
        if kind == "pairs":
            return DynamicPairsSampler(
                pairs_dir, batch_size=BATCH // pipelines, seed=3, store_options=store, **where
            )
        return ClassBalancedSampler(
            classes_dir,
            n_classes_per_batch=4 // pipelines,
            n_samples_per_class=N_P,
            seed=3,
            features=None,
            store_options=store,
            **where,
        )

    names = {"pairs": ("x_index", "y_index"), "classes": ("index", "label")}
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0)
    )
    processes = start_workers(dispatcher, 2, tmp_path)
    got, paths = {}, {}
    try:
        for kind in names:
            sampler = make(kind, 1, 0)
            first = collect(sampler.distributed_dataset(dispatcher.target, num_epochs=2))
            # The training loop advances the epoch the service never does, then checkpoints.
            sampler.state.epoch.assign(2)
            paths[kind] = tf.train.Checkpoint(sampler=sampler.state).write(str(tmp_path / kind))
            got[kind] = {"first": by_epoch(first)}
        processes += start_workers(dispatcher, 1, tmp_path)
        for kind in names:
            for pipeline in range(2):
                resumed = make(kind, 2, pipeline)
                checkpoint = tf.train.Checkpoint(sampler=resumed.state)
                checkpoint.read(paths[kind]).assert_consumed()
                batches = collect(resumed.distributed_dataset(dispatcher.target, num_epochs=2))
                got[kind][pipeline] = by_epoch(batches)
    finally:
        stop_workers(processes)
        dispatcher._stop()

    for kind, fields in names.items():
        expected = local_epochs(make(kind, 1, 0), 4)
        assert sorted(got[kind]["first"]) == [0, 1]
        for epoch in (0, 1):
            assert keys(got[kind]["first"][epoch], *fields) == keys(expected[epoch], *fields)
        for pipeline in range(2):
            assert sorted(got[kind][pipeline]) == [2, 3]
            for epoch in (2, 3):
                halves = _halves(expected[epoch], fields, pipeline)
                assert keys(got[kind][pipeline][epoch], *fields) == keys(halves, *fields)


# ----------------------------------------------------------------------------- dynamic pairs


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_pairs_under_the_service(service, pairs_run, mode, seed):
    run_dir, valid, x_records, y_records = pairs_run
    sampler = pairs_sampler(run_dir, seed)
    assert sampler.x_store.disk_reader == "native"
    dataset = sampler.distributed_dataset(service, processing_mode=mode, num_epochs=EPOCHS)
    got = by_epoch(collect(dataset))
    expected = local_epochs(pairs_sampler(run_dir, seed), EPOCHS)

    # distributed_epoch: each batch once; parallel_epochs: each worker yields every epoch.
    copies = 1 if mode == "distributed_epoch" else WORKERS
    assert sorted(got) == list(range(EPOCHS))
    for epoch, batches in got.items():
        x_index = np.concatenate([b["x_index"] for b in batches])
        y_index = np.concatenate([b["y_index"] for b in batches])
        np.testing.assert_array_equal(np.bincount(x_index, minlength=NUM_X), copies)
        assert all(y in valid[x] for x, y in zip(x_index, y_index, strict=True))
        for batch in batches:
            assert batch["x"].tolist() == [x_records[i] for i in batch["x_index"]]
            assert batch["y"].tolist() == [y_records[i] for i in batch["y_index"]]
        names = ("x_index", "y_index")
        assert keys(batches, *names) == sorted(keys(expected[epoch], *names) * copies)
    assert keys(got[1], "x_index", "y_index") != keys(got[2], "x_index", "y_index")


def test_same_seed_same_epochs_and_another_seed_others(service, pairs_run):
    run_dir = pairs_run[0]
    names = ("x_index", "y_index")

    def run(seed: int) -> dict[int, list[tuple]]:
        dataset = pairs_sampler(run_dir, seed).distributed_dataset(service, num_epochs=2)
        return {epoch: keys(b, *names) for epoch, b in by_epoch(collect(dataset)).items()}

    first = run(5)
    assert run(5) == first
    assert run(6) != first


@pytest.mark.parametrize("pairing", ["groups", "edge_list"])
def test_in_memory_records_and_least_sampled_from_a_later_epoch(service, pairing):
    """Arrays become in-memory stores shipped inside the graph; least_sampled is a stateless
    schedule, over groups and over an edge list alike, so it runs on the workers; start_epoch
    picks up the range."""
    rng = np.random.default_rng(0)
    x = rng.random([NUM_X, 3]).astype(np.float32)
    y = rng.random([NUM_Y, 2]).astype(np.float32)
    x_groups, y_groups = rng.integers(0, 3, NUM_X), np.arange(NUM_Y) % 3

    def sampler() -> DynamicPairsSampler:
        if pairing == "groups":
            pairs = ValidPairs.from_groups(x_groups, y_groups)
        else:
            pairs = [
                np.flatnonzero(y_groups == g)[: 1 + i % 4].tolist() for i, g in enumerate(x_groups)
            ]
        return DynamicPairsSampler(x, y, pairs, batch_size=BATCH, strategy="least_sampled", seed=2)

    remote = sampler()
    assert remote.x_store.backend == "memory"
    dataset = remote.distributed_dataset(service, start_epoch=1, num_epochs=2)
    got = by_epoch(collect(dataset))
    expected = local_epochs(sampler(), 3)
    assert sorted(got) == [1, 2]
    for epoch, batches in got.items():
        for batch in batches:
            np.testing.assert_array_equal(batch["x"], x[batch["x_index"]])
            np.testing.assert_array_equal(batch["y"], y[batch["y_index"]])
            assert (x_groups[batch["x_index"]] == y_groups[batch["y_index"]]).all()
        names = ("x_index", "y_index")
        assert keys(batches, *names) == keys(expected[epoch], *names)


def test_keras_fits_on_the_service_dataset_with_steps_per_epoch(service):
    """As docs/scale-out.md shows it: the service dataset spans the epochs, Keras counts them."""
    rng = np.random.default_rng(4)
    x = rng.random([NUM_X, 3]).astype(np.float32)
    y = rng.random([NUM_Y, 2]).astype(np.float32)
    valid = [[i % NUM_Y, (i + 1) % NUM_Y] for i in range(NUM_X)]
    sampler = DynamicPairsSampler(x, y, valid, batch_size=BATCH, seed=1)
    dataset = sampler.distributed_dataset(service, processing_mode="distributed_epoch")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    seen = BatchesPerEpoch()
    history = model.fit(
        dataset.map(lambda batch: (batch["x"], batch["y"])),
        epochs=2,
        steps_per_epoch=sampler.steps_per_epoch,
        callbacks=[seen],
        verbose=0,
    )
    assert seen.counts == [sampler.steps_per_epoch] * 2 == [NUM_X // BATCH] * 2
    assert np.isfinite(history.history["loss"]).all()


def test_a_damaged_record_fails_the_read_naming_it(service, tmp_path):
    output_dir = str(tmp_path)
    rng = np.random.default_rng(1)
    x_records = [runs.image_example(f"x{i}", p) for i, p in enumerate(runs.random_images(rng, 8))]
    runs.write_record_set(output_dir, layout.X_RECORD_SET, x_records, num_shards=2)
    runs.write_record_set(output_dir, layout.Y_RECORD_SET, x_records[:3], num_shards=1)
    runs.write_pairs(output_dir, [[i % 3] for i in range(8)])
    damaged = 5
    index_dir = layout.index_dir(output_dir, layout.X_RECORD_SET)
    shard, offset, length = np.load(os.path.join(index_dir, layout.OFFSETS_FILE))[damaged]
    shard_path = os.path.join(
        layout.examples_dir(output_dir, layout.X_RECORD_SET), layout.shard_name(shard, 2)
    )
    with open(shard_path, "r+b") as f:
        f.seek(offset + layout.FRAME_HEADER_BYTES + length // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))
    sampler = DynamicPairsSampler(
        output_dir, batch_size=4, seed=0, store_options=StoreOptions(backend="disk")
    )
    dataset = sampler.distributed_dataset(service, num_epochs=1)
    with pytest.raises(tf.errors.OpError, match=rf"damaged record.*\b{damaged}\b"):
        collect(dataset)


# ----------------------------------------------------------------------------- class-balanced


@pytest.mark.parametrize("seed", [0, 4])
@pytest.mark.parametrize("mode", MODES)
def test_class_balanced_under_the_service(service, audio_run, mode, seed):
    run_dir, class_ids = audio_run
    sampler = class_sampler(run_dir, seed)
    assert sampler.store.disk_reader == "native"
    dataset = sampler.distributed_dataset(service, processing_mode=mode, num_epochs=EPOCHS)
    got = by_epoch(collect(dataset))
    expected = local_epochs(class_sampler(run_dir, seed), EPOCHS)
    records = RecordsOf(run_dir)

    copies = 1 if mode == "distributed_epoch" else WORKERS
    usable = set(np.flatnonzero(CLASS_SIZES).tolist())
    assert sorted(got) == list(range(EPOCHS))
    for epoch, batches in got.items():
        for batch in batches:
            groups = batch["label"].reshape(N_C, N_P)
            assert (groups == groups[:, :1]).all()  # n_p samples of one class per group
            assert len(set(groups[:, 0].tolist())) == N_C  # n_c distinct classes
            np.testing.assert_array_equal(class_ids[batch["index"]], batch["label"])
            assert batch["record"].tolist() == records(batch["index"])
        assert set(np.concatenate([b["label"] for b in batches]).tolist()) == usable
        names = ("index", "label")
        assert keys(batches, *names) == sorted(keys(expected[epoch], *names) * copies)
    assert keys(got[0], "index") != keys(got[1], "index")


def test_a_mix_of_runs_under_the_service(service, audio_run, tmp_path):
    """A mix of two runs, planned in blocks of batches on the workers: each epoch's batches
    are exactly this process's, with each sample's run."""
    other_dir = str(tmp_path / "other_run")
    write_audio_run(other_dir, [4, 6, 3, 5], seed=9, min_samples=400, max_samples=800)
    mix = RunMix((WeightedRun(audio_run[0], 1.0, "first"), WeightedRun(other_dir, 2.0, "second")))

    def sampler() -> MixedClassBalancedSampler:
        return MixedClassBalancedSampler(
            mix, n_classes_per_batch=N_C, n_samples_per_class=N_P, seed=2, features=None
        )

    got = by_epoch(collect(sampler().distributed_dataset(service, num_epochs=2)))
    expected = local_epochs(sampler(), 2)
    assert sorted(got) == [0, 1]
    for epoch, batches in got.items():
        names = ("index", "label", "run")
        assert keys(batches, *names) == sorted(keys(expected[epoch], *names))
    assert {int(run) for batch in got[0] for run in batch["run"]} == {0, 1}


def test_audio_front_end_on_the_workers_matches_this_process(service, audio_run):
    run_dir = audio_run[0]
    features = AudioFeatureConfig(crop_seconds=0.05, num_mel_bins=16)
    sampler = class_sampler(run_dir, 9, features=features)
    got = collect(sampler.distributed_dataset(service, num_epochs=2))
    expected = local_epochs(class_sampler(run_dir, 9, features=features), 2)
    local = {
        (epoch, tuple(batch["index"].tolist())): batch
        for epoch, batches in enumerate(expected)
        for batch in batches
    }
    assert len(got) == len(local)
    for batch in got:
        want = local[(int(batch["epoch"]), tuple(batch["index"].tolist()))]
        for name in ("features", "lengths", "mask", "label"):
            np.testing.assert_allclose(batch[name], want[name], rtol=1e-5, atol=1e-5)


class RecordsOf:
    """Reads records of the run's `train` record set in this process, by record number."""

    def __init__(self, run_dir: str):
        self._store = RecordStore.open(run_dir, "train", backend="memory")

    def __call__(self, index: np.ndarray) -> list[bytes]:
        return self._store.read(index).numpy().tolist()


# ----------------------------------------------------------------------------- errors


def test_what_cannot_run_on_a_worker_fails_when_the_dataset_is_built(pairs_run, audio_run):
    run_dir = pairs_run[0]

    def fails(match: str, sampler, **options) -> None:
        with pytest.raises(ServiceUnsupportedError, match=match):
            sampler.distributed_dataset(NOWHERE, **options)

    fails("Python reader.*reader='python'", pairs_sampler(run_dir, 0, reader="python"))
    fails("on_damaged='skip'", pairs_sampler(run_dir, 0, on_damaged="skip"))
    fails(
        "in-memory records \\(\\d+ bytes\\)",
        pairs_sampler(run_dir, 0, backend="memory"),
        max_graph_bytes=1000,
    )
    # The indexes alone (disk backend) outgrow a tiny cap.
    fails("dataset graph is \\d+ bytes", pairs_sampler(run_dir, 0), max_graph_bytes=2000)
    python_parse = pairs_sampler(
        run_dir, 0, x_parse_fn=lambda records: tf.py_function(tf.identity, [records], tf.string)
    )
    fails("calls Python", python_parse)
    # A class index over memory_budget_bytes is looked up from its file in Python.
    fails("class index", class_sampler(audio_run[0], 0, memory_budget_bytes=8))
    # Several problems: all listed.
    with pytest.raises(ServiceUnsupportedError) as error:
        pairs_sampler(run_dir, 0, reader="python", on_damaged="skip").epochs_dataset()
    assert "on_damaged='skip'" in str(error.value) and "Python reader" in str(error.value)

    sampler = pairs_sampler(run_dir, 0)
    with pytest.raises(ValueError, match="processing_mode"):
        sampler.distributed_dataset(NOWHERE, processing_mode="static")
    with pytest.raises(ValueError, match="max_graph_bytes"):
        sampler.distributed_dataset(NOWHERE, max_graph_bytes=1 << 31)
    with pytest.raises(ValueError, match="num_epochs"):
        sampler.distributed_dataset(NOWHERE, num_epochs=0)


def test_worker_entrypoint_needs_the_native_op(monkeypatch, capsys):
    monkeypatch.setattr(native, "op_library", lambda: None)
    assert data_service_worker.main(["--dispatcher_address", "localhost:1"]) == 1
    assert "python -m tfx_dynamic_inputs.native" in capsys.readouterr().err
    config = data_service_worker.worker_config("grpc://dispatcher:5050", 7, "node3")
    assert (config.dispatcher_address, config.port) == ("dispatcher:5050", 7)
    assert config.worker_address == "node3:%port%"
    with pytest.raises(ValueError, match="HOST:PORT"):
        data_service_worker.worker_config("http://dispatcher:5050")


# ----------------------------------------------------------------------------- epoch range


def _plan(num_batches: int, width: int, calls: tf.Variable | None = None):
    """A stateless toy plan: rows of epoch-dependent numbers; counts its runs in `calls`."""

    def plan(epoch):
        values = tf.reshape(tf.range(num_batches * width, dtype=tf.int64), [num_batches, width])
        rows = {"a": values + 1000 * epoch, "b": values[:, :1] * epoch}
        if calls is None:
            return rows
        with tf.control_dependencies([calls.assign_add(1)]):
            return tf.nest.map_structure(tf.identity, rows)

    return plan


@pytest.mark.parametrize("num_workers, worker_index", [(1, 0), (2, 1), (3, 0)])
def test_epoch_range_yields_the_epochs_epoch_dataset_yields(num_workers, worker_index):
    num_batches = 6
    state = EpochState()
    local = epoch_dataset(
        _plan(num_batches, 3),
        num_batches=num_batches,
        state=state,
        num_workers=num_workers,
        worker_index=worker_index,
    )
    expected = [list(local.as_numpy_iterator()) for _ in range(4)]
    calls = tf.Variable(0, dtype=tf.int64)
    ranged = epoch_range_dataset(
        _plan(num_batches, 3, calls),
        num_batches=num_batches,
        start_epoch=1,
        num_epochs=3,
        num_workers=num_workers,
        worker_index=worker_index,
    )
    steps = num_batches // num_workers
    assert int(ranged.cardinality()) == 3 * steps
    got = list(ranged.as_numpy_iterator())
    assert int(calls.numpy()) == 3  # planned once per epoch, not per batch
    for position, row in enumerate(got):
        epoch = 1 + position // steps
        assert row["epoch"] == epoch
        want = expected[epoch][position % steps]
        for key in ("a", "b"):
            np.testing.assert_array_equal(row[key], want[key])
    # Iterating again replays the same range.
    assert [r["epoch"] for r in ranged.as_numpy_iterator()] == [r["epoch"] for r in got]


@pytest.mark.parametrize("num_workers, worker_index, block", [(1, 0, 4), (3, 2, 64), (2, 1, 1)])
def test_epoch_range_of_batches_planned_alone(monkeypatch, num_workers, worker_index, block):
    """With `batch_plan_fn`, the same rows as the whole-epoch form, planned in blocks of
    `PLAN_BLOCK_BATCHES` of one epoch each (the last block of an epoch shorter)."""
    monkeypatch.setattr(epoch_plan, "PLAN_BLOCK_BATCHES", block)
    num_batches, calls = 12, tf.Variable(0, dtype=tf.int64)
    whole = _plan(num_batches, 3)

    def batch_plan_fn(epoch, numbers):
        tf.debugging.assert_less_equal(tf.size(numbers), block)
        with tf.control_dependencies([calls.assign_add(1)]):
            return {key: tf.gather(rows, numbers) for key, rows in whole(epoch).items()}

    slice_args = {"num_workers": num_workers, "worker_index": worker_index}
    expected = epoch_range_dataset(
        whole, num_batches=num_batches, start_epoch=2, num_epochs=2, **slice_args
    )
    ranged = epoch_range_dataset(
        batch_plan_fn=batch_plan_fn,
        num_batches=num_batches,
        start_epoch=2,
        num_epochs=2,
        **slice_args,
    )
    steps = num_batches // num_workers
    got = list(ranged.as_numpy_iterator())
    want = list(expected.as_numpy_iterator())
    assert len(got) == len(want) == 2 * steps
    assert int(calls.numpy()) == 2 * -(-steps // block)
    for row, wanted in zip(got, want, strict=True):
        assert row.keys() == wanted.keys()
        for key in row:
            np.testing.assert_array_equal(row[key], wanted[key])
    with pytest.raises(ValueError, match="give one of plan_fn"):
        epoch_range_dataset(whole, batch_plan_fn=batch_plan_fn, num_batches=6, start_epoch=0)


def test_epoch_range_arguments():
    plan = _plan(4, 2)
    unbounded = epoch_range_dataset(plan, num_batches=4, start_epoch=5)
    first = next(iter(unbounded))
    assert int(first["epoch"]) == 5
    assert int(unbounded.cardinality()) > 1 << 60
    with pytest.raises(ValueError, match="start_epoch"):
        epoch_range_dataset(plan, num_batches=4, start_epoch=-1)
    with pytest.raises(ValueError, match="multiple of num_workers"):
        epoch_range_dataset(plan, num_batches=4, start_epoch=0, num_workers=3)
    with pytest.raises(ValueError, match="'epoch' key"):
        epoch_range_dataset(
            lambda e: {"epoch": tf.zeros([4], tf.int64)}, num_batches=4, start_epoch=0
        )
    with pytest.raises(ValueError, match="'epoch' key"):
        epoch_range_dataset(
            batch_plan_fn=lambda e, numbers: {"epoch": numbers}, num_batches=4, start_epoch=0
        )
