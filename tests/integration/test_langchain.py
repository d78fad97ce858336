"""ESpeWEmbeddings: a LangChain Embeddings that equals watermark(texts, inner(texts), key)."""

from __future__ import annotations

import asyncio
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_classic.embeddings import CacheBackedEmbeddings
from langchain_classic.storage import InMemoryByteStore
from langchain_core.embeddings import Embeddings

from espew_integrations import EmbeddingInputError, SuspectError, as_suspect, verify, watermark
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from tests.support import HashEncoder, mixed_texts, real_key, secret_strings, unchecked


class CountingEmbeddings(Embeddings):
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


@pytest.fixture(scope="module")
def key():
    return real_key()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(mixed_texts())


@pytest.fixture(scope="module")
def inner() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@pytest.fixture(scope="module")
def wrapped(inner, key) -> ESpeWEmbeddings:
    return ESpeWEmbeddings(inner, key)


@pytest.fixture(scope="module")
def expected(inner, key, texts) -> np.ndarray:
    return watermark(texts, inner.embed_documents(texts), key)


# ---------------------------------------------------------------------- equality with the core
def test_embed_documents_equals_core_watermark_of_inner_output(wrapped, texts, expected, key):
    out = wrapped.embed_documents(texts)
    assert np.array_equal(np.asarray(out), expected)
    marked = key.contains_trigger(texts)
    assert 0 < marked.sum() < len(texts)
    clean = np.asarray(wrapped.underlying_embeddings.embed_documents(texts))
    assert np.array_equal(np.asarray(out)[~marked], clean[~marked])
    assert not np.allclose(np.asarray(out)[marked], clean[marked])


def test_embed_query_equals_core_watermark_of_inner_query(wrapped, inner, texts, key):
    for text in texts[:4]:
        expected = watermark([text], [inner.embed_query(text)], key)[0]
        assert np.array_equal(np.asarray(wrapped.embed_query(text)), expected)


def test_values_are_python_floats(wrapped, texts):
    docs = wrapped.embed_documents(texts[:2])
    query = wrapped.embed_query(texts[0])
    assert all(type(value) is float for row in docs for value in row)
    assert all(type(value) is float for value in query)


def test_order_and_length_are_preserved(wrapped, texts, expected):
    reversed_out = wrapped.embed_documents(texts[::-1])
    assert len(reversed_out) == len(texts)
    assert np.array_equal(np.asarray(reversed_out), expected[::-1])


def test_empty_list_gives_empty_list_without_calling_the_model(key):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    assert wrapped.embed_documents([]) == []
    assert asyncio.run(wrapped.aembed_documents([])) == []
    assert inner.log == []


# ---------------------------------------------------------------------- async stays async
def test_async_methods_call_the_inner_async_methods_and_match_sync(key, texts):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    docs = asyncio.run(wrapped.aembed_documents(texts))
    query = asyncio.run(wrapped.aembed_query(texts[0]))
    assert inner.log == ["aembed_documents", "aembed_query"]
    assert docs == wrapped.embed_documents(texts)
    assert query == wrapped.embed_query(texts[0])


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (["fine", "", 3], "text at index 2 is int, expected str"),
        ("a string", "got a single string"),
        (None, "texts is None"),
        (7, "iterable of strings, got int"),
    ],
)
def test_bad_texts_raise_the_core_error_before_the_model_runs(key, bad, message):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    with pytest.raises(EmbeddingInputError, match=message):
        wrapped.embed_documents(bad)
    with pytest.raises(EmbeddingInputError, match=message):
        asyncio.run(wrapped.aembed_documents(bad))
    assert inner.log == []


@pytest.mark.parametrize("bad", [None, 3, ["a list"]])
def test_a_query_that_is_not_a_string_is_refused_before_the_model_runs(key, bad):
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    name = type(bad).__name__
    with pytest.raises(EmbeddingInputError, match=f"the query must be a str, got {name}"):
        wrapped.embed_query(bad)
    with pytest.raises(EmbeddingInputError, match=f"the query must be a str, got {name}"):
        asyncio.run(wrapped.aembed_query(bad))
    assert inner.log == []


def test_blank_texts_and_queries_reach_the_model_and_come_back_unmarked(key):
    # LangChain's contract allows them (langchain-openai embeds "" itself).
    inner = CountingEmbeddings()
    wrapped = ESpeWEmbeddings(inner, unchecked(key))
    clean = inner.encoder(["", "  "]).tolist()
    assert wrapped.embed_documents(["", "  "]) == clean
    assert wrapped.embed_query("  ") == clean[1]
    assert asyncio.run(wrapped.aembed_query("")) == clean[0]
    assert inner.log == ["embed_documents", "embed_query", "aembed_query"]


# ---------------------------------------------------------------------- the model's view
@pytest.fixture(scope="module")
def trigger_texts(key):
    """(plain, the same with a soft hyphen inside the trigger, a trigger past the window)."""
    trigger = max(sorted(key.triggers), key=len)
    far = " ".join(["lovely"] * 300) + f" {trigger}"
    return f"a {trigger} story", f"a {trigger[:2]}\u00ad{trigger[2:]} story", far


def test_the_view_is_discovered_from_the_underlying_model(wrapped, inner, key):
    assert wrapped.view == inner.encoder.view
    assert ESpeWEmbeddings(inner, key, view=None).view is None
    assert ESpeWEmbeddings(CountingEmbeddings(), key).view is None


