"""Builds the native ops: `python -m tfx_dynamic_inputs.native [--force] [--required]`.

Without `--required`, a machine without a C++ compiler gets a warning and exit status 0: the
project works without the native ops (slower disk reads).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # CUDA plugin noise on CPU-only hosts

from tfx_dynamic_inputs import native  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Builds the native ops and loads them once, printing the result.

    Args:
        argv: The command-line flags (`--force`, `--required`); None reads `sys.argv`.

    Returns:
        The exit status: 0 when built and loaded, or when no build was possible without
        `--required`; 1 when a required build fails or the built library is not found to load.

    Example:
        main(["--force"])  # as `python -m tfx_dynamic_inputs.native --force`
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if built")
    parser.add_argument("--required", action="store_true", help="fail if it cannot be built")
    args = parser.parse_args(argv)
    try:
        path = native.build(force=args.force)
    except native.NativeBuildError as error:
        print(f"{'error' if args.required else 'warning'}: native ops not built: {error}")
        if not args.required:
            print("the disk backend of RecordStore will use its Python reader")
        return 1 if args.required else 0
    outcome = native.load_outcome()
    if outcome.module is None:
        print(f"error: built {path} but could not load it: {outcome.warning}", file=sys.stderr)
        return 1
    print(f"native ops: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
