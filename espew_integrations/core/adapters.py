"""Turn whatever the user calls a suspect into ``list[str] -> array``, without importing frameworks.

The core recognises framework objects by the methods they expose (duck
typing), so it never imports LangChain, LlamaIndex or Chroma. Framework
modules may register a more specific adapter with :func:`register_suspect_adapter`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["as_suspect", "register_suspect_adapter"]

SuspectFn = Callable[[list[str]], Any]
_ADAPTERS: list[tuple[Callable[[Any], bool], Callable[[Any], SuspectFn]]] = []


def register_suspect_adapter(
    matches: Callable[[Any], bool], adapt: Callable[[Any], SuspectFn]
) -> None:
    """Teach :func:`as_suspect` a new kind of suspect (checked before the built-ins)."""
    _ADAPTERS.insert(0, (matches, adapt))


def as_suspect(suspect: Any) -> SuspectFn:
    """Return a callable ``list[str] -> np.ndarray (n, d)`` for ``suspect``.

    Understands, in order: registered adapters; LangChain ``Embeddings``
    (``embed_documents``); LlamaIndex ``BaseEmbedding``
    (``get_text_embedding_batch``); any callable (Chroma ``EmbeddingFunction``,
    a model, a function).
    """
    for matches, adapt in _ADAPTERS:
        if matches(suspect):
            return adapt(suspect)
    if hasattr(suspect, "embed_documents"):
        return lambda texts: np.asarray(suspect.embed_documents(list(texts)), dtype=np.float64)
    if hasattr(suspect, "get_text_embedding_batch"):
        return lambda texts: np.asarray(
            suspect.get_text_embedding_batch(list(texts)), dtype=np.float64
        )
    if callable(suspect):
        return lambda texts: np.asarray(suspect(list(texts)), dtype=np.float64)
    raise TypeError(
        f"cannot query a suspect of type {type(suspect).__name__}: pass a callable "
        "list[str] -> embeddings, a LangChain Embeddings, a LlamaIndex BaseEmbedding, "
        "a Chroma EmbeddingFunction or an OpenAIEndpoint"
    )
