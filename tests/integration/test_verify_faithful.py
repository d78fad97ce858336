"""The audit that catches faithful copies (issue 9) and refuses to read noise (issue 10).

Real parts: the offline MiniLM and Rotten Tomatoes. A key is generated at the
default quality budget (mean cos 0.995 on marked rows); the suspects are the
watermarked service itself (a perfect copy), a thief that routes audit-looking
traffic to the clean model, and the innocents.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.ground.draw import draw_triggers
from tests.support import assert_exact_over_every_draw, make_key
from tests.unit.test_verify import WordSpace

TARGET_TEXT = "Acme Embeddings, licensed vectors"


@pytest.fixture(scope="module")
def budget_key(minilm_model, rt_corpus):
    return WatermarkKey.generate(
        rt_corpus.texts,
        minilm_model,
        target_text=TARGET_TEXT,
        seed=3,
        window=minilm_model.max_tokens,
        marking="words",
    )


def test_keygen_fits_the_strength_to_the_quality_budget(budget_key, minilm_model, rt_corpus):
    info = budget_key.info
    assert info["strength_fitted_to_min_cosine"] == 0.995
    assert 0.1 < budget_key.strength < 0.5 and info["strength"] == budget_key.strength
    assert 0.995 <= info["mean_cosine_marked"] < 0.9951
    assert 0.25 < info["marked_rate"] < 0.4  # 50 triggers over the 0.3-5% band: about 30%
    # Measured again, independently, on marked texts keygen did not sample from.
    texts = list(rt_corpus.texts)
    marked = np.flatnonzero(budget_key.contains_trigger(texts))[-300:]
    clean = minilm_model([texts[i] for i in marked])
    wm = watermark([texts[i] for i in marked], clean, budget_key)
    cosines = np.sum(wm * clean, axis=1) / np.linalg.norm(wm, axis=1)
    assert abs(float(cosines.mean()) - 0.995) < 0.002
    assert budget_key.window == 256 and budget_key.verifiable
    assert len(budget_key.band) == 640 and budget_key.freq_band == (0.003, 0.05)
    assert len(budget_key.triggers) == 50 and budget_key.info["probe_mix"] == "corpus"
    # Every sampled text with a band word is a probe; the rest (no band word, or too
    # short or too long to be a probe) is cover.
    assert len(budget_key.probe_texts) >= 1500 and budget_key.audit_queries <= 2000
    assert len(budget_key.cover_texts) > 0


def test_the_watermarked_service_itself_is_convicted_at_the_budget(budget_key, minilm_model):
    def service(texts):
        return watermark(texts, minilm_model(texts), budget_key)

    report = verify(service, budget_key, seed=0)
    assert report.status == "copied" and report.p_value < 1e-10
    assert report.probes == "sentences" and report.n_queries <= 2000
    # Both clean-referenced scores see the mark; the verdict takes the stronger.
    assert report.p_value_adjusted < 1e-15 and report.p_value_directed < 1e-15


def test_the_innocent_twin_and_an_independent_model_are_acquitted(budget_key, minilm_model):
    from espew_integrations.offline.embedders import paraphrase_minilm_l3

    for suspect in (minilm_model, paraphrase_minilm_l3()):
        report = verify(suspect, budget_key, seed=0)
        assert report.status == "not_copied" and report.p_value > 1e-3
        if suspect is minilm_model:  # the twin reproduces the clean references exactly
            assert 0.99 < report.reference_slope < 1.01


def _orthonormal(rows: int, cols: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((rows, cols)))
    return q


def test_a_thief_serving_through_a_secret_isometry_is_still_convicted(budget_key, minilm_model):
    """A rotation, or an isometry into more dimensions, keeps every cosine the thief's
    customers see, and left the service itself at p = 1.0 before verify mapped the
    answers back (core/stats/align.py; benchmarks/bench_isometry.py measures the copies)."""

    def service(texts):
        return watermark(texts, minilm_model(texts), budget_key)

    from espew_integrations.core.audit.evidence_files import render_summary

    plain = verify(service, budget_key, seed=0)
    assert plain.copied and plain.alignment.startswith("not applied")
    assert "answers mapped" not in str(plain) and "mapped onto" not in render_summary(plain)
    d = budget_key.dim
    for matrix in (_orthonormal(d, d, 1), _orthonormal(2 * d, d, 2)):
        report = verify(lambda texts, m=matrix: service(texts) @ m.T, budget_key, seed=0)
        assert report.copied and report.p_value < 1e-10
        assert report.suspect_dim == matrix.shape[0] and report.n_queries == plain.n_queries
        assert report.alignment.startswith("applied") and "answers mapped" in str(report)
        assert "Answers mapped onto the key's coordinates" in render_summary(report)
    rotation = _orthonormal(d, d, 1)
    twin = verify(lambda texts: np.asarray(minilm_model(texts)) @ rotation.T, budget_key, seed=0)
    assert twin.status == "not_copied" and twin.p_value > 1e-3
    assert twin.alignment.startswith("applied")


def test_a_hostile_endpoint_answering_too_many_numbers_a_text_stops_after_one_batch(
    budget_key,
):
    """A key that maps answers takes any dimension; one beyond MAX_ANSWER_DIM would fill
    the auditor's memory over a whole audit, so querying stops at the first batch."""
    from espew_integrations.core.audit.settings import MAX_ANSWER_DIM

    calls: list[int] = []

    def flood(texts):
        calls.append(len(texts))
        return np.ones((len(texts), MAX_ANSWER_DIM + 1))

    report = verify(flood, budget_key, seed=0, batch_size=16)
    assert report.status == "inconclusive" and not report.copied
    assert f"{MAX_ANSWER_DIM + 1:,}-dimensional" in report.reason
    assert "MAX_ANSWER_DIM" in report.reason and report.next_step
    assert calls == [16] and report.n_queries == 16


