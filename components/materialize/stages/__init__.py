"""The stages every Beam job of the project is composed of: the materialize jobs (pairs, audio)
and the IndexExamples job (`tfx_dynamic_inputs.index_component.indexing`). Data walks one way:

    run_job:  claim the folder  ->  [the pipeline]  ->  release; a failure recorded
    pipeline: ReadSpread -> CollectIdTables / CollectRejectedIds        (read, screen)
              -> PlanRecordSets | PlanByPairList | PlanByGroup          (plan ids)
              -> AssignToShards -> Judge                                (shard, verdict)
              -> WriteShards -> WritePairing                            (write shards, indexes)
              -> Commit                                                 (summary.json, last)

A reader of its own (IndexExamples' `screening`) screens with this package's vocabulary: rejects
(`Reject`, `RejectedInput`, the reasons), the spilling reader base (`SpillingDoFn`, `Payload`)
and `normalize_id`.

One module per stage: `read` (read and screen), `plan` (plan ids, assign shards), `write`
(shards and indexes), `commit` (verdict and summary), `run` (claim and commit around the
pipeline); `job` holds `Job`, the base of each job's transform (the pipeline's root in, the
summary out). A job outside this package uses these names and `tfx_dynamic_inputs.layout` only; the
other modules of `tfx_dynamic_inputs.materialize` are its internals.

Why here and not a package of its own: the stages are made of the materialize package's
shard, spill, claim and pairing code, which holds the run's safety rules; beside it, they name
that code without a second copy or a dependency cycle.
"""

from tfx_dynamic_inputs.materialize.common import REJECTED
from tfx_dynamic_inputs.materialize.config import PAIRS_FORMATS, ShardingConfig
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.materialize.paths import normalize_id
from tfx_dynamic_inputs.materialize.rejects import (
    DUPLICATE_ID,
    MISSING_LABEL,
    NO_VALID_PAIRS,
    Reject,
    RejectedInput,
)
from tfx_dynamic_inputs.materialize.spill import Payload, SpillingDoFn, resolve_spill_root
from tfx_dynamic_inputs.materialize.stages.commit import Commit, Judge, Judgement, sharding_summary
from tfx_dynamic_inputs.materialize.stages.job import Job
from tfx_dynamic_inputs.materialize.stages.plan import (
    AssignToShards,
    CollectGroupTables,
    Pairing,
    PlanByGroup,
    PlanByPairList,
    PlanRecordSets,
)
from tfx_dynamic_inputs.materialize.stages.read import (
    CollectIdTables,
    CollectRejectedIds,
    ReadSpread,
)
from tfx_dynamic_inputs.materialize.stages.run import run_job, run_materialize
from tfx_dynamic_inputs.materialize.stages.write import WritePairing, WriteShards

__all__ = [
    "DUPLICATE_ID",
    "MISSING_LABEL",
    "NO_VALID_PAIRS",
    "PAIRS_FORMATS",
    "REJECTED",
    "Payload",
    "Reject",
    "RejectedInput",
    "SpillingDoFn",
    "normalize_id",
    "AssignToShards",
    "CollectGroupTables",
    "CollectIdTables",
    "CollectRejectedIds",
    "Commit",
    "Job",
    "Judge",
    "Judgement",
    "MaterializeError",
    "Pairing",
    "PlanByGroup",
    "PlanByPairList",
    "PlanRecordSets",
    "ReadSpread",
    "ShardingConfig",
    "WritePairing",
    "WriteShards",
    "resolve_spill_root",
    "run_job",
    "run_materialize",
    "sharding_summary",
]
