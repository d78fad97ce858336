"""What the three wrappers share: key resolution, input checks, suspect answers, layering."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import EmbeddingInputError, KeyFileError, SuspectError, watermark
from espew_integrations._wrapper_common import checked_texts, resolve_key, suspect_matrix
from espew_integrations.chroma import ESpeWEmbeddingFunction, MiniLMEmbeddingFunction
from espew_integrations.embedders import minilm
from espew_integrations.langchain import ESpeWEmbeddings, MiniLMEmbeddings
from espew_integrations.llama_index import ESpeWEmbedding, MiniLMEmbedding
from tests.wrapper_fixtures import mixed_texts, real_key

PACKAGE = Path(__file__).resolve().parents[1] / "espew_integrations"
FRAMEWORK_MODULES = {"langchain": "langchain", "llama_index": "llama_index", "chroma": "chromadb"}


@pytest.fixture(scope="module")
def key():
    return real_key()


def test_the_three_wrappers_agree_with_each_other_and_the_core(key):
    texts = list(mixed_texts())[:10]
    expected = watermark(texts, minilm()(texts), key)
    langchain = np.asarray(ESpeWEmbeddings(MiniLMEmbeddings(), key).embed_documents(texts))
    llama = np.asarray(ESpeWEmbedding(MiniLMEmbedding(), key).get_text_embedding_batch(texts))
    chroma = np.stack(ESpeWEmbeddingFunction(MiniLMEmbeddingFunction(), key)(texts))
    assert np.array_equal(langchain, llama)
    assert np.allclose(langchain, expected, atol=1e-6)
    assert np.array_equal(chroma, expected)  # Chroma keeps the model's float32


# ---------------------------------------------------------------------- key resolution
def test_resolve_key_from_object_path_and_environment(key, tmp_path, monkeypatch):
    path = key.save(tmp_path / "k.key")
    assert resolve_key(key) is key
    assert resolve_key(None, key_path=path) == key
    assert resolve_key(key, key_path=str(path)) == key
    monkeypatch.setenv("MY_KEY", str(path))
    assert resolve_key(None, key_env="MY_KEY") == key
    monkeypatch.setenv("ESPEW_KEY", key.to_json())
    assert resolve_key(None) == key


def test_resolve_key_errors_name_the_problem(key, tmp_path, monkeypatch):
    monkeypatch.delenv("ESPEW_KEY", raising=False)
    with pytest.raises(KeyFileError, match="ESPEW_KEY is not set"):
        resolve_key(None)
    with pytest.raises(ValueError, match="not both"):
        resolve_key(None, key_path="a", key_env="B")
    with pytest.raises(TypeError, match="must be a WatermarkKey"):
        resolve_key("provider.key")
    with pytest.raises(KeyFileError, match="not found"):
        resolve_key(None, key_path=tmp_path / "missing.key")
    path = key.save(tmp_path / "k.key")
    document = json.loads(path.read_text())
    document["key"]["alpha"] = 0.3  # an edited key would watermark differently
    path.write_text(json.dumps(document))
    with pytest.raises(KeyFileError, match="checksum"):
        resolve_key(None, key_path=path)


# ---------------------------------------------------------------------- inputs and answers
def test_checked_texts_returns_a_list_or_the_core_error():
    assert checked_texts(("a", "b")) == ["a", "b"]
    assert checked_texts([]) == []
    with pytest.raises(EmbeddingInputError, match="single string"):
        checked_texts("abc")
    with pytest.raises(EmbeddingInputError, match="index 0 is bytes"):
        checked_texts([b"abc"])


def test_suspect_matrix_turns_bad_answers_into_suspect_errors():
    assert suspect_matrix([[1, 0], [0, 1]], 2, "X").dtype == np.float64
    with pytest.raises(SuspectError, match="unequal length"):
        suspect_matrix([[1.0, 0.0], [1.0]], 2, "X")
    with pytest.raises(SuspectError, match=r"shape \(1, 2\) for 2 texts"):
        suspect_matrix([[1.0, 0.0]], 2, "X")


# ---------------------------------------------------------------------- layering
def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


@pytest.mark.parametrize("module", sorted(FRAMEWORK_MODULES))
def test_an_adapter_never_imports_another_adapter_or_framework(module):
    imports = _imports(PACKAGE / f"{module}.py")
    for other, framework in FRAMEWORK_MODULES.items():
        if other == module:
            continue
        assert f".{other}" not in imports
        assert not any(name.split(".")[0] == framework for name in imports), (module, imports)


def test_the_shared_helpers_and_the_core_import_no_framework():
    paths = [PACKAGE / "_wrapper_common.py", *sorted((PACKAGE / "core").glob("*.py"))]
    for path in paths:
        roots = {name.lstrip(".").split(".")[0] for name in _imports(path)}
        assert not roots & {"langchain_core", "llama_index", "chromadb"}, path
