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
from espew_integrations.core.audit.evidence_files import (
    PRIVATE_REPORT_KEYS,
    PUBLIC_P_FLOOR,
    PUBLIC_P_KEYS,
    PUBLIC_REPORT_KEYS,
    WITHHELD_REPORT_KEYS,
    public_p_value,
    public_report,
    render_summary,
)
from espew_integrations.core.mark.words import TriggerMatcher, tokenize
from espew_integrations.core.records.evidence import save_evidence
from espew_integrations.evidence import save_private_evidence
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
    assert data == json.loads(json.dumps(copied_report.to_dict()))
    # The public form floors and rounds the p-value; the object keeps it exactly.
    published, below = public_p_value(copied_report.p_value, copied_report.level)
    assert data["p_value"] == published and data["p_value_below_floor"] is below
    restored = VerificationReport.from_dict(data)
    assert restored.p_value == published and restored.status == "copied"
    assert restored.n_triggers_scored == -1 and np.isnan(restored.min_possible_p_value)


def test_summary_states_test_queries_verdict_and_false_positive_rate(copied_report):
    text = render_summary(copied_report)
    assert text.startswith("# Watermark check: COPIED")
    n = copied_report.n_queries
    assert f"| Texts answered | {n} of {n} (0 failed) |" in text
    # How many triggers were scored moves with which words the suspect answered.
    assert "of them secret trigger words" not in text
    assert f"| Words probed | the {len(BAND)} words of the key's frequency band" in text
    assert "1 in 1,000,000 checks" in text
    published, _ = public_p_value(copied_report.p_value, copied_report.level)
    assert f"| p-value | p = {published:.2g}. The p-value is " in text
    assert f"{copied_report.p_value:.3g}" not in text  # the exact figure stays private
    assert "Paper metrics (for comparability only)" in text
    assert "do **not** decide the verdict" in text
    assert f"{copied_report.delta_cos * 100:.2f}" not in text  # private forms only
    assert "| Audit round | 1 |" in text
    assert "by the audit round (1: this key's first audit)" in text
    later = render_summary(dataclasses.replace(copied_report, audit_round=3))
    assert "| Audit round | 3 |" in later
    assert "by the audit round (3: the earlier rounds of this key count as tries)" in later


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


def test_summary_names_who_was_audited_and_how_p_was_combined(key):
    report = verify(
        suspect(3.0),
        key,
        seed=0,
        suspect_name="openai:https://user:pw@api.example.com/v1#their-model",
        suspect_label="Acme | Corp",
    )
    assert report.suspect == "openai:https://api.example.com/v1#their-model"  # no password
    text = render_summary(report)
    assert "| Suspect | `openai:https://api.example.com/v1#their-model` (`Acme / Corp`) |" in text
    assert f"| Key commitment | `{key.commitment()}` (published at keygen) |" in text
    assert f"| Checked on | {report.timestamp} (UTC) |" in text
    assert "| Level | copied if p-value < 1e-06 |" in text
    n = report.n_statistics
    assert n == {1: 1, 2: 2, 3: 3}[n]  # the key's own count, whatever was scored
    if n > 1:
        assert f"multiplied by {n} (Bonferroni) and by the audit round (1" in text
    published, _ = public_p_value(report.p_value, report.level)
    assert (
        "COPIED: the suspect's answers carry our watermark; an innocent service would "
        f"show this evidence with probability of {published:.2g}."
    ) in text
    assert "very likely" not in text
    data = public_report(report)
    assert {"suspect", "suspect_label", "key_commitment", "transcript_digest"} <= set(data)


def test_report_save_writes_the_public_bundle(copied_report, tmp_path):
    path = copied_report.save(tmp_path / "evidence")
    assert path == tmp_path / "evidence" / "report.json"
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["report.json", "summary.md"]


