"""The wider threat model: audit router, paraphrasing thief, long texts, and their lab rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.mark.probes import scan_band
from espew_integrations.core.mark.words import band_words, document_frequencies, tokenize
from espew_lab import load_config, run_lab
from espew_lab.context import build_context
from espew_lab.paraphrase import (
    NeighbourParaphraser,
    ParaphraseThief,
    nearest_neighbours,
)
from espew_lab.report import threat_table
from espew_lab.router import (
    AuditHistory,
    AuditRouter,
    audit_reasons,
    detector_rates,
)
from espew_lab.threats import (
    aggregate,
    join_chunks,
    long_text_study,
    parse_threat,
    recall_at_k,
    run_threat,
)

TARGET = "Espew robustness lab: provider signature sample, 2026."


# ---------------------------------------------------------------------- router
@pytest.fixture(scope="module")
def traffic(rt_corpus):
    """The thief's ordinary-traffic sample, fresh ordinary texts, and the rest of the corpus."""
    texts = list(rt_corpus.texts)
    order = np.random.default_rng(0).permutation(len(texts))
    reference = [texts[i] for i in order[:4000]]
    ordinary = [texts[i] for i in order[4000:6000]]
    pool = [texts[i] for i in order[6000:]]
    return reference, ordinary, pool


def test_router_rarely_routes_customers_and_catches_todays_single_word_audits(traffic, rt_corpus):
    reference, ordinary, _ = traffic
    counts, n = document_frequencies(rt_corpus.texts)
    band = band_words(counts, n, (0.005, 0.01))  # the words today's audit probes, alone
    rates = detector_rates(AuditHistory.from_texts(reference), ordinary, band)
    assert rates["false_positive_rate"] < 0.05, rates
    assert rates["catch_rate"] == 1.0
    # Each rule alone stays rare on ordinary reviews.
    assert all(count < 0.025 * len(ordinary) for count in rates["ordinary_rules"].values())


def test_natural_sentence_probes_are_caught_by_the_rare_word_burst(traffic, rt_corpus):
    """Sentences of the corpus that each hold a band word look ordinary one by one, but
    an audit made only of them is a burst of rare-ish words: the router catches most
    (77% here; 96% with a 6,000-text reference)."""
    reference, ordinary, pool = traffic
    counts, n = document_frequencies(rt_corpus.texts)
    band = set(band_words(counts, n, (0.005, 0.01)))
    per_word: dict[str, list[str]] = {w: [] for w in band}
    for text in pool:
        for word in band.intersection(tokenize(text)):
            if len(per_word[word]) < 3:
                per_word[word].append(text)
    probes = list(dict.fromkeys(t for texts in per_word.values() for t in texts))
    history = AuditHistory.from_texts(reference, rare_band=(0.005, 0.01))
    caught = detector_rates(history, ordinary, probes)["catch_rate"]
    assert caught > 0.6
    no_burst = AuditHistory.from_texts(reference, rare_band=(0.005, 0.01))
    no_burst.rare_words = frozenset()
    assert detector_rates(no_burst, ordinary, probes)["catch_rate"] < 0.1


def test_each_rule_fires_on_its_shape_and_state_carries_across_calls(traffic):
    history = AuditHistory.from_texts(traffic[0])
    first = "The acting is superb and the story moves along at a brisk pace."
    assert audit_reasons([first], history) == [()]
    assert audit_reasons([first], history) == [("repeat",)]
    templated = "The acting is superb and the plot moves along at a brisk pace."
    assert audit_reasons([templated], history) == [("template",)]
    assert "short" in audit_reasons(["dazzling"], history)[0]
    assert audit_reasons(["a film that never finds its footing and never cares"], history) == [
        ("no_punctuation",)
    ]
    long_text = " ".join(["A long, winding sentence about the film."] * 10)
    assert "long" in audit_reasons([long_text], history)[0]


