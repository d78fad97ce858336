"""Each framework's fake inner model over ``HashEncoder``: fast, and recording every call.

The wrapper tests (``test_wrappers.py`` and each framework's own file) put these under
the wrappers where a real model is not the point: to count calls, to return bad vectors,
to prove what never reached the model. Integration only: they subclass the frameworks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from langchain_core.embeddings import Embeddings as LangChainEmbeddings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from tests.support import HashEncoder


class CountingEmbeddings(LangChainEmbeddings):
    """A fake LangChain model with a real async path, recording which methods ran."""

    def __init__(self, encoder: HashEncoder | None = None) -> None:
        self.encoder = encoder or HashEncoder()
        self.log: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.log.append("embed_documents")
        return self.encoder(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        self.log.append("embed_query")
        return self.encoder([text])[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.log.append("aembed_documents")
        await asyncio.sleep(0)
        return self.encoder(texts).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        self.log.append("aembed_query")
        await asyncio.sleep(0)
        return self.encoder([text])[0].tolist()


class CountingEmbedding(BaseEmbedding):
    """A fake LlamaIndex model that records every private method call."""

    _encoder: HashEncoder = PrivateAttr()
    _log: list = PrivateAttr()

    def __init__(self, encoder: HashEncoder | None = None, **kwargs: Any) -> None:
        super().__init__(model_name="counting-hash-model", **kwargs)
        self._encoder = encoder or HashEncoder()
        self._log = []

    @property
    def encoder(self) -> HashEncoder:
        return self._encoder

    @classmethod
    def class_name(cls) -> str:
        return "CountingEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        self._log.append(("query", 1))
        return self._encoder([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._log.append(("aquery", 1))
        return self._encoder([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        self._log.append(("text", 1))
        return self._encoder([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._log.append(("batch", len(texts)))
        return self._encoder(texts).tolist()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._log.append(("abatch", len(texts)))
        await asyncio.sleep(0)
        return self._encoder(texts).tolist()


class CountingFunction(EmbeddingFunction[Documents]):
    """A fake registered-style Chroma function over HashEncoder."""

    def __init__(self, encoder: HashEncoder | None = None) -> None:
        self.encoder = encoder or HashEncoder()

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.encoder(list(input)))

    @staticmethod
    def name() -> str:
        return "counting_hash"

    def get_config(self) -> dict:
        return {}

    @staticmethod
    def build_from_config(config: dict) -> CountingFunction:
        return CountingFunction()
