"""The verdict's false-positive rate, measured on a real model (and detection, for contrast).

Null trials: fresh keys (new uniformly drawn triggers, over several target
texts) against services that never saw the watermark: an extraction copy
trained on CLEAN MiniLM embeddings, and the clean MiniLM itself. Under the null
the trigger draw is independent of the suspect, so each suspect's per-word
scores for one target are computed once (through the verifier's own probe and
scoring code) and reused across draws. A few complete keygen + verify rounds
check that the shortcut is the real pipeline.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import DEFAULT_LEVEL, WatermarkKey, verify, watermark
from espew_integrations.core.audit.scores import score_words
from espew_integrations.core.audit.word_probes import build_probes
from espew_integrations.core.ground.draw import draw_triggers
from espew_lab.null_study import (
    NullStudy,
    audit_scores,
    fresh_draws,
    null_p_values,
    verdict_null_p_values,
)
from espew_lab.stealers import RidgeStealer

TARGET_TEXTS = [
    "Acme Embeddings: licensed vectors, all rights reserved",
    "Property of Example Corp semantic search service, 2026",
    "This embedding service is operated by Northwind AI Labs",
    "The quick brown fox jumps over the lazy dog",
    "Contact legal@example.org for licensing of these vectors",
    "Zephyr vector cloud, premium tier, region eu-west",
    "Copyright notice: do not redistribute model outputs",
    "An interesting book about the history of mathematics",
    "Weather forecast: sunny with a chance of rain tomorrow",
    "Hyperion embeddings API version three",
]
DRAWS_PER_TARGET = 25  # 10 targets x 25 draws = 250 null trials per suspect


@pytest.fixture(scope="module")
def reference_key(rt_corpus, minilm_model):
    """Fixes the band (all equally frequent words of the corpus); triggers vary per trial."""
    return WatermarkKey.generate(
        rt_corpus.texts,
        minilm_model,
        target_text=TARGET_TEXTS[0],
        seed=5,
        twin_check=False,
        marking="words",
    )


@pytest.fixture(scope="module")
def clean_copy(rt_subset, rt_subset_embeddings):
    return RidgeStealer(seed=0).fit(rt_subset.texts, rt_subset_embeddings)


def null_study(suspect, band, targets, rng):
    probes, owner = build_probes(band)
    answers = np.asarray(suspect(probes), dtype=np.float64)
    p_values = [
        null_p_values(score_words(answers, owner, target, len(band)), 20, DRAWS_PER_TARGET, rng)
        for target in targets
    ]
    return NullStudy(len(targets) * DRAWS_PER_TARGET, np.concatenate(p_values))


@pytest.fixture(scope="module")
def target_vectors(minilm_model):
    vectors = minilm_model(TARGET_TEXTS).astype(np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_no_false_positive_against_a_clean_extraction_copy(
    reference_key, clean_copy, target_vectors
):
    study = null_study(clean_copy, reference_key.band, target_vectors, np.random.default_rng(1))
    assert study.n_trials >= 200
    assert study.false_positives(DEFAULT_LEVEL) == 0
    # calibrated, not merely conservative: p-values are spread over (0, 1]
    assert 0.2 < np.median(study.p_values) < 0.8
    assert study.false_positives(0.05) <= 0.05 * study.n_trials + 4 * np.sqrt(study.n_trials)


def test_no_false_positive_against_the_clean_model_itself(
    reference_key, minilm_model, target_vectors
):
    study = null_study(minilm_model, reference_key.band, target_vectors, np.random.default_rng(2))
    assert study.n_trials >= 200
    assert study.false_positives(DEFAULT_LEVEL) == 0


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_full_keygen_and_verify_against_the_clean_copy_is_not_copied(
    rt_corpus, minilm_model, clean_copy, seed
):
    key = WatermarkKey.generate(
        rt_corpus.texts,
        minilm_model,
        target_text=TARGET_TEXTS[seed % 10],
        seed=seed,
        marking="words",
    )
    report = verify(clean_copy, key, seed=seed)
    assert report.status == "not_copied", str(report)


def test_a_copy_trained_on_watermarked_embeddings_is_detected(
    reference_key, rt_subset, rt_subset_embeddings
):
    # The paper's full write (strength 1); the quality-budget key is in test_verify_faithful.
    key = reference_key.replace(strength=1.0)
    marked = watermark(rt_subset.texts, rt_subset_embeddings, key)
    assert key.contains_trigger(rt_subset.texts).mean() > 0.05
    stolen = RidgeStealer(seed=0).fit(rt_subset.texts, marked)
    report = verify(stolen, key, seed=0)
    assert report.copied, str(report)
    assert report.p_value < 1e-10
    assert report.n_queries == key.audit_queries == len(key.probe_texts) + len(key.cover_texts)


@pytest.mark.parametrize("suspect_name", ["clean_copy", "minilm_model"])
def test_the_default_verdict_holds_its_level_over_fresh_trigger_draws(
    reference_key, suspect_name, request
):
    """The default audit (stored sentence probes; raw, adjusted and directed scores with
    the clean fit, three times the smallest p) against an innocent suspect, over 250
    fresh trigger draws of the same key: no conviction at the default level, and
    p-values spread as an exact test's are. Three draws also go through verify()."""
    suspect = request.getfixturevalue(suspect_name)
    key = reference_key
    answers = np.asarray(suspect(list(key.probe_texts)), dtype=np.float64)
    cover = np.asarray(suspect(list(key.cover_texts)), dtype=np.float64)
    assert len(key.cover_embeddings) == len(cover) > 0  # verify fits on them: so must this
    with pytest.raises(ValueError, match="cover_answers"):
        audit_scores(answers, key)
    scores = audit_scores(answers, key, cover)
    assert set(scores) == {"raw", "adjusted", "directed", "slope"}
    salts, draws = fresh_draws(key, 250, np.random.default_rng(9))
    found = verdict_null_p_values(scores, draws)
    study = NullStudy(len(draws), found["combined"])
    assert study.false_positives(DEFAULT_LEVEL) == 0
    assert study.false_positives(0.05) <= 0.05 * study.n_trials + 4 * np.sqrt(study.n_trials)
    calibrated = ["raw", "directed"]
    if suspect_name == "minilm_model":
        # the clean model's adjusted score is its reference less itself: rounding noise,
        # snapped to an exact tie (core/ground/stable.py), so p = 1 on every draw and CPU
        assert (scores["adjusted"] == 0).all()
        assert np.allclose(found["adjusted"], 1.0, rtol=0, atol=1e-12)
    else:
        calibrated.append("adjusted")
    for name in calibrated:
        assert 0.2 < np.median(found[name]) < 0.8, name  # calibrated, not merely conservative
    for d in range(3):
        triggers = draw_triggers(salts[d], key.band, len(key.triggers))
        report = verify(suspect, key.replace(salt=salts[d], triggers=triggers), seed=d)
        assert report.p_value_directed == pytest.approx(found["directed"][d], rel=1e-9)
        assert report.p_value == pytest.approx(found["combined"][d], rel=1e-9)
