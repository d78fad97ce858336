"""ESpeW inside LlamaIndex: one line turns any ``BaseEmbedding`` into a watermarked one.

>>> from espew_integrations.llama_index import ESpeWEmbedding, MiniLMEmbedding
>>> embed_model = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")  # doctest: +SKIP
>>> Settings.embed_model = embed_model  # doctest: +SKIP

The wrapper calls the inner model's *private* batch methods
(``_get_text_embeddings`` and friends), not its public ones: LlamaIndex's
public methods fire instrumentation events and callbacks, so calling them
would report every embedding twice. The wrapper takes over the inner model's
``embed_batch_size``, ``callback_manager``, ``num_workers`` and
``rate_limiter``, so batching, handlers and throttling behave as before, with
one event per call. Its ``embeddings_cache`` is its own (it stores watermarked
vectors), never the inner model's (which would hold clean ones).

The key is a pydantic ``PrivateAttr``: it never appears in ``model_dump()``,
``to_json()``, ``repr()`` or instrumentation payloads, and the wrapper refuses
to be pickled rather than drop or leak it. Auditing a LlamaIndex suspect
needs nothing from this module (:mod:`espew_integrations.suspects`).

``MiniLMEmbedding``, the clean offline model of the examples, lives with the
bundled models (:mod:`espew_integrations.offline.frameworks.llama_index`); it is
re-exported here on first use, so importing this module imports no model.
"""

from __future__ import annotations

import os
from typing import Any

from ._optional import raise_missing_extra

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
    from llama_index.core.bridge.pydantic import PrivateAttr
except ImportError as _error:
    raise_missing_extra(_error, "llama-index", "espew_integrations.llama_index", "llama_index")
    raise

from ._wrapper_common import (
    DISCOVER,
    ViewArgument,
    WatermarkingWrapper,
    checked_text,
    checked_texts,
    resolve_key,
    resolve_view,
)
from .core.key import WatermarkKey
from .core.text import TextView
from .core.traffic_sample import TrafficSample

__all__ = ["ESpeWEmbedding"]


def __getattr__(name: str) -> Any:
    # The offline demo model moved to the bundled models; its old import path stays.
    if name == "MiniLMEmbedding":
        from .offline.frameworks.llama_index import MiniLMEmbedding

        return MiniLMEmbedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ESpeWEmbedding(WatermarkingWrapper, BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` that watermarks what ``embed_model`` returns.

    Query, text, batch and async paths all return
    ``watermark(texts, clean, key, view=view)``; a batch of texts is one inner
    batch call. ``model_name`` is the inner model's, so code that keys on it
    keeps working. A bad input raises
    :class:`~espew_integrations.EmbeddingInputError` naming the problem (and a
    bad text's index) before the inner model runs; empty and whitespace-only
    texts go to the inner model as LlamaIndex would send them (its contract
    allows them) and come back unmarked.

    The key comes from at most one of ``key`` (a loaded
    :class:`~espew_integrations.WatermarkKey`), ``key_path`` (a key file) or
    ``key_env`` (the name of an environment variable holding a key file path
    or the key's JSON); with none of them, from ``$ESPEW_KEY``, as every
    ``espew`` command reads it.

    ``view`` decides which text the triggers are matched on. By default it is
    the inner model's own ``.view`` (the offline
    :class:`~espew_integrations.offline.frameworks.llama_index.MiniLMEmbedding` passes on
    its encoder's): the text exactly as the model reads it, so an invisible
    character inside a trigger still marks and a trigger past the model's
    token window does not. Pass a callable ``list[str] -> list[str]`` for a
    model that does not expose one, or ``None`` to match on the key's Unicode
    normalisation and window. Like the key, it is a private attribute.

    >>> embed_model = ESpeWEmbedding(MiniLMEmbedding(), key_path="provider.key")  # doctest: +SKIP
    >>> index = VectorStoreIndex(nodes, embed_model=embed_model)  # doctest: +SKIP
    """

    _inner: BaseEmbedding = PrivateAttr()
    _key: WatermarkKey = PrivateAttr()
    _view: TextView | None = PrivateAttr(default=None)
    _guard: Any = PrivateAttr(default=None)
    _traffic_sample: Any = PrivateAttr(default=None)

    def __init__(
        self,
        embed_model: BaseEmbedding,
        key: WatermarkKey | None = None,
        *,
        key_path: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        view: ViewArgument = DISCOVER,
        traffic_sample: TrafficSample | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"embed_model must be a LlamaIndex BaseEmbedding, got {type(embed_model).__name__}"
            )
        found = resolve_key(key, key_path=key_path, key_env=key_env, wrapper="ESpeWEmbedding")
        resolved_view = resolve_view(view, embed_model)
        for setting in _INHERITED_SETTINGS:
            kwargs.setdefault(setting, getattr(embed_model, setting))
        super().__init__(**kwargs)
        self._inner = embed_model
        self._key = found.key
        self._view = resolved_view
        self._guard = self._model_guard()
        self._traffic_sample = traffic_sample

    @classmethod
    def class_name(cls) -> str:
        return "ESpeWEmbedding"

    @property
    def embed_model(self) -> BaseEmbedding:
        """The wrapped (clean) model."""
        return self._inner

    def _underlying(self) -> BaseEmbedding:
        return self._inner

    def to_payload(self) -> dict[str, Any]:
        """Instrumentation payload: the base fields plus the inner class and the public key_id."""
        payload = super().to_payload()
        payload["inner_class_name"] = self._inner.class_name()
        payload["watermark_key_id"] = self._key.key_id
        return payload

    def __getstate__(self) -> dict[str, Any]:
        # LlamaIndex's BaseComponent silently drops unpicklable attributes; for
        # this wrapper that would be the key, leaving an object that fails later.
        raise TypeError(
            "ESpeWEmbedding holds a secret WatermarkKey and refuses to be pickled; "
            "build it in each process with key_path= or key_env="
        )

    # ------------------------------------------------------------------ sync paths
    def _get_query_embedding(self, query: str) -> Embedding:
        texts = checked_text(query, what="query")
        return self._rows(texts, [self._inner._get_query_embedding(query)])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        texts = checked_text(text)
        return self._rows(texts, [self._inner._get_text_embedding(text)])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        texts = checked_texts(texts)
        if not texts:
            return []
        return self._rows(texts, self._inner._get_text_embeddings(texts))

    # ------------------------------------------------------------------ async paths
    async def _aget_query_embedding(self, query: str) -> Embedding:
        texts = checked_text(query, what="query")
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, [await self._inner._aget_query_embedding(query)])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        texts = checked_text(text)
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, [await self._inner._aget_text_embedding(text)])[0]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        texts = checked_texts(texts)
        if not texts:
            return []
        await self._guard.acheck(self._inner._aget_text_embeddings)
        return self._rows(texts, await self._inner._aget_text_embeddings(texts))

    def _embed_clean(self, texts: list[str]) -> Any:
        return self._inner._get_text_embeddings(texts)

    def _rows(self, texts: list[str], clean: Any) -> list[Embedding]:
        return self._mark(texts, clean).tolist()


#: Settings the wrapper takes over from the inner model, so batching, handlers
#: and throttling behave as before.
_INHERITED_SETTINGS = (
    "model_name",
    "embed_batch_size",
    "callback_manager",
    "num_workers",
    "rate_limiter",
)
