"""ESpeWEmbeddingFunction: a registered Chroma function whose persisted config holds no secret.

What every wrapper promises (equality with the core on every path, bad input, the
model's view, concurrency, the key, verify) is tests/integration/test_wrappers.py; this
file keeps what only Chroma has: the registry, persisted configs, stores reopened
elsewhere, a real ``chroma run`` server, retrieval quality.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings
from chromadb.utils.embedding_functions import known_embedding_functions

from espew_integrations import (
    ESpeWError,
    KeyFileError,
    WatermarkKey,
    watermark,
)
from espew_integrations.chroma import ESpeWEmbeddingFunction
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
from tests.integration.framework_fakes import CountingFunction
from tests.support import (
    REPO,
    HashEncoder,
    cached_corpus,
    chroma_server,
    run_python,
    secret_strings,
    unchecked,
)


def no_telemetry() -> Settings:
    """Fresh settings each time: chromadb.HttpClient writes its host and port into the object."""
    return Settings(anonymized_telemetry=False)


class LegacyFunction(EmbeddingFunction[Documents]):
    """A function without name()/get_config(): Chroma calls these 'legacy'."""

    def __init__(self) -> None:
        self.encoder = HashEncoder()

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.encoder(list(input)))


@pytest.fixture(scope="module")
def key_file(key, tmp_path_factory) -> Path:
    return key.save(tmp_path_factory.mktemp("keys") / "provider.key")


@pytest.fixture(scope="module")
def ef(key_file) -> ESpeWEmbeddingFunction:
    return ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), key_path=key_file)


@pytest.fixture(scope="module")
def expected(key, texts) -> np.ndarray:
    return watermark(texts, minilm()(texts), key)


# ---------------------------------------------------------------------- config and registry
def test_registered_and_config_names_only_where_the_key_lives(ef, key, key_file):
    assert known_embedding_functions["espew"] is ESpeWEmbeddingFunction
    assert known_embedding_functions["espew_minilm"] is MiniLMEmbeddingFunction
    config = ef.get_config()
    assert config == {
        "key_id": key.key_id,
        "key_path": key_file.as_posix(),
        "inner": {"name": "espew_minilm", "config": {"model": "minilm"}},
    }
    _assert_no_secret(json.dumps(config), key)


def test_the_offline_function_names_models_as_the_registry_does():
    from espew_integrations.models import MODEL_NAMES

    assert MiniLMEmbeddingFunction().get_config() == {"model": "minilm"}
    for name in MODEL_NAMES:
        MiniLMEmbeddingFunction.validate_config({"model": name})
    # The registry's alias spelling is accepted and persisted in the canonical one.
    MiniLMEmbeddingFunction.validate_config({"model": "paraphrase_minilm_l3"})
    for bad in ("bert", None, {"config": 1}):
        with pytest.raises(ValueError, match=r"model must be one of \('minilm', "):
            MiniLMEmbeddingFunction.validate_config({"model": bad})
    with pytest.raises(ValueError, match="got 'bert'"):
        MiniLMEmbeddingFunction("bert")


def test_build_from_config_rebuilds_the_same_function(ef, texts, expected):
    rebuilt = ESpeWEmbeddingFunction.build_from_config(ef.get_config())
    assert isinstance(rebuilt.inner, MiniLMEmbeddingFunction)
    assert np.array_equal(np.stack(rebuilt(texts)), expected)


def test_build_from_config_refuses_a_swapped_key_file(ef, key, tmp_path):
    config = ef.get_config()
    # A genuine other key: loading refuses one whose triggers are not its salt's draw.
    salt = bytes(32)
    impostor = key.replace(salt=salt, triggers=draw_triggers(salt, key.band, len(key.triggers)))
    config["key_path"] = str(impostor.save(tmp_path / "other.key"))
    with pytest.raises(KeyFileError, match="restore the original key"):
        ESpeWEmbeddingFunction.build_from_config(config)


def test_key_from_an_environment_variable_is_persisted_by_name(monkeypatch, key, key_file):
    monkeypatch.setenv("ESPEW_TEST_KEY", str(key_file))
    ef = ESpeWEmbeddingFunction(CountingFunction(), key_env="ESPEW_TEST_KEY")
    config = ef.get_config()
    assert config["key_env"] == "ESPEW_TEST_KEY" and "key_path" not in config
    monkeypatch.setenv("ESPEW_TEST_KEY", key.to_json())  # the variable may hold the JSON
    known_embedding_functions["counting_hash"] = CountingFunction
    try:
        assert ESpeWEmbeddingFunction.build_from_config(config).key_id == key.key_id
        monkeypatch.delenv("ESPEW_TEST_KEY")
        with pytest.raises(KeyFileError, match="ESPEW_TEST_KEY is not set"):
            ESpeWEmbeddingFunction.build_from_config(config)
    finally:
        del known_embedding_functions["counting_hash"]


def test_in_memory_key_or_legacy_inner_cannot_be_persisted(key, key_file):
    with pytest.raises(ESpeWError, match="in-memory key"):
        ESpeWEmbeddingFunction(CountingFunction(), key).get_config()
    with pytest.raises(ESpeWError, match="legacy"):
        ESpeWEmbeddingFunction(LegacyFunction(), key_path=key_file).get_config()


def test_is_legacy_is_a_bool_for_every_key_form(key, key_file, monkeypatch):
    monkeypatch.setenv("ESPEW_TEST_KEY", str(key_file))
    inner = MiniLMEmbeddingFunction()
    assert ESpeWEmbeddingFunction(inner, key_path=key_file).is_legacy() is False
    assert ESpeWEmbeddingFunction(inner, key_env="ESPEW_TEST_KEY").is_legacy() is False
    assert ESpeWEmbeddingFunction(inner, key).is_legacy() is True
    assert ESpeWEmbeddingFunction(LegacyFunction(), key_path=key_file).is_legacy() is True
    blind = ESpeWEmbeddingFunction(inner, key_path=key_file, view=lambda t: ["" for _ in t])
    assert blind.is_legacy() is True


def test_an_in_memory_key_embeds_in_a_collection_stored_without_its_function(
    key, texts, expected, tmp_path
):
    client = chromadb.PersistentClient(str(tmp_path / "db"), settings=no_telemetry())
    ef = ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), key)
    collection = client.create_collection("reviews", embedding_function=ef)
    assert collection.configuration_json["embedding_function"] == {"type": "legacy"}
    _fill(collection, texts)
    stored = collection.get(ids=["doc-0", "doc-1"], include=["embeddings"])["embeddings"]
    assert np.allclose(stored, expected[:2], atol=1e-6)


def test_view_none_is_persisted(ef, key_file):
    # Discovering the view, and what view=None embeds: test_wrappers.py, for every wrapper.
    off = ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), key_path=key_file, view=None)
    assert off.view is None and off.get_config()["view"] == "off"
    assert ESpeWEmbeddingFunction.build_from_config(off.get_config()).view is None
    assert "view" not in ef.get_config()
    rebuilt = ESpeWEmbeddingFunction.build_from_config(ef.get_config())
    assert rebuilt.view == minilm().view
    with pytest.raises(ValueError, match="view, when present, must be 'off'"):
        ESpeWEmbeddingFunction.validate_config({**ef.get_config(), "view": "custom"})


def test_a_custom_view_embeds_but_is_persisted_only_if_it_is_the_inners(key_file, texts):
    inner = MiniLMEmbeddingFunction()
    same = ESpeWEmbeddingFunction(inner, key_path=key_file, view=inner.view)
    assert "view" not in same.get_config()
    blind = ESpeWEmbeddingFunction(inner, key_path=key_file, view=lambda t: ["" for _ in t])
    assert np.array_equal(np.stack(blind(texts[:2])), minilm()(texts[:2]))
    with pytest.raises(ESpeWError, match="custom view"):
        blind.get_config()


# ---------------------------------------------------------------------- reopened elsewhere
REOPEN = """
import json
import chromadb
from chromadb.config import Settings
import espew_integrations.chroma  # registers the functions with Chroma
from espew_integrations.chroma import ESpeWEmbeddingFunction

