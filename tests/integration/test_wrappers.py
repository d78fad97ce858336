"""What every wrapper promises, once per behaviour, a parameter per framework.

LangChain's ``ESpeWEmbeddings``, LlamaIndex's ``ESpeWEmbedding`` and Chroma's
``ESpeWEmbeddingFunction`` each equal ``watermark(texts, inner(texts), key)`` on every
path, refuse bad input before the model runs, mark what the model reads, keep the key
out of every repr, and are flagged by ``verify``. A ``Framework`` says how to reach each
path of one wrapper; what only one framework has (LangChain's cache, LlamaIndex's
batching and events, Chroma's persisted config) stays in that framework's own file.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from espew_integrations import (
    EmbeddingInputError,
    KeyFileError,
    SuspectError,
    as_suspect,
    verify,
    watermark,
)
from espew_integrations.chroma import ESpeWEmbeddingFunction
from espew_integrations.core.ground.text import discover_view
from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
from espew_integrations.langchain import ESpeWEmbeddings
from espew_integrations.llama_index import ESpeWEmbedding
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from tests.integration.framework_fakes import (
    CountingEmbedding,
    CountingEmbeddings,
    CountingFunction,
)
from tests.support import HashEncoder, mixed_texts, secret_strings, unchecked

Paths = dict[str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Framework:
    """One wrapper and the ways into it, each a plain function of the wrapped object."""

    name: str
    wrapper: type
    real_inner: Callable[[], Any]  # the framework's offline MiniLM
    counting_inner: Callable[..., Any]  # framework_fakes, over a HashEncoder
    batch: Callable[[Any], Paths]  # every path that takes a list of texts
    single: Callable[[Any], Paths]  # every path that takes one text (none for Chroma)
    checked: Callable[[Any], Paths]  # the batch paths that see the caller's object as given
    row_type: type  # what one answered row is
    inner_repr: str  # repr of the real inner model
    refuses: str  # the error for an inner model of another framework
    suspect_name: str  # how a malformed answer's error names the framework

    def __str__(self) -> str:
        return self.name


def _sync(coroutine_function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args: asyncio.run(coroutine_function(*args))


class _Ragged(CountingEmbeddings):
    def embed_documents(self, texts):
        return [[1.0, 0.0]] + [[1.0] for _ in texts[1:]]


class _ShortIndex(CountingEmbedding):
    def _get_text_embeddings(self, texts):
        return self._encoder(texts[:1]).tolist()


class _ShortFunction(CountingFunction):
    def __call__(self, input):
        return list(self.encoder(list(input)[:1]))


LANGCHAIN = Framework(
    name="langchain",
    wrapper=ESpeWEmbeddings,
    real_inner=MiniLMEmbeddings,
    counting_inner=CountingEmbeddings,
    batch=lambda w: {
        "embed_documents": w.embed_documents,
        "aembed_documents": _sync(w.aembed_documents),
    },
    single=lambda w: {"embed_query": w.embed_query, "aembed_query": _sync(w.aembed_query)},
    checked=lambda w: {
        "embed_documents": w.embed_documents,
        "aembed_documents": _sync(w.aembed_documents),
    },
    row_type=list,
    inner_repr="MiniLMEmbeddings(model_name='all-MiniLM-L6-v2-int8')",
    refuses="LangChain Embeddings",
    suspect_name="LangChain _Ragged",
)
LLAMA_INDEX = Framework(
    name="llama_index",
    wrapper=ESpeWEmbedding,
    real_inner=MiniLMEmbedding,
    counting_inner=CountingEmbedding,
    batch=lambda w: {
        "get_text_embedding_batch": w.get_text_embedding_batch,
        "aget_text_embedding_batch": _sync(w.aget_text_embedding_batch),
    },
    single=lambda w: {
        "get_text_embedding": w.get_text_embedding,
        "get_query_embedding": w.get_query_embedding,
        "aget_text_embedding": _sync(w.aget_text_embedding),
        "aget_query_embedding": _sync(w.aget_query_embedding),
    },
    # LlamaIndex's public batch methods cut the input into batches themselves (a string
    # into characters); the wrapper first sees it in the private methods they call.
    checked=lambda w: {
        "_get_text_embeddings": w._get_text_embeddings,
        "_aget_text_embeddings": _sync(w._aget_text_embeddings),
    },
    row_type=list,
    inner_repr="MiniLMEmbedding(model_name='all-MiniLM-L6-v2-int8')",
    refuses="BaseEmbedding",
    suspect_name="LlamaIndex _ShortIndex",
)
CHROMA = Framework(
    name="chroma",
    wrapper=ESpeWEmbeddingFunction,
    real_inner=MiniLMEmbeddingFunction,
    counting_inner=CountingFunction,
    batch=lambda w: {"__call__": w, "embed_query": w.embed_query},
    single=lambda w: {},
    checked=lambda w: {"__call__": w, "embed_query": w.embed_query},
    row_type=np.ndarray,
    inner_repr="MiniLMEmbeddingFunction(model='minilm')",
    refuses="must be a Chroma EmbeddingFunction",
    suspect_name="Chroma _ShortFunction",
)
FRAMEWORKS = [LANGCHAIN, LLAMA_INDEX, CHROMA]
MALFORMED = {"langchain": _Ragged, "llama_index": _ShortIndex, "chroma": _ShortFunction}
WITH_SINGLE_PATHS = [LANGCHAIN, LLAMA_INDEX]


@pytest.fixture(scope="module", params=FRAMEWORKS, ids=str)
def fw(request) -> Framework:
    return request.param


@pytest.fixture(scope="module")
def inner(fw):
    return fw.real_inner()


@pytest.fixture(scope="module")
def wrapped(fw, inner, key):
    return fw.wrapper(inner, key)


def _rows(answer: Any) -> np.ndarray:
    return np.asarray(answer)


def _first_batch(fw: Framework, embedder: Any) -> Callable[[Any], Any]:
    """The framework's plain synchronous batch method of ``embedder`` (wrapper or model)."""
    return next(iter(fw.batch(embedder).values()))


