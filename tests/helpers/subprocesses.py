"""Python code run in a fresh interpreter, as the tests that need a process of their own do."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

from tests.helpers.paths import REPO_ROOT


def run_python(
    script: str,
    *,
    cwd: str = REPO_ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """Runs `script` with this interpreter (`python -c`) and returns it done, output as text.

    Args:
      script: the code.
      cwd: its working folder (default the checkout, whose packages it then imports).
      env: its environment (None: this process's).
      timeout: seconds before it is killed (`subprocess.TimeoutExpired`).
      check: raise `subprocess.CalledProcessError` when it fails.
    """
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