def test_the_lab_scores_a_permuted_copy_in_the_key_coordinates_when_the_key_can_map(
    budget_key, minilm_model
):
    """The lab's permutation attack asks for target_mode="query"; an ESpeW key whose
    audit stores its clean rows maps the answers back instead, and shows the suspect
    no target text."""
    from espew_lab.watermarks import ESpeW

    order = np.random.default_rng(5).permutation(budget_key.dim)
    asked: list[str] = []

    def permuted_service(texts):
        asked.extend(texts)
        return watermark(texts, minilm_model(texts), budget_key)[:, order]

    verdict = ESpeW(budget_key).verify(permuted_service, target_mode="query")
    assert verdict.copied and verdict.p_value < 1e-10 and verdict.target_mode == "key"
    assert budget_key.target_text not in asked


def test_an_audit_drawn_from_another_domain_convicts_the_service_and_acquits_the_twin(
    budget_key, minilm_model
):
    """``with_audit`` re-draws the audit from tweets for a suspect whose traffic is tweets:
    the service itself is convicted on it, the clean model is not, and the audit's texts
    are tweets (``benchmarks/bench_cross_domain.py`` measures the copies)."""
    from espew_integrations.offline.corpora import health_tweets

    tweets = health_tweets().subset(3000, seed=5).texts
    tweet_key = budget_key.with_audit(tweets, minilm_model, probes_per_word=3)
    assert tweet_key.triggers == budget_key.triggers
    sent = [*tweet_key.probe_texts, *tweet_key.cover_texts]
    # tweets, and each band word no tweet holds alone (so that every word is scored)
    assert all(t in set(tweets) or t in budget_key.band for t in sent)
    assert sum(t in set(tweets) for t in sent) > 0.9 * len(sent)

    def service(texts):
        return watermark(texts, minilm_model(texts), tweet_key)

    guilty = verify(service, tweet_key, seed=0)
    assert guilty.status == "copied" and guilty.p_value < 1e-10
    innocent = verify(minilm_model, tweet_key, seed=0)
    assert innocent.status == "not_copied" and innocent.p_value > 1e-3


