"""A reader serves one run from open to close, or fails naming both run ids (issue 20, item 3).

* A folder overwritten by another run between two epochs: the native readers (a new kernel every
  epoch) fail naming both runs; the Python reader (shards kept open) and the memory backend go
  on serving the run they opened, never a mix.
* A shard copied in from another run of the same size is refused when the store is opened.
* A sampler state (checkpoint) of one run is refused by a sampler of another run of the same
  sizes, whether it is restored before or after the dataset is built.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs
from tfx_dynamic_inputs import layout, native
from tfx_dynamic_inputs.inputs import DynamicPairsSampler, RecordStore
from tfx_dynamic_inputs.inputs.class_balanced import ClassBalancedSampler
from tfx_dynamic_inputs.inputs.epoch_state import StateRunError

NUM_X, NUM_Y = 12, 7
STORES = [("memory", "auto"), ("disk", "python"), ("disk", "native"), ("disk", "mapped")]
# The readers of the native op, which opens the shards again each epoch (a new kernel).
NATIVE_READERS = ("native", "mapped")


def _write_pairs_run(output_dir: str, seed: int) -> str:
    """A pairs run whose records differ by `seed` but have the same sizes; returns its run id."""
    rng = np.random.default_rng(seed)
    for record_set, count in (("x", NUM_X), ("y", NUM_Y)):
        records = [rng.bytes(40) for _ in range(count)]
        runs.write_record_set(output_dir, record_set, records, num_shards=3)
    runs.write_pairs(output_dir, [[i % NUM_Y, (i + seed) % NUM_Y] for i in range(NUM_X)])
    return runs.run_id_of(output_dir)


def _skip_without_native(reader: str) -> None:
    if reader in NATIVE_READERS and native.op_library() is None:
        pytest.skip("the native op is not built (python -m tfx_dynamic_inputs.native)")


@pytest.mark.parametrize("backend, reader", STORES)
def test_a_folder_overwritten_between_epochs_is_never_served_mixed(tmp_path, backend, reader):
    _skip_without_native(reader)
    output_dir = str(tmp_path / "run")
    run_a = _write_pairs_run(output_dir, seed=1)
    store = RecordStore.open(output_dir, "x", backend=backend, reader=reader)
    assert store.run_id == run_a
    dataset = tf.data.Dataset.from_tensors(tf.range(NUM_X, dtype=tf.int64)).map(store.read)
    [first_epoch] = [batch.numpy().tolist() for batch in dataset]

    shutil.rmtree(output_dir)  # what --overwrite does before the new run writes
    run_b = _write_pairs_run(output_dir, seed=2)
    assert run_b != run_a

    if reader in NATIVE_READERS:
        with pytest.raises(tf.errors.FailedPreconditionError) as failed:
            list(dataset)
        message = str(failed.value)
        assert f"opened on run {run_a}" in message and f"now commits run {run_b}" in message
    else:  # the records it holds, or the shards it keeps open: run A's, all of them
        [second_epoch] = [batch.numpy().tolist() for batch in dataset]
        assert second_epoch == first_epoch
    reopened = RecordStore.open(output_dir, "x", backend=backend, reader=reader)
    assert reopened.run_id == run_b
    assert reopened.read(tf.range(NUM_X, dtype=tf.int64)).numpy().tolist() != first_epoch


@pytest.mark.parametrize("backend, reader", STORES)
def test_a_shard_copied_in_from_another_run_of_the_same_size_is_refused(tmp_path, backend, reader):
    _skip_without_native(reader)
    run_a_dir, run_b_dir = str(tmp_path / "a"), str(tmp_path / "b")
    _write_pairs_run(run_a_dir, seed=1)
    run_b = _write_pairs_run(run_b_dir, seed=2)
    shard = os.path.join(layout.examples_dir(run_b_dir, "x"), layout.shard_name(1, 3))
    other = os.path.join(layout.examples_dir(run_a_dir, "x"), layout.shard_name(1, 3))
    assert os.path.getsize(shard) == os.path.getsize(other)
    shutil.copyfile(other, shard)
    with pytest.raises(layout.RunCommitError, match=f"shard {shard} is not the one run {run_b}"):
        RecordStore.open(run_b_dir, "x", backend=backend, reader=reader)


@pytest.mark.parametrize("reader", ["python", *NATIVE_READERS])
def test_an_offset_index_cut_short_in_place_under_a_reader_fails_naming_it(tmp_path, reader):
    """The index is mapped by every disk reader: a truncation in place (a tool that rewrites
    files where they are) takes its pages away, which a read of a row would meet as SIGBUS, the
    end of the process. Each reader fails the next epoch with one error naming the index
    instead: the Python reader checks the size at each read, the native kernel (made again each
    epoch) when it is made. Within an epoch the native kernel's guard does it
    (`test_mapped_reader_truncation.py`)."""
    _skip_without_native(reader)
    output_dir = str(tmp_path / "run")
    _write_pairs_run(output_dir, seed=1)
    store = RecordStore.open(output_dir, "x", backend="disk", reader=reader)
    dataset = tf.data.Dataset.from_tensors(tf.range(NUM_X, dtype=tf.int64)).map(store.read)
    assert len(list(dataset)[0]) == NUM_X
    index = os.path.join(layout.index_dir(output_dir, "x"), layout.OFFSETS_FILE)
    os.truncate(index, 0)
    found = "cut short in place" if reader == "python" else f"fewer than \\d+ \\+ {NUM_X} rows"
    with pytest.raises(tf.errors.OpError, match=f"offset index {index} holds 0 bytes, .*{found}"):
        list(dataset)


def test_a_shard_grown_by_another_runs_records_is_refused(tmp_path):
    run_dir = str(tmp_path / "run")
    run_id = _write_pairs_run(run_dir, seed=3)
    shard = os.path.join(layout.examples_dir(run_dir, "y"), layout.shard_name(0, 3))
    with open(shard, "ab") as f:
        f.write(layout.tfrecord_frame(b"a record of another run"))
    with pytest.raises(layout.RunCommitError, match=f"not the one run {run_id} wrote .*holds"):
        RecordStore.open(run_dir, "y")


def _iterate(dataset: tf.data.Dataset) -> None:
    for _ in dataset:
        pass


@pytest.mark.parametrize("strategy", ["uniform", "least_sampled"])
@pytest.mark.parametrize("restore", ["before", "after"])
def test_a_pairs_state_of_one_run_is_refused_by_another(tmp_path, strategy, restore):
    run_a_dir, run_b_dir = str(tmp_path / "a"), str(tmp_path / "b")
    run_a = _write_pairs_run(run_a_dir, seed=1)
    run_b = _write_pairs_run(run_b_dir, seed=2)
    sampler_a = DynamicPairsSampler(run_a_dir, batch_size=4, strategy=strategy)
    _iterate(sampler_a.dataset())
    saved = tf.train.Checkpoint(sampler=sampler_a.state).write(str(tmp_path / "ckpt" / "a"))

    sampler_b = DynamicPairsSampler(run_b_dir, batch_size=4, strategy=strategy)
    expected = f"follows run {run_a} but this sampler reads run {run_b}"
    if restore == "before":
        tf.train.Checkpoint(sampler=sampler_b.state).read(saved).expect_partial()
        with pytest.raises(StateRunError, match=expected):
            sampler_b.dataset()
    else:
        dataset = sampler_b.dataset()
        tf.train.Checkpoint(sampler=sampler_b.state).read(saved).expect_partial()
        with pytest.raises(tf.errors.InvalidArgumentError) as failed:
            _iterate(dataset)
        assert f"follows run] [{run_a}] [but this sampler reads run {run_b}" in str(failed.value)

    # Its own run's state restores and resumes.
    again = DynamicPairsSampler(run_a_dir, batch_size=4, strategy=strategy)
    tf.train.Checkpoint(sampler=again.state).read(saved).expect_partial()
    _iterate(again.dataset())
    assert int(again.state.epoch.numpy()) == 2


def test_a_class_balanced_state_of_one_run_is_refused_by_another(tmp_path):
    run_dirs = [str(tmp_path / name) for name in ("a", "b")]
    for seed, run_dir in enumerate(run_dirs):
        write_audio_run(run_dir, [3, 4, 2, 5], record_set="train", seed=seed)
    run_ids = [runs.run_id_of(run_dir) for run_dir in run_dirs]
    samplers = [
        ClassBalancedSampler(
            run_dir, record_set="train", n_classes_per_batch=2, n_samples_per_class=2
        )
        for run_dir in run_dirs
    ]
    _iterate(samplers[0].dataset())
    saved = tf.train.Checkpoint(sampler=samplers[0].state).write(str(tmp_path / "ckpt" / "a"))
    tf.train.Checkpoint(sampler=samplers[1].state).read(saved).expect_partial()
    with pytest.raises(StateRunError, match=f"follows run {run_ids[0]} but .* run {run_ids[1]}"):
        samplers[1].dataset()


def test_the_audio_front_end_takes_the_sample_rate_the_run_stored(tmp_path):
    """What a run stores is read from it (issue 21): an 8 kHz run is featurized at 8 kHz by
    default, not at a 16 kHz default of the reader's."""
    run_dir = str(tmp_path / "run")
    write_audio_run(run_dir, [3, 4, 2], record_set="train", sample_rate=8000)
    summary = {"ok": True, "job": "audio", "config": {"sample_rate": 8000}}
    layout.commit_run(run_dir, runs.run_id_of(run_dir), summary)
    sampler = ClassBalancedSampler(
        run_dir, record_set="train", n_classes_per_batch=2, n_samples_per_class=2
    )
    assert sampler.features.sample_rate == 8000
    batch = next(iter(sampler.dataset()))
    assert batch["features"].shape[0] == 4
