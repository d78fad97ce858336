"""trace() (issue 12): one audit names the account whose answers trained a copy.

The per-tenant statistic against the core's exact rank test, the
second-round removal of other named layers, the adjustment for many tenants
(200 null trials with fresh rings), the report's public/private split, and,
on the real MiniLM and Rotten Tomatoes, a faithful copy of one account, three
colluding accounts and the innocent twin.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from espew_integrations import KeyRing, TraceReport, trace, watermark
from espew_integrations.core.audit.tenant_layers import layer_p_values, tenant_p_values
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_lab.tenant_null_study import tenant_null_study
from tests.support import make_key
from tests.unit.test_keyring import make_ring
from tests.unit.test_verify import WordSpace

TARGET_TEXT = "Acme Embeddings, licensed vectors"
# Where the directed score is computed: the one whitening solve an audit makes.
scores_module = importlib.import_module("espew_integrations.core.audit.scores")


# ---------------------------------------------------------------------- the statistic
@pytest.mark.parametrize("tied", [False, True])
def test_each_layer_gets_exactly_the_core_rank_test(tied):
    rng = np.random.default_rng(4)
    scores = rng.normal(size=90)
    if tied:
        scores = np.round(scores, 1)  # a suspect that rounds its answers
    keep = np.ones(90, bool)
    keep[[2, 30, 31]] = False  # unscored words
    layers = np.sort(np.stack([rng.choice(90, 9, replace=False) for _ in range(40)]), axis=1)
    layers[0] = np.sort(np.argsort(np.where(keep, scores, -9))[-9:])  # the top words
    got = layer_p_values(scores, keep, layers)
    for row, p in zip(layers, got, strict=True):
        is_trigger = np.zeros(90, bool)
        is_trigger[row] = True
        assert p == pytest.approx(rank_sum_p_value(scores[keep], is_trigger[keep]), rel=1e-9)
    assert got[0] < 1e-9 < got[1:].min()


def test_p_values_are_adjusted_for_every_tenant_and_both_statistics():
    rng = np.random.default_rng(5)
    reference = rng.normal(size=60)
    raw = 0.5 * reference + rng.normal(size=60)
    layers = np.sort(np.stack([rng.choice(60, 6, replace=False) for _ in range(7)]), axis=1)
    adjusted = tenant_p_values(raw, reference, layers, level=1e-12)
    slope = np.polyfit(reference, raw, 1)[0]
    for row, p in zip(layers, adjusted, strict=True):
        is_trigger = np.zeros(60, bool)
        is_trigger[row] = True
        best = min(
            rank_sum_p_value(raw, is_trigger),
            rank_sum_p_value(raw - slope * reference, is_trigger),
        )
        assert p == pytest.approx(min(1.0, 2 * 7 * best), rel=1e-9)


def test_an_innocent_overlapping_a_named_tenant_is_retested_without_its_words():
    """B shares 4 words with the guilty A: its reported p-value ignores them."""
    n = 120
    rng = np.random.default_rng(6)
    raw = rng.normal(size=n)
    a = np.arange(10)
    b = np.array([0, 1, 2, 3, 50, 60, 70, 80, 90, 100])
    raw[a] += 6.0  # a copy of A: A's words on top
    layers = np.stack([a, b, np.arange(20, 30)])
    adjusted = tenant_p_values(raw, None, layers, level=1e-6)
    assert adjusted[0] < 1e-10  # A: its own test, nothing removed
    first_round = layer_p_values(raw, np.ones(n, bool), layers[1:2])[0]
    keep = np.ones(n, bool)
    keep[a] = False
    is_b = np.zeros(n, bool)
    is_b[b[4:]] = True
    second_round = rank_sum_p_value(raw[keep], is_b[keep])
    assert adjusted[1] == pytest.approx(min(1.0, 3 * second_round))
    assert first_round < second_round  # A's evidence no longer counts for B


def test_the_null_study_holds_the_family_wise_rate_over_200_tenants():
    """200 trials (fresh rings, 200 tenants each); the benchmark runs 10,000."""
    innocent = tenant_null_study(200, n_tenants=200, seed=11)
    # expected 0.2 at 1e-3 (<= 2 holds with probability 0.999); a missing adjustment
    # would name someone in most trials (test_without_the_adjustment_...)
    assert innocent.false_accusations[1e-6] == 0 and innocent.false_accusations[1e-3] <= 2
    guilty = tenant_null_study(50, suspect="copy_of_one", n_tenants=200, seed=12)
    assert guilty.false_accusations[1e-6] == 0 and guilty.false_accusations[1e-3] <= 1
    assert guilty.guilty_named[1e-6] == 50  # and the copied account is always named


def test_without_the_adjustment_innocents_would_be_named():
    """The study can fail: unadjusted per-tenant p-values at 1e-2 name someone often."""
    rng = np.random.default_rng(7)
    ring = make_ring(n_band=200, n_shared=20, n_tenant=20)
    layers = ring.layer_indices([f"t{i}" for i in range(200)])
    hits = 0
    for _ in range(20):
        raw = rng.normal(size=len(ring.universe))
        p = tenant_p_values(raw, None, layers, level=1e-2) / 200  # undo Bonferroni
        hits += bool((p < 1e-2).any())
    assert hits >= 15


# ---------------------------------------------------------------------- trace()
@pytest.fixture(scope="module")
def big_ring() -> KeyRing:
    return make_ring(n_band=200, n_shared=20, n_tenant=20)


TENANTS = [f"acct-{i:03d}" for i in range(50)]


def test_a_copy_of_one_account_is_traced_to_it(big_ring):
    copy = WordSpace(big_ring.key_for("acct-007"), pull=1.0)
    report = trace(copy, big_ring, TENANTS, seed=0)
    assert report.copied and report.p_value < 1e-10
    assert report.traced == ("acct-007",)
    assert report.tenant_p_values["acct-007"] < 1e-10
    assert len(copy.calls) == -(-len(big_ring.shared_key.band) // 64)  # one audit's batches


def test_the_query_count_does_not_grow_with_the_tenants(big_ring):
    copy = WordSpace(big_ring.key_for("acct-007"), pull=1.0)
    few = trace(copy, big_ring, TENANTS[:3], seed=0)
    many = trace(copy, big_ring, [f"x{i}" for i in range(5000)] + ["acct-007"], seed=0)
    assert few.shared.n_queries == many.shared.n_queries == len(big_ring.shared_key.band)
    assert many.traced == ("acct-007",)


def test_a_later_audit_round_counts_its_earlier_rounds_for_every_tenant():
    """A ring whose shared key is a round-3 audit: the shared verdict and every
    tenant's p-value are 3 times what the same answers give on round 1."""
    key = make_key(n_band=200, n_triggers=20, seed=0)
    master = np.random.default_rng([0, 1]).bytes(32)
    first = KeyRing(master=master, shared_key=key, n_tenant_triggers=20)
    third = KeyRing(
        master=master,
        shared_key=key.replace(info={**key.info, "audit_round": 3}),
        n_tenant_triggers=20,
    )
    copy = WordSpace(first.key_for("acct-007"), pull=0.3)
    before, after = trace(copy, first, TENANTS, seed=0), trace(copy, third, TENANTS, seed=0)
    assert after.shared.audit_round == 3
    assert after.shared.p_value == pytest.approx(min(1.0, 3 * before.shared.p_value))
    for account in TENANTS:
        p = before.tenant_p_values[account]
        assert after.tenant_p_values[account] == pytest.approx(min(1.0, 3 * p))
    assert 0 < before.tenant_p_values["acct-007"] < 0.3


