"""Turn whatever the user calls a suspect into the core's ``list[str] -> (n, d) array``.

The core's :func:`~espew_integrations.core.verify.verify_callable` takes a plain
callable, so it never needs to know a framework. This layer sits above it and
knows, explicitly, how to ask each kind of suspect for embeddings the way a
stealer's index would have asked it:

- Chroma ``EmbeddingFunction``: ``__call__`` (what ``collection.add`` calls);
- LangChain ``Embeddings``: ``embed_documents`` (what a vector store calls);
- LlamaIndex ``BaseEmbedding``: ``get_text_embedding_batch`` (how nodes are embedded);
- anything else callable: an :class:`~espew_integrations.http.client.OpenAIEndpoint`,
  a model, a function.

Each kind is recognised by duck typing (no framework is imported here) and
listed once, in order, in :data:`ADAPTERS`, an immutable tuple: nothing
registers itself as a side effect of being imported. Every answer passes the
same check (:func:`answer_matrix`), so a malformed answer becomes a
:class:`~espew_integrations.core.ground.errors.SuspectError` naming the suspect,
which the verifier counts as missing data, never as evidence.

:func:`verify` and :func:`trace` here are what ``from espew_integrations
import verify, trace`` give: the core's functions, with their suspect passed
through :func:`as_suspect` first.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from .core.audit.settings import SuspectFn
from .core.ground.errors import InputTypeError, SuspectError
from .core.trace import trace_callable
from .core.verify import verify_callable

__all__ = [
    "ADAPTERS",
    "SuspectAdapter",
    "accepting_any_suspect",
    "answer_matrix",
    "as_suspect",
    "trace",
    "verify",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


@dataclasses.dataclass(frozen=True)
class SuspectAdapter:
    """How to recognise one kind of suspect and ask it to embed a batch of texts."""

    kind: str
    recognises: Callable[[Any], bool]
    embed: Callable[[Any, list[str]], Any]


def _is_langchain_embeddings(suspect: Any) -> bool:
    return callable(getattr(suspect, "embed_documents", None)) and callable(
        getattr(suspect, "embed_query", None)
    )


def _is_llama_index_embedding(suspect: Any) -> bool:
    return callable(getattr(suspect, "get_text_embedding_batch", None))


def _is_chroma_embedding_function(suspect: Any) -> bool:
    return callable(suspect) and any(
        base.__name__ == "EmbeddingFunction" and base.__module__.startswith("chromadb")
        for base in type(suspect).__mro__
    )


def _stacked(rows: Any) -> Any:
    """Chroma functions answer a list of 1-D arrays; stack it once."""
    if isinstance(rows, list) and rows and isinstance(rows[0], np.ndarray):
        return np.stack(rows)
    return rows


#: The kinds of suspect :func:`as_suspect` understands, tried in this order.
#: Chroma comes first: its test is exact (a chromadb base class), and its
#: functions also have an ``embed_query``.
ADAPTERS: tuple[SuspectAdapter, ...] = (
    SuspectAdapter("Chroma", _is_chroma_embedding_function, lambda s, texts: _stacked(s(texts))),
    SuspectAdapter(
        "LangChain", _is_langchain_embeddings, lambda s, texts: s.embed_documents(texts)
    ),
    SuspectAdapter(
        "LlamaIndex", _is_llama_index_embedding, lambda s, texts: s.get_text_embedding_batch(texts)
    ),
    SuspectAdapter("callable", callable, lambda s, texts: s(texts)),
)


def as_suspect(suspect: Any) -> SuspectFn:
    """A callable ``list[str] -> float64 array (n, d)`` that asks ``suspect`` as its kind is asked.

    The first adapter of :data:`ADAPTERS` that recognises ``suspect`` is used;
    a suspect no adapter knows is refused with a :class:`TypeError` listing
    what is accepted.

    >>> import numpy as np
    >>> as_suspect(lambda texts: np.ones((len(texts), 3)))(["a", "b"]).shape
    (2, 3)
    """
    for adapter in ADAPTERS:
        if adapter.recognises(suspect):
            source = (
                type(suspect).__name__
                if adapter.kind == "callable"
                else f"{adapter.kind} {type(suspect).__name__}"
            )
            asking = functools.partial(_ask, adapter, suspect, source)
            asking.audited = suspect  # type: ignore[attr-defined]  # what a transcript names
            return asking
    raise InputTypeError(
        f"cannot query a suspect of type {type(suspect).__name__}: pass a callable "
        "list[str] -> embeddings, a LangChain Embeddings, a LlamaIndex BaseEmbedding, "
        "a Chroma EmbeddingFunction or an OpenAIEndpoint"
    )


def _ask(adapter: SuspectAdapter, suspect: Any, source: str, texts: list[str]) -> np.ndarray:
    texts = list(texts)
    return answer_matrix(adapter.embed(suspect, texts), len(texts), source)


def answer_matrix(rows: Any, n_texts: int, source: str) -> np.ndarray:
    """A suspect's answer as a float64 (n, d) matrix, or a :class:`SuspectError` saying why not.

    >>> answer_matrix([[1.0, 0.0], [0.0, 1.0]], 2, "LangChain Embeddings").shape
    (2, 2)
    """
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SuspectError(
            f"{source} returned embeddings of unequal length or non-numbers: {exc}"
        ) from None
    if matrix.ndim != 2 or matrix.shape[0] != n_texts:
        raise SuspectError(
            f"{source} returned shape {matrix.shape} for {n_texts} texts; "
            "expected one embedding per text"
        )
    return matrix


def accepting_any_suspect(
    check: Callable[Concatenate[SuspectFn, _P], _R], name: str
) -> Callable[Concatenate[Any, _P], _R]:
    """``check`` (a core function whose first argument is a callable suspect), taking any suspect.

    The result, called ``name``, passes its first argument through :func:`as_suspect`
    and keeps ``check``'s docstring and signature (``__wrapped__``).

    >>> verify = accepting_any_suspect(verify_callable, "verify")  # doctest: +SKIP
    """

    @functools.wraps(check)
    def adapted(suspect: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return check(as_suspect(suspect), *args, **kwargs)

    adapted.__name__ = adapted.__qualname__ = name
    return adapted


#: :func:`~espew_integrations.core.verify.verify_callable`, for any suspect
#: :func:`as_suspect` knows.
verify = accepting_any_suspect(verify_callable, "verify")
#: :func:`~espew_integrations.core.trace.trace_callable`, for any suspect
#: :func:`as_suspect` knows.
trace = accepting_any_suspect(trace_callable, "trace")
