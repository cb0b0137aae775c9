"""A runner that loses records between stages: the shard writer notices, the job says so."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest

from tfx_dynamic_inputs.materialize import shards, spill, stages
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.verdict import Verdict

# The writer refuses before it reads a frame, so the refs point nowhere.
_UNREAD = spill.SpillRef("never-read.tfrecord", 0, 7)


def _plan(num_records: int) -> shards.ShardPlan:
    ids = IdIndex.from_ids([f"id{i:03d}" for i in range(num_records)])
    return shards.ShardPlan("y", ids, np.array([0, num_records // 2, num_records], np.int64))


@pytest.mark.parametrize("received", [[0, 1, 3], [0, 1, 2, 3, 3], [0, 2, 3, 4]])
def test_shard_writer_refuses_records_that_differ_from_its_plan(tmp_path, received):
    plan = _plan(8)  # shard 0 holds records 0..3
    writer = shards._WriteShard(str(tmp_path))
    element = (("y", 0), [[(r, _UNREAD, -1) for r in received]])
    with pytest.raises(RuntimeError, match=f"shard 0 of 'y' received {len(received)} records"):
        list(writer.process(element, {"y": plan}, Verdict(ok=True)))
    assert not list(tmp_path.iterdir())  # nothing written


def test_job_turns_lost_records_into_one_clear_error(tmp_path):
    def build(pipeline):
        plan = _plan(8)
        _ = (
            pipeline
            | beam.Create([(("y", 1), [(4, _UNREAD, -1), (5, _UNREAD, -1)])])
            | beam.GroupByKey()
            | beam.ParDo(shards._WriteShard(str(tmp_path / "out")), {"y": plan}, Verdict(ok=True))
        )

    with pytest.raises(MaterializeError) as raised:
        stages.run_job(build, str(tmp_path / "out"), False, (), None)
    message = str(raised.value)
    assert "\n" not in message
    assert "shard 1 of 'y' received 2 records, planned 4" in message
    assert "direct_num_workers" in message and "incomplete" in message


def test_other_pipeline_errors_pass_through(tmp_path):
    def build(pipeline):
        _ = pipeline | beam.Create([1]) | beam.Map(lambda _: 1 / 0)

    with pytest.raises(ZeroDivisionError):
        stages.run_job(build, str(tmp_path / "out"), False, (), None)
