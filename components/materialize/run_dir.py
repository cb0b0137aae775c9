"""The output directory of one run: preparing it and reading back its summary.

Both run in the launcher only; `tf.io.gfile` comes from `layout.gfile()` on use because the
pipeline modules import this one, and Beam workers importing those must not import TensorFlow.
"""

from __future__ import annotations

import os

from components import layout
from components.materialize.errors import MaterializeError
from components.materialize.spill import SPILL_DIR

_RUN_ENTRIES = (
    layout.EXAMPLES_DIR,
    layout.INDEX_DIR,
    layout.SUMMARY_FILE,
    layout.REJECTS_FILE,
    SPILL_DIR,
)


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Creates `output_dir`; refuses a non-empty one unless `overwrite`, which then removes the
    files of a previous run (so no stale shard survives next to new ones)."""
    gfile = layout.gfile()
    if gfile.exists(output_dir) and not gfile.isdir(output_dir):
        raise MaterializeError(f"--output_dir is a file: {output_dir}")
    if gfile.isdir(output_dir) and gfile.listdir(output_dir):
        if not overwrite:
            raise MaterializeError(
                f"--output_dir {output_dir} is not empty (pass --overwrite to replace a run)"
            )
        for entry in _RUN_ENTRIES:
            path = os.path.join(output_dir, entry)
            if gfile.isdir(path):
                gfile.rmtree(path)
            elif gfile.exists(path):
                gfile.remove(path)
    gfile.makedirs(output_dir)


def read_summary(output_dir: str) -> dict:
    """Loads `summary.json`; raises MaterializeError with the run's error when it failed."""
    gfile = layout.gfile()
    path = os.path.join(output_dir, layout.SUMMARY_FILE)
    if not gfile.exists(path):
        raise MaterializeError(f"the pipeline finished without writing {path}")
    summary = layout.load_json(path)
    if not summary.get("ok"):
        raise MaterializeError(
            f"{summary.get('error', 'failed')}; details in "
            f"{os.path.join(output_dir, layout.REJECTS_FILE)}"
        )
    return summary
