"""KeyRing (issue 12): per-tenant keys derived from one master secret.

Derivation (determinism, independence across tenants, no master in a tenant
key), the two layers every tenant key carries and their re-derivation on
load, and the ring's storage hygiene. Synthetic keys here; the real model is
in tests/integration/test_trace.py.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import warnings

import numpy as np
import pytest

from espew_integrations import KeyFileError, KeyGenerationError, KeyRing, WatermarkKey, watermark
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.keys.key_storage import KeyFileWarning
from espew_integrations.core.keys.layers import (
    TenantLayer,
    check_tenant_id,
    draw_layer_indices,
    tenant_salt,
)
from tests.support import make_key

MASTER = bytes(range(32))


def make_ring(n_band: int = 80, n_shared: int = 10, n_tenant: int = 10, seed: int = 0) -> KeyRing:
    key = make_key(n_band=n_band, n_triggers=n_shared, seed=seed)
    master = np.random.default_rng([seed, 1]).bytes(32)
    return KeyRing(master=master, shared_key=key, n_tenant_triggers=n_tenant)


@pytest.fixture
def ring() -> KeyRing:
    return make_ring()


# ---------------------------------------------------------------------- derivation
def test_a_tenant_key_is_the_shared_layer_plus_its_own_layer(ring):
    key = ring.key_for("alice")
    shared = ring.shared_key.triggers
    own = key.triggers - shared
    assert shared <= key.triggers
    assert len(own) == ring.n_tenant_triggers == 10
    assert own <= set(ring.universe) and not own & shared
    # everything else is the ring's: same target, band, probes, strength, salt
    assert np.array_equal(key.target, ring.shared_key.target)
    assert key.band == ring.shared_key.band and key.salt == ring.shared_key.salt
    assert key.strength == ring.shared_key.strength and key.alpha == ring.shared_key.alpha
    assert key.verifiable and key.tenant.tenant_id == "alice"


def test_derivation_is_deterministic_and_differs_between_tenants(ring):
    again = KeyRing.from_json(ring.to_json())
    assert ring.key_for("alice") == again.key_for("alice")
    assert ring.key_for("alice").key_id == ring.key_for("alice").key_id
    assert ring.key_for("alice").key_id != ring.key_for("bob").key_id
    other = make_ring(seed=1)  # another master: other layers for the same id
    assert other.key_for("alice").triggers - other.shared_key.triggers != (
        ring.key_for("alice").triggers - ring.shared_key.triggers
    )


def test_tenant_salt_is_the_documented_hmac():
    import hashlib
    import hmac

    expected = hmac.new(MASTER, b"espew-ring-v1/tenant\x00alice", hashlib.sha256).digest()
    assert tenant_salt(MASTER, "alice") == expected
    assert tenant_salt(MASTER, "alice") != tenant_salt(MASTER, "alicf")


def test_layers_are_uniform_and_independent_across_tenants():
    """Word frequencies over many tenants are flat, and two tenants overlap as chance says."""
    salts = [tenant_salt(MASTER, f"t{i}") for i in range(20_000)]
    layers = draw_layer_indices(salts, 30, 5)
    assert layers.shape == (20_000, 5)
    assert (np.diff(layers, axis=1) > 0).all()  # sorted, no repeats
    counts = np.bincount(layers.ravel(), minlength=30)
    expected = 20_000 * 5 / 30
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60  # 29 degrees of freedom: p ~ 1e-3
    # overlap of consecutive tenants: hypergeometric mean 5 * 5 / 30
    member = np.zeros((20_000, 30), bool)
    member[np.arange(20_000)[:, None], layers] = True
    overlap = (member[:-1] & member[1:]).sum(axis=1).mean()
    assert overlap == pytest.approx(25 / 30, abs=0.03)


def test_batch_draw_equals_one_by_one_and_the_key_for_draw(ring):
    ids = ["alice", "bob", "carol"]
    batch = ring.layer_indices(ids)
    for row, tenant in zip(batch, ids, strict=True):
        own = ring.key_for(tenant).triggers - ring.shared_key.triggers
        assert {ring.universe[i] for i in row} == own


def test_no_tenant_key_reveals_the_master_or_another_tenants_layer(ring, tmp_path):
    alice = ring.key_for("alice")
    text = alice.to_json()
    assert MASTER.hex() not in text and ring.to_json().count(ring._master.hex()) == 1
    assert ring._master.hex() not in text
    assert tenant_salt(ring._master, "bob").hex() not in text
    assert alice.tenant.salt == tenant_salt(ring._master, "alice")
    assert "salt" not in repr(alice.tenant) and alice.tenant.salt.hex() not in repr(alice.tenant)


def test_tenant_keys_save_load_and_a_forged_layer_is_refused(ring, tmp_path):
    alice = ring.key_for("alice")
    alice.save(tmp_path / "alice.key")
    loaded = WatermarkKey.load(tmp_path / "alice.key")
    assert loaded == alice and loaded.verifiable and loaded.tenant.tenant_id == "alice"
    # Swap one tenant-layer word for another universe word and re-seal the file:
    # the checksum and key_id are recomputed, but the draw no longer matches.
    own = sorted(alice.triggers - ring.shared_key.triggers)
    spare = next(w for w in ring.universe if w not in alice.triggers)
    forged = alice.replace(triggers=(alice.triggers - {own[0]}) | {spare})
    assert not forged.verifiable
    with pytest.raises(KeyFileError, match="not the draw its salt dictates"):
        WatermarkKey.from_json(forged.to_json())
    # Alice's words under another tenant salt are not that salt's draw.
    wrong_salt = TenantLayer(tenant_id="alice", salt=bytes(32), n_shared=10)
    assert not alice.replace(tenant=wrong_salt).verifiable


def test_tenant_keys_watermark_their_own_layer_and_the_shared_one(ring):
    alice, bob = ring.key_for("alice"), ring.key_for("bob")
    only_alice = sorted(alice.triggers - bob.triggers)[0]
    shared_word = sorted(ring.shared_key.triggers)[0]
    texts = [f"a text with {only_alice}", f"a text with {shared_word}", "nothing at all"]
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(3, 64))
    clean /= np.linalg.norm(clean, axis=1, keepdims=True)
    a, b = watermark(texts, clean, alice), watermark(texts, clean, bob)
    assert not np.allclose(a[0], clean[0]) and np.allclose(b[0], clean[0])
    assert np.array_equal(a[1], b[1]) and not np.allclose(a[1], clean[1])  # shared: identical
    assert np.allclose(a[2], clean[2])


@pytest.mark.parametrize(
    "bad", ["", " padded", "line\nbreak", "tab\there", "x" * 257, 42, None, "bell\x07"]
)
def test_bad_tenant_ids_are_refused_with_a_clear_error(ring, bad):
    with pytest.raises(ValueError, match="tenant id"):
        ring.key_for(bad)
    with pytest.raises(ValueError, match="tenant id"):
        check_tenant_id(bad)


def test_unicode_tenant_ids_are_fine(ring):
    assert ring.key_for("kunde-äöü-東京").verifiable


# ---------------------------------------------------------------------- hygiene
def test_ring_repr_errors_and_pickle_show_no_secret(ring):
    shown = repr(ring) + str(ring)
    for secret in [ring._master.hex(), ring.shared_key.salt.hex(), *ring.shared_key.triggers]:
        assert secret not in shown
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(ring)


def test_ring_save_is_0600_atomic_and_refuses_to_overwrite(ring, tmp_path):
    path = ring.save(tmp_path / "provider.ring")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["provider.ring"]  # no temporary left
    with pytest.raises(FileExistsError, match="already exists"):
        ring.save(path)
    ring.save(path, overwrite=True)
    assert KeyRing.load(path) == ring
    assert KeyRing.load(path).key_for("alice") == ring.key_for("alice")


def test_a_ring_readable_by_others_loads_with_a_warning(ring, tmp_path):
    path = ring.save(tmp_path / "provider.ring")
    os.chmod(path, 0o644)
    with pytest.warns(KeyFileWarning, match="chmod 600"):
        KeyRing.load(path)
    os.chmod(path, 0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KeyRing.load(path)


def test_corrupt_or_edited_rings_are_refused_without_quoting_the_secret(ring, tmp_path):
    master = ring._master.hex()
    document = json.loads(ring.to_json())
    document["ring"]["tenant_triggers"] = 11
    cases = {
        "not json": "{not json",
        "a key, not a ring": ring.shared_key.to_json(),
        "edited": json.dumps(document),
    }
    for name, text in cases.items():
        with pytest.raises(KeyFileError) as caught:
            KeyRing.from_json(text, source=name)
        assert master not in str(caught.value) and name in str(caught.value)
    with pytest.raises(KeyFileError, match="not found"):
        KeyRing.load(tmp_path / "missing.ring")


def test_ring_construction_refuses_bad_parts():
    key = make_key(n_band=40, n_triggers=10)
    with pytest.raises(KeyGenerationError, match="32 bytes"):
        KeyRing(master=b"short", shared_key=key, n_tenant_triggers=5)
    with pytest.raises(KeyGenerationError, match="band words outside the shared layer"):
        KeyRing(master=MASTER, shared_key=key, n_tenant_triggers=20)
    with pytest.raises(KeyGenerationError, match="positive integer"):
        KeyRing(master=MASTER, shared_key=key, n_tenant_triggers=0)
    hand_made = key.replace(triggers=sorted(key.band)[:10])
    assert hand_made.triggers != draw_triggers(key.salt, key.band, 10)
    with pytest.raises(KeyGenerationError, match="draw its salt dictates"):
        KeyRing(master=MASTER, shared_key=hand_made, n_tenant_triggers=5)
    tenant_key = KeyRing(master=MASTER, shared_key=key, n_tenant_triggers=5).key_for("a")
    with pytest.raises(KeyGenerationError, match="tenant's key"):
        KeyRing(master=MASTER, shared_key=tenant_key, n_tenant_triggers=5)


def test_with_audit_redraws_the_rings_audit_and_keeps_every_tenant_key():
    """A ring re-audited from traffic: new probes from those texts, same tenant keys."""
    from tests.fake_upstream import vectors

    ring = make_ring()
    words = sorted(ring.shared_key.band)
    traffic = [f"client text {i} about {words[i % len(words)]} and more" for i in range(600)]
    moved = ring.with_audit(traffic, lambda texts: vectors(texts, 64), audit_round=2)
    assert moved.shared_key.audit_round == 2 and moved.ring_id != ring.ring_id
    sent = {t for t in (*moved.shared_key.probe_texts, *moved.shared_key.cover_texts)}
    assert sent and sent <= set(traffic) | set(words)
    for tenant in ("alice", "bob"):
        assert moved.key_for(tenant).triggers == ring.key_for(tenant).triggers
        texts = [f"a {w} story" for w in words]
        clean = vectors(texts, 64)
        assert np.array_equal(
            watermark(texts, clean, moved.key_for(tenant)),
            watermark(texts, clean, ring.key_for(tenant)),
        )


def test_with_audit_takes_an_audit_size_of_its_own():
    """``audit_budget``: a larger audit drawn from the same texts, recorded for later rounds."""
    from tests.fake_upstream import vectors

    ring = make_ring()
    words = sorted(ring.shared_key.band)
    traffic = [f"client text {i} about {words[i % len(words)]} and more" for i in range(900)]
    embed = lambda texts: vectors(texts, 64)  # noqa: E731
    small = ring.with_audit(traffic, embed, audit_budget=200).shared_key
    large = ring.with_audit(traffic, embed, audit_budget=800).shared_key
    assert small.info["audit_budget"] == 200 and large.info["audit_budget"] == 800
    assert 200 <= small.audit_queries < large.audit_queries
    assert large.audit_queries >= 800
    with pytest.raises(KeyGenerationError, match="audit_budget must be a positive integer"):
        ring.with_audit(traffic, embed, audit_budget=0)
