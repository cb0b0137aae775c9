"""A tf.data service worker that can run the samplers' datasets.

    python -m tfx_dynamic_inputs.data_service_worker --dispatcher_address HOST:PORT [--port P]
        [--worker_address HOST] [--without_native_ops]

A worker runs dataset graphs that clients register with the dispatcher, so every op a graph names
must be registered in the worker's process before it serves: a plain
`tf.data.experimental.service.WorkerServer` lacks the project's native `ReadRecordsByIndex`
(`tfx_dynamic_inputs.native`, the disk backend's reader) and fails a job with "Op type not
registered". This entrypoint loads it, then starts a `WorkerServer` and serves until it is stopped.

The disk backend reads shards by the paths the client opened them with: every worker must see the
run at the same path (a shared filesystem). Clients build their datasets with
`sampler.distributed_dataset("grpc://HOST:PORT", ...)` (`tfx_dynamic_inputs.inputs.epoch_plan`).
Exit status 1 when the native op is not built (unless `--without_native_ops`: then only datasets
whose records are in memory can run here).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import tensorflow as tf

from tfx_dynamic_inputs import native


def worker_config(
    dispatcher_address: str, port: int = 0, worker_address: str = "localhost"
) -> tf.data.experimental.service.WorkerConfig:
    """The `WorkerConfig` of a worker on `port` (0: any free one) that clients reach at
    `worker_address` (a host name), serving the dispatcher at `dispatcher_address` ("HOST:PORT",
    a "grpc://" prefix allowed).

    Args:
        dispatcher_address: the dispatcher, "HOST:PORT" or "grpc://HOST:PORT".
        port: the port to serve on; 0 picks a free one.
        worker_address: the host name clients reach this worker at.

    Returns:
        The `tf.data.experimental.service.WorkerConfig`.

    Raises:
        ValueError: for a dispatcher address with another protocol.

    Example:
        worker_config("grpc://dispatcher:5050", port=5051)
    """
    protocol, _, address = dispatcher_address.rpartition("://")
    if protocol not in ("", "grpc"):
        raise ValueError(f"the dispatcher address must be HOST:PORT, got {dispatcher_address!r}")
    return tf.data.experimental.service.WorkerConfig(
        dispatcher_address=address, worker_address=f"{worker_address}:%port%", port=port
    )


def main(argv: list[str] | None = None) -> int:
    """Serves a tf.data service worker until interrupted.

    Args:
        argv: `--dispatcher_address HOST:PORT [--port N] [--worker_address HOST]
            [--without_native_ops]`; None reads `sys.argv`.

    Returns:
        The exit status: 0 after an interrupt, 1 when the native op is missing (unless
        `--without_native_ops`).

    Example:
        main(["--dispatcher_address", "localhost:5050"])
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher_address", required=True, help="HOST:PORT of the dispatcher")
    parser.add_argument("--port", type=int, default=0, help="port to serve on (0: any free one)")
    parser.add_argument(
        "--worker_address",
        default="localhost",
        help="host name clients reach this worker at (default: localhost)",
    )
    parser.add_argument(
        "--without_native_ops",
        action="store_true",
        help="serve even when the native op is not built (only in-memory record stores work)",
    )
    args = parser.parse_args(argv)
    try:
        native.load_op_library()
    except native.NativeBuildError as error:
        if not args.without_native_ops:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(f"warning: {error}; serving without it", file=sys.stderr)
    config = worker_config(args.dispatcher_address, args.port, args.worker_address)
    server = tf.data.experimental.service.WorkerServer(config)
    # The bound port is known only once the server runs (port 0); no public API returns it.
    print(
        f"tf.data service worker at {server._address}, dispatcher {config.dispatcher_address}",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