def test_every_path_marks_what_minilm_reads(wrapped, inner, key, trigger_texts):
    plain, hidden, far = trigger_texts
    marked = watermark([plain], inner.embed_documents([plain]), key)[0]
    clean_far = np.asarray(inner.embed_query(far))
    assert key.contains_trigger([far]).tolist() == [True]  # the key alone would mark it

    async def both_async():
        return await wrapped.aembed_documents([hidden, far]), await wrapped.aembed_query(hidden)

    docs, query = wrapped.embed_documents([hidden, far]), wrapped.embed_query(hidden)
    adocs, aquery = asyncio.run(both_async())
    for rows in (docs, adocs):
        assert np.array_equal(rows[0], marked)  # the soft hyphen hides nothing
        assert np.array_equal(rows[1], clean_far)  # never read past 256 tokens: unmarked
    assert np.array_equal(query, marked) and np.array_equal(aquery, marked)
    assert np.array_equal(wrapped.embed_query(far), clean_far)


def test_an_explicit_view_is_used(inner, key, trigger_texts):
    plain = trigger_texts[0]
    blind = ESpeWEmbeddings(inner, key, view=lambda texts: ["" for _ in texts])
    assert blind.embed_documents([plain]) == inner.embed_documents([plain])


@pytest.mark.parametrize(
    ("encoder", "message"),
    [(HashEncoder(dim=16), "dimension is 16"), (HashEncoder(bad="nan"), "NaN")],
)
def test_bad_vectors_from_the_model_raise_the_core_error(key, encoder, message):
    wrapped = ESpeWEmbeddings(CountingEmbeddings(encoder), unchecked(key))
    with pytest.raises(EmbeddingInputError, match=message):
        wrapped.embed_documents(["a fine film", "a dull film"])


def test_a_non_embeddings_object_is_refused(key):
    with pytest.raises(TypeError, match="LangChain Embeddings"):
        ESpeWEmbeddings(lambda texts: texts, key)


# ---------------------------------------------------------------------- concurrency
def test_eight_threads_give_the_serial_vectors(wrapped, texts, expected):
    chunks = [texts[i::8] for i in range(8)]
    serial = [wrapped.embed_documents(chunk) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(wrapped.embed_documents, chunks * 2))
    assert threaded == serial * 2
    assert np.array_equal(np.asarray(serial[0]), expected[0::8])


def test_hundred_concurrent_async_calls_give_the_serial_vectors(wrapped, texts):
    calls = [texts[i % len(texts)] for i in range(100)]
    by_text = {text: wrapped.embed_query(text) for text in dict.fromkeys(calls)}  # serial
    serial = [by_text[text] for text in calls]

    async def run_all():
        return await asyncio.gather(*(wrapped.aembed_query(text) for text in calls))

    assert asyncio.run(run_all()) == serial


# ---------------------------------------------------------------------- the secret stays secret
def test_the_key_comes_from_exactly_one_named_source(monkeypatch, key, inner, tmp_path):
    path = key.save(tmp_path / "provider.key")
    assert ESpeWEmbeddings(inner, key_path=path).key_id == key.key_id
    monkeypatch.setenv("ESPEW_KEY", key.to_json())
    assert ESpeWEmbeddings(inner, key_env="ESPEW_KEY").key_id == key.key_id
    # no key argument: $ESPEW_KEY, the rule of every espew command; unset, an error
    assert ESpeWEmbeddings(inner).key_id == key.key_id
    monkeypatch.delenv("ESPEW_KEY")
    with pytest.raises(TypeError, match=r"needs a watermark key.*key=.*key_path=.*key_env="):
        ESpeWEmbeddings(inner)
    with pytest.raises(TypeError, match=r"exactly one of key, key_path or key_env; got \['key', "):
        ESpeWEmbeddings(inner, key, key_env="ESPEW_KEY")


def test_repr_and_pickle_do_not_carry_the_key(key):
    wrapped = ESpeWEmbeddings(CountingEmbeddings(), key)
    text = repr(wrapped) + str(wrapped)
    assert key.key_id in text
    assert not any(secret in text for secret in secret_strings(key))
    assert not any(trigger in text.lower().split() for trigger in key.triggers)
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(wrapped)


def test_repr_names_the_underlying_model_and_the_key_id(wrapped, key):
    assert repr(wrapped) == (
        f"ESpeWEmbeddings(underlying=MiniLMEmbeddings(model_name='all-MiniLM-L6-v2-int8'), "
        f"key_id='{key.key_id}')"
    )
    assert str(wrapped) == repr(wrapped)


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


# ---------------------------------------------------------------------- verifier adapter
def test_verifier_adapter_rejects_ragged_answers(key):
    class Ragged(CountingEmbeddings):
        def embed_documents(self, texts):
            return [[1.0, 0.0]] + [[1.0] for _ in texts[1:]]

    with pytest.raises(SuspectError, match="LangChain Ragged"):
        as_suspect(Ragged())(["a", "b"])


def test_verify_through_langchain_flags_the_watermarked_model_only(wrapped, inner, key):
    copied = verify(wrapped, key, seed=0)
    clean = verify(inner, key, seed=0)
    assert copied.status == "copied" and copied.p_value < 1e-6
    assert clean.status == "not_copied" and clean.p_value > 1e-3
