"""What a worker process does with a pickled `RunRecordSource` (as Grain's workers do); imports
nothing but the reader, so the worker's modules are the reader's."""

from __future__ import annotations

import sys


def payload_lengths(source) -> tuple[list[int], bool]:
    """The length of each record `source` reads here, and whether TensorFlow is imported."""
    return [len(source[i]) for i in range(len(source))], "tensorflow" in sys.modules
