"""Field rings (issue 44): key rings whose layers are field units, and ``trace`` naming the
account a copy of a field ring's answers came from. The synthetic bag-of-words embedder
of tests/unit/test_field.py (seconds); the real MiniLM is in tests/integration/test_trace.py.
"""

from __future__ import annotations

import logging
import math
import pickle

import numpy as np
import pytest

from espew_integrations import KeyRing, WatermarkKey, trace, watermark
from espew_integrations.core.audit.fields import FIELD_TRACE_RULE
from espew_integrations.core.audit.tenant_layers import tenant_p_values
from espew_integrations.core.designs.field import FieldDesign
from espew_integrations.core.ground.defaults import DEFAULT_FIELD_MIN_COSINE
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.keys.layers import draw_layer_indices, tenant_salt, universe
from espew_integrations.core.mark.field import (
    FieldMark,
    drawn_mask,
    field_scales,
    field_scores,
    field_vector,
    keyed_gaussian,
    standardised,
    whitened_rows,
)
from espew_integrations.core.mark.inject import mark_all_rows
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from tests.unit.test_field import CORPUS, embed, innocent

TARGET = "acme licensed vectors"
TENANTS = [f"acct-{i:02d}" for i in range(20)]


@pytest.fixture(scope="module")
def ring() -> KeyRing:
    # 128 units, 16 + 16 drawn: the 64-dimensional synthetic space holds fewer independent
    # units than the default 256 (the real model's ring keeps the defaults)
    return KeyRing.generate(
        CORPUS, embed, target_text=TARGET, seed=3, marking="field", audit_budget=800,
        field_units=128, n_shared_triggers=16, n_tenant_triggers=16,
    )  # fmt: skip


def service(ring: KeyRing, tenant: str):
    key = ring.key_for(tenant)
    return lambda texts: watermark(texts, embed(texts), key)


def ridge_copy(ring: KeyRing, tenant: str):
    """A thief's ridge head on its own features (an open model beside the victim's
    clean rows) fitted to one account's answers on the whole corpus (the audit's texts
    among them, as a thief querying the provider's domain would send)."""
    stolen = CORPUS
    answers = service(ring, tenant)(stolen)

    def features(texts):
        return np.hstack([innocent(texts), embed(texts), np.ones((len(texts), 1))])

    x = features(stolen)
    weights = np.linalg.solve(x.T @ x + 1e-2 * np.eye(x.shape[1]), x.T @ answers)
    return lambda texts: unit_rows(features(texts) @ weights)


# ---------------------------------------------------------------------- the keys
def test_a_tenant_key_is_the_field_of_both_layers(ring):
    shared, alice, bob = ring.shared_key, ring.key_for("alice"), ring.key_for("bob")
    assert ring.marking == alice.marking == "field"
    assert ring.n_shared_triggers == ring.n_tenant_triggers == 16
    own = alice.triggers - shared.triggers
    assert shared.triggers <= alice.triggers and len(own) == ring.n_tenant_triggers
    assert own <= set(ring.universe) and own != bob.triggers - shared.triggers
    assert alice.verifiable and alice.tenant.tenant_id == "alice"
    field, mine = shared.design.field, alice.design.field
    assert (mine.units, mine.amplitude) == (field.units, field.amplitude)
    assert np.array_equal(mine.mu, field.mu) and np.array_equal(mine.sigma, field.sigma)
    # the two fields add with one weight per unit: q = sqrt(Ks/K) q_shared + sqrt(Kt/K) q_own
    gaussian = field.gaussian(shared.salt)
    q_own = field_vector(gaussian, field.sigma, drawn_mask(field.units, own), field.amplitude)
    k_shared, k_own = len(shared.triggers), len(own)
    total = k_shared + k_own
    q_shared = field_vector(
        gaussian, field.sigma, drawn_mask(field.units, shared.triggers), field.amplitude
    )
    expected = math.sqrt(k_shared / total) * q_shared + math.sqrt(k_own / total) * q_own
    # stored compact: rounded to int8 steps of a power of two, half a step at most
    assert mine.compact
    np.testing.assert_allclose(mine.q, expected, rtol=0, atol=np.abs(mine.q).max() / 127)
    # a forged tenant field (the shared one alone) is not what the salts dictate
    assert not alice.replace(design=FieldDesign(field)).verifiable


def test_tenants_answers_differ_and_each_meets_the_quality_budget(ring):
    info = ring.shared_key.info
    assert "sample tenants" in info["strength_fitted_on"]
    assert info["mean_cosine_marked"] == pytest.approx(DEFAULT_FIELD_MIN_COSINE, abs=1e-6)
    texts = CORPUS[1000:1500]
    clean = embed(texts)
    answers = [watermark(texts, clean, ring.key_for(t)) for t in ("alice", "bob", "carol")]
    for out in answers:
        cosines = row_cosines(clean, out)
        assert (cosines < 1 - 1e-9).mean() > 0.99  # every answer moves
        assert cosines.mean() >= DEFAULT_FIELD_MIN_COSINE - 3e-4
    # every answer differs between accounts: same mark direction, each account's own gain
    assert (np.abs(answers[0] - answers[1]).max(axis=1) > 1e-6).mean() > 0.99
    gains = [row_cosines(out - clean, answers[0] - clean) for out in answers[1:]]
    assert all((g < 0.999).mean() > 0.2 for g in gains)  # not the same move, even in sign


def test_a_field_ring_saves_loads_and_serves_the_same_keys(ring, tmp_path):
    path = ring.save(tmp_path / "provider.ring")
    loaded = KeyRing.load(path)
    assert loaded == ring and loaded.ring_id == ring.ring_id
    assert loaded.key_for("alice") == ring.key_for("alice")
    key_path = ring.key_for("alice").save(tmp_path / "alice.key")
    again = WatermarkKey.load(key_path)
    assert again.verifiable and again.design.field == ring.key_for("alice").design.field


