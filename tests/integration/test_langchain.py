"""ESpeWEmbeddings inside LangChain: async stays async, stores, caches, pickling.

What every wrapper promises (equality with the core on every path, bad input, the
model's view, concurrency, the key, verify) is tests/integration/test_wrappers.py.
"""

from __future__ import annotations

import asyncio
import pickle
import uuid

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_classic.embeddings import CacheBackedEmbeddings
from langchain_classic.storage import InMemoryByteStore

from espew_integrations import watermark
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from tests.integration.framework_fakes import CountingEmbeddings
from tests.support import unchecked


@pytest.fixture(scope="module")
def inner() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@pytest.fixture(scope="module")
def wrapped(inner, key) -> ESpeWEmbeddings:
    return ESpeWEmbeddings(inner, key)


@pytest.fixture(scope="module")
def expected(inner, key, texts) -> np.ndarray:
    return watermark(texts, inner.embed_documents(texts), key)


# ---------------------------------------------------------------------- async stays async
def test_async_methods_call_the_inner_async_methods_and_match_sync(key, texts):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    docs = asyncio.run(wrapped.aembed_documents(texts))
    query = asyncio.run(wrapped.aembed_query(texts[0]))
    assert inner.log == ["aembed_documents", "aembed_query"]
    assert docs == wrapped.embed_documents(texts)
    assert query == wrapped.embed_query(texts[0])


# ---------------------------------------------------------------------- the secret stays secret
def test_pickling_is_refused_rather_than_carrying_the_key(key):
    # The repr's rule (the key_id only) is in test_wrappers.py, for every wrapper.
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(ESpeWEmbeddings(CountingEmbeddings(), key))


# ---------------------------------------------------------------------- inside LangChain
def test_works_inside_langchain_chroma(wrapped, texts, expected):
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    store = Chroma(
        collection_name=f"langchain-espew-{uuid.uuid4().hex[:8]}",
        embedding_function=wrapped,
        client=client,
        collection_metadata={"hnsw:space": "cosine"},
    )
    ids = [f"doc-{i}" for i in range(len(texts))]
    store.add_texts(texts, ids=ids)
    stored = store.get(ids=ids, include=["embeddings", "documents"])
    by_id = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    assert np.allclose([by_id[i] for i in ids], expected, atol=1e-6)  # Chroma stores float32
    for i in (0, 1, 6):
        hits = store.similarity_search(texts[i], k=1)
        assert hits[0].page_content == texts[i]


def test_cache_backed_embeddings_store_the_watermarked_vector(key, texts):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    store = InMemoryByteStore()
    cached = CacheBackedEmbeddings.from_bytes_store(
        wrapped, store, namespace=wrapped.key_id, key_encoder="sha256"
    )
    first = cached.embed_documents(texts)
    again = cached.embed_documents(texts)
    assert inner.log == ["embed_documents"]  # the second call was served by the cache
    assert first == again == wrapped.embed_documents(texts)
    assert len(list(store.yield_keys())) == len(set(texts))
    decoded = cached.document_embedding_store.mget(texts)
    expected = watermark(texts, inner.encoder(texts).astype(np.float64), key)
    assert np.array_equal(np.asarray(decoded), expected)
