"""What the LangChain, LlamaIndex and Chroma wrappers share; imports no framework.

Every wrapper follows the same three steps, kept here so they cannot drift
apart: check the texts *before* the (possibly paid) inner model sees them,
call the inner model, then hand texts and clean vectors to the core's
:func:`~espew_integrations.core.inject.watermark`, which validates the vectors.
The verifier's suspect adapters share :func:`suspect_matrix`, which turns a
framework's answer into a matrix or raises :class:`~espew_integrations.core.errors.SuspectError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .core.errors import KeyFileError, SuspectError
from .core.inject import check_texts
from .core.key import WatermarkKey

__all__ = ["DEFAULT_KEY_ENV", "checked_texts", "resolve_key", "suspect_matrix"]

#: The environment variable a wrapper reads when it is given no key at all.
DEFAULT_KEY_ENV = "ESPEW_KEY"


def checked_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or the core's :class:`EmbeddingInputError` naming the bad entry.

    Runs before the inner model, so a bad input never costs an inner call.

    >>> checked_texts(("a", "b"))
    ['a', 'b']
    """
    check_texts(texts)
    return list(texts)


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
