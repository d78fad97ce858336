"""What the LangChain, LlamaIndex and Chroma wrappers share; imports no framework.

Every wrapper follows the same three steps, kept here so they cannot drift
apart: check the texts *before* the (possibly paid) inner model sees them,
call the inner model, then hand texts and clean vectors to the core's
:func:`~espew_integrations.core.inject.watermark`, which validates the vectors.
The verifier's suspect adapters share :func:`suspect_matrix`, which turns a
framework's answer into a matrix or raises :class:`~espew_integrations.core.errors.SuspectError`.

Triggers are matched on the text as the model reads it. A wrapper knows its
inner model, so it passes that model's view (:func:`resolve_view`) to
``watermark``: with it, an edit the model's normaliser undoes (a soft hyphen
inside a trigger) cannot dodge the mark, and a trigger past the model's token
window, which the model never reads, does not mark.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import numpy as np

from .core.errors import KeyFileError, SuspectError
from .core.inject import check_texts
from .core.key import WatermarkKey
from .core.text import TextView

__all__ = [
    "DEFAULT_KEY_ENV",
    "DISCOVER",
    "ViewArgument",
    "checked_texts",
    "discover_view",
    "resolve_key",
    "resolve_view",
    "suspect_matrix",
]

#: The environment variable a wrapper reads when it is given no key at all.
DEFAULT_KEY_ENV = "ESPEW_KEY"


class _Discover(enum.Enum):
    """Type of :data:`DISCOVER` (an enum member, so type checkers can narrow on it)."""

    DISCOVER = "discover"

    def __repr__(self) -> str:
        return "DISCOVER"


#: Default ``view`` of every wrapper: take the inner model's own ``.view`` when it has one.
DISCOVER: Final = _Discover.DISCOVER

#: What a wrapper's ``view`` argument accepts.
ViewArgument: TypeAlias = TextView | Literal[_Discover.DISCOVER] | None

_VIEW_PROBE = ["espew view probe"]


def checked_texts(texts: Iterable[str], *, allow_empty: bool = True) -> list[str]:
    """``texts`` as a list, or the core's :class:`EmbeddingInputError` naming the bad entry.

    Runs before the inner model, so a bad input never costs an inner call. Any
    iterable is read exactly once (a generator gives its items, not ``[]``).
    Empty and whitespace-only texts pass by default: none of LangChain,
    LlamaIndex or Chroma refuses them (LangChain's OpenAI model even embeds
    ``""``), so the wrappers hand them to the inner model like the bare model
    would see them, and ``watermark`` returns their rows unmarked. With
    ``allow_empty=False`` they are refused with an error that names the index
    and nothing of the key.

    >>> checked_texts(t for t in ("a", "b"))
    ['a', 'b']
    """
    return check_texts(texts, allow_empty=allow_empty)


def resolve_view(view: ViewArgument, embedder: Any) -> TextView | None:
    """The text view a wrapper passes to ``watermark``, from its ``view`` argument.

    :data:`DISCOVER` (every wrapper's default) asks ``embedder`` for its view
    (:func:`discover_view`); ``None`` matches on the key's own Unicode
    normalisation and token window; a callable is used as given.

    >>> resolve_view(None, object()) is None
    True
    """
    if view is DISCOVER:
        return discover_view(embedder)
    if view is None:
        return None
    if not callable(view):
        raise TypeError(
            f"view must be a callable list[str] -> list[str] (the texts as the model reads "
            f"them), None or DISCOVER, got {type(view).__name__}"
        )
    return view


def discover_view(embedder: Any) -> TextView | None:
    """``embedder.view`` when it is a callable text view, else ``None``.

    An :class:`~espew_integrations.embedders.OnnxSentenceEncoder` has one, and
    so has anything that passes it on (the library's ``MiniLM*`` framework
    classes, or a proxy that forwards attributes). The candidate is called once
    on a probe text: a ``.view`` that means something else (NumPy's
    ``ndarray.view``, say) must fail loudly here rather than on the first real
    batch, or worse, match triggers on the wrong text.

    >>> discover_view(object()) is None
    True
    """
    candidate = getattr(embedder, "view", None)
    if not callable(candidate):
        return None
    where = type(embedder).__name__
    try:
        answer = candidate(list(_VIEW_PROBE))
    except Exception as exc:  # any failure means it is not a text view
        raise TypeError(
            f"{where}.view is not a text view (calling it on a list of one text raised "
            f"{type(exc).__name__}); pass view=None to match triggers on the key's "
            "normalisation and window, or pass the model's view explicitly"
        ) from None
    if not isinstance(answer, (list, tuple)) or len(answer) != 1 or not isinstance(answer[0], str):
        raise TypeError(
            f"{where}.view is not a text view (for one text it returned "
            f"{type(answer).__name__}, not a list of one str); pass view=None to match "
            "triggers on the key's normalisation and window, or pass the model's view "
            "explicitly"
        )
    return candidate


def resolve_key(
    key: WatermarkKey | None,
    *,
    key_path: str | os.PathLike[str] | None = None,
    key_env: str | None = None,
) -> WatermarkKey:
    """The key to use, from an object, a key file or an environment variable.

    With neither a key nor a location, reads ``$ESPEW_KEY`` (a path or the JSON).
    With both a key and a location, they must be the same key: a mismatch
    means a collection or a deployment would be rebuilt with another key.

    >>> resolve_key(None, key_path="provider.key")  # doctest: +SKIP
    WatermarkKey(key_id='3f2a9c0e51b7d644', alpha=0.2, selection='smallest', dim=384)
    """
    if key is not None and not isinstance(key, WatermarkKey):
        raise TypeError(
            f"key must be a WatermarkKey, got {type(key).__name__}; load one with "
            "WatermarkKey.load(path) or pass key_path=/key_env="
        )
    if key_path is not None and key_env is not None:
        raise ValueError("pass key_path or key_env, not both")
    if key_path is not None:
        located = WatermarkKey.load(Path(key_path))
    elif key_env is not None:
        located = WatermarkKey.from_env(key_env)
    elif key is None:
        located = WatermarkKey.from_env(DEFAULT_KEY_ENV)
    else:
        return key
    if key is not None and key.key_id != located.key_id:
        where = f"key file {key_path}" if key_path is not None else f"${key_env}"
        raise KeyFileError(
            f"the key passed (key_id {key.key_id}) is not the key at {where} "
            f"(key_id {located.key_id})"
        )
    return located


def suspect_matrix(rows: Any, n_texts: int, source: str) -> np.ndarray:
    """A suspect's answer as a float64 (n, d) matrix, or a :class:`SuspectError` saying why not.

    The verifier turns the error into missing data, never into evidence.

    >>> suspect_matrix([[1.0, 0.0], [0.0, 1.0]], 2, "LangChain Embeddings").shape
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