def _clean(fw: Framework, inner: Any, texts: list[str]) -> np.ndarray:
    """The inner model's own batch answer, in the framework's own number type."""
    return _rows(_first_batch(fw, inner)(texts))


@pytest.fixture(scope="module")
def expected(fw, inner, key, texts) -> np.ndarray:
    return watermark(texts, _clean(fw, inner, texts), key)


def _counting(fw: Framework, key, encoder: HashEncoder | None = None):
    """(the wrapper over the framework's counting fake, the fake's encoder)."""
    inner = fw.counting_inner(encoder)
    return fw.wrapper(inner, unchecked(key)), inner.encoder


# ---------------------------------------------------------------------- equality with the core
def test_every_batch_path_equals_the_core_watermark_of_the_inner_output(
    fw, wrapped, inner, key, texts, expected
):
    marked = key.contains_trigger(texts)
    assert 0 < marked.sum() < len(texts)
    clean = _clean(fw, inner, texts)
    for name, path in fw.batch(wrapped).items():
        out = _rows(path(texts))
        assert np.array_equal(out, expected), name
        assert np.array_equal(out[~marked], clean[~marked]), name
        assert not np.allclose(out[marked], clean[marked]), name


@pytest.mark.parametrize("fw", WITH_SINGLE_PATHS, ids=str, indirect=True)
def test_every_single_text_path_equals_its_batch_row(fw, wrapped, texts, expected):
    for i in range(4):
        for name, path in fw.single(wrapped).items():
            assert np.array_equal(path(texts[i]), expected[i]), (name, i)


def test_order_and_length_are_kept(fw, wrapped, texts, expected):
    for name, path in fw.batch(wrapped).items():
        out = path(texts[::-1])
        assert len(out) == len(texts), name
        assert np.array_equal(_rows(out), expected[::-1]), name


def test_answers_are_the_framework_s_types(fw, wrapped, texts):
    for name, path in fw.batch(wrapped).items():
        out = path(texts[:2])
        assert isinstance(out, list) and all(type(row) is fw.row_type for row in out), name
        if fw.row_type is list:  # of Python floats, as the framework's models answer
            assert all(type(value) is float for row in out for value in row), name
    for name, path in fw.single(wrapped).items():
        assert all(type(value) is float for value in path(texts[0])), name


