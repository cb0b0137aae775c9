"""Paths of the checkout the tests run from."""

from __future__ import annotations

import os

# The repository root: the working directory and PYTHONPATH of the subprocesses tests start.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
