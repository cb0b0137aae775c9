"""The tf.data service worker's command line (issue 46, item 11): a malformed flag is one line and
status 2 before TensorFlow loads; a dispatcher that does not answer is waited for a bounded,
stated time (`--connect_timeout_seconds`), then one line and status 1. TF's own `WorkerServer`
retries its registration forever, holding the interpreter (`127.0.0.1:99999` hung the worker).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import socket
import string
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs import data_service_worker
from tfx_dynamic_inputs.data_service_worker import WorkerOptions, dispatcher_host_port

SETTINGS = settings(max_examples=40, deadline=None)
MALFORMED = [
    "127.0.0.1:99999",
    "127.0.0.1:0",
    "",
    ":5050",
    "dispatcher",
    "dispatcher:",
    "dispatcher :5050",
    " dispatcher:5050",
    "dispatcher:50 50",
    "http://dispatcher:5050",
    "grpc://",
    "dispatcher:5050/path",
    "::1:5050",
    "dispatcher:-1",
]


def _closed_port() -> int:
    """A local TCP port that nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _main(argv: list[str]) -> tuple[int, str]:
    """`main(argv)` in this process: its status and what it wrote to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = data_service_worker.main(argv)
    return status, err.getvalue()


def test_malformed_addresses_are_one_line_and_status_2_before_tensorflow_loads():
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs.data_service_worker import main\n"
        f"statuses = [main(['--dispatcher_address', a]) for a in {MALFORMED!r}]\n"
        "statuses.append(main(['--dispatcher_address', 'h:5', '--port', '70000']))\n"
        "statuses.append(main(['--dispatcher_address', 'h:5', '--connect_timeout_seconds', 'x']))\n"
        "assert 'tensorflow' not in sys.modules and 'grpc' not in sys.modules\n"
        "print(statuses)\n"
    )
    done = run_python(script, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([2] * (len(MALFORMED) + 2))
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(MALFORMED) + 2, done.stderr
    assert all(line.startswith(f"{data_service_worker.PROGRAM}: error: ") for line in lines)
    assert "'127.0.0.1:99999'" in lines[0] and "1-65535" in lines[0]


@SETTINGS
@given(st.text(alphabet=string.printable + "é[]", max_size=40))
def test_any_address_is_host_and_port_or_one_line(text):
    try:
        host_port = dispatcher_host_port(text)
    except ValueError as error:
        assert "\n" not in str(error) and repr(text) in str(error)
        status, err = _main(["--dispatcher_address", text])
        assert status == 2 and err.count("\n") == 1, err
        return
    assert text.endswith(host_port) and text[: -len(host_port)] in ("", "grpc://")
    host, _, port = host_port.rpartition(":")
    assert host and not any(c.isspace() for c in host) and 1 <= int(port) <= 65535


@SETTINGS
@given(
    host=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}|\[[0-9a-f:]{2,10}\]", fullmatch=True),
    port=st.integers(-(10**6), 10**6),
    prefix=st.sampled_from(["", "grpc://"]),
)
def test_a_host_with_a_port_is_accepted_exactly_in_range(host, port, prefix):
    address = f"{prefix}{host}:{port}"
    if 1 <= port <= 65535:
        assert dispatcher_host_port(address) == f"{host}:{port}"
    else:
        with pytest.raises(ValueError, match="1-65535"):
            dispatcher_host_port(address)


@SETTINGS
@given(
    port=st.integers(-(10**12), 10**12) | st.sampled_from([0, 65535, 65536, -1]),
    timeout=st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 1e-9, 86400.0, 86400.5, math.nan, math.inf]),
)
def test_port_and_timeout_flags_are_in_range_or_one_line(port, timeout):
    argv = ["--dispatcher_address", "dispatcher:5050", "--port", str(port)]
    argv += ["--connect_timeout_seconds", repr(timeout)]
    in_range = 0 <= port <= 65535 and 0 < timeout <= 86400
    try:
        options = data_service_worker.parse_options(argv)
    except ValueError as error:
        assert not in_range and "\n" not in str(error)
        status, err = _main(argv)
        assert status == 2 and err.count("\n") == 1, err
        return
    assert in_range, options
    assert (options.port, options.connect_timeout_seconds) == (port, timeout)


def test_options_refuse_what_the_flags_refuse():
    with pytest.raises(ValueError, match="worker_address"):
        WorkerOptions("dispatcher:5050", worker_address="node3:5051")
    with pytest.raises(TypeError, match="port"):
        WorkerOptions("dispatcher:5050", port=True)
    with pytest.raises(ValueError, match="--connect_timeout_seconds"):
        WorkerOptions("dispatcher:5050", connect_timeout_seconds=math.nan)


def test_an_unanswered_dispatcher_is_waited_for_the_stated_time():
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    assert not data_service_worker.wait_for_dispatcher(address, 0.5)
    assert 0.4 < time.monotonic() - start < 10


def test_the_worker_gives_up_on_an_unanswered_dispatcher_in_one_line_and_status_1():
    address = f"127.0.0.1:{_closed_port()}"
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs.data_service_worker import main\n"
        "argv = ['--dispatcher_address', sys.argv[1], '--connect_timeout_seconds', '1',\n"
        "        '--without_native_ops']\n"
        "sys.exit(main(argv))\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = run_python(script.replace("sys.argv[1]", repr(address)), env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: no dispatcher answered at {address} within --connect_timeout_seconds=1 s"
    )


def test_ctrl_c_stops_a_serving_worker_with_status_0():
    # The docs promise status 0 after an interrupt; WorkerServer.join() never returned on SIGINT.
    import tensorflow as tf

    dispatcher = tf.data.experimental.service.DispatchServer()
    address = dispatcher.target.split("://")[-1]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    argv = ["--dispatcher_address", address, "--without_native_ops"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "tfx_dynamic_inputs.data_service_worker", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = worker.stdout.readline()
        assert first.startswith("tf.data service worker at "), (first, worker.stderr.read())
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=60) == 0, worker.stderr.read()
    finally:
        worker.kill()
        dispatcher.stop()