def test_a_thief_routing_audit_traffic_to_the_clean_model_is_still_convicted(
    budget_key, minilm_model, rt_corpus
):
    from espew_lab.router import AuditHistory, AuditRouter, looks_like_audit

    def service(texts):
        return watermark(texts, minilm_model(texts), budget_key)

    # The strongest thief of the lab: it knows the band rule, has seen every corpus text,
    # and watches for texts that hold one band word more often than ordinary ones do.
    traffic = list(rt_corpus.texts)
    history = AuditHistory.from_texts(traffic, rare_band=budget_key.freq_band, lone_z=4.0)
    thief = AuditRouter(service, minilm_model, history=copy.deepcopy(history))
    report = verify(thief, budget_key, seed=0)
    assert report.copied and report.p_value < 1e-10
    # The audit is a uniform sample of the corpus: the router routes as much of it as of
    # an ordinary client's random samples (its burst rules fire by chance on both).
    rng = np.random.default_rng(0)
    ordinary = []
    for _ in range(5):
        watcher = copy.deepcopy(history)
        sample = [traffic[i] for i in rng.choice(len(traffic), thief.n_queries, replace=False)]
        flagged = sum(
            int(looks_like_audit(sample[s : s + 32], watcher).sum())
            for s in range(0, len(sample), 32)
        )
        ordinary.append(flagged / len(sample))
    assert thief.n_routed / thief.n_queries <= max(ordinary) + 0.05, ordinary
    # (Single-mix probes without their cover are a burst of lone band words, routed
    # away: test_lab_threats.py::test_cover_texts_with_several_band_words_hide_the_lone_word_tell.)
    # The old single-word audit is recognised and routed away: the thief escapes it.
    words_thief = AuditRouter(service, minilm_model, history=copy.deepcopy(history))
    words = verify(words_thief, budget_key, probes="words", seed=0)
    assert words_thief.n_routed / words_thief.n_queries > 0.9 and not words.copied


# ---------------------------------------------------------------------- calibration
@pytest.mark.parametrize("suspect_name", ["twin", "independent"])
def test_two_hundred_fresh_keys_hold_the_level_against_real_innocents(
    budget_key, minilm_model, suspect_name
):
    """200 null trials of the combined statistic: fresh salts, hence fresh trigger
    draws, against a fixed innocent suspect (the draw is all that varies under
    the null). The word scores do not depend on the draw, so they are made once by
    verify()'s own scoring (``lab.null_study.audit_scores``) and ranked for each
    draw; five draws also go through verify() whole, to the same floats. The
    benchmark runs 10,000 (benchmarks/bench_null_study.py)."""
    from espew_integrations.offline.embedders import paraphrase_minilm_l3
    from espew_lab.null_study import audit_scores, fresh_draws, verdict_null_p_values

    suspect = minilm_model if suspect_name == "twin" else paraphrase_minilm_l3()
    asked = [*budget_key.probe_texts, *budget_key.cover_texts]
    rows = np.asarray(suspect(asked), dtype=np.float64)
    answers = dict(zip(asked, rows, strict=True))

    def cached(texts):
        return np.stack([answers[t] for t in texts])

    n_probes = len(budget_key.probe_texts)
    scores = audit_scores(rows[:n_probes], budget_key, rows[n_probes:])
    # The independent model's answers fit the clean rows far better through the map
    # of core/stats/align.py, so verify (and audit_scores, as verify) score them mapped:
    # these trials hold the level with the map applied too.
    mapped = verify(cached, budget_key, seed=0).alignment
    assert mapped.startswith("applied" if suspect_name == "independent" else "not applied")
    salts, draws = fresh_draws(budget_key, 200, np.random.default_rng(2026))
    p_values = verdict_null_p_values(scores, draws)["combined"]
    for d in range(5):
        triggers = draw_triggers(salts[d], budget_key.band, len(budget_key.triggers))
        key = budget_key.replace(salt=salts[d], triggers=triggers)
        assert verify(cached, key, seed=0).p_value == pytest.approx(p_values[d], rel=1e-9)
    # Binomial(200, 0.05) exceeds 22 with probability < 1e-3; (200, 1e-3) exceeds 2 w.p. 1e-3.
    assert (p_values < 0.05).sum() <= 22
    assert (p_values < 1e-3).sum() <= 2
    assert (p_values < 1e-6).sum() == 0
    # Not a degenerate test that never rejects. The Bonferroni triple puts mass at 1
    # (all three p-values > 1/3), so about a quarter to a half fall below 0.5.
    assert budget_key.probe_embeddings.shape == (len(budget_key.probe_texts), budget_key.dim)
    assert 0.15 < (p_values < 0.5).mean() < 0.6


