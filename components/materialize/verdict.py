"""Whether a run is usable: something left in every required record set, rejects under limit."""

from __future__ import annotations

import dataclasses

from tfx_dynamic_inputs.materialize import rejects


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The judgement of a run: `ok`, else `error` (the one line a failed run prints); the
    number of rejected input records and their fraction of all inputs (6 decimals).
    """

    ok: bool
    error: str = ""
    record_rejects: int = 0
    reject_fraction: float = 0.0


def decide(
    *,
    num_inputs: int,
    reject_counts: dict[str, int],
    record_counts: dict[str, int],
    required_record_sets: tuple[str, ...],
    max_reject_fraction: float,
    record_reasons: tuple[str, ...] = rejects.RECORD_REASONS,
    input_noun: str = "inputs",
) -> Verdict:
    """Judges a run from its counts.

    The reject fraction counts rejected input records (those of `record_reasons`: files,
    manifest rows, Examples records; not pair-list entries) over all input records. Fails when
    every record set is empty, when a required one is, or when the fraction exceeds
    `max_reject_fraction`. `input_noun`: what the failure line calls the input records.

    Args:
        num_inputs: how many input records were read.
        reject_counts: reason -> rejects (`RecordRejects`' output).
        record_counts: record set -> records written.
        required_record_sets: the record sets that must not be empty.
        max_reject_fraction: the largest fraction of rejected inputs allowed.
        record_reasons: the reasons that count as rejected input records.
        input_noun: as above.

    Returns:
        The `Verdict`.

    Example:
        decide(num_inputs=10, reject_counts={"corrupt_image": 2}, record_counts={"x": 8},
               required_record_sets=("x",), max_reject_fraction=0.1).ok  # False
    """
    record_rejects = sum(reject_counts.get(reason, 0) for reason in record_reasons)
    fraction = record_rejects / num_inputs if num_inputs else 0.0
    # Every reason, most frequent first: the line is all a failed run prints.
    counts = ", ".join(
        f"{reason}={count}"
        for reason, count in sorted(reject_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    why = f" (rejects: {counts})" if counts else ""
    error = ""
    empty = [name for name in required_record_sets if not record_counts.get(name)]
    if not any(record_counts.values()):
        error = (
            f"nothing left to materialize: {record_rejects} of {num_inputs} {input_noun} "
            f"rejected{why}"
        )
    elif empty:
        error = f"nothing left in record set {', '.join(map(repr, empty))}{why}"
    elif fraction > max_reject_fraction:
        error = (
            f"{record_rejects} of {num_inputs} {input_noun} rejected ({fraction:.1%}), more than "
            f"max_reject_fraction={max_reject_fraction:g}{why}"
        )
    return Verdict(not error, error, record_rejects, round(fraction, 6))
