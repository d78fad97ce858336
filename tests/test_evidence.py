"""Evidence files: the JSON report, the plain-language summary and the plot."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import numpy as np
import pytest

from espew_integrations import VerificationReport, WatermarkKey, verify
from espew_integrations.core.words import tokenize
from espew_integrations.evidence import render_summary, save_evidence

DIM = 32
BAND = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(8) for j in range(10)]
TRIGGERS = BAND[::8]


@pytest.fixture(scope="module")
def key() -> WatermarkKey:
    target = np.zeros(DIM)
    target[0] = 1.0
    return WatermarkKey(
        triggers=TRIGGERS, target=target, target_text="t", band=BAND, salt=bytes(32)
    )


def suspect(pull: float):
    """Random embeddings; trigger words pulled toward the target by ``pull``."""
    triggers = set(TRIGGERS)

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
            row = rng.standard_normal(DIM)
            if text in triggers:
                row[0] += pull * np.linalg.norm(row)
            out.append(row)
        return np.asarray(out)

    return embed


@pytest.fixture(scope="module")
def copied_report(key) -> VerificationReport:
    report = verify(suspect(3.0), key, seed=0)
    assert report.status == "copied"
    return report


@pytest.fixture(scope="module")
def inconclusive_report(key) -> VerificationReport:
    def down(texts):
        raise ConnectionError("endpoint down")

    return verify(down, key, seed=0)


def test_save_evidence_writes_json_summary_and_png(copied_report, tmp_path):
    paths = save_evidence(copied_report, tmp_path)
    assert set(paths) == {"json", "summary", "plot"}
    restored = VerificationReport.from_dict(json.loads(paths["json"].read_text()))
    assert restored == copied_report
    png = paths["plot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(paths["plot"])
    assert image.shape[0] > 200 and image.shape[1] > 400


def test_summary_states_test_queries_verdict_and_false_positive_rate(copied_report):
    text = render_summary(copied_report)
    assert text.startswith("# Watermark check: COPIED")
    assert f"| Queries sent | {copied_report.n_queries} (0 failed) |" in text
    assert f"{len(TRIGGERS)} of them secret trigger words" in text
    assert "1 in 1,000,000 checks" in text
    assert f"{copied_report.p_value:.3g}" in text
    assert "Paper metrics (for comparability only)" in text
    assert "do **not** decide the verdict" in text


def test_evidence_never_names_the_trigger_words(copied_report, tmp_path):
    paths = save_evidence(copied_report, tmp_path)
    for kind in ("json", "summary"):
        words = set(tokenize(paths[kind].read_text()))
        assert not words & set(BAND), kind


def test_inconclusive_summary_says_why_and_plot_still_renders(inconclusive_report, tmp_path):
    paths = save_evidence(inconclusive_report, tmp_path)
    text = paths["summary"].read_text()
    assert "# Watermark check: INCONCLUSIVE" in text
    assert "## Why no verdict" in text
    assert "every query to the suspect failed" in text
    assert "endpoint down" in text
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_report_save_writes_the_whole_bundle(copied_report, tmp_path):
    path = copied_report.save(tmp_path / "evidence")
    assert path == tmp_path / "evidence" / "report.json"
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["report.json", "scores.png", "summary.md"]


def test_report_save_without_matplotlib_writes_json_and_markdown_only(
    copied_report, tmp_path, monkeypatch
):
    (tmp_path / "scores.png").write_bytes(b"stale plot of an earlier report")
    real_find_spec = importlib.util.find_spec

    def no_matplotlib(name, *args, **kwargs):
        return None if name == "matplotlib" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_matplotlib)
    copied_report.save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["report.json", "summary.md"]
    assert "scores.png" not in (tmp_path / "summary.md").read_text()


def test_not_copied_summary_reads_as_no_evidence(key):
    report = verify(suspect(0.0), key, seed=0)
    assert report.status == "not_copied"
    text = render_summary(report)
    assert "# Watermark check: NOT COPIED" in text
    assert "No evidence" in text
