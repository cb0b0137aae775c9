"""The Python blocks of the README and `docs/`, run as a user would paste them.

A block fenced ```` ```python ```` runs with the full stack (`make setup`'s venv); one fenced
```` ```python core ```` needs only the core install (`pip install tfx-dynamic-inputs`) and also
runs in the core venv, against the installed wheel. Shell blocks (```` ```sh ````) are not run.
The blocks of one page run in order in one fresh interpreter, in an empty working folder, so a
block may use what an earlier block of its page defined, and nothing else.

As a script (from outside the checkout, so that the installed wheel, not the checkout, is what
the blocks import; `make test-core` runs the same through `test_snippets.py`):

    python tests/docs/snippets.py --tag core README.md
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")
CORE_TAG = "core"


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced Python block: its page, first line (1-based), tags and code."""

    path: str
    line: int
    tags: tuple[str, ...]
    code: str


def python_blocks(path: str) -> list[Block]:
    """The ```` ```python ```` blocks of the Markdown page `path`, in order."""
    blocks, language, tags, start, lines = [], None, (), 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            match = FENCE.match(line.rstrip("\n"))
            if language is None:
                if match and match.group(1):
                    language, tags, start, lines = (
                        match.group(1),
                        tuple(match.group(2).split()),
                        number,
                        [],
                    )
                continue
            if line.strip() == "```":
                if language == "python":
                    blocks.append(Block(path, start, tags, "".join(lines)))
                language = None
                continue
            lines.append(line)
    if language is not None:
        raise ValueError(f"{path}:{start}: a ```{language} block is never closed")
    return blocks


def page_script(blocks: list[Block]) -> str:
    """One script running `blocks` in order; a failing block names its page and line."""
    parts = ["import sys, traceback\n"]
    for block in blocks:
        parts.append(
            f"try:\n    exec(compile({block.code!r}, {f'{block.path}:{block.line}'!r}, 'exec'))\n"
            "except BaseException:\n"
            "    traceback.print_exc()\n"
            f"    sys.exit('snippet failed: {block.path}:{block.line}')\n"
        )
    return "".join(parts)


def run_page(
    path: str, tag: str | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Runs the Python blocks of `path` (those tagged `tag` when given) in a fresh interpreter,
    in an empty temporary working folder.

    Returns:
      The finished process (stdout and stderr captured as text); `returncode` 0 when every block
      ran.

    Raises:
      ValueError: the page has no such block (a page that promised code would test nothing).
    """
    blocks = [b for b in python_blocks(path) if tag is None or tag in b.tags]
    if not blocks:
        raise ValueError(f"{path} has no python blocks" + (f" tagged {tag!r}" if tag else ""))
    with tempfile.TemporaryDirectory(prefix="snippets-") as work_dir:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run(
            [sys.executable, "-c", page_script(blocks)],
            cwd=work_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", help="Markdown pages")
    parser.add_argument("--tag", default=None, help="run only the blocks with this tag")
    args = parser.parse_args(argv)
    failed = 0
    for page in args.pages:
        done = run_page(os.path.abspath(page), args.tag)
        print(f"{page}: {'ok' if done.returncode == 0 else 'FAILED'}")
        if done.returncode != 0:
            failed += 1
            print(done.stdout[-4000:], done.stderr[-8000:], sep="\n", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