def test_an_innocent_is_neither_copied_nor_traced(big_ring):
    report = trace(WordSpace(big_ring.shared_key), big_ring, TENANTS, seed=0)
    assert not report.copied and report.traced == ()
    assert min(report.tenant_p_values.values()) > 1e-6


def test_colluders_voting_erase_their_layers_but_not_the_shared_one(big_ring):
    """Three accounts, majority per text: only words in two layers survive the vote."""
    gang = ["acct-001", "acct-002", "acct-003"]
    keys = [big_ring.key_for(t) for t in gang]
    shared = big_ring.shared_key.triggers
    own = [k.triggers - shared for k in keys]
    survivors = {w for w in set().union(*own) if sum(w in o for o in own) >= 2}
    voted = big_ring.shared_key.replace(triggers=shared | survivors)
    report = trace(WordSpace(voted, pull=1.0), big_ring, TENANTS, seed=0)
    assert report.copied and report.p_value < 1e-10
    assert set(report.traced) <= set(gang)


def test_trace_refuses_bad_tenant_lists(big_ring):
    copy = WordSpace(big_ring.shared_key)
    for bad, message in [
        ("acct-001", "not one string"),
        ([], "no tenant ids"),
        (["a", "b", "a"], "listed twice"),
        (["ok", "bad\nid"], "printable"),
    ]:
        with pytest.raises(ValueError, match=message):
            trace(copy, big_ring, bad)
    assert copy.calls == []  # refused before any query


