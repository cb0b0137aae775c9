"""The Python blocks of the README and `docs/`, run as a user would paste them.

A block fenced ```` ```python ```` runs with the full stack (`make setup`'s venv); one fenced
```` ```python core ```` needs only the core install (`pip install tfx-dynamic-inputs`) and also
runs in the core venv, against the installed wheel. Shell blocks (```` ```sh ````) are not run.
The blocks of one page run in order, in a namespace of their own (a fresh `__main__`) and an
empty working folder of their own, so a block may use what an earlier block of its page defined,
and nothing else. The pages of one call share one interpreter, which is started outside the
checkout (the installed package is what the blocks import): each page would otherwise pay the
import of TensorFlow and TFX again (120 s of CPU for the seven pages, against 82 s in one).

As a script (from outside the checkout, so that the installed wheel, not the checkout, is what
the blocks import; `make test-core` runs the same through `test_snippets.py`):

    python tests/docs/snippets.py --tag core README.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")
CORE_TAG = "core"
# Blocks for an install of their own, which neither the full nor the core run takes: `grain`
# blocks run in the Grain venv, without TensorFlow (tests/grain/test_keras_fit.py).
GRAIN_TAG = "grain"
# What the interpreter runs: each page's blocks in a fresh `__main__` namespace and an empty
# folder, one result line a page (JSON) appended to the results file as soon as it is known.
_RUNNER = r"""
import builtins, json, os, sys, traceback

def run(pages_path, work_dir, results_path):
    with open(pages_path) as f:
        pages = json.load(f)
    main = sys.modules["__main__"]
    for number, page in enumerate(pages):
        folder = os.path.join(work_dir, f"page-{number}")
        os.mkdir(folder)
        os.chdir(folder)
        namespace = vars(main)
        namespace.clear()
        namespace.update(__name__="__main__", __builtins__=builtins, __doc__=None)
        failed, error = None, ""
        for block in page["blocks"]:
            try:
                exec(compile(block["code"], block["where"], "exec"), namespace)
            except BaseException:
                failed, error = block["where"], traceback.format_exc()
                break
        with open(results_path, "a") as results:
            results.write(json.dumps({"path": page["path"], "failed": failed, "error": error}))
            results.write("\n")
"""


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced Python block: its page, first line (1-based), tags and code."""

    path: str
    line: int
    tags: tuple[str, ...]
    code: str

    @property
    def where(self) -> str:
        """`page:line`, the name its tracebacks and failures give it."""
        return f"{self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class PageResult:
    """How the blocks of one page ran.

    Attributes:
      path: the page.
      failed: `page:line` of the block that raised, or a sentence saying the interpreter ended
        before the page finished; None when every block ran.
      error: the failing block's traceback, or the end of the interpreter's output.
    """

    path: str
    failed: str | None
    error: str

    @property
    def ok(self) -> bool:
        return self.failed is None

    def report(self) -> str:
        return "ok" if self.ok else f"snippet failed: {self.failed}\n{self.error}"


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


def run_pages(
    paths: list[str], tag: str | None = None, timeout: float = 1800
) -> dict[str, PageResult]:
    """Runs the Python blocks of each page of `paths` (those tagged `tag` when given), page
    after page, in one fresh interpreter outside the checkout (module doc).

    Args:
      paths: Markdown pages.
      tag: run only the blocks with this tag (e.g. `CORE_TAG`); None runs every block but those
        tagged `GRAIN_TAG`.
      timeout: seconds for all the pages together.

    Returns:
      Each page's result, by its path. A page that raised stops at that block; the next page
      still runs. Pages the interpreter never finished (it crashed or ran out of time) fail
      with the end of its output.

    Raises:
      ValueError: a page has no such block (a page that promised code would test nothing).

    Example:
      results = run_pages(["README.md"], CORE_TAG)
      assert results["README.md"].ok, results["README.md"].report()
    """
    pages = []
    for path in paths:
        blocks = [
            b
            for b in python_blocks(path)
            if (tag in b.tags if tag is not None else GRAIN_TAG not in b.tags)
        ]
        if not blocks:
            raise ValueError(f"{path} has no python blocks" + (f" tagged {tag!r}" if tag else ""))
        pages.append({"path": path, "blocks": [{"where": b.where, "code": b.code} for b in blocks]})
    with tempfile.TemporaryDirectory(prefix="snippets-") as work_dir:
        pages_path = os.path.join(work_dir, "pages.json")
        with open(pages_path, "w") as f:
            json.dump(pages, f)
        results_path = os.path.join(work_dir, "results.jsonl")
        pages_dir = os.path.join(work_dir, "pages")
        os.mkdir(pages_dir)
        script = (
            "import types\n"
            "runner = types.ModuleType('snippet_runner')\n"
            f"exec({_RUNNER!r}, vars(runner))\n"
            f"runner.run({pages_path!r}, {pages_dir!r}, {results_path!r})\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        try:
            done = subprocess.run(
                [sys.executable, "-c", script],
                cwd=pages_dir,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            output = f"exit status {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        except subprocess.TimeoutExpired as expired:
            output = f"ran past {timeout:.0f} s\n{_text(expired.stdout)}\n{_text(expired.stderr)}"
        results = {}
        if os.path.exists(results_path):
            with open(results_path) as f:
                for line in f:
                    result = PageResult(**json.loads(line))
                    results[result.path] = result
    unfinished = "the interpreter ended before this page finished"
    return {path: results.get(path, PageResult(path, unfinished, output)) for path in paths}


def _text(captured: bytes | str | None) -> str:
    if isinstance(captured, bytes):
        captured = captured.decode(errors="replace")
    return (captured or "")[-6000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", help="Markdown pages")
    parser.add_argument("--tag", default=None, help="run only the blocks with this tag")
    args = parser.parse_args(argv)
    results = run_pages([os.path.abspath(page) for page in args.pages], args.tag)
    for page, result in zip(args.pages, results.values(), strict=True):
        print(f"{page}: {'ok' if result.ok else 'FAILED'}")
        if not result.ok:
            print(result.report(), file=sys.stderr)
    return 0 if all(result.ok for result in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
