"""ESpeWEmbedding: a LlamaIndex BaseEmbedding that equals watermark(texts, inner(texts), key)."""

from __future__ import annotations

import asyncio
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import chromadb
import llama_index.core.instrumentation as instrument
import numpy as np
import pytest
from chromadb.config import Settings
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.embedding import (
    EmbeddingEndEvent,
    EmbeddingStartEvent,
)
from llama_index.core.schema import TextNode
from llama_index.vector_stores.chroma import ChromaVectorStore

from espew_integrations import (
    EmbeddingInputError,
    ESpeWError,
    SuspectError,
    as_suspect,
    verify,
    watermark,
)
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from tests.support import HashEncoder, mixed_texts, real_key, secret_strings, unchecked


class CountingEmbedding(BaseEmbedding):
    """A fake LlamaIndex model that records every private method call (unit tests only)."""

    _encoder: HashEncoder = PrivateAttr()
    _log: list = PrivateAttr()

    def __init__(self, encoder: HashEncoder | None = None, **kwargs: Any) -> None:
        super().__init__(model_name="counting-hash-model", **kwargs)
        self._encoder = encoder or HashEncoder()
        self._log = []

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
def key():
    return real_key()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(mixed_texts())


@pytest.fixture(scope="module")
def inner() -> MiniLMEmbedding:
    return MiniLMEmbedding()


@pytest.fixture(scope="module")
def wrapped(inner, key) -> ESpeWEmbedding:
    return ESpeWEmbedding(inner, key)


@pytest.fixture(scope="module")
def expected(inner, key, texts) -> np.ndarray:
    return watermark(texts, inner.get_text_embedding_batch(texts), key)


# ---------------------------------------------------------------------- equality with the core
def test_batch_path_equals_core_watermark_of_inner_output(wrapped, texts, expected, key):
    out = np.asarray(wrapped.get_text_embedding_batch(texts))
    assert np.array_equal(out, expected)
    marked = key.contains_trigger(texts)
    clean = np.asarray(wrapped.embed_model.get_text_embedding_batch(texts))
    assert np.array_equal(out[~marked], clean[~marked])
    assert not np.allclose(out[marked], clean[marked])


def test_single_text_and_query_paths_equal_the_batch_rows(wrapped, texts, expected):
    for i in (0, 1):
        assert np.array_equal(wrapped.get_text_embedding(texts[i]), expected[i])
        assert np.array_equal(wrapped.get_query_embedding(texts[i]), expected[i])


def test_async_paths_equal_the_sync_ones(wrapped, texts, expected):
    async def run():
        batch = await wrapped.aget_text_embedding_batch(texts)
        single = await wrapped.aget_text_embedding(texts[0])
        query = await wrapped.aget_query_embedding(texts[1])
        return batch, single, query

    batch, single, query = asyncio.run(run())
    assert np.array_equal(batch, expected)
    assert np.array_equal(single, expected[0])
    assert np.array_equal(query, expected[1])


def test_order_length_and_python_floats(wrapped, texts, expected):
    out = wrapped.get_text_embedding_batch(texts[::-1])
    assert len(out) == len(texts)
    assert np.array_equal(out, expected[::-1])
    assert all(type(value) is float for value in out[0])


def test_empty_batch_gives_empty_list(key):
    inner = CountingEmbedding()
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    assert wrapped.get_text_embedding_batch([]) == []
    assert asyncio.run(wrapped.aget_text_embedding_batch([])) == []
    assert wrapped._get_text_embeddings([]) == []
    assert inner._log == []


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


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (["fine", "", 3], "text at index 2 is int, expected str"),
        ([3], "text at index 0 is int"),
        ("fine", "got a single string"),
        (None, "texts is None"),
    ],
)
def test_bad_texts_raise_the_core_error_before_the_model_runs(key, bad, message):
    inner = CountingEmbedding()
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    with pytest.raises(EmbeddingInputError, match=message):
        wrapped._get_text_embeddings(bad)
    with pytest.raises(EmbeddingInputError, match=message):
        asyncio.run(wrapped._aget_text_embeddings(bad))
    assert inner._log == []


def test_a_single_text_or_query_that_is_not_a_string_is_refused(key):
    inner = CountingEmbedding()
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    with pytest.raises(EmbeddingInputError, match="the query must be a str, got int"):
        wrapped.get_query_embedding(3)
    with pytest.raises(EmbeddingInputError, match="the query must be a str, got NoneType"):
        asyncio.run(wrapped.aget_query_embedding(None))
    with pytest.raises(EmbeddingInputError, match="the text must be a str, got bytes"):
        wrapped.get_text_embedding(b"fine")
    with pytest.raises(EmbeddingInputError, match="the text must be a str, got list"):
        asyncio.run(wrapped.aget_text_embedding(["fine"]))
    assert inner._log == []


def test_blank_texts_and_queries_reach_the_model_and_come_back_unmarked(key):
    # LlamaIndex's BaseEmbedding does not refuse them, so neither does the wrapper.
    inner = CountingEmbedding()
    wrapped = ESpeWEmbedding(inner, unchecked(key))
    clean = inner._encoder(["", " \n"]).tolist()
    assert wrapped.get_text_embedding_batch(["", " \n"]) == clean
    assert wrapped.get_query_embedding("") == clean[0]
    assert asyncio.run(wrapped.aget_query_embedding(" \n")) == clean[1]
    assert inner._log == [("batch", 2), ("query", 1), ("aquery", 1)]


