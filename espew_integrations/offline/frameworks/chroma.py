"""The bundled models as a clean, registered Chroma embedding function (no model download).

Importing this module registers ``espew_minilm`` with Chroma. The watermarking
function (:class:`~espew_integrations.chroma.ESpeWEmbeddingFunction`) imports it
when a persisted collection names it as its inner function, and
:mod:`espew_integrations.chroma` re-exports :class:`MiniLMEmbeddingFunction` on
first use, so the wrapper module itself imports no bundled model. A process
that reopens a collection built on this function alone (not wrapped) imports
this module, or the class, before ``get_collection``, as Chroma asks of every
registered function.
"""

from __future__ import annotations

from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

from ...core.ground.text import TextView
from ...models import MODEL_NAMES, ModelSpecError, canonical_model_name, load_model

__all__ = ["MiniLMEmbeddingFunction"]


class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """A clean, offline, registered Chroma embedding function (no model download).

    Chroma's own default function downloads its model at first use; this one
    runs the library's bundled all-MiniLM-L6-v2 (``model="minilm"``) or
    paraphrase-MiniLM-L3-v2 (``model="paraphrase-minilm-l3"``), named and
    loaded by the library's one model registry (:mod:`espew_integrations.models`),
    and its config rebuilds it in any process. :attr:`view` is the model's text
    view, which :class:`~espew_integrations.chroma.ESpeWEmbeddingFunction` uses to
    match triggers on what it reads.

    >>> ef = MiniLMEmbeddingFunction()  # doctest: +SKIP
    >>> client.create_collection("docs", embedding_function=ef)  # doctest: +SKIP
    """

    def __init__(self, model: str = "minilm") -> None:
        self._model = _model_name(model)
        self._encoder = load_model(self._model)

    def __call__(self, input: Documents) -> Embeddings:
        return list(self._encoder(list(input)))

    @property
    def model(self) -> str:
        """The bundled model's name in the registry's one spelling, as persisted."""
        return self._model

    @property
    def view(self) -> TextView:
        """The model's text view: its normaliser, word pieces and token window."""
        return self._encoder.view

    @staticmethod
    def name() -> str:
        return "espew_minilm"

    def get_config(self) -> dict[str, Any]:
        return {"model": self._model}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbeddingFunction:
        MiniLMEmbeddingFunction.validate_config(config)
        return MiniLMEmbeddingFunction(config.get("model", "minilm"))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        _model_name(config.get("model", "minilm"))

    def default_space(self) -> Space:
        return "cosine"  # the encoder returns unit vectors


def _model_name(model: Any) -> str:
    """The registry's canonical spelling of a bundled model, or a ModelSpecError listing them."""
    canonical = canonical_model_name(model) if isinstance(model, str) else None
    if canonical is None:
        raise ModelSpecError(f"model must be one of {MODEL_NAMES}, got {model!r}")
    return canonical


register_embedding_function(MiniLMEmbeddingFunction)
