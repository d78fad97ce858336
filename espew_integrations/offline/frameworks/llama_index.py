"""The offline MiniLM as a clean LlamaIndex ``BaseEmbedding``: indexes build without a network.

Re-exported by :mod:`espew_integrations.llama_index` on first use, so
``from espew_integrations.llama_index import MiniLMEmbedding`` keeps working
while the wrapper module itself imports no bundled model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from ...core.ground.text import TextView, discover_view

__all__ = ["MiniLMEmbedding"]

#: The bundled encoders' names (the ``model_name`` they give) -> their registry names, so
#: a model rebuilt from its ``model_name`` (unpickled, ``from_dict``) is the same model.
_BUNDLED = {"all-MiniLM-L6-v2-int8": "minilm", "paraphrase-MiniLM-L3-v2": "paraphrase-minilm-l3"}


class MiniLMEmbedding(BaseEmbedding):
    """A clean LlamaIndex ``BaseEmbedding`` around an offline encoder (default: MiniLM).

    ``encoder`` is any callable ``list[str] -> array (n, d)``; by default the
    library's offline all-MiniLM-L6-v2, so indexes build without a network (or the
    bundled model that ``model_name`` names). With a bundled encoder it pickles and
    round-trips through ``to_dict`` by that name, loading the model again.
    Async calls run the encoder in a worker thread, keeping the event loop free.
    :attr:`view` passes on the encoder's view, so
    :class:`~espew_integrations.llama_index.ESpeWEmbedding` matches triggers on what the
    encoder reads.

    >>> MiniLMEmbedding().get_text_embedding_batch(["a fine film"])  # doctest: +SKIP
    """

    _encoder: Callable[[list[str]], Any] = PrivateAttr()
    _view: TextView | None = PrivateAttr(default=None)

    def __init__(self, encoder: Callable[[list[str]], Any] | None = None, **kwargs: Any) -> None:
        if encoder is None:
            from ...models import load_model

            encoder = load_model(_BUNDLED.get(kwargs.get("model_name", ""), "minilm"))
        kwargs.setdefault("model_name", getattr(encoder, "name", type(encoder).__name__))
        super().__init__(**kwargs)
        self._encoder = encoder
        self._view = discover_view(encoder)

    @classmethod
    def class_name(cls) -> str:
        return "ESpeWMiniLMEmbedding"

    def __getstate__(self) -> dict[str, Any]:
        # A bundled encoder (an onnxruntime session) is loaded again from model_name by
        # BaseComponent.__setstate__, which calls __init__ with the fields; any other
        # encoder goes through LlamaIndex's default, which pickles what it can.
        name = getattr(self._encoder, "name", None)
        if name in _BUNDLED and name == self.model_name:
            return {"__dict__": dict(self.__dict__)}
        return super().__getstate__()

    @property
    def view(self) -> TextView | None:
        """The encoder's text view (its normaliser and window), or None if it has none."""
        return self._view

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        if not texts:
            return []
        return np.asarray(self._encoder(list(texts))).tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._get_text_embeddings([query])[0]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._aget_text_embeddings([query]))[0]