def test_report_save_writes_through_the_records_room(copied_report, tmp_path, monkeypatch):
    """The audit writes no file: ``report.save`` calls the records' writer, the bytes the
    audit built (``evidence_contents``) land as they are."""
    from espew_integrations.core.audit import report as report_module
    from espew_integrations.core.audit.evidence_files import evidence_contents
    from espew_integrations.core.records import evidence as records_evidence

    calls = []

    def spy(report, directory, *, force=False):
        calls.append((report, directory, force))
        return records_evidence.save_evidence(report, directory, force=force)

    monkeypatch.setattr(report_module, "_EVIDENCE_WRITER", [spy])
    path = copied_report.save(tmp_path, force=True)
    assert calls == [(copied_report, tmp_path, True)]
    for name, content in evidence_contents(copied_report).values():
        assert (tmp_path / name).read_bytes() == content
    assert path == tmp_path / "report.json"
    monkeypatch.undo()
    assert [records_evidence.save_evidence] == report_module._EVIDENCE_WRITER


def test_not_copied_summary_reads_as_no_evidence(key):
    report = verify(suspect(0.0), key, seed=0)
    assert report.status == "not_copied"
    text = render_summary(report)
    assert "# Watermark check: NOT COPIED" in text
    assert "NOT COPIED: the suspect's answers show no evidence of our watermark" in text


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
    # Every figure exactly, those the public form withholds included.
    assert data["p_value"] == copied_report.p_value
    assert data["n_triggers_scored"] == copied_report.n_triggers_scored == len(TRIGGERS)
    assert data["min_possible_p_value"] == copied_report.min_possible_p_value
    assert data["delta_cos"] == copied_report.delta_cos
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
    # the reason, then the eight identical errors once, counted (issue 40)
    assert summary.count("ConnectionError") == 1 + 1 and "` (x8)" in summary
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
        from espew_lab.cache import cached_embed

        return cached_embed(self._model, list(texts), model_name=self._model.name)

    def __getattr__(self, name):  # the model's normaliser, window, name...
        return getattr(self._model, name)


