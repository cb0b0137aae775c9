"""Read, then screen: the inputs spread over the workers and read by a job's reader, then the
ids of what passed screening, and of what was rejected, gathered for the planning stage.

A reader is a DoFn (a `spill.SpillingDoFn` for payloads that travel on) that yields batches of
`(record_set, ids, payloads, ...)`, or single records, and tags every input it refuses as a
`rejects.Reject` under `REJECTED`. Only ids and payload lengths are gathered: the payloads (spill
refs, or the bytes with `--spill none`) stay where they are until the shard writers read them.
"""

from __future__ import annotations

import apache_beam as beam

from tfx_dynamic_inputs.materialize import common, shards, spill

REJECTED = common.REJECTED


class ReadSpread(beam.PTransform):
    """Work items (file batches, files, manifest rows) -> what `reader` makes of them, spread
    over the workers first (`beam.Reshuffle`: a listing or a `Create` hands everything to one),
    where there is more than one (`spreads_work`).

    Args:
        reader: the DoFn that reads one work item; it tags its rejects `REJECTED`.
        main: the name of its main output.
        extra_outputs: the tags of its other outputs, beside `REJECTED`.

    Returns (of `expand`):
        The reader's `DoOutputsTuple`: `main`, `REJECTED` and each of `extra_outputs`.

    Example:
        >>> decoded = rows | "Decode" >> ReadSpread(_DecodeUtterances(...), "utterances")
        ... # doctest: +SKIP
    """

    def __init__(self, reader: beam.DoFn, main: str, extra_outputs: tuple[str, ...] = ()):
        super().__init__()
        self._reader = reader
        self._main = main
        self._extra_outputs = extra_outputs

    def expand(self, items: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        """Reshuffles the work items, then reads each with the reader DoFn.

        Args:
            items: PCollection of work items, as `reader.process` takes them.

        Returns:
            The reader's `DoOutputsTuple`.
        """
        if spreads_work(items.pipeline):
            items = items | "Spread" >> beam.Reshuffle()
        return items | "Read" >> beam.ParDo(self._reader).with_outputs(
            REJECTED, *self._extra_outputs, main=self._main
        )


def spreads_work(pipeline: beam.Pipeline) -> bool:
    """Whether `pipeline`'s runner may run the work items on more than one worker.

    The DirectRunner in memory (its default mode, batch) runs every bundle on one worker in
    this process: a `Reshuffle` there spreads nothing, and its five transforms (a stage break)
    cost the job's start-up about 60 ms. Every other runner and mode gets it.

    Args:
        pipeline: the pipeline the job is built on (its runner and options are read).

    Returns:
        False for the DirectRunner in memory, True otherwise.
    """
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner

    options = pipeline.options
    return not (
        isinstance(pipeline.runner, SwitchingDirectRunner)
        and options.view_as(DirectOptions).direct_running_mode == "in_memory"
        and not options.view_as(StandardOptions).streaming
    )


@beam.ptransform_fn
def CollectIdTables(batches: beam.PCollection) -> beam.PCollection:
    """The ids of every record that passed screening, by record set, with their sizes.

    Args:
        batches: the input, PCollection of batches whose first three fields are
            `(record_set, ids, payloads)` (`screening.RecordBatch`, the pairs job's decoded
            images).

    Returns:
        PCollection[(record_set, shards.IdTable)], one per record set.

    Example:
        tables = decoded.records | "Tables" >> CollectIdTables()
    """
    return (
        batches
        | "Keys" >> beam.Map(lambda b: (b[0], (b[1], [spill.payload_length(p) for p in b[2]])))
        | "CollectIds" >> beam.CombinePerKey(shards.CollectIds())
    )


@beam.ptransform_fn
def CollectRejectedIds(rejected: beam.PCollection) -> beam.PCollection:
    """The ids of the records rejected while reading or screening, by record set (each once):
    a pair list entry naming one is told apart from one naming no record at all.

    Args:
        rejected: the input, PCollection[Reject]; those without an id (a listing's, a pair
            list's) are left out.

    Returns:
        PCollection[(record_set, shards.IdTable)] (sizes 0).

    Example:
        rejected_tables = decoded.rejects | "RejectedTables" >> CollectRejectedIds()
    """
    return (
        rejected
        | "WithId" >> beam.Filter(lambda reject: bool(reject.id))
        | "RejectedId" >> beam.Map(lambda reject: (reject.record_set, reject.id))
        | "DistinctRejectedIds" >> beam.Distinct()
        | "RejectedKeys" >> beam.Map(lambda key: (key[0], ([key[1]], [0])))
        | "CollectRejectedIds" >> beam.CombinePerKey(shards.CollectIds())
    )