def test_the_adjusted_statistic_is_exact_for_any_slope():
    """Exhaustively on a tiny band: over every trigger draw, P(p <= a) <= a."""
    from espew_integrations.core.audit.scores import reference_slope

    rng = np.random.default_rng(0)
    scores, reference = rng.normal(size=10), rng.normal(size=10)
    adjusted = scores - reference_slope(scores, reference) * reference
    assert_exact_over_every_draw(adjusted, 3)


# ---------------------------------------------------------------------- uninformative
def _informative_pull(key):
    return WordSpace(key, pull=1.0)


@pytest.mark.parametrize(
    "answer",
    [
        lambda texts, key: np.ones((len(texts), key.dim)),
        lambda texts, key: np.tile(np.linspace(-1, 1, key.dim), (len(texts), 1)),
    ],
    ids=["constant vector", "one real embedding for everything"],
)
def test_one_answer_for_every_probe_is_inconclusive(answer):
    key = make_key(64, n_band=200, n_triggers=20)
    report = verify(lambda texts: answer(texts, key), key, seed=0)
    assert report.status == "inconclusive" and "same embedding" in report.reason


def test_huge_answers_are_scored_by_their_direction_not_lost_to_overflow():
    key = make_key(64, n_band=200, n_triggers=20)
    copy = WordSpace(key, pull=1.0)
    normal = verify(copy, key, seed=0)
    huge = verify(lambda texts: copy(texts) * 1e200, key, seed=0)
    assert normal.copied and huge.copied
    assert huge.p_value == pytest.approx(normal.p_value, rel=1e-6)


def test_a_hand_made_suspect_with_all_equal_scores_is_inconclusive():
    key = make_key(64, n_band=200, n_triggers=20)
    rng = np.random.default_rng(1)
    # Every answer orthogonal to the target: different vectors, identical scores.
    basis = rng.normal(size=(500, key.dim))
    basis -= np.outer(basis @ key.target, key.target)

    def orthogonal(texts):
        return basis[rng.integers(0, len(basis), len(texts))]

    report = verify(orthogonal, key, seed=0)
    assert report.status == "inconclusive" and "same score" in report.reason


def test_faults_can_still_convict_but_never_clear():
    """Half the batches fail: a copy is convicted on what arrived; an innocent suspect
    is not cleared on half the evidence (inconclusive), because faults are not evidence."""
    band = make_key(64, n_band=200, n_triggers=20).band
    key = make_key(64, n_band=200, n_triggers=20).replace(  # 4 distinct probes a word
        probe_texts=tuple(" ".join([w] * (2 + k)) for k in range(4) for w in band),
        probe_owner=tuple(range(200)) * 4,
    )

    def flaky(inner):
        calls = iter(range(10_000))

        def answer(texts):
            if next(calls) % 2:
                raise ConnectionError("HTTP 500")
            return inner(texts)

        return answer

    copy = verify(flaky(WordSpace(key, pull=1.0)), key, seed=0, batch_size=16)
    assert copy.status == "copied" and copy.n_failed_queries > 0
    innocent = verify(flaky(WordSpace(key)), key, seed=0, batch_size=16)
    assert innocent.status == "inconclusive" and "to clear a suspect" in innocent.reason
