"""What a lab run shares: its models and, per run, the corpus, embeddings, key and watermarks.

:mod:`.runner` (the grid), :mod:`.threats` (the wider threat model),
:mod:`.report` (the plots) and :mod:`.tune` all read the same context; it
lives here, below all of them, so none of them imports another to get it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["model_name", "resolve_model"]

#: The offline models by name; an underscore spelling is accepted as an alias.
_NAMED_MODELS = {"minilm": "minilm", "paraphrase-minilm-l3": "paraphrase_minilm_l3"}


def resolve_model(spec: str) -> Callable[[list[str]], np.ndarray]:
    """``"minilm"``, ``"paraphrase-minilm-l3"`` or ``"module:factory"`` -> an embedder.

    A ``module:factory`` names a zero-argument callable that returns the
    embedder (a callable ``list[str] -> (n, d)``, ideally with a ``.name``).
    """
    from .. import embedders

    named = _NAMED_MODELS.get(spec.replace("_", "-"))
    if named is not None:
        return getattr(embedders, named)()
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(
            f"unknown model {spec!r}; use 'minilm', 'paraphrase-minilm-l3' or 'module:factory'"
        )
    return getattr(importlib.import_module(module), attr)()


def model_name(model: Any, spec: str) -> str:
    """The model's own name (what its embedding cache is keyed by), else its spec."""
    return str(getattr(model, "name", None) or spec)
