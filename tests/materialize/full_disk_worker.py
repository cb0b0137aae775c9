"""A process whose files may not grow past a size, as on a full disk (run by
test_full_disk.py).

`RLIMIT_FSIZE` makes the OS refuse any write past LIMIT bytes of a file with `EFBIG` (SIGXFSZ,
which would kill the process, is ignored), the way a full disk refuses one with `ENOSPC`: a real
failure of the writes, not a stand-in for the code under test. Beam and TensorFlow are imported
before the limit (their imports may write caches). Runs the materialize command line ARGV under
the limit; with `--again`, lifts the limit (the space is freed) and runs ARGV again with
`--overwrite` in this same process. Prints one JSON line: the statuses, and what the output
folder held after the limited run (file -> size, and the text of `summary.json` and `.claim`).

    python -m tests.materialize.full_disk_worker LIMIT OUTPUT_DIR ARGV_JSON [--again]
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys

import apache_beam  # noqa: F401  (imported before the limit, as said above)
import tensorflow  # noqa: F401

from tfx_dynamic_inputs.materialize.__main__ import main as materialize


def folder_state(output_dir: str) -> dict:
    """Every file below `output_dir` with its size, and the text of its summary and claim."""
    sizes = {}
    for folder, _, names in os.walk(output_dir):
        for name in names:
            path = os.path.join(folder, name)
            sizes[os.path.relpath(path, output_dir)] = os.path.getsize(path)
    texts = {}
    for name in ("summary.json", ".claim"):
        if name in sizes:
            with open(os.path.join(output_dir, name)) as f:
                texts[name] = f.read()
    return {"sizes": sizes, "texts": texts}


def main(limit: int, output_dir: str, argv: list[str], again: bool) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    report = {"limited": materialize(argv)}
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    report["after_failure"] = folder_state(output_dir)
    if again:
        report["again"] = materialize([*argv, "--overwrite"])
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), "--again" in sys.argv[4:])
