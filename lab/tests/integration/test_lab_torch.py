"""The end-to-end neural stealer (torch, the optional torch extra of espew-lab)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import cpu_torch

torch = cpu_torch()  # or skip, saying how to get the CPU build

from espew_lab.stealers import make_stealer  # noqa: E402


@pytest.fixture(scope="module")
def word_world():
    rng = np.random.default_rng(0)
    words = [
        "film",
        "movie",
        "story",
        "cast",
        "music",
        "plot",
        "scene",
        "actor",
        "drama",
        "comedy",
        "funny",
        "dark",
        "warm",
        "slow",
    ]
    direction = {w: rng.normal(size=16) for w in words}
    texts = [" ".join(rng.choice(words, size=4, replace=False)) for _ in range(600)]
    targets = np.array([sum(direction[w] for w in t.split()) for t in texts])
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    return texts, targets


def test_torch_encoder_learns_from_the_answers_end_to_end(word_world):
    texts, targets = word_world
    copy = make_stealer("torch_encoder", seed=0, width=32, epochs=20)
    copy.fit(texts[:500], targets[:500])
    held_out = copy(texts[500:])
    assert held_out.shape == (100, 16)
    np.testing.assert_allclose(np.linalg.norm(held_out, axis=1), 1.0, rtol=1e-5)
    assert np.einsum("ij,ij->i", held_out, targets[500:]).mean() > 0.8


def test_torch_encoder_is_seeded(word_world):
    texts, targets = word_world
    a = make_stealer("torch_encoder", seed=3, width=16, epochs=1).fit(texts, targets)(texts[:5])
    b = make_stealer("torch_encoder", seed=3, width=16, epochs=1).fit(texts, targets)(texts[:5])
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="one embedding per text"):
        make_stealer("torch_encoder", seed=0).fit(texts, targets[:-1])
