"""Write shards, then write indexes: the records' TFRecord shards with their offset and class
indexes (`WriteShards`), and the valid-pair index of a pairing (`WritePairing`).

Every writer takes the run's verdict and writes nothing when it is not ok, and every index
names the run of the job that claims the output folder (`claims.claimed_run_id`), so a reader
can tell it from another run's.
"""

from __future__ import annotations

import apache_beam as beam

from tfx_dynamic_inputs.materialize import group_pairing, pair_index, shards
from tfx_dynamic_inputs.materialize.stages.plan import Pairing


@beam.ptransform_fn
def WriteShards(
    shard_batches: beam.PCollection,
    output_dir: str,
    *,
    plans: beam.PCollection,
    verdict: beam.PCollection,
    vocabularies: beam.PCollection | None = None,
    make_record: shards.MakeRecord | None = None,
) -> beam.PCollection:
    """Writes each record set's shards, its offset index and, when labelled, its class index
    (`shards.WriteRecordSets`).

    Args:
        shard_batches: the input, PCollection[((record_set, shard), [ShardRecord])]
            (`AssignToShards`), any number of batches per shard.
        output_dir: the run's folder.
        plans: singleton PCollection, dict record_set -> ShardPlan.
        verdict: singleton PCollection, the run's `Verdict`: nothing is written unless ok.
        vocabularies: singleton PCollection, dict record_set -> class names, for the labelled
            record sets; None when none is labelled.
        make_record: builds each record from its payload and class (labelled sets only);
            without it a payload is the serialized record.

    Returns:
        PCollection[(record_set, stats dict)], for `Commit`'s `index_stats`.

    Example:
        index_stats = assigned.shard_batches | "Write" >> WriteShards(
            run_dir, plans=plans, verdict=judgement.verdict)
    """
    return shard_batches | "WriteRecordSets" >> shards.WriteRecordSets(
        output_dir,
        plans=beam.pvalue.AsSingleton(plans),
        verdict=beam.pvalue.AsSingleton(verdict),
        vocabularies=None if vocabularies is None else beam.pvalue.AsSingleton(vocabularies),
        make_record=make_record,
    )


@beam.ptransform_fn
def WritePairing(
    verdict: beam.PCollection,
    output_dir: str,
    pairing: Pairing,
    tables: beam.PCollection,
) -> beam.PCollection:
    """Writes the valid-pair index of `pairing`: the CSR index of each x record's valid y
    (`pair_index.WritePairIndex`) for a pair list, the group index
    (`group_pairing.WriteGroupIndex`) by group.

    Args:
        verdict: the input, singleton PCollection, the run's `Verdict`: nothing is written
            unless ok.
        output_dir: the run's folder.
        pairing: the `Pairing` of `PlanByPairList` or `PlanByGroup`.
        tables: PCollection[(record_set, IdTable)] of the candidates.

    Returns:
        A singleton PCollection, {"pairs": stats}, a section of the summary.

    Example:
        pair_stats = judgement.verdict | "PairIndex" >> WritePairing(run_dir, pairing, tables)
    """
    if pairing.edges is None:
        return verdict | "GroupIndex" >> group_pairing.WriteGroupIndex(
            output_dir, pairing.selection
        )
    return pairing.edges | "PairIndex" >> pair_index.WritePairIndex(
        output_dir, pairing.selection, tables, verdict
    )
