"""The stealers: the block ridge solver's objective, and both copies learning what they see."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from espew_integrations.lab.stealers import (
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