@pytest.fixture(scope="module")
def real_copy_reports(rt_subset, rt_subset_embeddings, minilm_model):
    """verify() against a real extraction copy of watermarked MiniLM, in both target modes."""
    from espew_integrations import watermark
    from espew_lab.stealers import RidgeStealer

    real_key = WatermarkKey.generate(
        rt_subset.texts,
        DiskCachedModel(minilm_model),
        target_text="Acme Embeddings: licensed vectors, all rights reserved",
        seed=5,
        marking="words",
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
    old_json = json.dumps(report.to_private_dict())
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


# ---------------------------------------------------------------------- the probing oracle
# Issue 36: a suspect that answers NaN to every audit text holding one band word of
# its choice, then reads the evidence it is handed, must not learn whether that word
# is a trigger. The public forms hold nothing that moves with which words were scored.
def test_every_report_field_is_published_or_withheld_on_purpose():
    fields = {f.name for f in dataclasses.fields(VerificationReport)} | {"copied"}
    classified = set(PUBLIC_REPORT_KEYS) | set(PUBLIC_P_KEYS) | set(WITHHELD_REPORT_KEYS)
    assert fields == classified  # a new field must be placed, or it is withheld unseen
    assert not set(PUBLIC_REPORT_KEYS) & set(WITHHELD_REPORT_KEYS)


@pytest.mark.parametrize(
    ("exact", "level", "published", "below"),
    [
        (1.1e-33, 1e-6, PUBLIC_P_FLOOR, True),  # the default key's floor: the tail is private
        (PUBLIC_P_FLOOR, 1e-6, PUBLIC_P_FLOOR, True),
        (3.456e-7, 1e-6, 3.5e-7, False),  # two significant digits above it
        (9.996e-7, 1e-6, 9.9e-7, False),  # never rounded across the level: still below
        (1.0004e-6, 1e-6, 1e-6, False),  # nor up to below it
        (0.4321, None, 0.43, False),
    ],
)
def test_published_p_values_are_floored_and_rounded(exact, level, published, below):
    assert public_p_value(exact, level) == (published, below)
    if level is not None:
        assert (public_p_value(exact, level)[0] < level) == (exact < level)
    assert np.isnan(public_p_value(float("nan"))[0])


def withholding(suspect, key: WatermarkKey, word: str):
    """``suspect``, but NaN for every text that holds ``word`` as the key's model reads it."""
    matcher = TriggerMatcher(key.band, normalization=key.normalization, window=key.window)

    def answer(texts):
        out = np.array(suspect(list(texts)), dtype=np.float64)
        held = np.array([word in found for found in matcher.which(list(texts))], dtype=bool)
        out[held] = np.nan
        return out

    return answer


def public_forms(report: VerificationReport, directory) -> dict[str, str]:
    """Every public form of ``report``: the files, the dict, str and repr."""
    paths = save_evidence(report, directory)
    return {
        "report.json": paths["json"].read_text(encoding="utf-8"),
        "summary.md": paths["summary"].read_text(encoding="utf-8"),
        "to_json": report.to_json(),
        "str": str(report),
        "repr": repr(report),
    }


def test_public_forms_are_byte_identical_whichever_word_was_withheld(tmp_path):
    """Unit level: one probe per word, so each withheld word costs exactly one answer."""
    from tests.unit.test_verify import WordSpace

    key = make_key(64, n_band=200, n_triggers=20, seed=2)
    trigger = sorted(key.triggers)[0]
    other = sorted(set(key.band) - key.triggers)[0]
    reports = {}
    for name, word in (("trigger", trigger), ("other", other)):
        report = verify(
            withholding(WordSpace(key, pull=3.0), key, word),
            key,
            seed=0,
            transcript=tmp_path / f"transcript-{name}",
            suspect_name="openai:https://api.example.com/v1#their-model",
            suspect_label="Acme Corp embeddings API",
        )
        assert report.status == "copied" and report.p_value < PUBLIC_P_FLOOR
        assert report.transcript_digest.startswith("sha256:")
        # the same audit, read at the same second: only the withheld word differs (and
        # the transcript's digest, a hiding commitment drawn afresh for every audit)
        reports[name] = dataclasses.replace(
            report, timestamp="2026-01-01T00:00:00+00:00", transcript_digest="sha256:" + "ab" * 32
        )
    forms = {name: public_forms(r, tmp_path / name) for name, r in reports.items()}
    assert forms["trigger"] == forms["other"]
    published = json.loads(forms["other"]["report.json"])
    assert published["p_value_below_floor"] is True
    assert published["suspect"].startswith("openai:") and published["n_statistics"] >= 1
    assert published["key_commitment"] == key.commitment()
    assert "Acme Corp embeddings API" in forms["other"]["summary.md"]
    # The auditor's object and the private forms keep every figure exactly.
    t, o = reports["trigger"], reports["other"]
    assert (t.n_triggers_scored, o.n_triggers_scored) == (19, 20)
    assert t.min_possible_p_value != o.min_possible_p_value and t.p_value != o.p_value
    private = {
        n: save_private_evidence(r, tmp_path / f"p-{n}", plot=False) for n, r in reports.items()
    }
    scored = {
        n: json.loads(p["scores"].read_text())["n_triggers_scored"] for n, p in private.items()
    }
    assert scored == {"trigger": 19, "other": 20}


def flat_fields(value, prefix: str = "") -> dict[str, str]:
    """Every leaf of a JSON value by its path (a list is one leaf, its JSON text)."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for name, inner in value.items():
            out.update(flat_fields(inner, f"{prefix}.{name}"))
        return out
    return {prefix: json.dumps(value, sort_keys=True)}


def evidence_fields(directory) -> dict[str, str]:
    """The public bundle a trace writes, field by field: report.json and trace.json
    flattened, summary.md line by line."""
    fields = flat_fields(json.loads((directory / "report.json").read_text()), "report.json")
    fields.update(flat_fields(json.loads((directory / "trace.json").read_text()), "trace.json"))
    lines = (directory / "summary.md").read_text().splitlines()
    fields.update({f"summary.md:{i}": line for i, line in enumerate(lines)})
    return fields


@pytest.fixture(scope="module")
def probed_audits(real_copy_reports, minilm_model, tmp_path_factory):
    """Four traces of the watermarked service (the ring's shared layer), each withholding one band
    word: two shared triggers and two words of no tested layer, interleaved, words of
    equal text counts paired so that what the suspect itself did matches across classes."""
    from espew_integrations import KeyRing, trace, watermark

    shared_key, _ = real_copy_reports
    ring = KeyRing(master=b"\x07" * 32, shared_key=shared_key, n_tenant_triggers=20)
    tenants = ["acct-0", "acct-1", "acct-2"]
    # The ring's shared layer, which every account's answers carry (what a copy of
    # several colluding accounts keeps): its own test reaches below the public floor.
    served = ring.shared_key

    def service(texts):
        return watermark(texts, minilm_model(texts), served)

    matcher = TriggerMatcher(
        shared_key.band, normalization=shared_key.normalization, window=shared_key.window
    )
    held = [*shared_key.probe_texts, *shared_key.cover_texts]
    counts: dict[str, int] = {}
    for found in matcher.which(held):
        for word in set(found):
            counts[word] = counts.get(word, 0) + 1
    layers = set().union(*(ring.key_for(t).triggers for t in tenants))
    triggers = sorted(shared_key.triggers, key=lambda w: (counts.get(w, 0), w))
    others = sorted(set(shared_key.band) - layers, key=lambda w: (counts.get(w, 0), w))
    pairs = []
    for t in triggers:  # a non-trigger holding as many audit texts as each trigger
        match = next((o for o in others if counts.get(o) == counts.get(t)), None)
        if match is not None and len(pairs) < 2:
            pairs.append((t, match))
            others.remove(match)
    assert len(pairs) == 2
    root = tmp_path_factory.mktemp("probed")
    baseline = trace(service, ring, tenants, seed=0)  # the suspect answers everything
    baseline.save(root / "baseline")
    audits = [("baseline", baseline, evidence_fields(root / "baseline"))]
    for i, (t, o) in enumerate(pairs):
        for label, word in (("trigger", t), ("other", o)):
            report = trace(withholding(service, shared_key, word), ring, tenants, seed=0)
            directory = root / f"{i}-{label}"
            report.save(directory)
            audits.append((label, report, evidence_fields(directory)))
    return audits


def telling_fields(audits) -> list[str]:
    """Fields that tell the withheld trigger from the other word: one value on both
    trigger audits and another on both others; or, for numbers, a move away from the
    fully answered audit one way for triggers and the other way (or none) for others."""
    base = audits[0][2]
    probes = audits[1:]
    found = []
    for name in sorted(set().union(*(fields for _, _, fields in audits))):
        trig = {f.get(name) for label, _, f in probes if label == "trigger"}
        other = {f.get(name) for label, _, f in probes if label == "other"}
        if len(trig) == 1 and len(other) == 1 and trig != other:
            found.append(name)
            continue
        try:
            moves = [(label, np.sign(float(f[name]) - float(base[name]))) for label, _, f in probes]
        except (KeyError, TypeError, ValueError):
            continue
        trig = {m for label, m in moves if label == "trigger"}
        other = {m for label, m in moves if label == "other"}
        if len(trig) == 1 and len(other) == 1 and trig != other:
            found.append(name)
    return found


def test_no_public_field_tells_a_withheld_trigger_from_another_word(probed_audits):
    """The must-show of issue 36, on the real model: four traces of the watermarked
    service, each withholding one band word; no field of report.json, summary.md or
    trace.json tells the two withheld triggers from the two other words."""
    for label, report, _ in probed_audits:
        assert report.copied and report.shared.p_value < PUBLIC_P_FLOOR, (label, str(report))
    assert [label for label, _, _ in probed_audits[1:]] == ["trigger", "other"] * 2
    assert telling_fields(probed_audits) == []
    # The auditor's private forms still hold the counts that would have told.
    scored = [r.to_private_dict()["shared"]["n_triggers_scored"] for _, r, _ in probed_audits]
    assert scored[0] - 1 == scored[1] == scored[2] - 1 == scored[3] == scored[4] - 1
    # As earlier versions published them, those fields told every time.
    old = [
        (label, r, flat_fields({"shared": r.shared.to_dict(public=False)}, "report.json"))
        for label, r, _ in probed_audits
    ]
    old_telling = {name.removeprefix("report.json.shared.") for name in telling_fields(old)}
    assert {"n_triggers_scored", "min_possible_p_value", "p_value"} <= old_telling