def _band_stream(n, rng, lone_share):
    """Texts over filler words; 40% carry a rare word, ``lone_share`` of those exactly one."""
    rare = [f"rareword{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(40)]
    texts = []
    for i in range(n):
        words = [f"filler{j}" for j in rng.choice(30, size=8, replace=False)]
        if rng.random() < 0.4:
            k = 1 if rng.random() < lone_share else 2
            words += list(rng.choice(rare, size=k, replace=False))
        texts.append(f"Text {i}: " + " ".join(words) + ".")
    return texts


def test_the_lone_word_rule_spots_texts_that_each_carry_exactly_one_rare_word():
    """The lab's strongest router knows that probes carry a single band word each: among
    ordinary texts with one, 40% carry two here. It fires on a stream where every
    carrying text holds exactly one, at the ordinary share of carriers, and stays quiet
    on ordinary traffic; without ``lone_z`` the rule is off."""
    rng = np.random.default_rng(0)
    reference = _band_stream(4000, rng, lone_share=0.6)
    kwargs = dict(rare_band=(0.005, 0.05), window=100)
    armed = AuditHistory.from_texts(reference, lone_z=4.0, **kwargs)
    assert len(armed.rare_words) == 40 and 0.55 < armed.base_lone_rate < 0.65
    ordinary = detector_rates(armed, _band_stream(2000, rng, 0.6), [])
    assert ordinary["false_positive_rate"] < 0.01 and "lone_burst" not in ordinary["ordinary_rules"]
    audit = _band_stream(2000, rng, lone_share=1.0)
    caught = detector_rates(armed, [], audit)["catch_rate"]
    assert caught > 0.3  # every carrying text of the audit (40% of it) once the rule fires
    plain = AuditHistory.from_texts(reference, **kwargs)
    assert plain.lone_threshold == float("inf")
    assert detector_rates(plain, [], audit)["catch_rate"] == 0.0


def test_router_answers_in_the_original_order_and_checks_its_parts():
    def stolen(texts):
        return np.array([[1.0, float(len(t))] for t in texts])

    def honest(texts):
        return np.array([[-1.0, float(len(t))] for t in texts])

    router = AuditRouter(stolen, honest)
    texts = [
        "word",
        "A full sentence, with punctuation.",
        "two words",
        "Another sentence here, fine.",
    ]
    out = router(texts)
    assert out[:, 0].tolist() == [-1.0, 1.0, -1.0, 1.0]
    assert out[:, 1].tolist() == [float(len(t)) for t in texts]
    assert router.n_queries == 4 and router.n_routed == 2 and router.routed_fraction == 0.5
    wide = AuditRouter(stolen, lambda t: np.zeros((len(t), 3)))
    with pytest.raises(ValueError, match="different dimensions"):
        wide(texts)
    broken = AuditRouter(stolen, honest, lambda texts, history: np.zeros(1, bool))
    with pytest.raises(ValueError, match="mask of shape"):
        broken(texts)
    with pytest.raises(TypeError, match="list of texts"):
        router("one string")
    with pytest.raises(ValueError, match="at least window"):
        AuditHistory.from_texts(texts)


@pytest.fixture(scope="module")
def small_key(rt_subset, minilm_model):
    return WatermarkKey.generate(
        rt_subset.texts,
        minilm_model,
        target_text=TARGET,
        marking="words",
        n_triggers=8,
        freq_band=(0.005, 0.01),
        alpha=0.2,
        seed=3,
        max_band_words=60,
    )


def test_a_perfect_copy_behind_the_router_escapes_todays_audit(small_key, minilm_model, traffic):
    def service(texts):
        return watermark(texts, minilm_model(texts), small_key)

    assert verify(service, small_key, level=1e-3, seed=0, probes="words").copied
    router = AuditRouter(service, minilm_model, history=AuditHistory.from_texts(traffic[0]))
    report = verify(router, small_key, level=1e-3, seed=0, probes="words")
    assert not report.copied
    assert router.n_routed == router.n_queries == len(small_key.band)


def test_cover_texts_hide_the_audit_from_the_rare_word_burst(small_key, minilm_model, traffic):
    """Probes alone are a burst of band words that a thief who knows the band routes away;
    the key's cover texts bring the audit's share of them down to ordinary traffic's, and
    the copy behind the router is convicted."""
    assert small_key.cover_texts and small_key.audit_queries == len(small_key.probe_texts) + len(
        small_key.cover_texts
    )

    def service(texts):
        return watermark(texts, minilm_model(texts), small_key)

    routed = {}
    for name, key in (("cover", small_key), ("probes alone", small_key.replace(cover_texts=()))):
        history = AuditHistory.from_texts(traffic[0], rare_band=small_key.freq_band)
        router = AuditRouter(service, minilm_model, history=history)
        report = verify(router, key, level=1e-3, seed=0)
        assert report.status != "inconclusive", report.reason
        routed[name] = (router.routed_fraction, report)
    assert routed["probes alone"][0] > 0.3  # measured 0.44 on this small key
    fraction, report = routed["cover"]
    assert fraction < 0.2 and report.copied
    assert report.n_queries == small_key.audit_queries


def test_cover_texts_with_several_band_words_hide_the_lone_word_tell(
    rt_subset, minilm_model, traffic
):
    """Single-mix probes each hold one band word. Sent only with cover texts that hold
    none (the earlier design), the audit is a burst of lone band words to a router that
    knows that tell, and the service itself walks free. The default audit, a uniform
    sample of the corpus, also sends its texts with several band words, in the corpus's
    share, and the same router lets it through."""
    kwargs = dict(target_text=TARGET, marking="words", n_triggers=8, seed=3, probes_per_word=6)
    key = WatermarkKey.generate(
        rt_subset.texts, minilm_model, freq_band=(0.01, 0.015), probe_mix="single", **kwargs
    )  # the earlier default band and probes, where that design was measured
    band = set(key.band)
    held = [band & set(tokenize(t)) for t in key.cover_texts]
    assert 0.2 < np.mean([len(h) >= 2 for h in held]) < 0.6  # the texts with several
    plain = [i for i, h in enumerate(held) if not h and len(tokenize(key.cover_texts[i])) >= 4]
    rate = scan_band(rt_subset.texts, key.band).rate
    n_earlier = math.ceil(len(key.probe_texts) * (1 - rate) / rate)
    assert len(plain) >= n_earlier
    kept = plain[:n_earlier]
    earlier = key.replace(  # with its cover's clean rows, which that design fitted on too
        cover_texts=tuple(key.cover_texts[i] for i in kept),
        cover_embeddings=key.cover_embeddings[kept],
    )

    def service(texts):
        return watermark(texts, minilm_model(texts), key)

    found = {}
    for name, audited in (("earlier", earlier), ("default", key)):
        history = AuditHistory.from_texts(traffic[0], rare_band=key.freq_band, lone_z=4.0)
        router = AuditRouter(service, minilm_model, history=history)
        report = verify(router, audited, level=1e-3, seed=0)
        found[name] = (router.routed_fraction, report)
    fraction, report = found["earlier"]  # measured: 46% routed, p = 1.7e-3
    assert fraction > 0.3 and not report.copied
    fraction, report = found["default"]  # measured: 4.0% routed, p = 1.3e-10
    assert fraction < 0.1 and report.copied


# ---------------------------------------------------------------------- paraphrase
def _toy_embedder(words):
    """Deterministic vectors where 'great'~'superb' and 'film'~'movie' are neighbours."""
    base = {"great": [1, 0, 0], "superb": [0.9, 0.1, 0], "film": [0, 1, 0], "movie": [0, 0.9, 0.1]}
    rng = np.random.default_rng(0)
    return np.array([base.get(w, rng.normal(size=3) + np.array([0, 0, 3])) for w in words], float)


TOY_TEXTS = ["A great film, truly.", "A movie that is superb!", "Great acting in a great movie."]


def test_nearest_neighbours_excludes_the_word_itself():
    vectors = np.random.default_rng(1).normal(size=(50, 8))
    found = nearest_neighbours(vectors, block=7)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    assert found.tolist() == sims.argmax(axis=1).tolist()


def test_paraphrases_are_seeded_and_change_only_eligible_words():
    para = NeighbourParaphraser(_toy_embedder, TOY_TEXTS, max_df=0.7)
    assert para.neighbour["great"] == "superb" and para.neighbour["movie"] == "film"
    assert para.paraphrase(TOY_TEXTS, rate=0.0) == TOY_TEXTS
    full = para.paraphrase(TOY_TEXTS, rate=1.0)
    assert full[0].startswith("A superb movie, ")  # "a" is too common (max_df) to change
    assert full[2].startswith("Superb ")  # capitalisation kept
    half = para.paraphrase(TOY_TEXTS * 20, rate=0.5, seed=4)
    assert half == para.paraphrase(TOY_TEXTS * 20, rate=0.5, seed=4)
    assert half != para.paraphrase(TOY_TEXTS * 20, rate=0.5, seed=4, variant=1)
    dropped = para.paraphrase(TOY_TEXTS, rate=1.0, mode="dropout")
    assert dropped[0] == "A,." and dropped[1] == "A!"
    with pytest.raises(ValueError, match="unknown paraphrase mode"):
        para.paraphrase(TOY_TEXTS, rate=0.1, mode="backtranslate")
    with pytest.raises(ValueError, match="rate must be in"):
        para.paraphrase(TOY_TEXTS, rate=1.5)


def test_paraphrase_thief_averages_k_answers_and_trains_on_the_originals():
    para = NeighbourParaphraser(_toy_embedder, TOY_TEXTS, max_df=0.7)
    seen: dict[str, object] = {}

    class Recorder:
        def fit(self, texts, embeddings):
            seen["texts"], seen["targets"] = list(texts), embeddings
            return self

        def __call__(self, texts):
            return np.ones((len(texts), 2))

    def service(texts):
        seen["asked"] = list(texts)
        return np.array([[1.0, float(i)] for i in range(len(texts))])

    thief = ParaphraseThief(service, para, Recorder(), rate=0.5, k=3, seed=1).fit(TOY_TEXTS)
    assert seen["texts"] == TOY_TEXTS and thief.n_queries == 9
    assert seen["asked"] == thief.queries(TOY_TEXTS)
    # text i's answers are rows i, i+3, i+6: mean (1, i + 3), then normalised
    expected = np.array([[1.0, i + 3.0] for i in range(3)])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(seen["targets"], expected)
    assert thief(["x"]).shape == (1, 2)
    with pytest.raises(RuntimeError, match="not stolen"):
        ParaphraseThief(service, para, Recorder(), rate=0.1)(["x"])


def test_paraphrasing_dilutes_the_mark_in_the_averaged_answers(small_key, rt_subset, minilm_model):
    """On the real model: the more words are substituted, the fewer paraphrases keep a
    trigger, and the closer the averaged answer of a trigger text comes to clean."""
    carriers = [t for t in rt_subset.texts if small_key.contains_trigger([t])[0]][:40]
    para = NeighbourParaphraser(minilm_model, rt_subset.texts[:150] + tuple(carriers))

    def service(texts):
        return watermark(texts, minilm_model(texts), small_key)

    clean = minilm_model(carriers)
    pulls = {}
    for rate in (0.0, 0.5):
        thief = ParaphraseThief(service, para, _NoStealer(), rate=rate, seed=0).fit(carriers)
        kept = small_key.contains_trigger(thief.queries(carriers)).mean()
        pulls[rate] = float(np.mean(thief.averaged @ small_key.target - clean @ small_key.target))
        assert kept == 1.0 if rate == 0.0 else kept < 0.8
    assert pulls[0.5] < 0.8 * pulls[0.0]


class _NoStealer:
    def fit(self, texts, embeddings):
        return self


# ---------------------------------------------------------------------- long texts
def test_chunks_join_every_text_once_and_recall_is_one_for_the_same_service():
    texts = [f"Review {i}." for i in range(23)]
    chunks = join_chunks(texts, 5, seed=2)
    assert len(chunks) == 4 and all(c.count("Review") == 5 for c in chunks)
    assert chunks == join_chunks(texts, 5, seed=2) != join_chunks(texts, 5, seed=3)
    assert join_chunks(texts, 1, seed=0) != texts and sorted(join_chunks(texts, 1)) == sorted(texts)
    x = np.random.default_rng(0).normal(size=(40, 6))
    assert recall_at_k(x[:5], x[5:], x[:5], x[5:]) == 1.0
    assert recall_at_k(x[:5], x[5:], x[:5], -x[5:]) < 0.5
    with pytest.raises(ValueError, match="chunk size"):
        join_chunks(texts, 0)


def test_long_chunks_are_marked_far_more_often_than_single_reviews(
    small_key, rt_subset, minilm_model
):
    reviews, queries = list(rt_subset.texts[:200]), list(rt_subset.texts[200:240])
    rows = long_text_study(reviews, queries, minilm_model, small_key, sizes=(1, 5))
    single, five = rows
    assert single["n_chunks"] == 200 and five["n_chunks"] == 40
    assert five["marked_rate"] > 2 * single["marked_rate"] > 0
    assert five["marked_rate"] == pytest.approx(five["marked_rate_if_independent"], abs=0.15)
    assert 0.0 <= five["recall_at_10"] <= single["recall_at_10"] <= 1.0


# ---------------------------------------------------------------------- lab wiring
def test_threat_specs_parse_or_name_the_problem():
    assert parse_threat("router:twin") == ("router", ("twin",))
    assert parse_threat("chunks:20") == ("chunks", (20,))
    assert parse_threat("spectral:200") == ("spectral", (200,))
    assert parse_threat("spectral:0") == ("spectral", (0,))
    bad_specs = ("router:oracle", "paraphrase:substitute:1.5", "chunks:0", "paraphrase:x:0.1")
    for bad in (*bad_specs, "spectral:-1", "spectral:x", "spectral"):
        with pytest.raises(ValueError, match="unknown threat"):
            parse_threat(bad)


def test_configs_without_threats_keep_their_digest():
    config = load_config("smoke")
    bare = {k: v for k, v in config.to_dict().items() if k != "threats"}
    assert config.digest() == load_config(bare).digest()
    with_threats = config.updated({"threats": {"cells": ["chunks:5"]}})
    assert with_threats.digest() != config.digest()
    assert load_config("threats").threats.seeds == (0, 1, 2)


def _tiny_threats_config():
    return load_config("smoke").updated(
        {
            "limit": 400,
            "watermarks": ["espew_smallest"],
            "attacks": ["none"],
            "plots": False,
            "ablation": {"alphas": [], "attacks": ["none"], "watermark": "espew_smallest"},
            "metrics": {"accuracy": False, "holdout": 80},
            "threats": {
                "cells": ["router:twin", "paraphrase:substitute:0.3", "chunks:5"],
                "seeds": [0, 1],
                "long_texts": {"n_reviews": 150, "queries": 40},
            },
        }
    )


@pytest.fixture(scope="module")
def threats_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("threats")
    return out, run_lab(_tiny_threats_config(), output=out, progress=False)


def test_threat_rows_run_per_seed_and_reach_the_table(threats_run):
    out, results = threats_run
    records = results["threats"]["records"]
    assert len(records) == 6 and len(list((out / "cells").glob("threat__*.json"))) == 6
    rows = {r["threat"]: r for r in results["threats"]["rows"]}
    assert set(rows) == {"router:twin", "paraphrase:substitute:0.3", "chunks:5"}
    router = rows["router:twin"]
    # The stored natural-text probes reach the stolen copy: the router is convicted.
    assert router["n_seeds"] == 2 and router["copied"] == 2
    assert router["catch_rate"]["mean"] < 0.2  # natural probes look like ordinary traffic
    assert router["false_positive_rate"]["mean"] < 0.1
    # Routing can only cost evidence (both may sit at the test's floor).
    assert router["log10_p_value_direct"]["mean"] <= router["log10_p_value"]["mean"]
    para = rows["paraphrase:substitute:0.3"]
    assert 0.0 < para["trigger_kept_rate"]["mean"] < 1.0 and para["copy_fidelity"]["mean"] > 0.3
    assert rows["chunks:5"]["marked_rate"]["mean"] > 0
    keys = {r["seed"]: r for r in records if r["threat"] == "chunks:5"}
    assert keys[0]["marked_rate"] != keys[1]["marked_rate"]  # each seed draws its own key
    table = (out / "table.md").read_text()
    assert "Wider threat model (2 seeds per row" in table
    assert "audit router (honest: twin)" in table and "chunks of 5 reviews" in table
    secret = load_config("smoke").key.target_text
    for path in (out / "cells").glob("threat__*.json"):
        assert secret not in path.read_text()
    assert secret not in (out / "results.json").read_text()


def test_threat_cells_resume_without_recomputing(threats_run, monkeypatch):
    out, results = threats_run
    from espew_lab import threats as lab_threats

    def refuse(*args, **kwargs):
        raise AssertionError("a finished threat cell was recomputed")

    monkeypatch.setattr(lab_threats, "run_threat", refuse)
    again = run_lab(_tiny_threats_config(), output=out, progress=False)
    assert json.dumps(again["threats"]["rows"]) == json.dumps(results["threats"]["rows"])


# ---------------------------------------------------------------------- the spectral thief
@pytest.fixture(scope="module")
def spectral_context():
    """The smoke corpus (900 answers for the thief) with a quality-budget key."""
    config = load_config("smoke").updated(
        {
            "key": {"alpha": 0.75, "min_cosine": 0.995},
            "threats": {"cells": ["spectral:300"], "seeds": [0]},
        }
    )
    return build_context(config, progress=False)


def test_a_lab_key_can_be_fitted_to_the_quality_budget(spectral_context):
    info = spectral_context.key.info
    assert info["strength_fitted_to_min_cosine"] == 0.995
    assert info["mean_cosine_marked"] == pytest.approx(0.995, abs=5e-4)
    assert 0.0 < spectral_context.key.strength < 0.5  # far below the paper's full write
    smoke = load_config("smoke")
    with pytest.raises(ValueError, match="min_cosine"):
        smoke.updated({"key": {"strength": 0.3, "min_cosine": 0.995}})
    assert "min_cosine" not in smoke.to_dict()["key"]  # older configs keep their digest


def test_the_spectral_thief_finds_nothing_to_drop_under_a_text_target(spectral_context):
    record = run_threat(spectral_context, "spectral:300", 0)
    # A target that looks like an embedding leaves no component that splits the
    # marked answers off: what is flagged (if anything) is a few outliers.
    assert record["flagged_rate"] < 0.05
    assert 0.05 < record["marked_rate"] < 0.5
    assert record["best_bimodality"] < 5 / 9 or record["flagged_rate"] > 0
    assert record["copied_direct"] and record["copied"]
    assert record["copy_fidelity"] > 0.3
    (row,) = aggregate([record])
    table = "\n".join(threat_table([row], 1e-3))
    assert "| spectral thief (ICA past the first 300 principal axes) |" in table
    assert "copy of the unflagged answers" in table


def test_the_spectral_cell_trains_on_what_the_search_left(spectral_context, monkeypatch):
    """A search that flags exactly the marked answers: the copy of the rest is clean."""
    from espew_lab import spectral
    from espew_lab.spectral import SpectralFinding

    ctx = spectral_context
    marked = ctx.key.contains_trigger([ctx.corpus.texts[i] for i in ctx.stealer_rows])

    def perfect_search(answers, **_):
        assert len(answers) == len(marked)
        return SpectralFinding(marked.copy(), (0,), (0.9,), 0.9)

    monkeypatch.setattr(spectral, "find_displaced_rows", perfect_search)
    record = run_threat(ctx, "spectral:300", 0)
    assert record["precision"] == 1.0 and record["recall"] == 1.0
    assert record["flagged_rate"] == pytest.approx(marked.mean())
    # The copy of every answer is convicted at this small key's floor (3.9e-8). The copy
    # of the unmarked ones carries no mark, only the hole that dropping every trigger
    # text leaves: it never learned the triggers' texts. Scoring only the probes, the
    # hole gave p ~ 2e-4; with every audit text scored (core.word_evidence) it alone
    # convicts, at 1.6e-7 here. Still weaker than the copy of everything: it trained on
    # what the search left, not on every answer.
    assert record["copied_direct"] and record["p_value_direct"] < 1e-6
    assert record["p_value"] > record["p_value_direct"]


def test_the_lab_thief_never_trains_on_an_audit_text(spectral_context):
    """split: disjoint (the default) leaves every audit text of the key out of the stealer's
    rows; a corpus the audit swallows is refused; split: overlap (the smoke config's)
    keeps every row but the held-out ones."""
    import dataclasses

    from espew_lab.stealers import thief_rows

    ctx = spectral_context
    texts = ctx.corpus.texts
    assert load_config({}).split == "disjoint"
    everything = np.setdiff1d(np.arange(len(texts)), ctx.holdout_rows)
    assert ctx.config.split == "overlap"
    assert np.array_equal(thief_rows(ctx), everything)
    disjoint = ctx.config.updated({"split": "disjoint"})

    class SmallAudit:  # an audit of 300 of the corpus's texts
        probe_texts = tuple(texts[:200])
        cover_texts = tuple(texts[200:300])

    rows = thief_rows(dataclasses.replace(ctx, config=disjoint, key=SmallAudit()))
    audit = set(texts[:300])
    assert not {texts[i] for i in rows} & audit
    assert set(rows) == {i for i in everything if texts[i] not in audit}
    # The smoke key's audit samples more rows than its 1,000 texts: nothing is left.
    with pytest.raises(ValueError, match="split: overlap"):
        thief_rows(dataclasses.replace(ctx, config=disjoint))
    with pytest.raises(ValueError, match="'split' must be"):
        ctx.config.updated({"split": "tweets"})
