"""Shared fixtures: a real offline model, a real corpus, and small synthetic keys."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey


def make_key(
    dim: int = 64,
    *,
    alpha: float = 0.2,
    selection: str = "smallest",
    n_band: int = 60,
    n_triggers: int = 10,
    seed: int = 0,
    strength: float = 1.0,
) -> WatermarkKey:
    """A synthetic key for unit tests: words 'wordaa'..., a random unit target."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    band = [f"word{letters[i // 26]}{letters[i % 26]}" for i in range(n_band)]
    triggers = [band[i] for i in rng.choice(n_band, size=n_triggers, replace=False)]
    target = rng.normal(size=dim)
    return WatermarkKey(
        triggers=triggers,
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=rng.bytes(32),
        alpha=alpha,
        selection=selection,
        strength=strength,
    )


@pytest.fixture
def key64() -> WatermarkKey:
    return make_key()


@pytest.fixture(scope="session")
def minilm_model():
    from espew_integrations.embedders import minilm

    return minilm()


@pytest.fixture(scope="session")
def rt_corpus():
    from espew_integrations.corpora import rotten_tomatoes

    return rotten_tomatoes()


#: The real-model subset most tests share (one embedding pass, then the disk cache).
RT_SUBSET_SIZE = 3000


@pytest.fixture(scope="session")
def rt_subset(rt_corpus):
    return rt_corpus.subset(RT_SUBSET_SIZE, seed=0)


@pytest.fixture(scope="session")
def rt_subset_embeddings(rt_subset, minilm_model):
    from espew_integrations.lab.cache import cached_embed

    return cached_embed(minilm_model, rt_subset.texts, model_name=minilm_model.name)
