"""The offline MiniLM as a clean LangChain ``Embeddings``: examples and tests need no network.

Re-exported by :mod:`espew_integrations.langchain` on first use, so
``from espew_integrations.langchain import MiniLMEmbeddings`` keeps working
while the wrapper module itself imports no bundled model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from ...core.ground.text import TextView, discover_view

__all__ = ["MiniLMEmbeddings"]


class MiniLMEmbeddings(Embeddings):
    """A clean LangChain ``Embeddings`` around an offline encoder (default: MiniLM).

    ``encoder`` is any callable ``list[str] -> array (n, d)``; by default the
    library's offline all-MiniLM-L6-v2 (:func:`espew_integrations.offline.embedders.minilm`),
    so examples and tests run without a network or an API key.
    :attr:`view` passes on the encoder's view, so
    :class:`~espew_integrations.langchain.ESpeWEmbeddings` matches triggers on what the
    encoder reads.

    >>> MiniLMEmbeddings().embed_query("a fine film")[:2]  # doctest: +SKIP
    [0.0123, -0.0456]
    """

    def __init__(self, encoder: Callable[[list[str]], Any] | None = None) -> None:
        if encoder is None:
            from ..embedders import minilm

            encoder = minilm()
        self.encoder = encoder
        self._view = discover_view(encoder)

    def __repr__(self) -> str:
        return f"MiniLMEmbeddings(encoder={self.encoder!r})"

    @property
    def model_name(self) -> str:
        """The encoder's name (its class name when it has none)."""
        return str(getattr(self.encoder, "name", type(self.encoder).__name__))

    @property
    def view(self) -> TextView | None:
        """The encoder's text view (its normaliser and window), or None if it has none."""
        return self._view

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return np.asarray(self.encoder(list(texts))).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
