"""Every relative link in the docs names a file that exists, and every #anchor a heading.

Pages move and headings get renamed; a broken link in a limitations page sends a
reader who is deciding whether to trust a verdict to nowhere. The README's links are
absolute (the package index shows it) and are checked in ``test_readme``.
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


REPOSITORY_FILES = "https://github.com/espew-integrations/espew-integrations/"


def site_exclusions():
    """``exclude_docs`` of mkdocs.yml, matched as mkdocs matches it (gitignore rules)."""
    pathspec = pytest.importorskip("pathspec")
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return pathspec.GitIgnoreSpec.from_lines(config["exclude_docs"].splitlines())


def links_off_the_site(page: Path, excluded, docs: Path = ROOT / "docs") -> list[str]:
    """Relative links of a site page to a file the site leaves out (outside docs/, or excluded)."""
    off = []
    for link in relative_links(page):
        path = link.partition("#")[0]
        if not path:
            continue
        target = (page.parent / path).resolve()
        inside = target.is_relative_to(docs)
        if not inside or excluded.match_file(target.relative_to(docs).as_posix()):
            off.append(link)
    return off


def test_site_pages_link_files_the_site_leaves_out_by_their_repository_address():
    """`make docs` builds the site without docs/results/** or benchmarks/: a relative link
    there would break on the site, so such links name the file in the repository."""
    excluded = site_exclusions()
    pages = [
        p
        for p in sorted(ROOT.glob("docs/**/*.md"))
        if not excluded.match_file(p.relative_to(ROOT / "docs").as_posix())
    ]
    assert ROOT / "docs" / "results" / "frontier" / "README.md" in pages  # re-included
    off = {str(p.relative_to(ROOT)): links_off_the_site(p, excluded) for p in pages}
    assert not {page: links for page, links in off.items() if links}, (
        f"link these as {REPOSITORY_FILES}blob/main/<path>"
    )


def test_a_link_off_the_site_is_caught(tmp_path: Path):
    docs = tmp_path / "docs"
    (docs / "results" / "frontier").mkdir(parents=True)
    page = docs / "lab.md"
    page.write_text(
        "[script](../benchmarks/b.py) [table](results/table.md) [ok](index.md)\n"
        "[study](results/frontier/README.md) [repo](https://github.com/x/y/blob/main/b.py)\n"
    )
    assert links_off_the_site(page, site_exclusions(), docs) == [
        "../benchmarks/b.py",
        "results/table.md",
    ]
