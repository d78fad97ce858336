"""ESpeWEmbedding inside LlamaIndex: batching, metadata, events, private attributes, the index.

What every wrapper promises (equality with the core on every path, bad input, the
model's view, concurrency, the key, verify) is tests/integration/test_wrappers.py;
pickling across processes is tests/integration/test_llama_index_pipeline.py.
"""

from __future__ import annotations

import asyncio
import pickle
import uuid
from typing import Any

import chromadb
import llama_index.core.instrumentation as instrument
import numpy as np
import pytest
from chromadb.config import Settings
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.embedding import (
    EmbeddingEndEvent,
    EmbeddingStartEvent,
)
from llama_index.core.schema import TextNode
from llama_index.vector_stores.chroma import ChromaVectorStore

from espew_integrations import ESpeWError, watermark
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from tests.integration.framework_fakes import CountingEmbedding
from tests.support import secret_strings, unchecked


class EventCounter(BaseEventHandler):
    starts: int = 0
    ends: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "EventCounter"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, EmbeddingStartEvent):
            self.starts += 1
        elif isinstance(event, EmbeddingEndEvent):
            self.ends += 1


@pytest.fixture(scope="module")
def inner() -> MiniLMEmbedding:
    return MiniLMEmbedding()


@pytest.fixture(scope="module")
def wrapped(inner, key) -> ESpeWEmbedding:
    return ESpeWEmbedding(inner, key)


@pytest.fixture(scope="module")
def expected(inner, key, texts) -> np.ndarray:
    return watermark(texts, inner.get_text_embedding_batch(texts), key)


# ---------------------------------------------------------------------- batching and metadata
def test_one_inner_batch_call_per_batch(key):
    inner = CountingEmbedding(embed_batch_size=4)
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    texts = [f"review number {i} of a fine film" for i in range(10)]
    wrapped.get_text_embedding_batch(texts)
    asyncio.run(wrapped.aget_text_embedding_batch(texts))
    assert wrapped.embed_batch_size == 4
    sync_calls = [("batch", 4), ("batch", 4), ("batch", 2)]
    async_calls = [("abatch", 4), ("abatch", 4), ("abatch", 2)]
    assert inner._log == sync_calls + async_calls


def test_model_name_and_class_name(wrapped, inner, key):
    assert wrapped.model_name == inner.model_name == "all-MiniLM-L6-v2-int8"
    assert ESpeWEmbedding(CountingEmbedding(), key).model_name == "counting-hash-model"
    assert ESpeWEmbedding.class_name() == wrapped.class_name() == "ESpeWEmbedding"
    assert wrapped.to_dict()["class_name"] == "ESpeWEmbedding"


def test_instrumentation_events_fire_once_per_call(key):
    inner = CountingEmbedding(embed_batch_size=4)
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    counter = EventCounter()
    dispatcher = instrument.get_dispatcher()
    dispatcher.add_event_handler(counter)
    try:
        wrapped.get_query_embedding("a fine film")
        wrapped.get_text_embedding("a fine film")
        asyncio.run(wrapped.aget_query_embedding("a fine film"))
        assert (counter.starts, counter.ends) == (3, 3)
        wrapped.get_text_embedding_batch([f"text {i}" for i in range(10)])  # 3 batches
        assert (counter.starts, counter.ends) == (6, 6)
    finally:
        dispatcher.event_handlers.remove(counter)


# ---------------------------------------------------------------------- private attributes
def test_the_view_is_a_private_attribute_never_dumped(wrapped):
    assert wrapped.view is not None  # discovered from MiniLM (test_wrappers.py)
    assert "view" not in str(wrapped.model_dump()) and "_view" in wrapped.__private_attributes__


def test_key_is_a_private_attribute_never_serialised(wrapped, key):
    assert "_key" in type(wrapped).__private_attributes__
    assert "key" not in type(wrapped).model_fields
    for text in (repr(wrapped), str(wrapped), wrapped.to_json(), str(wrapped.model_dump())):
        assert not any(secret in text for secret in secret_strings(key))
        assert not any(f'"{trigger}"' in text for trigger in key.triggers)
    payload = str(wrapped.to_payload())
    assert key.key_id in payload
    assert not any(secret in payload for secret in secret_strings(key))


def test_pickling_an_in_memory_key_is_refused_instead_of_dropping_the_key(key):
    # Pickling by location: tests/integration/test_llama_index_pipeline.py.
    refused = r"in-memory WatermarkKey, which is never pickled.*key_path="
    with pytest.raises(ESpeWError, match=refused):
        pickle.dumps(ESpeWEmbedding(CountingEmbedding(), key))


def test_a_key_given_by_location_serialises_as_its_location_only(key, tmp_path):
    path = key.save(tmp_path / "provider.key")
    located = ESpeWEmbedding(CountingEmbedding(), key_path=path)
    assert located.key_id == key.key_id
    for text in (located.to_json(), str(located.model_dump()), repr(located)):
        assert not any(secret in text for secret in secret_strings(key))


# ---------------------------------------------------------------------- inside LlamaIndex
def test_works_with_vector_store_index_and_chroma_vector_store(wrapped, texts, expected):
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection(
        f"llama-espew-{uuid.uuid4().hex[:8]}", configuration={"hnsw": {"space": "cosine"}}
    )
    store = ChromaVectorStore(chroma_collection=collection)
    nodes = [TextNode(text=text, id_=f"node-{i}") for i, text in enumerate(texts)]
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=wrapped,
    )
    stored = collection.get(ids=[n.id_ for n in nodes], include=["embeddings"])
    by_id = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    assert np.allclose([by_id[n.id_] for n in nodes], expected, atol=1e-6)
    retriever = index.as_retriever(similarity_top_k=1)
    for i in (0, 1, 6):
        assert retriever.retrieve(texts[i])[0].node.node_id == f"node-{i}"