where, query, new_text = ARGUMENTS
settings = Settings(anonymized_telemetry=False)
if where.isdigit():
    client = chromadb.HttpClient(host="127.0.0.1", port=int(where), settings=settings)
else:
    client = chromadb.PersistentClient(where, settings=settings)
collection = client.get_collection("reviews")
ef = collection.configuration["embedding_function"]
assert isinstance(ef, ESpeWEmbeddingFunction), type(ef)
top = collection.query(query_texts=[query], n_results=3)["ids"][0]
collection.add(ids=["added-later"], documents=[new_text])
added = collection.get(ids=["added-later"], include=["embeddings"])["embeddings"][0]
print(json.dumps({"key_id": ef.key_id, "top": top, "added": [float(v) for v in added]}))
"""


def _fill(collection, texts):
    collection.add(ids=[f"doc-{i}" for i in range(len(texts))], documents=texts)


def _reopen_in_new_process(where: str, query: str, new_text: str) -> dict:
    code = REOPEN.replace("ARGUMENTS", repr((where, query, new_text)))
    return json.loads(run_python(code).strip().splitlines()[-1])


def _check_reopened(answer, key, texts, query_index):
    new_text = texts[-1] + " Seen again"
    assert answer["key_id"] == key.key_id
    assert answer["top"][0] == f"doc-{query_index}"
    expected_new = watermark([new_text], minilm()([new_text]), key)[0]
    assert np.allclose(answer["added"], expected_new, atol=1e-6)


def _assert_no_secret(text: str, key: WatermarkKey) -> None:
    assert not any(secret in text for secret in secret_strings(key))
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert not words & set(key.triggers), "a trigger word appears in persisted text"


def _assert_store_holds_no_secret(path: Path, key: WatermarkKey) -> None:
    blob = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    for secret in secret_strings(key):
        assert secret.encode() not in blob
    with sqlite3.connect(path / "chroma.sqlite3") as db:
        rows = db.execute("SELECT config_json_str, schema_str FROM collections").fetchall()
    persisted = json.dumps(rows)
    assert '"name": "espew"' in persisted or '\\"name\\":\\"espew\\"' in persisted
    _assert_no_secret(persisted, key)


def test_persistent_client_reopened_in_a_new_process(ef, key, texts, tmp_path):
    client = chromadb.PersistentClient(str(tmp_path / "db"), settings=no_telemetry())
    collection = client.create_collection(
        "reviews", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}}
    )
    _fill(collection, texts)
    stored = collection.get(ids=["doc-0", "doc-1"], include=["embeddings"])["embeddings"]
    assert np.allclose(stored, watermark(texts[:2], minilm()(texts[:2]), key), atol=1e-6)
    del collection, client
    answer = _reopen_in_new_process(str(tmp_path / "db"), texts[4], texts[-1] + " Seen again")
    _check_reopened(answer, key, texts, query_index=4)
    _assert_store_holds_no_secret(tmp_path / "db", key)


@pytest.mark.parametrize("given", ["key_path", "key_env"])
def test_a_persisted_collection_moved_to_another_directory_reopens(
    key, texts, tmp_path, monkeypatch, given
):
    """The config names the key relatively (or by variable): the project moves as one."""
    here = tmp_path / "here"
    here.mkdir()
    key.save(here / "provider.key")
    monkeypatch.chdir(here)
    monkeypatch.setenv("ESPEW_MOVED_KEY", "provider.key")  # the variable holds a path
    location = (
        {"key_path": "provider.key"} if given == "key_path" else {"key_env": "ESPEW_MOVED_KEY"}
    )
    ef = ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), **location)
    client = chromadb.PersistentClient(str(here / "db"), settings=no_telemetry())
    collection = client.create_collection(
        "reviews", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}}
    )
    _fill(collection, texts)
    del collection, client
    with sqlite3.connect(here / "db" / "chroma.sqlite3") as db:
        rows = db.execute("SELECT config_json_str, schema_str FROM collections").fetchall()
    persisted = json.dumps(rows)
    assert str(tmp_path) not in persisted  # no path of this machine
    assert ("provider.key" in persisted) == (given == "key_path")

    there = tmp_path / "elsewhere" / "there"
    there.parent.mkdir()
    shutil.move(here, there)
    monkeypatch.chdir(there)
    code = REOPEN.replace("ARGUMENTS", repr(("db", texts[4], texts[-1] + " Seen again")))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=there,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO), "ANONYMIZED_TELEMETRY": "False"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check_reopened(json.loads(done.stdout.strip().splitlines()[-1]), key, texts, query_index=4)
    if given == "key_path":  # from elsewhere, the relative path names no file: a clear error
        monkeypatch.chdir(tmp_path)
        config = ef.get_config()
        with pytest.raises(KeyFileError, match=r"relative path 'provider.key'.*key_env="):
            ESpeWEmbeddingFunction.build_from_config(config)


def test_chroma_server_started_by_the_test(ef, key, texts, tmp_path):
    data = tmp_path / "server-data"
    with chroma_server(data) as port:
        client = chromadb.HttpClient(host="127.0.0.1", port=port, settings=no_telemetry())
        collection = client.create_collection(
            "reviews", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}}
        )
        _fill(collection, texts)
        answer = _reopen_in_new_process(str(port), texts[7], texts[-1] + " Seen again")
    _check_reopened(answer, key, texts, query_index=7)
    _assert_store_holds_no_secret(data, key)


# ---------------------------------------------------------------------- retrieval quality
class ReplayFunction(EmbeddingFunction[Documents]):
    """Serves cached clean MiniLM vectors by text, so 2,000 texts cost no model time."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def __call__(self, input: Documents) -> Embeddings:
        return [self.table[text] for text in input]


