"""TensorBoard starts from the venv: the README's `tensorboard --logdir` route works out of the
box (setuptools 81+ dropped the `pkg_resources` that TensorBoard 2.16 imports at start)."""

from __future__ import annotations

import os
import subprocess
import sys

import tensorboard


def test_the_venvs_tensorboard_command_starts():
    command = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    result = subprocess.run(
        [command, "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == tensorboard.__version__