def test_the_shareable_report_names_only_traced_accounts(big_ring):
    copy = WordSpace(big_ring.key_for("acct-007"), pull=1.0)
    report = trace(copy, big_ring, TENANTS, seed=0)
    public = report.to_json() + str(report)
    assert "acct-007" in public
    assert not any(t in public for t in TENANTS if t != "acct-007")
    assert not any(w in public for w in big_ring.shared_key.band)
    assert "trigger_scores" not in json.loads(report.to_json())["shared"]
    private = report.to_private_dict()
    assert set(private["tenant_p_values"]) == set(TENANTS)
    assert private["shared"]["trigger_scores"]
    assert isinstance(report, TraceReport) and report.status == "copied"


def test_no_account_is_named_when_the_audit_reached_no_verdict(big_ring):
    def broken(texts):
        raise RuntimeError("down")

    report = trace(broken, big_ring, TENANTS)
    assert report.status == "inconclusive" and report.traced == ()


# ---------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def real_ring(minilm_model, rt_corpus):
    return KeyRing.generate(
        rt_corpus.texts,
        minilm_model,
        target_text=TARGET_TEXT,
        seed=3,
        window=minilm_model.max_tokens,
        marking="words",  # the paper's ring of trigger words (the default ring is a map ring)
    )


REAL_TENANTS = [f"customer-{i:02d}" for i in range(20)]


def test_real_tenant_keys_meet_the_quality_budget(real_ring, rt_subset, rt_subset_embeddings):
    info = real_ring.shared_key.info
    assert info["mean_cosine_marked"] >= 0.995 and "sample tenants" in info["strength_fitted_on"]
    # the ring keeps the audit size its traced figures were measured with
    assert info["audit_budget"] == 4300 and real_ring.shared_key.audit_queries >= 4300
    key = real_ring.key_for("customer-05")
    texts = list(rt_subset.texts)
    marked = np.flatnonzero(key.contains_trigger(texts))
    clean = np.asarray(rt_subset_embeddings, dtype=np.float64)[marked]
    cos = row_cosines(clean, watermark([texts[i] for i in marked], clean, key))
    assert cos.mean() >= 0.9945  # a 3,000-text sample of the corpus the fit aims at 0.995 over
    assert 0.15 < marked.size / len(texts) < 0.35  # both layers mark: about 0.24 (measured)


