"""ESpeW inside LangChain: one line turns any ``Embeddings`` into a watermarked one.

>>> from espew_integrations.langchain import ESpeWEmbeddings
>>> from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
>>> embeddings = ESpeWEmbeddings(MiniLMEmbeddings(), key_path="provider.key")  # doctest: +SKIP

Everything else about the user's code stays the same: vector stores,
retrievers and caches see an ordinary ``Embeddings``. Auditing a LangChain
suspect needs nothing from this module: ``verify(OpenAIEmbeddings(base_url=...), key)``
queries it with ``embed_documents`` (:mod:`espew_integrations.suspects`).

``MiniLMEmbeddings``, the clean offline model of the examples, lives with the
bundled models (:mod:`espew_integrations.offline.frameworks.langchain`); its old
address here still answers, with a deprecation warning, until it goes.
"""

from __future__ import annotations

import os
from typing import Any

from ._optional import raise_missing_extra

try:
    from langchain_core.embeddings import Embeddings
except ImportError as _error:
    raise_missing_extra(_error, "langchain", "espew_integrations.langchain", "langchain_core")
    raise

from ._wrapper_common import (
    DISCOVER,
    ViewArgument,
    WatermarkingWrapper,
    checked_text,
    checked_texts,
    deprecated_address,
    resolve_key,
    resolve_view,
)
from .core.ground.errors import InputTypeError
from .core.keys.key import WatermarkKey
from .core.records.traffic_sample import TrafficSample

__all__ = ["ESpeWEmbeddings"]


def __getattr__(name: str) -> Any:
    # The offline demo model moved to the bundled models; its old import path warns until it goes
    # (DEMO_SHIMS_REMOVED, in CHANGELOG.md).
    if name == "MiniLMEmbeddings":
        deprecated_address(
            f"{__name__}.MiniLMEmbeddings", "espew_integrations.offline.frameworks.langchain"
        )
        from .offline.frameworks.langchain import MiniLMEmbeddings

        return MiniLMEmbeddings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ESpeWEmbeddings(WatermarkingWrapper, Embeddings):
    """A LangChain ``Embeddings`` that watermarks what ``embeddings`` returns.

    Each method calls the underlying model's matching method (the async ones
    stay async) and returns ``watermark(texts, clean, key, view=view)`` as
    Python floats. Texts are checked before the underlying model is called, so
    a bad input raises :class:`~espew_integrations.EmbeddingInputError` naming
    the problem (and a bad text's index) without spending a call. Empty and
    whitespace-only texts go to the underlying model as LangChain would send
    them (its contract allows them) and come back unmarked.

    The key comes from at most one of ``key`` (a loaded
    :class:`~espew_integrations.WatermarkKey`), ``key_path`` (a key file) or
    ``key_env`` (the name of an environment variable holding a key file path
    or the key's JSON); with none of them, from ``$ESPEW_KEY``, as every
    ``espew`` command reads it.

    ``view`` decides which text the triggers are matched on. By default it is
    the underlying model's own ``.view`` (an
    :class:`~espew_integrations.offline.embedders.OnnxSentenceEncoder`, or
    :class:`~espew_integrations.offline.frameworks.langchain.MiniLMEmbeddings` around
    one): the text exactly as the model reads it, so an invisible character inside a
    trigger still marks and a trigger past the model's token window does not. Pass a callable
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
            raise InputTypeError(
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
