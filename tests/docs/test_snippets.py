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


def _selected_pages(request: pytest.FixtureRequest, test_name: str) -> list[str]:
    """The pages of the `test_name` tests this session runs (`-k` may select a few): the
    fixture runs those, not every page."""
    return [
        item.callspec.params["page"]
        for item in request.session.items
        if item.module is request.module and item.originalname == test_name
    ]


@pytest.fixture(scope="module")
def every_block_run(request) -> dict[str, snippets.PageResult]:
    """Every block of the selected pages, in one interpreter (snippets.run_pages)."""
    return snippets.run_pages(_selected_pages(request, "test_every_python_block_of_the_page_runs"))


@pytest.fixture(scope="module")
def core_blocks_run(request) -> dict[str, snippets.PageResult]:
    """The `core` blocks of the selected pages, in one interpreter."""
    pages = _selected_pages(request, "test_the_core_blocks_run_on_the_core_install")
    return snippets.run_pages(pages, snippets.CORE_TAG)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_ids(PAGES_WITH_CODE))
def test_every_python_block_of_the_page_runs(page, every_block_run):
    assert every_block_run[page].ok, every_block_run[page].report()


@pytest.mark.core
@pytest.mark.skipif(
    not CORE_INSTALL,
    reason="the full install runs every block (test_every_python_block_of_the_page_runs)",
)
@pytest.mark.parametrize("page", CORE_PAGES, ids=_ids(CORE_PAGES))
def test_the_core_blocks_run_on_the_core_install(page, core_blocks_run):
    """The README quickstart and the other `core` blocks, from an empty folder: in the core
    venv the installed wheel is what they import."""
    assert core_blocks_run[page].ok, core_blocks_run[page].report()


@pytest.mark.core
def test_a_broken_block_fails_naming_its_page_and_line_and_the_next_page_still_runs(tmp_path):
    broken = tmp_path / "broken.md"
    broken.write_text(
        "# A page\n\n```python core\nvalue = 2\n```\n\ntext\n\n```sh\nexit 1\n```\n\n"
        "```python core\nassert value == 3, 'the page drifted'\n```\n"
    )
    blocks = snippets.python_blocks(str(broken))
    assert [(b.line, b.tags) for b in blocks] == [(3, ("core",)), (13, ("core",))]
    # The pages after it see neither its names nor an earlier page's files.
    clean = [tmp_path / "clean.md", tmp_path / "clean_again.md"]
    for page in clean:
        page.write_text(
            "```python core\nimport os\nassert os.listdir('.') == [], os.listdir('.')\n"
            "assert 'value' not in globals()\nopen('left.txt', 'w').close()\n```\n"
        )
    results = snippets.run_pages([str(broken), *map(str, clean)], snippets.CORE_TAG)
    assert not results[str(broken)].ok
    assert results[str(broken)].failed == f"{broken}:13"
    assert "the page drifted" in results[str(broken)].report()
    for page in clean:
        assert results[str(page)].ok, results[str(page)].report()


@pytest.mark.core
def test_a_page_the_interpreter_never_finishes_fails_with_its_output(tmp_path):
    page = tmp_path / "exits.md"
    page.write_text("```python core\nimport os\nprint('bye')\nos._exit(3)\n```\n")
    [result] = snippets.run_pages([str(page)], snippets.CORE_TAG).values()
    assert not result.ok
    assert result.failed == "the interpreter ended before this page finished"
    assert "exit status 3" in result.error and "bye" in result.error


@pytest.mark.core
def test_a_page_without_the_promised_code_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Nothing to run\n\n```sh\necho hi\n```\n")
    with pytest.raises(ValueError, match="has no python blocks tagged 'core'"):
        snippets.run_pages([str(page)], snippets.CORE_TAG)
    unclosed = tmp_path / "unclosed.md"
    unclosed.write_text("```python\nx = 1\n")
    with pytest.raises(ValueError, match="unclosed.md:1: a ```python block is never closed"):
        snippets.python_blocks(str(unclosed))


@pytest.mark.core
def test_grain_blocks_run_only_when_asked_for(tmp_path):
    """A `grain` block needs the Grain venv (no TensorFlow): the full run of a page leaves it
    out, and `--tag grain` runs it (tests/grain/test_keras_fit.py)."""
    page = tmp_path / "grain.md"
    page.write_text(
        "```python\nvalue = 1\n```\n\n```python grain\nraise SystemExit('a grain block ran')\n```\n"
    )
    assert snippets.run_pages([str(page)])[str(page)].ok
    assert not snippets.run_pages([str(page)], snippets.GRAIN_TAG)[str(page)].ok