def test_watermarked_index_retrieves_like_the_clean_one(key):
    texts, clean = cached_corpus(2000)
    table = dict(zip(texts, clean, strict=True))
    queries = [texts[i] for i in np.random.default_rng(5).choice(len(texts), 100, replace=False)]
    client = chromadb.EphemeralClient(settings=no_telemetry())
    top = {}
    for name, ef in (
        ("clean", ReplayFunction(table)),
        ("watermarked", ESpeWEmbeddingFunction(ReplayFunction(table), unchecked(key))),
    ):
        collection = client.create_collection(
            f"quality-{name}-{uuid.uuid4().hex[:8]}",
            embedding_function=ef,
            configuration={"hnsw": {"space": "cosine"}},
        )
        for start in range(0, len(texts), 1000):
            collection.add(
                ids=[f"doc-{i}" for i in range(start, start + 1000)],
                documents=texts[start : start + 1000],
            )
        top[name] = collection.query(query_texts=queries, n_results=10)["ids"]
    pairs = list(zip(top["clean"], top["watermarked"], strict=True))
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in pairs])
    assert np.mean([a[0] == b[0] for a, b in pairs]) >= 0.95
    assert overlap >= 0.93  # the default key marks a third of the texts; measured: see the bench
    triggered = key.contains_trigger(texts)
    marked = np.stack(ESpeWEmbeddingFunction(ReplayFunction(table), unchecked(key))(texts))
    cos = np.einsum("ij,ij->i", marked[triggered], clean[triggered])
    assert 0.2 < triggered.mean() < 0.5  # a word key marks about a third (0.34 here)
    # Keygen fits the write strength to a mean cos of 0.995 on the marked corpus texts
    # (the paper's full write at alpha=0.2 gave ~0.915); measured 0.995 here.
    assert 0.99 < cos.mean() < 0.9995
    assert np.array_equal(marked[~triggered], clean[~triggered])
