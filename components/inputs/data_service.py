"""What a dataset must satisfy to run on tf.data service workers, checked when it is built.

A tf.data service worker (`python -m tfx_dynamic_inputs.data_service_worker`) runs the dataset graph
that the client serializes and registers with the dispatcher, in another process, usually on another
machine. So:

* nothing may call back into the client's Python process: `tf.py_function` and
  `tf.numpy_function` (the Python disk reader, a `parse_fn` that uses them, the skip log of
  `on_damaged="skip"`) fail there with an unhelpful "callback not found";
* every variable the graph captures travels *by value*: serialization writes its current value as
  a constant, and each worker task starts from a fresh copy. Records of the memory backend and the
  indexes are shipped this way (and a graph is a protobuf, capped at 2 GB: over it, serialization
  returns an empty graph); a variable updated on a worker (an epoch counter) is never seen by the
  client or by the other workers;
* custom ops (`ReadRecordsByIndex`) must be loaded in the worker process before it starts.

`check_dataset` finds the first two in the dataset's serialized graph and raises
`ServiceUnsupportedError` at once, in the client, instead of deep in a worker.
"""

from __future__ import annotations

from typing import Protocol

import tensorflow as tf

PROCESSING_MODES = ("parallel_epochs", "distributed_epoch")

# The default cap on a dataset graph shipped to workers. The hard limit is protobuf's 2 GB, but the
# client serializes the graph twice (this check, then the registration), the dispatcher keeps it,
# and every worker holds it twice (the graph's constants and the variables restored from them):
# beyond about 1 GiB of in-memory records, read them from disk on a shared filesystem instead.
DEFAULT_MAX_GRAPH_BYTES = 1 << 30
PROTOBUF_LIMIT_BYTES = (1 << 31) - 1

# Op types that call back into the Python process that built the graph.
_PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


class ServiceProblems(Protocol):
    """A part of a sampler's graph that knows whether it can run on a worker (a record store, a
    speaker augmenter): `service_problems()` says why not (empty: it can)."""

    def service_problems(self) -> list[str]: ...


class ServiceUnsupportedError(ValueError):
    """The dataset cannot run on tf.data service workers; the message says why and what to do.

    Example:

        try:
            dataset = sampler.distributed_dataset("grpc://dispatcher:5050")
        except ServiceUnsupportedError as error:
            print(error)   # e.g. "... opened with on_damaged='skip' ...; open it with ..."
    """


def check_processing_mode(processing_mode: str) -> str:
    """Checks a tf.data service processing mode.

    Args:
      processing_mode: ``"parallel_epochs"`` or ``"distributed_epoch"``.

    Returns:
      `processing_mode`.

    Raises:
      ValueError: it is not one of `PROCESSING_MODES`.
    """
    if processing_mode not in PROCESSING_MODES:
        raise ValueError(
            f"processing_mode must be one of {PROCESSING_MODES}, got {processing_mode!r}"
        )
    return processing_mode


def problems_of(*parts: ServiceProblems | None) -> list[str]:
    """What keeps the parts of a sampler's graph off tf.data service workers, in their order.

    Args:
      parts: the record stores, augmenters, ... the sampler's batches read through; None (an
        absent part, such as no augmentation) has none.

    Returns:
      Their `service_problems()`, concatenated (empty: all can run on a worker).
    """
    return [problem for part in parts if part is not None for problem in part.service_problems()]


def check_sampler(problems: list[str], memory_bytes: int, max_graph_bytes: int) -> None:
    """Refuses a sampler that cannot run on tf.data service workers, before its graph is built.

    Checked first, so that an oversized store costs no serialization.

    Args:
      problems: what the sampler knows cannot run on a worker (empty: nothing).
      memory_bytes: bytes of the records held in memory, shipped inside the graph.
      max_graph_bytes: the largest graph to accept, in (0, 2**31 - 1].

    Raises:
      ServiceUnsupportedError: listing `problems`, and `memory_bytes` over `max_graph_bytes`.
      ValueError: `max_graph_bytes` out of range.
    """
    _check_max_graph_bytes(max_graph_bytes)
    if memory_bytes > max_graph_bytes:
        problems = [
            *problems,
            f"the in-memory records ({memory_bytes} bytes) would be shipped to every worker inside "
            f"the dataset graph, over max_graph_bytes={max_graph_bytes}: open the record sets with "
            "backend='disk' on a filesystem every worker mounts at the same path, or raise "
            f"max_graph_bytes (up to {PROTOBUF_LIMIT_BYTES})",
        ]
    if problems:
        raise ServiceUnsupportedError(_message(problems))


def check_dataset(dataset: tf.data.Dataset, max_graph_bytes: int) -> int:
    """Serializes `dataset` as the tf.data service will and checks what it would ship to workers.

    Args:
      dataset: the dataset to distribute.
      max_graph_bytes: the largest serialized graph to accept, in (0, 2**31 - 1].

    Returns:
      The serialized graph's size in bytes.

    Raises:
      ServiceUnsupportedError: the graph calls Python (`tf.py_function`, `tf.numpy_function`:
        the functions that do are named) or is larger than `max_graph_bytes` (including the
        2 GB that protobuf cannot serialize at all).
      ValueError: `max_graph_bytes` out of range.
    """
    _check_max_graph_bytes(max_graph_bytes)
    # The serialization RegisterDataset runs (variables become constants of their values); no
    # public API returns it.
    serialized = dataset._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE
    ).numpy()
    if not serialized:
        raise ServiceUnsupportedError(
            _message(
                [
                    "the dataset graph is over protobuf's 2 GB limit (the indexes and in-memory "
                    "records it captures); read the records from disk (backend='disk')"
                ]
            )
        )
    if len(serialized) > max_graph_bytes:
        raise ServiceUnsupportedError(
            _message(
                [
                    f"the dataset graph is {len(serialized)} bytes (the indexes and in-memory "
                    f"records it captures), over max_graph_bytes={max_graph_bytes}: read the "
                    "records from disk (backend='disk') or raise max_graph_bytes (up to "
                    f"{PROTOBUF_LIMIT_BYTES})"
                ]
            )
        )
    graph = tf.compat.v1.GraphDef.FromString(serialized)
    calling_python = sorted(
        function.signature.name
        for function in graph.library.function
        if any(node.op in _PYTHON_OPS for node in function.node_def)
    )
    if calling_python or any(node.op in _PYTHON_OPS for node in graph.node):
        raise ServiceUnsupportedError(
            _message(
                [
                    "the dataset calls Python (tf.py_function / tf.numpy_function), which runs "
                    "only in the process that built it, in: "
                    f"{', '.join(calling_python) or 'the top-level graph'}. Replace it with "
                    "TensorFlow ops (a parse_fn is the usual place)"
                ]
            )
        )
    return len(serialized)


def _check_max_graph_bytes(max_graph_bytes: int) -> None:
    if not 0 < max_graph_bytes <= PROTOBUF_LIMIT_BYTES:
        raise ValueError(
            f"max_graph_bytes must be in (0, {PROTOBUF_LIMIT_BYTES}], got {max_graph_bytes}"
        )


def _message(problems: list[str]) -> str:
    listed = "\n".join(f"  - {problem}" for problem in problems)
    return f"this dataset cannot run on tf.data service workers:\n{listed}"
