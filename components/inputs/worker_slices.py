"""How an epoch's global batches split over workers (input pipelines) and their replicas.

* `worker_slice`, `replicas_per_worker`: this input pipeline's place, from a
  `tf.distribute.InputContext` or given values;
* `round_batches`: the one rule every sampler plans its batch count with, so every replica of
  every worker takes the same number of steps;
* `batches_per_worker`: the whole batches each worker keeps of a plan (both from
  `plans.worker_slices`, the arithmetic the NumPy plans share).
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dynamic_inputs.plans import worker_slices


def worker_slice(
    input_context: tf.distribute.InputContext | None = None,
    *,
    worker_index: int | None = None,
    num_workers: int | None = None,
) -> tuple[int, int]:
    """This input pipeline's `(worker_index, num_workers)`, from an input context or values.

    Args:
      input_context: given by `strategy.distribute_datasets_from_function`.
      worker_index, num_workers: given together, instead of `input_context`.

    Returns:
      `(worker_index, num_workers)`; with neither argument, the input is not distributed:
      `(0, 1)`.

    Raises:
      ValueError: both an input context and values, only one of the values, or not
        `0 <= worker_index < num_workers`.

    Example:

        worker_slice(worker_index=1, num_workers=4)  # (1, 4)
    """
    if input_context is not None:
        if worker_index is not None or num_workers is not None:
            raise ValueError("pass either input_context or worker_index/num_workers, not both")
        worker_index = input_context.input_pipeline_id
        num_workers = input_context.num_input_pipelines
    if worker_index is None and num_workers is None:
        return 0, 1
    if worker_index is None or num_workers is None:
        raise ValueError("worker_index and num_workers must be given together")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(
            f"need 0 <= worker_index < num_workers, got worker_index={worker_index}, "
            f"num_workers={num_workers}"
        )
    return int(worker_index), int(num_workers)


def replicas_per_worker(input_context: tf.distribute.InputContext | None) -> int:
    """The replicas one input pipeline feeds.

    Args:
      input_context: from `strategy.distribute_datasets_from_function`, or None.

    Returns:
      Replicas in sync // input pipelines, at least 1 (1 without an input context).
    """
    if input_context is None:
        return 1
    return max(1, input_context.num_replicas_in_sync // input_context.num_input_pipelines)


# The arithmetic is stated once, with the NumPy plans' executor.
round_batches = worker_slices.round_batches
batches_per_worker = worker_slices.batches_per_worker
