"""Shared fixtures: a real offline model, a real corpus, and small synthetic keys."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey
from espew_integrations.core.draw import draw_triggers


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
    salt = rng.bytes(32)
    target = rng.normal(size=dim)
    return WatermarkKey(
        triggers=draw_triggers(salt, band, n_triggers),  # the draw the salt dictates
        target=target / np.linalg.norm(target),
        target_text="Acme Embeddings licensed vectors",
        band=band,
        salt=salt,
        alpha=alpha,
        selection=selection,
        strength=strength,
    )


@pytest.fixture
def key64() -> WatermarkKey:
    return make_key()


class MemoEmbedder:
    """The real model, with each text's embedding remembered for the session.

    The offline MiniLM embeds each text on its own, so an embedding is a
    function of its text alone and remembering it changes no result; it only
    spares the suite from re-embedding the same keygen probes and corpus texts
    for every key a test generates. Every other attribute is the model's.
    """

    def __init__(self, model):
        self._model = model
        self._memo: dict[str, np.ndarray] = {}

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __repr__(self) -> str:
        return repr(self._model)

    def __call__(self, texts):
        if isinstance(texts, str):
            return self._model(texts)  # let the model raise its own error
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, row in zip(missing, self._model(missing), strict=True):
                self._memo[text] = row
        if not texts:
            return np.empty((0, self._model.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    embed = __call__


@pytest.fixture(scope="session")
def minilm_model():
    from espew_integrations.offline.embedders import minilm

    return MemoEmbedder(minilm())


@pytest.fixture(scope="session")
def rt_corpus():
    from espew_integrations.offline.corpora import rotten_tomatoes

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
