"""A figure the README and a guide both state is the one its results page measured for
today's default (issue 55: the top-10 overlap read 95.5% in the README and 0.954, the
word key's figure, on the LangChain page). Today's default is the map key; its figure
is the means row of ``docs/results/map/quality.txt``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "map" / "quality.txt"
#: The quality table's rows: key, seed, marked, cos all, cos marked, top-10 overlap, top-1.
_ROW = re.compile(r"^map \(.*\)\s+(\d+)?\s+[\d.]+%\s+[\d.]+\s+[\d.]+\s+(0\.\d+)\s+[\d.]+%$")


def default_key_top10() -> tuple[str, str]:
    """(mean figure, range over keys) of the map default's top-10 overlap."""
    per_key, mean = [], None
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        found = _ROW.match(line.strip())
        if found:
            if found.group(1) is None:
                mean = found.group(2)
            else:
                per_key.append(found.group(2))
    assert mean is not None and len(per_key) >= 3, (mean, per_key)
    return mean, f"{min(per_key)}-{max(per_key)}"


def test_the_results_row_is_read():
    figure, spread = default_key_top10()
    assert re.fullmatch(r"0\.9\d\d", figure) and "-" in spread


def test_readme_and_langchain_page_state_the_default_keys_top10_overlap():
    figure, spread = default_key_top10()
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    langchain = " ".join(
        (ROOT / "docs" / "frameworks" / "langchain.md").read_text(encoding="utf-8").split()
    )
    assert f"a watermarked index keeps {figure} of a clean one's top-10" in readme
    assert f"index with a clean one {figure} ({spread} over six keys)" in readme
    assert f"top-10 overlap of {figure} with a clean one" in langchain
    stated = set(re.findall(r"top-10[^.]*?(0\.9\d\d)", langchain))
    assert stated == {figure}, stated
