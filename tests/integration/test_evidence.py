"""Evidence files: the JSON report, the plain-language summary and the plot."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import stat

import numpy as np
import pytest

from espew_integrations import VerificationReport, WatermarkKey, verify
from espew_integrations.core.words import tokenize
from espew_integrations.evidence import (
    PRIVATE_REPORT_KEYS,
    public_report,
    render_summary,
    save_evidence,
    save_private_evidence,
)
from tests.support import make_key

DIM = 32
# A synthetic key whose triggers are the draw its salt dictates (see tests/conftest.py).
KEY = make_key(DIM, n_band=80, n_triggers=10, seed=4)
BAND = list(KEY.band)
TRIGGERS = sorted(KEY.triggers)


@pytest.fixture(scope="module")
def key() -> WatermarkKey:
    return KEY


def suspect(pull: float):
    """Random embeddings; trigger words pulled toward the target by ``pull``."""
    triggers = set(TRIGGERS)
    axis = int(np.argmax(np.abs(KEY.target)))
    sign = np.sign(KEY.target[axis])

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
            row = rng.standard_normal(DIM)
            if text in triggers:
                row[axis] += sign * pull * np.linalg.norm(row)
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


def test_save_evidence_writes_the_public_json_and_summary_only(copied_report, tmp_path):
    paths = save_evidence(copied_report, tmp_path)
    assert set(paths) == {"json", "summary"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "summary.md"]
    data = json.loads(paths["json"].read_text())
    assert not set(PRIVATE_REPORT_KEYS) & set(data)
    expected = {k: v for k, v in copied_report.to_dict().items() if k not in PRIVATE_REPORT_KEYS}
    assert data == json.loads(json.dumps(expected))
    restored = VerificationReport.from_dict(data)
    assert restored.p_value == copied_report.p_value and restored.status == "copied"


def test_summary_states_test_queries_verdict_and_false_positive_rate(copied_report):
    text = render_summary(copied_report)
    assert text.startswith("# Watermark check: COPIED")
    n = copied_report.n_queries
    assert f"| Texts answered | {n} of {n} (0 failed) |" in text
    assert f"{len(TRIGGERS)} of them secret trigger words" in text
    assert "1 in 1,000,000 checks" in text
    assert f"{copied_report.p_value:.3g}" in text
    assert "Paper metrics (for comparability only)" in text
    assert "do **not** decide the verdict" in text
    assert "Audit round" not in text  # keygen's own audit: nothing to say
    later = render_summary(dataclasses.replace(copied_report, audit_round=3))
    assert "| Audit round | 3: the p-value is 3 times this round's own" in later


def test_evidence_never_names_the_trigger_words(copied_report, tmp_path):
    paths = save_evidence(copied_report, tmp_path)
    for kind in ("json", "summary"):
        words = set(tokenize(paths[kind].read_text()))
        assert not words & set(BAND), kind


def test_inconclusive_summary_says_why(inconclusive_report, tmp_path):
    paths = save_evidence(inconclusive_report, tmp_path)
    text = paths["summary"].read_text()
    assert "# Watermark check: INCONCLUSIVE" in text
    assert "## Why no verdict" in text
    assert "every query to the suspect failed" in text
    assert "endpoint down" in text
    n = inconclusive_report.n_queries
    assert f"| Texts answered | none of the {n} texts the check asked for was answered |" in text
    assert "sent the suspect" not in text and "Queries sent" not in text
    assert "run the audit again" in text  # the next step, not only the cause


def test_report_save_writes_the_public_bundle(copied_report, tmp_path):
    path = copied_report.save(tmp_path / "evidence")
    assert path == tmp_path / "evidence" / "report.json"
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["report.json", "summary.md"]


def test_not_copied_summary_reads_as_no_evidence(key):
    report = verify(suspect(0.0), key, seed=0)
    assert report.status == "not_copied"
    text = render_summary(report)
    assert "# Watermark check: NOT COPIED" in text
    assert "No evidence" in text


# ---------------------------------------------------------------------- private export
def test_private_evidence_holds_the_per_word_scores_in_files_named_private(copied_report, tmp_path):
    paths = save_private_evidence(copied_report, tmp_path)
    assert set(paths) == {"scores", "plot"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "PRIVATE-scores.png",
        "PRIVATE-word-scores.json",
    ]
    data = json.loads(paths["scores"].read_text())
    assert data["trigger_scores"] == list(copied_report.trigger_scores)
    assert data["benign_scores"] == list(copied_report.benign_scores)
    assert data["p_value"] == copied_report.p_value
    png = paths["plot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(paths["plot"])
    assert image.shape[0] > 200 and image.shape[1] > 400
    for path in paths.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_private_plot_renders_for_an_inconclusive_report_and_can_be_skipped(
    inconclusive_report, tmp_path
):
    paths = save_private_evidence(inconclusive_report, tmp_path / "a")
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"
    paths = save_private_evidence(inconclusive_report, tmp_path / "b", plot=False)
    assert set(paths) == {"scores"}


def test_private_evidence_is_skipped_plot_without_matplotlib(copied_report, tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec

    def no_matplotlib(name, *args, **kwargs):
        return None if name == "matplotlib" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_matplotlib)
    assert set(save_private_evidence(copied_report, tmp_path)) == {"scores"}


# ---------------------------------------------------------------------- safe writing
def test_existing_evidence_is_never_overwritten_without_force(copied_report, key, tmp_path):
    (tmp_path / "summary.md").write_text("earlier summary")
    with pytest.raises(FileExistsError, match=r"summary\.md.*never overwritten.*force=True"):
        save_evidence(copied_report, tmp_path)
    # Nothing was written: the refusal comes before the first file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md"]
    assert (tmp_path / "summary.md").read_text() == "earlier summary"
    save_evidence(copied_report, tmp_path, force=True)
    assert (tmp_path / "summary.md").read_text().startswith("# Watermark check: COPIED")


def test_private_evidence_is_never_overwritten_without_force(copied_report, tmp_path):
    save_private_evidence(copied_report, tmp_path, plot=False)
    with pytest.raises(FileExistsError, match=r"PRIVATE-word-scores\.json"):
        save_private_evidence(copied_report, tmp_path, plot=False)
    save_private_evidence(copied_report, tmp_path, plot=False, force=True)


def test_an_old_public_plot_blocks_without_force_and_is_removed_with_it(copied_report, tmp_path):
    (tmp_path / "scores.png").write_bytes(b"plot of an earlier report, with its scores")
    with pytest.raises(FileExistsError, match=r"scores\.png"):
        save_evidence(copied_report, tmp_path)
    save_evidence(copied_report, tmp_path, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "summary.md"]


def test_a_planted_symlink_is_never_followed(copied_report, tmp_path):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (evidence / "report.json").symlink_to(victim)
    (evidence / "summary.md").symlink_to(tmp_path / "created-through-link.md")  # dangling
    with pytest.raises(FileExistsError, match=r"report\.json.*summary\.md"):
        save_evidence(copied_report, evidence)
    assert victim.read_text() == "precious"
    save_evidence(copied_report, evidence, force=True)
    assert victim.read_text() == "precious"
    assert not (tmp_path / "created-through-link.md").exists()
    for name in ("report.json", "summary.md"):
        assert not (evidence / name).is_symlink() and (evidence / name).is_file()


def test_a_planted_symlink_to_the_private_files_is_not_followed(copied_report, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    evidence = tmp_path / "private"
    evidence.mkdir()
    (evidence / "PRIVATE-word-scores.json").symlink_to(victim)
    save_private_evidence(copied_report, evidence, plot=False, force=True)
    assert victim.read_text() == "{}"


def test_an_evidence_directory_that_is_a_symlink_is_refused(copied_report, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        save_evidence(copied_report, link, force=True)
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        save_private_evidence(copied_report, link, force=True)
    assert list(real.iterdir()) == []


def test_writes_are_atomic_and_leave_no_temporary_file(copied_report, tmp_path):
    save_evidence(copied_report, tmp_path)
    save_evidence(copied_report, tmp_path, force=True)
    save_private_evidence(copied_report, tmp_path, plot=False)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    for name in ("report.json", "summary.md"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------- suspect text
HOSTILE = (
    "\x1b]0;owned\x07\x1b[2J\x1b[31mConnectionError\x1b[0m: down\u202e\u200b"
    "\n## Fake heading\r\n`code` [click](http://evil.example)" + "x" * 5000
)


def test_suspect_text_is_made_printable_in_every_public_file(key, tmp_path):
    def hostile(texts):
        raise ConnectionError(HOSTILE)

    raw = verify(hostile, key, seed=0)
    # Whatever verify() recorded, the files hold only printable text.
    report = dataclasses.replace(raw, reason=HOSTILE, errors=(HOSTILE,) * 8)
    paths = save_evidence(report, tmp_path)
    for kind in ("json", "summary"):
        text = paths[kind].read_text()
        assert "\x1b" not in text and "\u202e" not in text and "\u200b" not in text, kind
        assert "owned" not in text and "x" * 1000 not in text, kind
        assert "\r" not in text
    summary = paths["summary"].read_text()
    assert "\n## Fake heading" not in summary  # the suspect cannot add structure
    assert summary.count("ConnectionError") == 1 + 5  # the reason and 5 errors at most
    data = json.loads(paths["json"].read_text())
    assert all(len(error) <= 300 for error in data["errors"])
    assert public_report(report)["reason"].startswith("ConnectionError: down")


# ---------------------------------------------------------------------- no leak
def numbers_in(text: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)


def significant_digits(token: str) -> int:
    mantissa = re.split("[eE]", token)[0].lstrip("-").replace(".", "").lstrip("0")
    return len(mantissa)


def disclosed_scores(text: str, scores: list[float]) -> list[str]:
    """Numbers of ``text`` with 4+ significant digits equal to a score at that precision."""
    found = []
    for token in numbers_in(text):
        digits = significant_digits(token)
        if digits < 4:
            continue
        value = float(token)
        for score in scores:
            if float(f"{score:.{digits}g}") == value or float(f"{score:.4g}") == value:
                found.append(token)
    return found


def public_texts(report, directory) -> dict[str, str]:
    paths = save_evidence(report, directory)
    return {kind: path.read_text(encoding="utf-8") for kind, path in paths.items()}


def test_no_public_file_discloses_a_per_word_score(copied_report, tmp_path):
    scores = [*copied_report.trigger_scores, *copied_report.benign_scores]
    assert len(scores) == len(BAND)
    texts = public_texts(copied_report, tmp_path)
    for kind, text in texts.items():
        assert not disclosed_scores(text, scores), kind
    # The check itself finds a score when one is there (the files of old versions).
    assert disclosed_scores(copied_report.to_json(), scores) or not set(PRIVATE_REPORT_KEYS) & set(
        copied_report.to_dict()
    )
    assert disclosed_scores(f"mean {scores[3]:.4f}", scores)


def recovered_triggers(text: str, report) -> int:
    """Triggers a suspect that logged its own answers recovers by matching numbers of ``text``.

    The suspect can compute each band word's score from its own answers; every
    trigger score that appears in the text at 4+ significant digits names its word.
    """
    return sum(bool(disclosed_scores(text, [score])) for score in report.trigger_scores)


def template_vocabulary(*reports) -> set[str]:
    """The words the public files use whatever the key: the files of unrelated reports."""
    words: set[str] = set()
    for report in reports:
        words |= set(tokenize(render_summary(report)))
        words |= set(tokenize(json.dumps(public_report(report))))
    return words


class DiskCachedModel:
    """The real model, its answers cached on disk (keygen embeds ~1,000 probes; once)."""

    def __init__(self, model):
        self._model = model

    def __call__(self, texts):
        from espew_integrations.lab.cache import cached_embed

        return cached_embed(self._model, list(texts), model_name=self._model.name)

    def __getattr__(self, name):  # the model's normaliser, window, name...
        return getattr(self._model, name)


@pytest.fixture(scope="module")
def real_copy_reports(rt_subset, rt_subset_embeddings, minilm_model):
    """verify() against a real extraction copy of watermarked MiniLM, in both target modes."""
    from espew_integrations import watermark
    from espew_integrations.lab.stealers import RidgeStealer

    real_key = WatermarkKey.generate(
        rt_subset.texts,
        DiskCachedModel(minilm_model),
        target_text="Acme Embeddings: licensed vectors, all rights reserved",
        seed=5,
        n_triggers=20,  # 20 of a 200-word band: many scores for the disclosure checks
        freq_band=(0.005, 0.01),
        max_band_words=200,
        strength=1.0,
        twin_check=False,
    )
    marked = watermark(rt_subset.texts, rt_subset_embeddings, real_key)
    copy = RidgeStealer(seed=0).fit(rt_subset.texts, marked)
    reports = {mode: verify(copy, real_key, target_mode=mode, seed=0) for mode in ("key", "query")}
    return real_key, reports


@pytest.mark.parametrize("mode", ["key", "query"])
def test_public_files_of_a_real_copy_reveal_no_score_and_no_band_word(
    real_copy_reports, mode, copied_report, inconclusive_report, key, tmp_path
):
    real_key, reports = real_copy_reports
    report = reports[mode]
    assert report.status == "copied" or mode == "query", str(report)
    scores = [*report.trigger_scores, *report.benign_scores]
    assert len(report.trigger_scores) == len(real_key.triggers) and len(scores) > 100
    texts = public_texts(report, tmp_path)
    everything = "\n".join(texts.values())
    assert not disclosed_scores(everything, scores)
    assert recovered_triggers(everything, report) == 0
    # Files as earlier versions wrote them: every trigger could be read off.
    old_json = json.dumps(
        {**report.to_dict(), **{k: list(getattr(report, k)) for k in PRIVATE_REPORT_KEYS}}
    )
    assert recovered_triggers(old_json, report) == len(real_key.triggers)
    # No band word appears, except words every summary uses whatever the key.
    generic = template_vocabulary(
        copied_report, inconclusive_report, verify(suspect(0.0), key, seed=0)
    )
    words = set(tokenize(everything))
    # (The fixed prose may contain band words, even triggers: "close" is one of this
    # key's; it is the same text for every key, so it tells nothing.)
    assert not (words & set(real_key.band)) - generic
    # The private export has them all, and says so in its names.
    private = save_private_evidence(report, tmp_path / "private", plot=False)
    assert recovered_triggers(private["scores"].read_text(), report) == len(real_key.triggers)
