"""Ctrl-C in the command lines: one line and exit status 130, however a runner reports it.

A runner does not always let the interrupt through as `KeyboardInterrupt`: Beam's DirectRunner
re-raises it from a worker thread as its own error ("RuntimeError: KeyboardInterrupt [while
running ...]"), which a pipeline runner then reports as a failed component. `watching_interrupts`
installs a SIGINT handler that remembers the interrupt before raising it as Python's own does,
so a command can tell an interrupted run from a failed one whatever error reaches it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


@contextlib.contextmanager
def watching_interrupts() -> Iterator[threading.Event]:
    """A SIGINT handler for the block that sets the yielded event, then raises
    `KeyboardInterrupt`; the previous handler is restored on the way out.

    Yields:
      The event, set once an interrupt came.

    Example:

        with watching_interrupts() as interrupted:
            try:
                run()
            except Exception:
                if interrupted.is_set():
                    return EXIT_INTERRUPTED
                raise
    """
    interrupted = threading.Event()

    def handler(signum, frame):
        interrupted.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