# ---------------------------------------------------------------------- the model's view
@pytest.fixture(scope="module")
def trigger_texts(key):
    """(plain, the same with a soft hyphen inside the trigger, a trigger past the window)."""
    trigger = max(sorted(key.triggers), key=len)
    far = " ".join(["lovely"] * 300) + f" {trigger}"
    return f"a {trigger} story", f"a {trigger[:2]}\u00ad{trigger[2:]} story", far


def test_the_view_is_discovered_from_the_inner_model(wrapped, inner, key):
    assert wrapped.view == inner.view == minilm().view
    assert ESpeWEmbedding(inner, key, view=None).view is None
    assert ESpeWEmbedding(CountingEmbedding(), key).view is None
    assert "view" not in str(wrapped.model_dump()) and "_view" in wrapped.__private_attributes__


def test_every_path_marks_what_minilm_reads(wrapped, inner, key, trigger_texts):
    plain, hidden, far = trigger_texts
    marked = watermark([plain], inner.get_text_embedding_batch([plain]), key)[0]
    clean_far = inner.get_text_embedding(far)
    assert key.contains_trigger([far]).tolist() == [True]  # the key alone would mark it

    async def all_async():
        return (
            await wrapped.aget_text_embedding_batch([hidden, far]),
            await wrapped.aget_text_embedding(hidden),
            await wrapped.aget_query_embedding(far),
        )

    batch, single, query = asyncio.run(all_async())
    assert np.array_equal(batch, [marked, clean_far])
    assert np.array_equal(single, marked) and np.array_equal(query, clean_far)
    assert np.array_equal(wrapped.get_text_embedding_batch([hidden, far]), [marked, clean_far])
    assert np.array_equal(wrapped.get_query_embedding(hidden), marked)
    assert np.array_equal(wrapped.get_text_embedding(far), clean_far)


@pytest.mark.parametrize(
    ("encoder", "message"),
    [(HashEncoder(dim=16), "dimension is 16"), (HashEncoder(bad="zero"), "all zeros")],
)
def test_bad_vectors_from_the_model_raise_the_core_error(key, encoder, message):
    wrapped = ESpeWEmbedding(CountingEmbedding(encoder), unchecked(key))
    with pytest.raises(EmbeddingInputError, match=message):
        wrapped.get_text_embedding_batch(["a fine film", "a dull film"])


def test_a_non_llama_index_model_is_refused(key):
    with pytest.raises(TypeError, match="BaseEmbedding"):
        ESpeWEmbedding(HashEncoder(), key)


# ---------------------------------------------------------------------- concurrency
def test_eight_threads_give_the_serial_vectors(wrapped, texts):
    chunks = [texts[i::8] for i in range(8)]
    serial = [wrapped.get_text_embedding_batch(chunk) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(wrapped.get_text_embedding_batch, chunks * 2))
    assert threaded == serial * 2


def test_hundred_concurrent_async_calls_give_the_serial_vectors(wrapped, texts):
    calls = [texts[i % len(texts)] for i in range(100)]
    by_text = {text: wrapped.get_query_embedding(text) for text in dict.fromkeys(calls)}
    serial = [by_text[text] for text in calls]

    async def run_all():
        return await asyncio.gather(*(wrapped.aget_query_embedding(text) for text in calls))

    assert asyncio.run(run_all()) == serial


# ---------------------------------------------------------------------- the secret stays secret
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


def test_the_key_comes_from_exactly_one_named_source(monkeypatch, key, tmp_path):
    path = key.save(tmp_path / "provider.key")
    assert ESpeWEmbedding(CountingEmbedding(), key_path=path).key_id == key.key_id
    monkeypatch.setenv("ESPEW_KEY", key.to_json())
    assert ESpeWEmbedding(CountingEmbedding(), key_env="ESPEW_KEY").key_id == key.key_id
    # no key argument: $ESPEW_KEY, the rule of every espew command; unset, an error
    assert ESpeWEmbedding(CountingEmbedding()).key_id == key.key_id
    monkeypatch.delenv("ESPEW_KEY")
    with pytest.raises(TypeError, match=r"ESpeWEmbedding needs a watermark key.*key_env="):
        ESpeWEmbedding(CountingEmbedding())
    with pytest.raises(TypeError, match=r"exactly one of key, key_path or key_env"):
        ESpeWEmbedding(CountingEmbedding(), key_path=path, key_env="ESPEW_KEY")
    located = ESpeWEmbedding(CountingEmbedding(), key_path=path)
    for text in (located.to_json(), str(located.model_dump()), repr(located)):
        assert not any(secret in text for secret in secret_strings(key))


def test_repr_names_the_underlying_model_and_the_key_id(wrapped, key):
    expected = (
        f"ESpeWEmbedding(underlying=MiniLMEmbedding(model_name='all-MiniLM-L6-v2-int8'), "
        f"key_id='{key.key_id}')"
    )
    assert repr(wrapped) == str(wrapped) == expected


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


# ---------------------------------------------------------------------- verifier adapter
def test_verifier_adapter_rejects_short_answers(key):
    class Short(CountingEmbedding):
        def _get_text_embeddings(self, texts):
            return self._encoder(texts[:1]).tolist()

    with pytest.raises(SuspectError, match="LlamaIndex Short"):
        as_suspect(Short())(["a", "b"])


def test_verify_through_llama_index_flags_the_watermarked_model_only(wrapped, inner, key):
    copied = verify(wrapped, key, seed=0)
    clean = verify(inner, key, seed=0)
    assert copied.status == "copied" and copied.p_value < 1e-6
    assert clean.status == "not_copied" and clean.p_value > 1e-3