def test_generate_refuses_the_single_keys_layer_options():
    with pytest.raises(TypeError, match="not field_marked"):
        KeyRing.generate(CORPUS, embed, target_text=TARGET, marking="field", field_marked=8)
    with pytest.raises(ValueError, match="positive integer"):
        KeyRing.generate(CORPUS, embed, target_text=TARGET, marking="field", n_tenant_triggers=0)


# ---------------------------------------------------------------------- trace
def test_trace_names_the_account_a_ridge_copy_learned_from(ring):
    report = trace(ridge_copy(ring, "acct-07"), ring, TENANTS, seed=0, level=1e-3)
    assert report.copied and report.traced == ("acct-07",)
    assert report.tenant_p_values["acct-07"] < 1e-4
    assert sorted(report.tenant_p_values.values())[1] > 0.1  # nobody else comes close
    assert report.marking == "field" and report.decision_rule == FIELD_TRACE_RULE
    assert report.shared.statistic == "field" and "field units" in str(report)


def test_innocents_are_acquitted_and_nobody_is_named(ring):
    for suspect in (innocent, embed):
        report = trace(suspect, ring, TENANTS, seed=0, level=1e-3)
        assert report.status == "not_copied" and report.traced == ()
        assert min(report.tenant_p_values.values()) > 1e-3


def test_false_accusations_are_exact_over_200_fresh_field_rings(ring):
    """200 fresh rings (salt, field, master) against one innocent's fixed answers: trace's
    statistic names some account of 20 (and convicts) at most as often as the level says."""
    shared = ring.shared_key
    texts = list(shared.probe_texts)
    clean = unit_rows(shared.probe_embeddings)
    directions = unit_rows(mark_all_rows(clean, shared) - clean)
    answers = innocent(texts)
    mu = clean.mean(axis=0)
    whitened = whitened_rows(clean, mu)  # depends on the clean rows alone
    units, k_shared, k_tenant = (
        shared.design.field.units,
        len(shared.triggers),
        ring.n_tenant_triggers,
    )
    n_universe, amplitude = units - k_shared, shared.design.field.amplitude

    def layers(master: bytes) -> np.ndarray:
        salts = [tenant_salt(master, t) for t in TENANTS]
        return draw_layer_indices(salts, n_universe, k_tenant)

    named = {0.05: 0, 0.01: 0}
    copied = {0.05: 0, 0.01: 0}
    drawn = [np.random.default_rng([44, seed]).bytes(64) for seed in range(200)]
    salts, masters = [d[:32] for d in drawn], [d[32:] for d in drawn]
    gaussians = [keyed_gaussian(salt, clean.shape[1], units) for salt in salts]
    projected = np.split(whitened @ np.hstack(gaussians), len(salts), axis=1)  # one product
    for i, (salt, master) in enumerate(zip(salts, masters, strict=True)):
        triggers = draw_triggers(salt, shared.band, k_shared)
        if i < 3:  # what a fresh ring is (the loop re-derives its parts faster)
            sigma = field_scales(gaussians[i], mu, clean)
            q = field_vector(gaussians[i], sigma, drawn_mask(units, triggers), amplitude)
            field = FieldMark(units=units, amplitude=amplitude, mu=mu, sigma=sigma, q=q)
            key = shared.replace(salt=salt, triggers=triggers, design=FieldDesign(field))
            fresh = KeyRing(master=master, shared_key=key, n_tenant_triggers=k_tenant)
            assert key.verifiable and fresh.universe == universe(salt, shared.band, k_shared)
            assert np.array_equal(fresh.layer_indices(TENANTS), layers(master))
        scores = field_scores(answers, directions, clean, standardised(projected[i]))
        p_shared = rank_sum_p_value(scores, drawn_mask(units, triggers))
        in_band = np.searchsorted(shared.band, universe(salt, shared.band, k_shared))
        for level in named:
            p_tenants = tenant_p_values(
                scores[in_band], None, layers(master), level=level, statistic="field"
            )
            named[level] += bool(p_tenants.min() < level)
            copied[level] += bool(min(1.0, 2 * min(p_shared, p_tenants.min())) < level)
    # binomial(200, a) upper tails at about 1e-3: 21 for a = 0.05, 8 for a = 0.01
    assert named[0.05] <= 21 and named[0.01] <= 8
    assert copied[0.05] <= 21 and copied[0.01] <= 8
    assert named[0.05] + copied[0.05] > 0  # the statistic is not stuck at 1


# ---------------------------------------------------------------------- secrets
def test_no_secret_in_reprs_reports_pickles_or_logs(ring, caplog):
    caplog.set_level(logging.DEBUG)
    alice = ring.key_for("alice")
    report = trace(service(ring, "alice"), ring, [*TENANTS[:3], "alice"], seed=0, level=1e-3)
    shown = repr(ring) + str(ring) + repr(alice) + repr(alice.design.field) + repr(alice.tenant)
    shown += str(report) + repr(report) + report.to_json() + caplog.text
    secrets = [ring._master.hex(), ring.shared_key.salt.hex(), alice.tenant.salt.hex(), TARGET]
    secrets += [
        repr(float(alice.design.field.q[0]))[:12],
        repr(float(ring.shared_key.design.field.q[0]))[:12],
    ]
    for secret in secrets:
        assert secret not in shown
    assert not any(u in report.to_json() for u in alice.triggers)  # which units are drawn
    for thing in (ring, alice):
        with pytest.raises(TypeError, match="pickled"):
            pickle.dumps(thing)
