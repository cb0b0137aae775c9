"""Spill files: payloads handed between Beam stages by file and offset instead of by value."""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.materialize import readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import claims, held_payloads, run_dir, spill, stages


@settings(max_examples=30, deadline=None)
@given(
    payload_sizes=st.lists(st.lists(st.integers(0, 3000), max_size=12), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_refs_read_back_the_spilled_payloads_in_any_order(tmp_path_factory, payload_sizes, seed):
    """Several writers (bundles), several writes each; refs read back shuffled."""
    output_dir = str(tmp_path_factory.mktemp("run"))
    rng = np.random.default_rng(seed)
    payloads, refs = [], []
    for sizes in payload_sizes:
        writer = spill.SpillWriter(output_dir)
        for chunk in np.array_split(np.array(sizes, np.int64), 2):
            chunk_payloads = [rng.bytes(int(n)) for n in chunk]
            payloads.extend(chunk_payloads)
            refs.extend(writer.write(chunk_payloads))
        writer.close()
    order = rng.permutation(len(refs)).tolist()
    shuffled = [refs[i] for i in order]
    assert spill.read_payloads(shuffled) == [payloads[i] for i in order]
    assert spill.read_frames(shuffled) == [layout.tfrecord_frame(payloads[i]) for i in order]
    assert [ref.length for ref in refs] == [len(p) for p in payloads]


@settings(max_examples=30, deadline=None)
@given(
    payload_sizes=st.lists(st.lists(st.integers(0, 3000), max_size=12), min_size=1, max_size=5),
    budget=st.integers(0, 20000),
    seed=st.integers(0, 2**16),
)
def test_held_payloads_fill_the_budget_and_the_rest_spill(
    tmp_path_factory, payload_sizes, budget, seed
):
    """With the folder's holder open in this process (`--spill auto`), writers hold payloads
    until the budget would be passed and spill the rest; held and spilled refs read back
    alike, in any order, and the run's payloads are dropped with its spill files."""
    output_dir = str(tmp_path_factory.mktemp("run"))
    run_id = f"held{seed}"
    root = spill.spill_dir(output_dir, run_id)
    holder = held_payloads.open_holder(root, run_id, budget)
    rng = np.random.default_rng(seed)
    payloads, refs = [], []
    for sizes in payload_sizes:
        writer = spill.SpillWriter(root)
        chunk_payloads = [rng.bytes(int(n)) for n in sizes]
        payloads.extend(chunk_payloads)
        refs.extend(writer.write(chunk_payloads))
        writer.close()
    held = [isinstance(ref, held_payloads.HeldRef) for ref in refs]
    assert holder.held_bytes == sum(len(p) for p, h in zip(payloads, held, strict=True) if h)
    assert holder.held_bytes <= budget
    # A payload is spilled only when holding it would have passed the budget.
    total = 0
    for payload, was_held in zip(payloads, held, strict=True):
        assert was_held == (total + len(payload) <= budget)
        total += len(payload) if was_held else 0
    order = rng.permutation(len(refs)).tolist()
    shuffled = [refs[i] for i in order]
    assert spill.read_payloads(shuffled) == [payloads[i] for i in order]
    assert spill.read_frames(shuffled) == [layout.tfrecord_frame(payloads[i]) for i in order]
    assert [spill.payload_length(ref) for ref in refs] == [len(p) for p in payloads]
    assert os.path.isdir(root) == (not all(held))
    spill.remove_spill_dir(output_dir, run_id)
    assert held_payloads.holder_of(root) is None and not os.path.exists(root)
    if any(held):
        with pytest.raises(RuntimeError, match="held in memory by another process, or its run"):
            spill.read_payloads([refs[held.index(True)]])


def test_a_run_holds_at_most_what_the_docs_say():
    # docs/materialize.md and docs/scale-out.md: "up to 1 GiB a run".
    assert held_payloads.HELD_BYTES_BUDGET == 1 << 30


def test_a_process_forked_from_the_launcher_spills_instead_of_holding(tmp_path, monkeypatch):
    """A forked process sees the launcher's holder, but what it held no other process could
    read: it spills."""
    root = spill.spill_dir(str(tmp_path), "forked")
    held_payloads.open_holder(root, "forked")
    launcher = os.getpid()
    monkeypatch.setattr(held_payloads.os, "getpid", lambda: launcher + 1)
    writer = spill.SpillWriter(root)
    [ref] = writer.write([b"decoded in a forked worker"])
    writer.close()
    assert isinstance(ref, spill.SpillRef)
    assert spill.read_payloads([ref]) == [b"decoded in a forked worker"]
    held_payloads.release("forked")


def test_spill_files_are_tfrecord_files(tmp_path):
    payloads = [b"", b"a", bytes(range(256)) * 40]
    writer = spill.SpillWriter(str(tmp_path))
    refs = writer.write(payloads[:2]) + writer.write(payloads[2:])
    writer.close()
    assert len({ref.path for ref in refs}) == 1
    read = [r.numpy() for r in tf.data.TFRecordDataset(refs[0].path)]
    assert read == payloads


def test_a_ref_past_the_end_of_its_file_is_a_clear_error(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    [ref] = writer.write([b"x" * 100])
    writer.close()
    with open(ref.path, "r+b") as f:
        f.truncate(50)
    with pytest.raises(RuntimeError, match="spill file .* is shorter than its refs"):
        spill.read_frames([ref])


class _SpillThenMaybeFail(spill.SpillingDoFn):
    def __init__(self, output_dir: str, fail: bool):
        super().__init__(output_dir)
        self._fail = fail

    def process(self, element):
        [ref] = self.spill.write([element])
        if self._fail:
            raise ValueError("a worker failed after spilling")
        yield ref


@pytest.mark.parametrize("fail", [False, True])
def test_run_job_removes_the_spill_files_whether_or_not_the_job_fails(tmp_path, fail):
    output_dir = str(tmp_path / "out")

    def build(pipeline):
        run_id = claims.claimed_run_id(output_dir)
        read_back = (
            pipeline
            | beam.Create([b"p0", b"p1"])
            | beam.ParDo(_SpillThenMaybeFail(spill.spill_dir(output_dir, run_id), fail))
            | beam.Reshuffle()  # a later stage reads the refs, as in the jobs
            | beam.Map(lambda ref: bytes(spill.read_payloads([ref])[0]).decode())
        )
        _ = (
            pipeline
            | "Impulse" >> beam.Create([None])
            | "Summary"
            >> beam.Map(
                lambda _, read: layout.commit_run(
                    output_dir, run_id, {"ok": True, "read": sorted(read)}
                ),
                beam.pvalue.AsList(read_back),
            )
        )

    if fail:
        with pytest.raises(ValueError, match="a worker failed after spilling"):
            stages.run_job(build, output_dir, False, (), None)
        # Not committed: the summary says the run failed, and why.
        summary = layout.load_json(os.path.join(output_dir, layout.SUMMARY_FILE))
        assert summary["ok"] is False
        assert "a worker failed after spilling" in summary["error"]
    else:
        summary = stages.run_job(build, output_dir, False, (), None)
        assert summary.pop(layout.RUN_ID_KEY)
        assert summary == {"ok": True, "read": ["p0", "p1"]}
    assert readback.spill_entries(output_dir) == []


def test_overwrite_removes_the_spill_files_of_a_crashed_run(tmp_path):
    output_dir = str(tmp_path / "out")
    writer = spill.SpillWriter(spill.spill_dir(output_dir, "killedrun"))
    writer.write([b"left by a run that was killed"])
    writer.close()
    # The killed run is known by the stale claim it left.
    run_dir.prepare_output_dir(output_dir, overwrite=True, stale_run_ids=["killedrun"])
    assert os.listdir(output_dir) == []


def test_without_a_spill_root_payloads_are_handed_on_as_they_are(tmp_path):
    """`--spill none`: the writer returns the bytes, and both readers take them as refs."""
    inline = spill.SpillWriter(None)
    payloads = [b"", b"kept", bytes(range(256)) * 3]
    handed = inline.write(payloads)
    inline.close()
    assert handed == payloads
    writer = spill.SpillWriter(str(tmp_path / "spill"))
    refs = writer.write([b"spilled", b""])
    writer.close()
    mixed = [refs[0], handed[1], refs[1], handed[2]]
    expected = [b"spilled", b"kept", b"", handed[2]]
    assert spill.read_payloads(mixed) == expected
    assert spill.read_frames(mixed) == [layout.tfrecord_frame(p) for p in expected]
    assert [spill.payload_length(p) for p in mixed] == [len(p) for p in expected]
    assert os.listdir(tmp_path) == ["spill"]  # only the writer with a folder wrote
