"""Every Python block of the README and `docs/` runs (`snippets.py`): none drifts from the code."""

from __future__ import annotations

import glob
import os

import pytest

from tests.docs import snippets
from tests.helpers.installs import CORE_INSTALL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
PAGES_WITH_CODE = [page for page in PAGES if snippets.python_blocks(page)]
CORE_PAGES = [
    page
    for page in PAGES
    if any(snippets.CORE_TAG in block.tags for block in snippets.python_blocks(page))
]


def _ids(pages: list[str]) -> list[str]:
    return [os.path.relpath(page, ROOT) for page in pages]


def _assert_ran(done) -> None:
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_ids(PAGES_WITH_CODE))
def test_every_python_block_of_the_page_runs(page):
    _assert_ran(snippets.run_page(page))


@pytest.mark.core
@pytest.mark.skipif(
    not CORE_INSTALL,
    reason="the full install runs every block (test_every_python_block_of_the_page_runs)",
)
@pytest.mark.parametrize("page", CORE_PAGES, ids=_ids(CORE_PAGES))
def test_the_core_blocks_run_on_the_core_install(page):
    """The README quickstart and the other `core` blocks, from an empty folder: in the core
    venv the installed wheel is what they import."""
    _assert_ran(snippets.run_page(page, snippets.CORE_TAG))


@pytest.mark.core
def test_a_broken_block_fails_naming_its_page_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python core\nvalue = 2\n```\n\ntext\n\n```sh\nexit 1\n```\n\n"
        "```python core\nassert value == 3, 'the page drifted'\n```\n"
    )
    blocks = snippets.python_blocks(str(page))
    assert [(b.line, b.tags) for b in blocks] == [(3, ("core",)), (13, ("core",))]
    done = snippets.run_page(str(page), snippets.CORE_TAG)
    assert done.returncode != 0
    assert f"snippet failed: {page}:13" in done.stderr and "the page drifted" in done.stderr


@pytest.mark.core
def test_a_page_without_the_promised_code_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Nothing to run\n\n```sh\necho hi\n```\n")
    with pytest.raises(ValueError, match="has no python blocks tagged 'core'"):
        snippets.run_page(str(page), snippets.CORE_TAG)
    unclosed = tmp_path / "unclosed.md"
    unclosed.write_text("```python\nx = 1\n")
    with pytest.raises(ValueError, match="unclosed.md:1: a ```python block is never closed"):
        snippets.python_blocks(str(unclosed))
