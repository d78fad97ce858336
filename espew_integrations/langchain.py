"""ESpeW inside LangChain: one line turns any ``Embeddings`` into a watermarked one.

>>> from espew_integrations.langchain import ESpeWEmbeddings, MiniLMEmbeddings
>>> embeddings = ESpeWEmbeddings(MiniLMEmbeddings(), key_path="provider.key")  # doctest: +SKIP

Everything else about the user's code stays the same: vector stores,
retrievers and caches see an ordinary ``Embeddings``. Auditing a LangChain
suspect needs nothing from this module: ``verify(OpenAIEmbeddings(base_url=...), key)``
queries it with ``embed_documents`` (:mod:`espew_integrations.suspects`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from ._wrapper_common import (
    DISCOVER,
    ViewArgument,
    WatermarkingWrapper,
    checked_text,
    checked_texts,
    discover_view,
    resolve_key,
    resolve_view,
)
from .core.key import WatermarkKey
from .core.text import TextView
from .core.traffic_sample import TrafficSample

__all__ = ["ESpeWEmbeddings", "MiniLMEmbeddings"]


class ESpeWEmbeddings(WatermarkingWrapper, Embeddings):
    """A LangChain ``Embeddings`` that watermarks what ``embeddings`` returns.

    Each method calls the underlying model's matching method (the async ones
    stay async) and returns ``watermark(texts, clean, key, view=view)`` as
    Python floats. Texts are checked before the underlying model is called, so
    a bad input raises :class:`~espew_integrations.EmbeddingInputError` naming
    the problem (and a bad text's index) without spending a call. Empty and
    whitespace-only texts go to the underlying model as LangChain would send
    them (its contract allows them) and come back unmarked.

    The key comes from exactly one of ``key`` (a loaded
    :class:`~espew_integrations.WatermarkKey`), ``key_path`` (a key file) or
    ``key_env`` (the name of an environment variable holding a key file path
    or the key's JSON, conventionally ``"ESPEW_KEY"``). Nothing is read from
    the environment unless it is named.

    ``view`` decides which text the triggers are matched on. By default it is
    the underlying model's own ``.view`` (an
    :class:`~espew_integrations.offline.embedders.OnnxSentenceEncoder`, or
    :class:`MiniLMEmbeddings` around one): the text exactly as the model reads
    it, so an invisible character inside a trigger still marks and a trigger
    past the model's token window does not. Pass a callable
    ``list[str] -> list[str]`` for a model that does not expose one, or
    ``None`` to match on the key's Unicode normalisation and window.

    >>> wm = ESpeWEmbeddings(MiniLMEmbeddings(), key_path="provider.key")  # doctest: +SKIP
    >>> vectors = wm.embed_documents(["a fine film", "a dull one"])  # doctest: +SKIP
    """

    def __init__(
        self,
        embeddings: Embeddings,
        key: WatermarkKey | None = None,
        *,
        key_path: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        view: ViewArgument = DISCOVER,
        traffic_sample: TrafficSample | None = None,
    ) -> None:
        if not hasattr(embeddings, "embed_documents") or not hasattr(embeddings, "embed_query"):
            raise TypeError(
                f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
            )
        self.underlying_embeddings = embeddings
        found = resolve_key(key, key_path=key_path, key_env=key_env, wrapper="ESpeWEmbeddings")
        self._key = found.key
        self._view = resolve_view(view, embeddings)
        self._guard = self._model_guard()
        self._traffic_sample = traffic_sample

    def _underlying(self) -> Embeddings:
        return self.underlying_embeddings

    def _embed_clean(self, texts: list[str]) -> Any:
        return self.underlying_embeddings.embed_documents(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        texts = checked_texts(texts)
        if not texts:
            return []
        return self._mark(texts, self.underlying_embeddings.embed_documents(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        texts = checked_text(text, what="query")
        clean = self.underlying_embeddings.embed_query(text)
        return self._mark(texts, [clean])[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        texts = checked_texts(texts)
        if not texts:
            return []
        await self._guard.acheck(self.underlying_embeddings.aembed_documents)
        clean = await self.underlying_embeddings.aembed_documents(texts)
        return self._mark(texts, clean).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        texts = checked_text(text, what="query")
        await self._guard.acheck(self.underlying_embeddings.aembed_documents)
        clean = await self.underlying_embeddings.aembed_query(text)
        return self._mark(texts, [clean])[0].tolist()


class MiniLMEmbeddings(Embeddings):
    """A clean LangChain ``Embeddings`` around an offline encoder (default: MiniLM).

    ``encoder`` is any callable ``list[str] -> array (n, d)``; by default the
    library's offline all-MiniLM-L6-v2 (:func:`espew_integrations.offline.embedders.minilm`),
    so examples and tests run without a network or an API key.
    :attr:`view` passes on the encoder's view, so :class:`ESpeWEmbeddings`
    matches triggers on what the encoder reads.

    >>> MiniLMEmbeddings().embed_query("a fine film")[:2]  # doctest: +SKIP
    [0.0123, -0.0456]
    """

    def __init__(self, encoder: Callable[[list[str]], Any] | None = None) -> None:
        if encoder is None:
            from .offline.embedders import minilm

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