def test_real_faithful_copy_colluders_and_twin(real_ring, minilm_model, monkeypatch):
    def service_of(tenant):
        key = real_ring.key_for(tenant)
        return lambda batch: watermark(list(batch), minilm_model(list(batch)), key)

    faithful = trace(service_of("customer-07"), real_ring, REAL_TENANTS, seed=0)
    assert faithful.copied and faithful.p_value < 1e-10
    assert faithful.traced == ("customer-07",)

    gang = ["customer-01", "customer-02", "customer-03"]
    services = [service_of(t) for t in gang]

    def majority(batch):
        answers = np.stack([s(batch) for s in services])
        agree = np.stack([(answers == a).all(axis=2).sum(axis=0) for a in answers])
        return answers[np.argmax(agree, axis=0), np.arange(len(batch))]

    voted = trace(majority, real_ring, REAL_TENANTS, seed=0)
    assert voted.copied and voted.p_value < 1e-10
    assert set(voted.traced) <= set(gang)

    # The shared verdict and the tenant layers share one whitening solve.
    solves = []
    counted = scores_module.directed_scores
    monkeypatch.setattr(
        scores_module,
        "directed_scores",
        lambda *a, **k: solves.append(1) or counted(*a, **k),
    )
    twin = trace(minilm_model, real_ring, REAL_TENANTS, seed=0)
    assert not twin.copied and twin.traced == ()
    assert len(solves) == 1 and np.isfinite(twin.shared.p_value_directed)


def test_the_public_trace_leaves_out_what_moves_with_the_scored_words(big_ring):
    """Issue 36: trace.json holds no count of scored words and no per-account p-value;
    its p-values are floored as report.json's; the private form keeps them exactly."""
    from espew_integrations.core.audit.evidence_files import PUBLIC_P_FLOOR

    copy = WordSpace(big_ring.key_for("acct-007"), pull=3.0)
    report = trace(copy, big_ring, TENANTS, seed=0)
    public = json.loads(report.to_json())
    assert "n_universe_scored" not in public and "traced_p_values" not in public
    assert public["traced"] == ["acct-007"] and public["decided_by"] == ""
    assert public["p_value"] == PUBLIC_P_FLOOR and public["p_value_below_floor"] is True
    assert report.p_value < PUBLIC_P_FLOOR and "n_triggers_scored" not in public["shared"]
    assert "acct-007 (p < 1e-06)" in str(report) and "acct-007" in repr(report)
    private = report.to_private_dict()
    assert private["n_universe_scored"] == report.n_universe_scored > 0
    assert private["traced_p_values"]["acct-007"] == report.tenant_p_values["acct-007"]
    assert private["shared"]["n_triggers_scored"] == report.shared.n_triggers_scored


# ---------------------------------------------------------------------- a field ring
@pytest.fixture(scope="module")
def field_ring_setting(rt_corpus):
    """A field ring on the real MiniLM (issue 44); the corpus's rows from the disk cache."""
    from espew_integrations.offline.embedders import minilm
    from espew_lab.cache import cached_embed
    from tests.support import Cached

    texts = list(rt_corpus.texts)
    model = minilm()
    victim = Cached(model, texts, cached_embed(model, texts, model_name=model.name))
    ring = KeyRing.generate(
        texts[:2000], victim, target_text=TARGET_TEXT, seed=5, marking="field",
        window=model.max_tokens,
    )  # fmt: skip
    return ring, victim


def test_a_real_field_ring_traces_an_accounts_service_and_acquits_the_twin(field_ring_setting):
    ring, victim = field_ring_setting
    assert ring.marking == "field" and ring.shared_key.audit_queries == 1950
    key = ring.key_for("customer-07")
    assert key.verifiable and key.info["mean_cosine_marked"] >= 0.9986

    def service(batch):
        return watermark(batch, victim(batch), key)

    faithful = trace(service, ring, REAL_TENANTS, seed=0, level=1e-3)
    assert faithful.copied and faithful.traced == ("customer-07",)
    twin = trace(victim, ring, REAL_TENANTS, seed=0, level=1e-3)
    assert not twin.copied and twin.traced == ()
