"""The Beam transforms of the jobs, run on TestPipeline and checked with assert_that."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    claims,
    images,
    pair_index,
    pairs_pipeline,
    rejects,
    shards,
    spill,
)
from tfx_dynamic_inputs.materialize.audio_pipeline import _Deduplicate
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.manifest import ManifestRow
from tfx_dynamic_inputs.materialize.pair_list import PairEntry
from tfx_dynamic_inputs.materialize.verdict import Verdict


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(counter.committed for counter in counters)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
    max_shard_bytes=st.integers(1, 2000),
    num_shards=st.integers(0, 7),
)
def test_shard_plans_cover_records_in_order(sizes, max_shard_bytes, num_shards):
    table = shards.IdTable(
        IdIndex.from_ids(f"r{i:03d}" for i in range(len(sizes))), np.array(sizes, np.int64)
    )
    plan = shards.plan_shards("s", table, ShardingConfig(max_shard_bytes, num_shards))
    starts = plan.shard_starts
    assert starts[0] == 0 and starts[-1] == len(sizes) and np.all(np.diff(starts) > 0)
    np.testing.assert_array_equal(
        plan.shard_of(np.arange(len(sizes))), np.repeat(np.arange(plan.num_shards), np.diff(starts))
    )
    if num_shards:
        assert plan.num_shards == min(num_shards, len(sizes))
        assert np.ptp(np.diff(starts)) <= 1
    else:
        frames = table.sizes + layout.FRAME_OVERHEAD_BYTES
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            assert frames[begin : end - 1].sum() < max_shard_bytes or end - begin == 1


@settings(max_examples=25, deadline=None)
@given(class_ids=st.lists(st.integers(0, 9), max_size=80), extra_classes=st.integers(0, 3))
def test_class_records_list_each_class_in_order(class_ids, extra_classes):
    num_classes = (max(class_ids) + 1 if class_ids else 0) + extra_classes
    row_splits, values = layout.class_records(np.array(class_ids, np.int64), num_classes)
    assert len(row_splits) == num_classes + 1
    for c in range(num_classes):
        members = values[row_splits[c] : row_splits[c + 1]].tolist()
        assert members == [i for i, k in enumerate(class_ids) if k == c]


def _records(record_set: str, n: int, rng) -> dict[str, bytes]:
    return {
        f"{record_set}/{i:04d}-{rng.integers(1 << 30)}": rng.bytes(int(rng.integers(0, 200)))
        for i in range(n)
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_write_record_sets_writes_sorted_shards_and_indexes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    payloads = {"a": _records("a", 70, rng), "b": _records("b", 9, rng)}
    vocabulary = ["k0", "k1", "k2"]
    labels = {rid: int(rng.integers(0, 3)) for rid in payloads["b"]}
    plans = {
        name: shards.plan_shards(
            name,
            shards.IdTable(
                IdIndex.from_ids(records), np.array([len(v) for v in records.values()], np.int64)
            ),
            ShardingConfig(max_shard_bytes=1500),
        )
        for name, records in payloads.items()
    }
    output_dir = str(tmp_path)
    run_id = layout.new_run_id()
    claims.try_claim(output_dir, claims.Claim.of_this_process(run_id))
    batches = []
    for name, records in payloads.items():
        items = list(records.items())
        rng.shuffle(items)
        for chunk in np.array_split(np.arange(len(items)), 4):
            chunk_ids = [items[i][0] for i in chunk.tolist()]
            writer = spill.SpillWriter(output_dir)  # a decode bundle: one spill file per chunk
            batches.extend(
                shards.group_by_shard(
                    plans[name],
                    plans[name].ids.lookup(chunk_ids),
                    writer.write([records[i] for i in chunk_ids]),
                    np.array([labels.get(i, -1) for i in chunk_ids], np.int64),
                )
            )
            writer.close()
    pipeline = TestPipeline()
    stats = (
        pipeline
        | beam.Create(batches)
        | shards.WriteRecordSets(
            output_dir,
            plans=beam.pvalue.AsSingleton(pipeline | "Plans" >> beam.Create([plans])),
            verdict=beam.pvalue.AsSingleton(pipeline | "Ok" >> beam.Create([Verdict(True)])),
            vocabularies=beam.pvalue.AsSingleton(
                pipeline | "Vocab" >> beam.Create([{"b": vocabulary}])
            ),
        )
    )
    assert_that(
        stats | beam.Map(lambda kv: (kv[0], kv[1]["num_records"], kv[1]["num_shards"])),
        equal_to([(name, len(payloads[name]), plans[name].num_shards) for name in payloads]),
    )
    result = pipeline.run()
    result.wait_until_finish()

    assert plans["a"].num_shards > 1
    for name, records in payloads.items():
        ordered = sorted(records, key=lambda rid: rid.encode())
        assert readback.ids(output_dir, name) == ordered
        assert readback.records_by_index(output_dir, name) == [records[i] for i in ordered]
        assert readback.records_sequential(output_dir, name) == [records[i] for i in ordered]
        assert _counter(result, f"records_written_{name}") == len(records)
    index = layout.index_dir(output_dir, "b")
    assert layout.load_lines(os.path.join(index, "classes.txt")) == vocabulary
    ordered_b = sorted(payloads["b"], key=lambda rid: rid.encode())
    np.testing.assert_array_equal(
        layout.load_npy(os.path.join(index, "class_ids.npy")), [labels[i] for i in ordered_b]
    )
    assert not os.path.exists(os.path.join(layout.index_dir(output_dir, "a"), "classes.txt"))
    # Every index names the run of the job that claims the folder.
    for name in payloads:
        shards_json = layout.load_json(
            os.path.join(layout.index_dir(output_dir, name), "shards.json")
        )
        assert shards_json[layout.RUN_ID_KEY] == run_id
    assert layout.load_run_file(layout.class_records_dir(output_dir, "b")) == run_id


def test_write_record_sets_writes_nothing_for_a_failed_run(tmp_path):
    plan = shards.plan_shards(
        "a", shards.IdTable(IdIndex.from_ids(["r"]), np.array([3])), ShardingConfig()
    )
    run_id = layout.new_run_id()
    claims.try_claim(str(tmp_path), claims.Claim.of_this_process(run_id))
    writer = spill.SpillWriter(spill.spill_dir(str(tmp_path), run_id))
    [ref] = writer.write([b"abc"])
    writer.close()
    spill.remove_spill_dir(str(tmp_path), run_id)  # refs are all the writer stage sees
    with TestPipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create([(("a", 0), [(0, ref, -1)])])
            | shards.WriteRecordSets(
                str(tmp_path),
                plans=beam.pvalue.AsSingleton(pipeline | "Plans" >> beam.Create([{"a": plan}])),
                verdict=beam.pvalue.AsSingleton(
                    pipeline | "Failed" >> beam.Create([Verdict(False, "too many rejects")])
                ),
            )
        )
    assert os.listdir(tmp_path) == [layout.CLAIM_FILE]


def test_record_rejects_counts_each_reason_and_writes_sorted_lines(tmp_path):
    rng = np.random.default_rng(5)
    reasons = [rejects.CORRUPT_IMAGE] * 3 + [rejects.MISSING_FILE] * 2 + [rejects.PAIR_UNKNOWN_Y]
    all_rejects = [
        rejects.Reject(f"/data/{i}", reason, f"detail {i}", "x", f"{i}.png")
        for i, reason in enumerate(reasons)
    ]
    rng.shuffle(all_rejects)
    pipeline = TestPipeline()
    counts = pipeline | beam.Create(all_rejects) | rejects.RecordRejects(str(tmp_path))
    assert_that(
        counts,
        equal_to([{rejects.CORRUPT_IMAGE: 3, rejects.MISSING_FILE: 2, rejects.PAIR_UNKNOWN_Y: 1}]),
    )
    result = pipeline.run()
    result.wait_until_finish()
    lines = layout.load_lines(os.path.join(tmp_path, layout.REJECTS_FILE))
    assert lines == sorted(lines) and len(lines) == len(reasons)
    assert sorted(json.loads(line)["source"] for line in lines) == sorted(
        r.source for r in all_rejects
    )
    assert _counter(result, f"rejected_{rejects.CORRUPT_IMAGE}") == 3
    assert _counter(result, f"rejected_{rejects.MISSING_FILE}") == 2


def _run_tagged(pipeline, elements: list, do_fn: beam.DoFn, main: str, *side_inputs):
    """`do_fn` applied to `elements`: its outputs, `main` and the rejects it tagged."""
    return (
        pipeline
        | beam.Create(elements)
        | beam.ParDo(do_fn, *side_inputs).with_outputs(pairs_pipeline.REJECTED, main=main)
    )


def _assert_tagged(
    outputs, main, expected: list, field: str, expected_rejects: list[tuple[str, str]]
) -> None:
    """A DoFn's main output, as the test maps it into `main`, is `expected`, and the rejects it
    tagged in `outputs` are `expected_rejects`, as (their `field`, reason)."""
    assert_that(main, equal_to(expected), label="main")
    assert_that(
        outputs[pairs_pipeline.REJECTED]
        | "RejectFields" >> beam.Map(lambda r: (getattr(r, field), r.reason)),
        equal_to(expected_rejects),
        label="rejects",
    )


def test_decode_images_emits_records_and_tagged_rejects(tmp_path):
    rng = np.random.default_rng(6)
    root = str(tmp_path / "x")
    generate.write_images(root, ["a.png", "s/b.jpg"], rng)
    generate.write_file(root, "c.png", b"broken")
    generate.write_file(root, "d.bmp", b"BM")
    listed = (
        "x",
        [
            (name, os.path.join(root, name))
            for name in ("a.png", "s/b.jpg", "c.png", "d.bmp", "gone.png")
        ],
    )

    def spilled_ids(refs):
        return [
            tf.train.Example.FromString(payload).features.feature["id"].bytes_list.value[0]
            for payload in spill.read_payloads(refs)
        ]

    with TestPipeline() as pipeline:
        decode = pairs_pipeline._DecodeImages(
            {"x": root}, images.ImageStorage(), str(tmp_path / "out")
        )
        decoded = _run_tagged(pipeline, [listed], decode, "records")
        _assert_tagged(
            decoded,
            decoded.records
            | beam.Reshuffle()  # refs are read by a later stage, once the bundle has closed
            | beam.Map(lambda d: (d[0], d[1], spilled_ids(d[2]))),
            [("x", ["a.png", "s/b.jpg"], [b"a.png", b"s/b.jpg"])],
            "id",
            [
                ("c.png", rejects.CORRUPT_IMAGE),
                ("d.bmp", rejects.UNSUPPORTED_FORMAT),
                ("gone.png", rejects.MISSING_FILE),
            ],
        )


def test_resolve_edges_separates_unknown_from_rejected_ids():
    def table(names):
        return shards.IdTable(IdIndex.from_ids(names), np.zeros([len(names)], np.int64))

    tables = {"x": table(["x1", "x2", "x3"]), "y": table(["y1", "y2"])}
    rejected_tables = {"x": table(["xbad"]), "y": table(["ybad"])}
    entries = [
        PairEntry("x1", ["y2", "y1", "ybad", "ynone"], []),
        PairEntry("x3", [], []),
        PairEntry("xbad", ["y1"], []),
        PairEntry("xnone", ["y1"], []),
    ]
    with TestPipeline() as pipeline:
        edges = _run_tagged(
            pipeline,
            [entries],
            pair_index._ResolveEdges("p.jsonl"),
            "edges",
            beam.pvalue.AsSingleton(pipeline | "T" >> beam.Create([tables])),
            beam.pvalue.AsSingleton(pipeline | "R" >> beam.Create([rejected_tables])),
        )
        _assert_tagged(
            edges,
            edges.edges | beam.Map(lambda e: (e[0].tolist(), e[1].tolist(), e[2].tolist())),
            [([0, 0], [1, 0], [0, 2])],
            "source",
            [
                ("p.jsonl: x=x1 y=ybad", rejects.PAIR_REJECTED_Y),
                ("p.jsonl: x=x1 y=ynone", rejects.PAIR_UNKNOWN_Y),
                ("p.jsonl: x=xbad y=y1", rejects.PAIR_REJECTED_X),
                ("p.jsonl: x=xnone y=y1", rejects.PAIR_UNKNOWN_X),
            ],
        )


def test_deduplicate_keeps_one_of_identical_rows_and_no_conflicting_row():
    same = ManifestRow("a.wav", "s1", "")
    grouped = [
        ("a.wav", [same, same, same]),
        ("b.wav", [ManifestRow("b.wav", "s1", ""), ManifestRow("b.wav", "s2", "")]),
        ("c.wav", [ManifestRow("c.wav", "s3", "")]),
    ]
    with TestPipeline() as pipeline:
        unique = _run_tagged(pipeline, grouped, _Deduplicate("/root"), "rows")
        _assert_tagged(
            unique,
            unique.rows,
            [same, ManifestRow("c.wav", "s3", "")],
            "id",
            [("a.wav", rejects.DUPLICATE_ID)] * 2 + [("b.wav", rejects.DUPLICATE_ID)] * 2,
        )
