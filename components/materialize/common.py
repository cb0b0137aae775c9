"""Small pieces every materialize job and stage shares: the rejects' output tag, the default
pipeline, the empty id table."""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from tfx_dynamic_inputs.materialize import beam_worker, staging
from tfx_dynamic_inputs.materialize.id_index import IdIndex
from tfx_dynamic_inputs.materialize.shards import IdTable

# The output tag under which every DoFn of the jobs yields its `rejects.Reject`s.
REJECTED = "rejected"

EMPTY_TABLE = IdTable(IdIndex.from_ids([]), np.zeros([0], np.int64))


def make_default_pipeline(beam_pipeline_args: Iterable[str]) -> beam.Pipeline:
    """The pipeline a job runs on when its caller gives none.

    Args:
        beam_pipeline_args: Beam's command-line options (`--runner`, `--direct_num_workers`, ...).

    Returns:
        A `beam.Pipeline` (the DirectRunner unless the options name another runner).
    """
    # Remote workers get the project's code as a wheel (`staging`); local runs are unchanged.
    options = PipelineOptions(staging.with_project_staged(beam_pipeline_args))
    return beam_worker.local_pipeline(options)


def table(tables: dict[str, IdTable], record_set: str) -> IdTable:
    """The `IdTable` of `record_set` in `tables`, or an empty one when it has none.

    Args:
        tables: record_set -> IdTable (a side input's dict).
        record_set: the record set's name.

    Returns:
        The `IdTable`.
    """
    return tables.get(record_set, EMPTY_TABLE)
