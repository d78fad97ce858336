"""Every link in the README and the docs works in the checkout a reader holds (issue 55).

The project has no public address anyone has confirmed, so a link is either relative
(to a file, and a heading in it, that this checkout holds) or an external page that is
not this project's own: a link to an invented host sends a newcomer nowhere. The same
rule holds for install lines: every hint the package prints installs from the
checkout (``pip install '.[http]'``), and the published form is said to be that.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "lab" / "README.md",
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("examples/**/*.md"),
    ]
)
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?\s*$", re.M)
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
# The project's own invented address, in any spelling: a GitHub owner or any host that
# carries the project's name. Spelt in pieces so that this file does not hold it.
OWN_NAME = "espew" + "-integrations"


def links(page: Path) -> list[str]:
    """The link targets of a markdown page, outside code blocks and code spans."""
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    found = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text) + AUTOLINK.findall(text)
    return [link for link in found if not link.startswith("mailto:")]


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens.

    >>> heading_anchor("What the field costs search, and what its budget buys")
    'what-the-field-costs-search-and-what-its-budget-buys'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {
        heading_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)
    }


def is_own_address(url: str) -> bool:
    """True for an address that names this project as its host or GitHub owner."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    owner = parts.path.strip("/").split("/")[0].lower() if host.endswith("github.com") else ""
    return "espew" in host or owner == OWN_NAME or owner.startswith("espew")


def broken(page: Path) -> list[str]:
    """The links of ``page`` that do not resolve, each with why."""
    bad = []
    for link in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):
            if is_own_address(link):
                bad.append(f"{link} (this project's own address: none is confirmed)")
            elif not link.startswith(("https://", "http://")):
                bad.append(f"{link} (not a web page)")
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.is_relative_to(ROOT):
            bad.append(f"{link} (outside the checkout)")
        elif not target.exists():
            bad.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{link} (no such heading)")
    return bad


def test_the_readme_and_docs_have_links_to_check():
    assert ROOT / "README.md" in PAGES and len(PAGES) > 20
    assert len(links(ROOT / "README.md")) > 10
    assert sum(len(links(page)) for page in PAGES) > 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_checkout_or_is_someone_elses_page(page: Path):
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"


def test_a_bad_link_of_each_kind_is_caught(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("## What the field costs search\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "# Title\n\n[ok](#title) [ok](b.md#what-the-field-costs-search) "
        "[ok](https://semver.org/)\n"
        f"[own](https://github.com/{OWN_NAME}/{OWN_NAME}/blob/main/b.md)\n"
        "[gone](c.md) [bad](#nope) [out](../../etc/passwd)\n"
        "[ref]: https://docs.espew.dev/\n"
        "```\n[in a fence](d.md)\n```\nand `[in a span](e.md)`\n",
        encoding="utf-8",
    )
    assert broken(page) == [
        f"https://github.com/{OWN_NAME}/{OWN_NAME}/blob/main/b.md "
        "(this project's own address: none is confirmed)",
        "c.md (no such file)",
        "#nope (no such heading)",
        "../../etc/passwd (outside the checkout)",
        "https://docs.espew.dev/ (this project's own address: none is confirmed)",
    ]


# ----------------------------------------------------------------- the invented host
#: Files a reader or the package shows: the docs, the package's messages and metadata.
SHOWN = ("*.md", "*.py", "*.toml", "*.json", "*.ipynb", "*.yml", "*.yaml", "Makefile")
NOT_SHOWN = {".git", ".venv", "build", "dist", "site", "node_modules", "demo-output"}


def shown_files() -> list[Path]:
    files = []
    for pattern in SHOWN:
        for path in ROOT.rglob(pattern):
            parts = set(path.relative_to(ROOT).parts)
            if parts & NOT_SHOWN or any(p.endswith(".egg-info") for p in parts):
                continue
            files.append(path)
    return sorted(set(files))


def test_no_file_of_the_checkout_names_the_invented_host():
    host = f"github.com/{OWN_NAME}"
    naming = [
        str(path.relative_to(ROOT))
        for path in shown_files()
        if host in path.read_text(encoding="utf-8", errors="replace").lower()
    ]
    assert len(shown_files()) > 100
    assert not naming, f"these name {host}, which nobody has confirmed exists: {naming}"


PIP_HINT = re.compile(r"pip install[^\n\"]*")


def test_no_install_hint_in_the_package_names_a_host():
    """Every ``pip install`` the plugin or the lab can print installs this project without
    a host: from the checkout, or by the published name. (A third party's own index, such
    as PyTorch's CPU wheels for the lab's torch extra, is that party's confirmed address.)"""
    sources = [*ROOT.glob("espew_integrations/**/*.py"), *ROOT.glob("lab/espew_lab/**/*.py")]
    hints = [
        (path.relative_to(ROOT), hint)
        for path in sources
        for hint in PIP_HINT.findall(path.read_text(encoding="utf-8"))
    ]
    assert len(hints) > 5, "the package's install hints were not found"
    urls = re.compile(r"\S+://\S+")
    hosted = [
        (str(p), h)
        for p, h in hints
        if "git+" in h or " @ " in h or any(is_own_address(u) for u in urls.findall(h))
    ]
    assert not hosted, f"install hints that name a host: {hosted}"


def test_the_install_line_installs_from_the_checkout_and_names_the_published_form():
    from espew_integrations._optional import LAB_INSTALL, install_line

    line = install_line("http")
    assert line == (
        "pip install '.[http]' in a checkout of espew-integrations; "
        "once published, pip install 'espew-integrations[http]'"
    )
    assert LAB_INSTALL.startswith("pip install ./lab in a checkout of espew-integrations;")
    assert "://" not in line + LAB_INSTALL


def test_a_docs_install_line_of_the_published_name_says_it_is_for_later():
    """``pip install 'espew-integrations[...]'`` fails today (no package index has it):
    the docs show it only as what will work once published."""
    published = re.compile(r"pip install '" + OWN_NAME + r"\[")
    early = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            match = published.search(line)
            if not match:
                continue
            said = (lines[number - 2] if number > 1 else "") + line[: match.start()]
            if "published" not in said.lower():
                early.append(f"{page.relative_to(ROOT)}:{number}")
    assert not early, f"install lines that no package index answers today: {early}"
