"""The stealers: the block ridge solver's objective, and both copies learning what they see."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from espew_lab.stealers import (
    FrozenMLPStealer,
    RidgeStealer,
    block_ridge,
    make_stealer,
)


def test_block_ridge_solves_the_ridge_normal_equations():
    rng = np.random.default_rng(0)
    features = sp.random(200, 60, density=0.1, random_state=1, format="csr")
    targets = rng.normal(size=(200, 5))
    coef, intercept = block_ridge(features, targets, alpha=0.5, tol=1e-7)
    # Dense reference: [A 1] w = Y - mean(Y), penalty alpha on every weight.
    a = np.hstack([features.toarray(), np.ones((200, 1))])
    w = np.linalg.solve(a.T @ a + 0.5 * np.eye(61), a.T @ (targets - targets.mean(0)))
    np.testing.assert_allclose(coef, w[:-1], atol=1e-4)
    np.testing.assert_allclose(intercept, targets.mean(0) + w[-1], atol=1e-4)


def test_ridge_copy_learns_word_directions():
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(30)]
    direction = {w: rng.normal(size=8) for w in words}
    texts = [" ".join(rng.choice(words, size=4, replace=False)) for _ in range(400)]
    targets = np.array([sum(direction[w] for w in t.split()) for t in texts])
    copy = RidgeStealer(seed=0).fit(texts, targets)
    out = copy(["w3 w7 w11 w20"])[0]
    truth = sum(direction[w] for w in ("w3", "w7", "w11", "w20"))
    assert out @ truth / np.linalg.norm(truth) > 0.95
    with pytest.raises(ValueError, match="one embedding per text"):
        RidgeStealer().fit(texts, targets[:-1])
    with pytest.raises(RuntimeError, match="not trained"):
        RidgeStealer()(["x"])


def test_frozen_mlp_copy_learns_a_mapping_from_the_attackers_features():
    rng = np.random.default_rng(2)
    lookup = {f"t{i}": rng.normal(size=12) for i in range(300)}
    mixing = rng.normal(size=(12, 6))

    def encoder(texts):
        return np.array([lookup[t] for t in texts])

    texts = list(lookup)
    victim = np.tanh(encoder(texts) @ mixing)
    copy = FrozenMLPStealer(encoder, hidden=64, epochs=200, seed=0).fit(texts[:250], victim[:250])
    held_out = copy(texts[250:])
    unit = victim[250:] / np.linalg.norm(victim[250:], axis=1, keepdims=True)
    assert np.einsum("ij,ij->i", held_out, unit).mean() > 0.8
    with pytest.raises(ValueError, match="unknown stealer"):
        make_stealer("bert", seed=0)


def _encoder_task(seed: int):
    rng = np.random.default_rng(seed)
    lookup = {f"t{i}": rng.normal(size=12) for i in range(300)}
    mixing = rng.normal(size=(12, 6))

    def encoder(texts):
        return np.array([lookup[t] for t in texts])

    texts = list(lookup)
    return encoder, texts, encoder(texts) @ mixing


def test_ridge_head_learns_a_linear_map_from_the_attackers_features():
    encoder, texts, victim = _encoder_task(3)
    copy = make_stealer("ridge_head", seed=0, encoder=encoder).fit(texts[:250], victim[:250])
    held_out = copy(texts[250:])
    unit = victim[250:] / np.linalg.norm(victim[250:], axis=1, keepdims=True)
    assert np.einsum("ij,ij->i", held_out, unit).mean() > 0.99
    with pytest.raises(ValueError, match="needs the attacker's encoder"):
        make_stealer("ridge_head", seed=0)


def test_knn_memoriser_answers_with_its_neighbours_stolen_answers():
    encoder, texts, victim = _encoder_task(4)
    copy = make_stealer("knn", seed=0, encoder=encoder, k=1).fit(texts, victim)
    # A text it stole with is its own nearest neighbour: its answer comes back.
    unit = victim / np.linalg.norm(victim, axis=1, keepdims=True)
    np.testing.assert_allclose(copy(texts[:20]), unit[:20], atol=1e-12)
    five = make_stealer("knn", seed=0, encoder=encoder, k=5).fit(texts[:250], victim[:250])
    assert five(texts[250:]).shape == (50, 6)
    with pytest.raises(ValueError, match="k must be"):
        make_stealer("knn", seed=0, encoder=encoder, k=0)


def test_rows_outside_audit_leave_out_every_audit_text():
    from espew_lab.stealers import rows_outside_audit

    class Key:
        probe_texts = ("b", "d")
        cover_texts = ("a",)

    rows = rows_outside_audit(["a", "b", "c", "d", "c"], np.array([0, 1, 2, 3, 4]), Key())
    assert rows.tolist() == [2, 4]
