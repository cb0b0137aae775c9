"""A tf.data service worker that can run the samplers' datasets.

    python -m tfx_dynamic_inputs.data_service_worker --dispatcher_address HOST:PORT [--port P]
        [--worker_address HOST] [--connect_timeout_seconds S] [--without_native_ops] [--verbose]

A worker runs dataset graphs that clients register with the dispatcher, so every op a graph names
must be registered in the worker's process before it serves: a plain
`tf.data.experimental.service.WorkerServer` lacks the project's native `ReadRecordsByIndex`
(`tfx_dynamic_inputs.native`, the disk backend's reader) and fails a job with "Op type not
registered". This entrypoint loads it, then starts a `WorkerServer` and serves until it is stopped.

The disk backend reads shards by the paths the client opened them with: every worker must see the
run at the same path (a shared filesystem). Clients build their datasets with
`sampler.distributed_dataset("grpc://HOST:PORT", ...)` (`tfx_dynamic_inputs.inputs.epoch_plan`).

Exit status 2 for a malformed flag (an address that is not HOST:PORT, a port outside 0-65535, a
timeout that is not a number of seconds in (0, 86400]): one line, before TensorFlow loads.
Exit status 1 when the native op is not built (unless `--without_native_ops`: then only datasets
whose records are in memory can run here), or when the dispatcher does not answer within
`--connect_timeout_seconds` (default 60).
"""

from __future__ import annotations

import dataclasses
import math
import re
import signal
import sys
import threading

from tfx_dynamic_inputs import native
from tfx_dynamic_inputs.cli_flags import (
    EXIT_BAD_FLAGS,
    BoolFlag,
    FlagParser,
    parse_float,
    parse_int,
    quiet,
)

# How long the worker waits for its dispatcher to answer by default, and at most (a day): TF's
# WorkerServer itself retries its registration forever, silently to anyone but its log.
CONNECT_TIMEOUT_SECONDS = 60.0
MAX_CONNECT_TIMEOUT_SECONDS = 86400.0
MAX_PORT = 65535
# A host name, an IPv4 address or a bracketed IPv6 address, then ":" and a decimal port.
_HOST = r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9._-]*"
_HOST_ONLY = re.compile(_HOST)
_HOST_PORT = re.compile(rf"(?P<host>{_HOST}):(?P<port>[0-9]{{1,5}})")
PROGRAM = "python -m tfx_dynamic_inputs.data_service_worker"


def dispatcher_host_port(dispatcher_address: str) -> str:
    """The "HOST:PORT" of a dispatcher address, checked without connecting.

    Args:
        dispatcher_address: "HOST:PORT" or "grpc://HOST:PORT"; HOST a host name, an IPv4 address
            or a bracketed IPv6 address, PORT in 1-65535.

    Returns:
        "HOST:PORT", without the "grpc://" prefix.

    Raises:
        ValueError: one line naming the address, when it is not of that form.
        TypeError: when it is not a str.

    Example:
        dispatcher_host_port("grpc://dispatcher:5050")  # "dispatcher:5050"
    """
    if not isinstance(dispatcher_address, str):
        raise TypeError(f"the dispatcher address must be a str, got {dispatcher_address!r}")
    protocol, _, address = dispatcher_address.rpartition("://")
    match = _HOST_PORT.fullmatch(address)
    if protocol not in ("", "grpc") or match is None or not 1 <= int(match["port"]) <= MAX_PORT:
        raise ValueError(
            f"the dispatcher address must be HOST:PORT or grpc://HOST:PORT with PORT in "
            f"1-{MAX_PORT}, got {dispatcher_address!r}"
        )
    return address


