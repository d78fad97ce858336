"""Every relative link in the docs names a file that exists, and every #anchor a heading.

Pages move and headings get renamed; a broken link in a limitations page sends a
reader who is deciding whether to trust a verdict to nowhere. The README's links, and
the rule that no link names this project's own (unconfirmed) address, are checked in
tests/unit/test_doc_links.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md")])
FENCE = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens.

    >>> heading_anchor("Make the key on texts like those you serve")
    'make-the-key-on-texts-like-those-you-serve'
    >>> heading_anchor("`target_mode=\\"key\\"` or `target_mode=\\"query\\"`")
    'target_modekey-or-target_modequery'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {heading_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:", link)]


def test_the_docs_have_pages_with_relative_links():
    assert len(PAGES) > 10
    assert sum(len(relative_links(page)) for page in PAGES) > 100


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file or heading does not exist."""
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_files_and_headings_that_exist(page: Path):
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_a_broken_link_is_caught(tmp_path: Path):
    (tmp_path / "b.md").write_text("## Make the key on texts like those you serve\n")
    page = tmp_path / "a.md"
    page.write_text(
        "# Title\n\n[ok](#title) [ok](b.md#make-the-key-on-texts-like-those-you-serve)\n"
        "[gone](c.md) [bad](#nope) [bad](b.md#title)\n```\n[in a fence](d.md)\n```\n"
    )
    assert broken_links(page) == [
        "c.md (no such file)",
        "#nope (no such heading)",
        "b.md#title (no such heading)",
    ]
