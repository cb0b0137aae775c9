"""The README stays short and every link between the README and `docs/` lands on a page and a
heading that exist (GitHub's heading anchors)."""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
README_MAX_CHARS = 12_500
# [text](target): a Markdown link; targets with a scheme (https:) are not checked.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")

pytestmark = pytest.mark.core


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _prose(text: str) -> str:
    """`text` without its fenced blocks (a `# comment` in code is not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: str) -> set[str]:
    """The heading anchors GitHub gives the page at `path`."""
    found = set()
    for line in _prose(_read(path)).splitlines():
        match = HEADING.match(line)
        if match:
            title = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def local_links(path: str) -> list[str]:
    return [t for t in LINK.findall(_prose(_read(path))) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_short():
    assert len(_read(README)) <= README_MAX_CHARS


def test_the_readme_links_every_docs_page():
    linked = {os.path.normpath(os.path.join(ROOT, t.split("#")[0])) for t in local_links(README)}
    assert DOCS and set(DOCS) <= linked


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: os.path.relpath(p, ROOT))
def test_every_link_lands_on_a_page_and_heading_that_exist(page):
    for target in local_links(page):
        file_part, _, anchor = target.partition("#")
        linked = page
        if file_part:
            linked = os.path.normpath(os.path.join(os.path.dirname(page), file_part))
        assert os.path.exists(linked), f"{os.path.relpath(page, ROOT)}: no such page {target}"
        if anchor:
            assert anchor in anchors(linked), f"{os.path.relpath(page, ROOT)}: no heading {target}"
