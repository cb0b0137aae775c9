"""How every job ends: its rejects recorded and its verdict decided (`Judge`), then, once every
writer has reported, `summary.json` written last (`Commit`).

A job judges its run with `Judge` before it writes anything: its writers take the verdict and
write nothing when it fails. The summary `Commit` writes names the run of the job that claims
the folder (`layout.commit_run`), written whole or not at all (`commit_file.commit_whole`);
readers refuse a folder whose summary is missing, not ok, or names another run.
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

from tfx_dynamic_inputs.materialize import claims, commit_file, rejects
from tfx_dynamic_inputs.materialize.config import ShardingConfig
from tfx_dynamic_inputs.materialize.shards import ShardPlan
from tfx_dynamic_inputs.materialize.verdict import Verdict, decide


class Judgement(NamedTuple):
    """What `Judge` yields, as singleton PCollections.

    Attributes:
        reject_counts: dict reason -> count, available once `rejects.jsonl` is written.
        verdict: the run's `Verdict`.
    """

    reject_counts: beam.PCollection
    verdict: beam.PCollection


def _decide(
    reject_counts: dict[str, int],
    num_inputs: int,
    plans: dict[str, ShardPlan],
    required_record_sets: tuple[str, ...],
    max_reject_fraction: float,
    record_reasons: tuple[str, ...],
    input_noun: str,
) -> Verdict:
    return decide(
        num_inputs=num_inputs,
        reject_counts=reject_counts,
        record_counts={name: plan.num_records for name, plan in plans.items()},
        required_record_sets=required_record_sets,
        max_reject_fraction=max_reject_fraction,
        record_reasons=record_reasons,
        input_noun=input_noun,
    )


@beam.ptransform_fn
def Judge(
    all_rejects: tuple[beam.PCollection, ...],
    output_dir: str,
    *,
    num_inputs: beam.PCollection,
    plans: beam.PCollection,
    required_record_sets: tuple[str, ...],
    max_reject_fraction: float,
    record_reasons: tuple[str, ...] = rejects.RECORD_REASONS,
    input_noun: str = "inputs",
) -> Judgement:
    """Records the rejects (`rejects.RecordRejects`) and decides the run's verdict (`decide`).

    Args:
        all_rejects: the input, a tuple of PCollection[Reject] (every stage's rejects).
        output_dir: the run's folder, where `rejects.jsonl` goes.
        num_inputs: singleton PCollection, the number of input records.
        plans: singleton PCollection, dict record_set -> ShardPlan.
        required_record_sets: the record sets that must keep a record for the run to be ok.
        max_reject_fraction: the largest fraction of inputs that may be rejected.
        record_reasons: the reasons that count as a rejected input (the others drop entries
            of a pair or groups list).
        input_noun: what the inputs are called in the verdict's error.

    Returns:
        A `Judgement`.

    Example:
        judgement = (decoded.rejects, assigned[REJECTED]) | "Judge" >> Judge(
            run_dir, num_inputs=num_files, plans=plans, required_record_sets=("x", "y"),
            max_reject_fraction=0.1)
    """
    reject_counts = (
        all_rejects
        | "AllRejects" >> beam.Flatten()
        | "Rejects" >> rejects.RecordRejects(output_dir)
    )
    verdict = reject_counts | "Verdict" >> beam.Map(
        _decide,
        beam.pvalue.AsSingleton(num_inputs),
        beam.pvalue.AsSingleton(plans),
        required_record_sets,
        max_reject_fraction,
        record_reasons,
        input_noun,
    )
    return Judgement(reject_counts, verdict)


def sharding_summary(sharding: ShardingConfig) -> dict:
    """The summary's config entries that say how the record sets were cut into shards.

    Args:
        sharding: the job's `ShardingConfig`.

    Returns:
        {"max_shard_bytes": ..., "num_shards": ...}.
    """
    return {"max_shard_bytes": sharding.max_shard_bytes, "num_shards": sharding.num_shards}


def _write_summary(
    verdict: Verdict,
    output_dir: str,
    run_id: str,
    static: dict,
    reject_counts: dict[str, int],
    plans: dict[str, ShardPlan],
    index_stats: dict[str, dict],
    sections: list[dict],
) -> dict:
    record_sets = {
        name: index_stats.get(name, {"num_records": plan.num_records, "num_shards": 0})
        for name, plan in sorted(plans.items())
        if plan.num_records or name in index_stats
    }
    summary = {
        **static,
        "ok": verdict.ok,
        "error": verdict.error or None,
        "record_sets": record_sets,
        "rejects": {
            "total": int(sum(reject_counts.values())),
            "records": verdict.record_rejects,
            "by_reason": reject_counts,
        },
        "reject_fraction": verdict.reject_fraction,
    }
    for section in sections:
        summary.update(section)
    return commit_file.commit_whole(output_dir, run_id, summary)


@beam.ptransform_fn
def Commit(
    judgement: Judgement,
    output_dir: str,
    static: dict,
    *,
    plans: beam.PCollection,
    index_stats: beam.PCollection,
    sections: tuple[beam.PCollection, ...],
) -> beam.PCollection:
    """Writes `summary.json`, the last file a run writes: it commits the run of the job that
    claims `output_dir` (`commit_file.commit_whole`), as ok or not as the verdict says.

    Args:
        judgement: the input, the run's `Judgement`.
        output_dir: the run's folder.
        static: what the job knew before it ran (job, inputs, config).
        plans: singleton PCollection, dict record_set -> ShardPlan.
        index_stats: PCollection[(record_set, stats)] from `WriteShards`.
        sections: PCollections of dicts, the job's own top-level entries (pair statistics,
            input counts, ...), merged into the summary; each waits for its writer.

    Returns:
        A singleton PCollection, the summary written.

    Example:
        summary = judgement | "Summary" >> Commit(
            run_dir, static, plans=plans, index_stats=index_stats, sections=(pair_stats,))
    """
    return judgement.verdict | "Write" >> beam.Map(
        _write_summary,
        output_dir,
        claims.claimed_run_id(output_dir),
        static,
        beam.pvalue.AsSingleton(judgement.reject_counts),
        beam.pvalue.AsSingleton(plans),
        beam.pvalue.AsDict(index_stats),
        beam.pvalue.AsList(sections | "Sections" >> beam.Flatten()),
    )
