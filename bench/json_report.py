"""The JSON result a benchmark writes to its `--output` file and prints.

Imported by the `bench_*.py` scripts as a sibling module: a script's own folder is the first
entry of `sys.path` when it runs as `python bench/bench_<name>.py`.
"""

from __future__ import annotations

import json
import os


def write_report(path: str, report: dict, sort_keys: bool = False) -> None:
    """Writes `report` as indented JSON to `path`, creating its folder, and prints it.

    Args:
        path: The output file (`--output`); its folder is created when missing.
        report: The benchmark's result; numpy scalars in it are written as floats.
        sort_keys: Whether the JSON lists the keys of every object sorted.

    Example:
        write_report(args.output, {"speedup": 2.5})
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = json.dumps(report, indent=2, default=float, sort_keys=sort_keys)
    with open(path, "w") as f:
        f.write(text)
    print(text)