def test_an_empty_batch_is_empty_and_never_reaches_the_model(fw, key):
    wrapped, encoder = _counting(fw, key)
    for name, path in {**fw.batch(wrapped), **fw.checked(wrapped)}.items():
        assert path([]) == [], name
    assert encoder.calls == []


@pytest.mark.parametrize("fw", [LANGCHAIN, CHROMA], ids=str, indirect=True)
def test_a_generator_of_texts_is_read_once_and_embedded_whole(fw, wrapped, texts):
    # (LlamaIndex's own batch methods take only lists: the wrapper sees no generator there.)
    batch = _first_batch(fw, wrapped)
    assert np.array_equal(_rows(batch(text for text in texts[:4])), _rows(batch(texts[:4])))


# ---------------------------------------------------------------------- bad input
BAD_TEXTS = [
    (["fine", "", 3], "text at index 2 is int, expected str"),
    (["fine", "", None], "text at index 2 is NoneType, expected str"),
    ([3], "text at index 0 is int"),
    ("a string", "got a single string"),
    (None, "texts is None"),
    (7, "iterable of strings, got int"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_TEXTS)
def test_bad_texts_raise_the_core_error_before_the_model_runs(fw, key, bad, message):
    wrapped, encoder = _counting(fw, key)
    for path in fw.checked(wrapped).values():
        with pytest.raises(EmbeddingInputError, match=message):
            path(bad)
    assert encoder.calls == []


@pytest.mark.parametrize("fw", WITH_SINGLE_PATHS, ids=str, indirect=True)
@pytest.mark.parametrize("bad", [None, 3, ["a list"], b"bytes"])
def test_a_single_text_that_is_not_a_string_is_refused_before_the_model_runs(fw, key, bad):
    wrapped, encoder = _counting(fw, key)
    for name, path in fw.single(wrapped).items():
        role = "query" if "query" in name else "text"
        message = f"the {role} must be a str, got {type(bad).__name__}"
        with pytest.raises(EmbeddingInputError, match=message):
            path(bad)
    assert encoder.calls == []


def test_bad_text_errors_name_the_index_and_nothing_of_the_key(fw, wrapped, key, trigger_texts):
    for name, path in fw.checked(wrapped).items():
        with pytest.raises(EmbeddingInputError, match="text at index 2 is int") as caught:
            path([trigger_texts[0], "", 7])
        message = str(caught.value)
        assert not any(secret in message for secret in secret_strings(key)), name
        assert not set(message.lower().replace(",", " ").split()) & set(key.triggers), name


def test_blank_texts_reach_the_model_and_come_back_unmarked(fw, key, trigger_texts):
    # Every framework lets them through (langchain-openai and Chroma embed "" themselves).
    wrapped, encoder = _counting(fw, key)
    texts = [trigger_texts[0], "", " \n\t"]
    clean = encoder(texts)
    for name, path in fw.batch(wrapped).items():
        encoder.calls.clear()
        out = _rows(path(texts))
        assert encoder.calls == [texts], name  # the blanks reached the model, in one call
        assert np.array_equal(out[1:], clean[1:]) and not np.allclose(out[0], clean[0]), name
    for name, path in fw.single(wrapped).items():
        assert np.array_equal(path(" \n\t"), clean[2]), name


@pytest.mark.parametrize(
    ("encoder", "message"),
    [
        (HashEncoder(dim=16), "dimension is 16"),
        (HashEncoder(bad="nan"), "NaN"),
        (HashEncoder(bad="zero"), "all zeros"),
    ],
    ids=["dimension", "nan", "zero"],
)
def test_bad_vectors_from_the_model_raise_the_core_error(fw, key, encoder, message):
    wrapped, _ = _counting(fw, key, encoder)
    for name, path in fw.batch(wrapped).items():
        with pytest.raises(EmbeddingInputError, match=message):
            path(["a fine film", "a dull film"])
        assert name


def test_an_inner_model_of_another_kind_is_refused(fw, key):
    with pytest.raises(TypeError, match=fw.refuses):
        fw.wrapper(object(), key)


# ---------------------------------------------------------------------- the model's view
@pytest.fixture(scope="module")
def trigger_texts(key):
    """(plain, the same with a soft hyphen inside the trigger, a trigger past the window)."""
    trigger = max(sorted(key.triggers), key=len)
    plain = f"a {trigger} story"
    hidden = f"a {trigger[:2]}\u00ad{trigger[2:]} story"
    far = " ".join(["lovely"] * 300) + f" {trigger}"
    model = minilm()
    assert key.contains_trigger([plain], view=model.view).tolist() == [True]
    assert not key.contains_trigger(["a story", "lovely"]).any()
    assert len(model.view([far])[0].split()) < 300  # the model stops reading before it
    assert key.contains_trigger([far]).tolist() == [True]  # what the key alone would mark
    return plain, hidden, far


def test_the_view_is_discovered_from_the_inner_model(fw, wrapped, inner, key):
    assert wrapped.view == discover_view(inner) == minilm().view
    assert fw.wrapper(inner, key, view=None).view is None
    assert fw.wrapper(fw.counting_inner(), key).view is None


def test_every_path_marks_what_the_model_reads(fw, wrapped, inner, key, trigger_texts):
    plain, hidden, far = trigger_texts
    clean = _clean(fw, inner, [plain, far])
    marked = watermark([plain], clean[:1], key)[0]
    assert not np.allclose(marked, clean[0])
    for name, path in fw.batch(wrapped).items():
        # The soft hyphen is deleted by the model's normaliser: marked as the plain text is;
        # the model never reads a trigger past its 256-token window: returned clean.
        assert np.array_equal(_rows(path([hidden, far])), np.stack([marked, clean[1]])), name
    for name, path in fw.single(wrapped).items():
        assert np.array_equal(path(hidden), marked), name
        assert np.array_equal(path(far), clean[1]), name


def test_view_none_falls_back_to_the_key_s_rules(fw, inner, key, trigger_texts):
    _, hidden, far = trigger_texts
    blind_to_the_model = fw.wrapper(inner, key, view=None)
    clean = _clean(fw, inner, [hidden, far])
    # The key's Unicode normalisation still sees through the soft hyphen, but with no
    # window recorded in this key, the far trigger now marks.
    for name, path in fw.batch(blind_to_the_model).items():
        out = _rows(path([hidden, far]))
        assert np.array_equal(out, watermark([hidden, far], clean, key)), name
        assert not np.allclose(out[1], clean[1]), name


def test_an_explicit_view_is_used(fw, inner, key, trigger_texts):
    blind = fw.wrapper(inner, key, view=lambda texts: ["" for _ in texts])
    plain = [trigger_texts[0]]
    for name, path in fw.batch(blind).items():
        assert np.array_equal(_rows(path(plain)), _clean(fw, inner, plain)), name


# ---------------------------------------------------------------------- concurrency
def test_eight_threads_give_the_serial_vectors(fw, wrapped, texts, expected):
    batch = _first_batch(fw, wrapped)
    chunks = [texts[i::8] for i in range(8)]
    serial = [_rows(batch(chunk)) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = [_rows(rows) for rows in pool.map(batch, chunks * 2)]
    assert all(np.array_equal(a, b) for a, b in zip(threaded, serial * 2, strict=True))
    assert np.array_equal(serial[0], expected[0::8])


def _one_async(fw: Framework, wrapped: Any) -> Callable[[str], Any]:
    """A coroutine function of one text: the framework's async query path (Chroma: a thread)."""
    return {
        "langchain": lambda text: wrapped.aembed_query(text),
        "llama_index": lambda text: wrapped.aget_query_embedding(text),
        "chroma": lambda text: asyncio.to_thread(lambda: wrapped([text])[0]),
    }[fw.name]


def test_a_hundred_concurrent_async_calls_give_the_serial_vectors(fw, wrapped, texts, expected):
    calls = [i % len(texts) for i in range(100)]
    one = _one_async(fw, wrapped)

    async def run_all():
        return await asyncio.gather(*(one(texts[i]) for i in calls))

    assert np.array_equal(_rows(asyncio.run(run_all())), expected[calls])


# ---------------------------------------------------------------------- the key and the secret
def test_the_key_comes_from_exactly_one_named_source(fw, key, tmp_path, monkeypatch):
    path = key.save(tmp_path / "provider.key")
    make = lambda *args, **kw: fw.wrapper(fw.counting_inner(), *args, **kw)  # noqa: E731
    monkeypatch.setenv("MY_KEY", key.to_json())  # the variable may hold the JSON
    monkeypatch.setenv("ESPEW_KEY", str(path))  # or a path
    for sources in ({"key": key}, {"key_path": path}, {"key_env": "MY_KEY"}, {}):
        assert make(**sources).key_id == key.key_id, sources  # {}: $ESPEW_KEY, as espew
    monkeypatch.delenv("ESPEW_KEY")
    with pytest.raises(TypeError, match=r"needs a watermark key.*key=.*key_path=.*key_env="):
        make()
    with pytest.raises(TypeError, match=r"exactly one of key, key_path or key_env; got \['key', "):
        make(key, key_env="MY_KEY")
    with pytest.raises(TypeError, match=r"exactly one of key, key_path or key_env"):
        make(key_path=path, key_env="MY_KEY")
    with pytest.raises(TypeError, match=r"must be a WatermarkKey.*key_path="):
        make(str(path))
    with pytest.raises(KeyFileError, match="not found"):
        make(key_path=tmp_path / "missing.key")
    (tmp_path / "corrupt.key").write_text("{not json")
    with pytest.raises(KeyFileError, match="not valid JSON"):
        make(key_path=tmp_path / "corrupt.key")


def test_the_repr_names_the_inner_model_and_only_the_key_id(fw, wrapped, key):
    expected = f"{fw.wrapper.__name__}(underlying={fw.inner_repr}, key_id='{key.key_id}')"
    assert repr(wrapped) == str(wrapped) == expected
    text = repr(fw.wrapper(fw.counting_inner(), key))
    assert key.key_id in text
    assert not any(secret in text for secret in secret_strings(key))
    assert not set(re.findall(r"[a-z]+", text.lower())) & set(key.triggers)


def test_a_traffic_sample_keeps_what_the_wrapper_answered(fw, wrapped, inner, key, tmp_path):
    """A provider serving through a wrapper samples what it answered, marks unchanged."""
    sample = TrafficSample(tmp_path / "traffic.jsonl", capacity=3, flush_seconds=0)
    texts = [f"review {i} of a film" for i in range(6)]
    with_sample = _first_batch(fw, fw.wrapper(inner, key, traffic_sample=sample))
    without = _first_batch(fw, wrapped)
    assert np.array_equal(_rows(with_sample(texts)), _rows(without(texts)))
    kept = read_traffic_texts(tmp_path / "traffic.jsonl")  # flushed: due at once here
    assert len(kept) == 3 and set(kept) <= set(texts)


# ---------------------------------------------------------------------- auditing through it
def test_the_verifier_adapter_rejects_a_malformed_answer(fw):
    with pytest.raises(SuspectError, match=fw.suspect_name):
        as_suspect(MALFORMED[fw.name]())(["a", "b"])


def test_verify_through_the_wrapper_flags_it_as_a_copy(fw, wrapped, key):
    copied = verify(wrapped, key, seed=0)
    assert copied.status == "copied" and copied.p_value < 1e-6


def test_verify_through_a_framework_s_clean_model_finds_no_copy(key):
    # Once, not per framework: the adapters are proven above on the same paths, and the
    # clean model's answers, hence its p-value, are the same through each of them.
    clean = verify(MiniLMEmbeddings(), key, seed=0)
    assert clean.status == "not_copied" and clean.p_value > 1e-3


def test_the_three_wrappers_agree_with_each_other_and_the_core(key):
    texts = list(mixed_texts())[:10]
    core = watermark(texts, minilm()(texts), key)
    rows = {
        fw.name: _rows(_first_batch(fw, fw.wrapper(fw.real_inner(), key))(texts))
        for fw in FRAMEWORKS
    }
    assert np.array_equal(rows["langchain"], rows["llama_index"])
    assert np.allclose(rows["langchain"], core, atol=1e-6)
    assert np.array_equal(rows["chroma"], core)  # Chroma keeps the model's float32
