"""How an epoch's global batches split over workers (input pipelines) and their replicas: the
arithmetic alone, shared by the TensorFlow samplers (`inputs.worker_slices`) and the NumPy plans.

* `round_batches`: the one rule every plan sets its batch count with, so every replica of every
  worker takes the same number of steps;
* `batches_per_worker`: the whole batches each worker keeps of a plan;
* `worker_batch_numbers`: which global batches those are, from a resume step on.
"""

from __future__ import annotations

import numpy as np


def round_batches(
    num_batches: int, *, num_workers: int, replicas_per_worker: int = 1, down: bool = False
) -> int:
    """The global batches of an epoch, rounded to a multiple of workers x replicas per worker.

    Every sampler plans its epochs with this one rule, so that every replica of every worker takes
    the same number of steps (a `tf.distribute` strategy drops a last, partial step).

    Args:
      num_batches: the batches the plan needs.
      num_workers: input pipelines (>= 1).
      replicas_per_worker: replicas each pipeline feeds (>= 1).
      down: round down (the plan leaves the last batches out) instead of up (it adds some).

    Returns:
      The rounded number of batches (0 is possible when rounding down).

    Raises:
      ValueError: `num_workers` or `replicas_per_worker` below 1.
    """
    if num_workers < 1 or replicas_per_worker < 1:
        raise ValueError(
            f"need num_workers >= 1 and replicas_per_worker >= 1, got {num_workers}, "
            f"{replicas_per_worker}"
        )
    multiple = num_workers * replicas_per_worker
    if down:
        return num_batches // multiple * multiple
    return -(-num_batches // multiple) * multiple


def batches_per_worker(num_batches: int, num_workers: int, worker_index: int) -> int:
    """The batches of an epoch that one worker takes, when the plan splits into whole batches.

    Args:
      num_batches: global batches per epoch (>= 1).
      num_workers: input pipelines (>= 1).
      worker_index: this pipeline, in `[0, num_workers)`.

    Returns:
      `num_batches // num_workers`.

    Raises:
      ValueError: `num_batches` below 1, a bad worker slice, or `num_batches` not a multiple
        of `num_workers`.
    """
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"need 0 <= worker_index < num_workers, got {worker_index}, {num_workers}")
    if num_batches % num_workers:
        raise ValueError(
            f"num_batches ({num_batches}) must be a multiple of num_workers ({num_workers})"
        )
    return num_batches // num_workers


def worker_batch_numbers(
    num_batches: int, num_workers: int, worker_index: int, initial_step: int = 0
) -> np.ndarray:
    """The global batch numbers one worker takes of an epoch, in order: `b % num_workers ==
    worker_index`, from its `initial_step`-th on (what `inputs.epoch_plan.epoch_dataset` plans).

    Args:
      num_batches: global batches per epoch, a multiple of `num_workers`.
      num_workers: input pipelines (>= 1).
      worker_index: this pipeline, in `[0, num_workers)`.
      initial_step: the resume point, in this worker's batches, in `[0, num_batches //
        num_workers)`.

    Returns:
      int64 [num_batches // num_workers - initial_step].

    Raises:
      ValueError: as `batches_per_worker`, or `initial_step` outside its range.

    Example:

        worker_batch_numbers(8, 2, 1, initial_step=1)  # [3 5 7]
    """
    steps = batches_per_worker(num_batches, num_workers, worker_index)
    if not 0 <= initial_step < steps:
        raise ValueError(
            f"initial_step must be in [0, {steps}) (batches per worker per epoch), "
            f"got {initial_step}"
        )
    first = worker_index + initial_step * num_workers
    return np.arange(first, num_batches, num_workers, dtype=np.int64)