def wait_for_dispatcher(host_port: str, timeout_seconds: float) -> bool:
    """Whether a gRPC server (the dispatcher) answers at `host_port` within `timeout_seconds`;
    gRPC retries the connection (a refused one, an unresolved host) until then.

    Args:
        host_port: "HOST:PORT", as `dispatcher_host_port` returns it.
        timeout_seconds: how long to wait, in seconds.

    Returns:
        True once the connection is ready; False when the time ran out.

    Example:
        wait_for_dispatcher("dispatcher:5050", 60.0)
    """
    import grpc  # a dependency of TensorFlow, loaded in a tenth of its time

    channel = grpc.insecure_channel(host_port)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_seconds)
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """The worker's flags, checked when made.

    Attributes:
        dispatcher_address: the dispatcher, "HOST:PORT" or "grpc://HOST:PORT"
            (`dispatcher_host_port`).
        port: the port to serve on, 0-65535; 0 picks a free one.
        worker_address: the host name (or address, without a port) clients reach this worker at.
        connect_timeout_seconds: how long to wait for the dispatcher to answer, in
            (0, `MAX_CONNECT_TIMEOUT_SECONDS`].
        without_native_ops: serve even when the native op is not built.
        verbose: show the libraries' notices that ask nothing of the user (`cli_flags.quiet`).
    """

    dispatcher_address: str
    port: int = 0
    worker_address: str = "localhost"
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS
    without_native_ops: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        dispatcher_host_port(self.dispatcher_address)
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise TypeError(f"port must be an int, got {self.port!r}")
        if not 0 <= self.port <= MAX_PORT:
            raise ValueError(f"--port must be in 0-{MAX_PORT} (0: any free one), got {self.port}")
        if not isinstance(self.worker_address, str) or not _HOST_ONLY.fullmatch(
            self.worker_address
        ):
            raise ValueError(
                "--worker_address must be a host name or address without a port, got "
                f"{self.worker_address!r}"
            )
        seconds = self.connect_timeout_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"connect_timeout_seconds must be a number, got {seconds!r}")
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_CONNECT_TIMEOUT_SECONDS):
            raise ValueError(
                f"--connect_timeout_seconds must be in (0, {MAX_CONNECT_TIMEOUT_SECONDS:g}], "
                f"got {seconds}"
            )
        for name in ("without_native_ops", "verbose"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def host_port(self) -> str:
        """The dispatcher's "HOST:PORT", without a "grpc://" prefix."""
        return dispatcher_host_port(self.dispatcher_address)


def worker_config(dispatcher_address: str, port: int = 0, worker_address: str = "localhost"):
    """The `tf.data.experimental.service.WorkerConfig` of a worker on `port` (0: any free one)
    that clients reach at `worker_address` (a host name), serving the dispatcher at
    `dispatcher_address` ("HOST:PORT", a "grpc://" prefix allowed).

    Args:
        dispatcher_address: the dispatcher, "HOST:PORT" or "grpc://HOST:PORT".
        port: the port to serve on, 0-65535; 0 picks a free one.
        worker_address: the host name clients reach this worker at.

    Returns:
        The `tf.data.experimental.service.WorkerConfig`.

    Raises:
        ValueError: as `WorkerOptions`: for a dispatcher address that is not HOST:PORT, a port
            outside 0-65535 or a worker address that is not a host.

    Example:
        worker_config("grpc://dispatcher:5050", port=5051)
    """
    options = WorkerOptions(dispatcher_address, port, worker_address)
    import tensorflow as tf

    return tf.data.experimental.service.WorkerConfig(
        dispatcher_address=options.host_port,
        worker_address=f"{options.worker_address}:%port%",
        port=options.port,
    )


def parse_options(argv: list[str] | None = None) -> WorkerOptions:
    """The worker's options from its command line (the package's flag grammar, `cli_flags`),
    checked before TensorFlow loads.

    Args:
        argv: `--dispatcher_address HOST:PORT [--port N] [--worker_address HOST]
            [--connect_timeout_seconds S] [--without_native_ops] [--verbose]`; None reads
            `sys.argv`.

    Returns:
        The `WorkerOptions`.

    Raises:
        ValueError: one line, for an unknown flag, a missing or malformed value.

    Example:
        parse_options(["--dispatcher_address", "dispatcher:5050", "--port", "5051"])
    """
    parser = FlagParser(prog=PROGRAM, description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher_address", required=True, help="HOST:PORT of the dispatcher")
    parser.add_argument(
        "--port", type=parse_int, default=0, help="port to serve on (0: any free one)"
    )
    parser.add_argument(
        "--worker_address",
        default="localhost",
        help="host name clients reach this worker at (default: localhost)",
    )
    parser.add_argument(
        "--connect_timeout_seconds",
        type=parse_float,
        default=CONNECT_TIMEOUT_SECONDS,
        help="how long to wait for the dispatcher to answer before exiting with status 1 "
        f"(default {CONNECT_TIMEOUT_SECONDS:g}, at most {MAX_CONNECT_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--without_native_ops",
        action=BoolFlag,
        help="serve even when the native op is not built (only in-memory record stores work)",
    )
    parser.add_verbose_flag()
    return WorkerOptions(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    """Serves a tf.data service worker until interrupted.

    Args:
        argv: the flags (`parse_options`); None reads `sys.argv`.

    Returns:
        The exit status: 0 after an interrupt; 2 for a malformed flag (one line, before
        TensorFlow loads); 1 when the native op is missing (unless `--without_native_ops`), or
        when the dispatcher does not answer within `--connect_timeout_seconds`.

    Example:
        main(["--dispatcher_address", "localhost:5050"])
    """
    try:
        options = parse_options(argv)
    except ValueError as error:  # a FlagError, or WorkerOptions' own checks
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        return EXIT_BAD_FLAGS
    quiet(options.verbose)  # before TensorFlow's import
    try:
        native.load_op_library()
    except native.NativeBuildError as error:
        if not options.without_native_ops:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(f"warning: {error}; serving without it", file=sys.stderr)
    if not wait_for_dispatcher(options.host_port, options.connect_timeout_seconds):
        print(
            f"error: no dispatcher answered at {options.host_port} within "
            f"--connect_timeout_seconds={options.connect_timeout_seconds:g} s",
            file=sys.stderr,
        )
        return 1
    import tensorflow as tf

    # WorkerServer.join() blocks in C++ and never returns to Python on Ctrl-C: wait on an event
    # that SIGINT / SIGTERM set (their handlers run between the waits), then stop the server.
    # Installed before the server starts and says where it is, so no interrupt is missed (one
    # inherited as ignored would otherwise be dropped).
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    config = worker_config(options.host_port, options.port, options.worker_address)
    server = tf.data.experimental.service.WorkerServer(config)
    # The bound port is known only once the server runs (port 0); no public API returns it.
    print(
        f"tf.data service worker at {server._address}, dispatcher {config.dispatcher_address}",
        flush=True,
    )
    while not stopped.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
