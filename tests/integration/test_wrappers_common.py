"""The helpers the three wrappers share (key resolution, input checks, the model's view) and
their layering. What each wrapper promises, a parameter per framework: test_wrappers.py."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import EmbeddingInputError, KeyFileError
from espew_integrations._wrapper_common import (
    DISCOVER,
    checked_text,
    checked_texts,
    describe_model,
    resolve_key,
    resolve_view,
)
from espew_integrations.core.ground.text import discover_view
from espew_integrations.offline.embedders import minilm
from espew_integrations.offline.frameworks.chroma import MiniLMEmbeddingFunction
from espew_integrations.offline.frameworks.langchain import MiniLMEmbeddings
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
from tests.support import run_python

PACKAGE = Path(__file__).resolve().parents[2] / "espew_integrations"
FRAMEWORK_MODULES = {"langchain": "langchain", "llama_index": "llama_index", "chroma": "chromadb"}


# ---------------------------------------------------------------------- key resolution
def test_resolve_key_from_object_path_or_named_variable(key, tmp_path, monkeypatch):
    path = key.save(tmp_path / "k.key")
    found = resolve_key(key)
    assert found.key is key and found.location == {}
    found = resolve_key(None, key_path=path)
    assert found.key == key and found.location == {"key_path": path.as_posix()}
    # A relative path stays relative: it moves with the files it is relative to.
    monkeypatch.chdir(tmp_path)
    assert resolve_key(None, key_path="k.key").location == {"key_path": "k.key"}
    monkeypatch.setenv("MY_KEY", str(path))
    found = resolve_key(None, key_env="MY_KEY")
    assert found.key == key and found.location == {"key_env": "MY_KEY"}
    assert repr(found) == f"WrapperKey(key_id='{key.key_id}', location={{'key_env': 'MY_KEY'}})"


def test_resolve_key_reads_espew_key_when_no_source_is_given_as_espew_does(key, monkeypatch):
    """One rule for the key (issue 48): no argument means $ESPEW_KEY, as for every command."""
    monkeypatch.setenv("ESPEW_KEY", key.to_json())
    found = resolve_key(None, wrapper="MyWrapper")
    assert found.key == key and found.location == {"key_env": "ESPEW_KEY"}
    monkeypatch.delenv("ESPEW_KEY")
    with pytest.raises(TypeError, match="MyWrapper needs a watermark key") as caught:
        resolve_key(None, wrapper="MyWrapper")
    message = str(caught.value)
    assert "key=WatermarkKey.load(path)" in message and "key_path=" in message
    assert "key_env='VAR'" in message and "or set ESPEW_KEY" in message
    monkeypatch.setenv("ESPEW_KEY", "  ")  # set but blank: refused, never taken for "no key"
    with pytest.raises(KeyFileError, match="ESPEW_KEY is set but blank"):
        resolve_key(None, wrapper="MyWrapper")


@pytest.mark.parametrize(
    "sources",
    [
        {"key_path": "a", "key_env": "B"},
        {"key_env": "B", "key": "KEY"},
        {"key_path": "a", "key": "KEY"},
    ],
)
def test_resolve_key_takes_exactly_one_source(key, sources):
    if sources.get("key") == "KEY":
        sources = {**sources, "key": key}
    given = [name for name in ("key", "key_path", "key_env") if name in sources]
    with pytest.raises(TypeError, match="exactly one of key, key_path or key_env") as caught:
        resolve_key(sources.pop("key", None), **sources)
    assert str(caught.value).endswith(f"got {given}")  # names what was given


def test_resolve_key_errors_name_the_problem(key, tmp_path, monkeypatch):
    monkeypatch.delenv("ESPEW_KEY", raising=False)
    with pytest.raises(KeyFileError, match="ESPEW_KEY is not set"):
        resolve_key(None, key_env="ESPEW_KEY")
    with pytest.raises(TypeError, match="key_env must be the name of an environment variable"):
        resolve_key(None, key_env="")
    with pytest.raises(TypeError, match=r"must be a WatermarkKey.*key_path="):
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
    with pytest.raises(EmbeddingInputError, match="got a single string; wrap it in a list"):
        checked_texts("abc")
    with pytest.raises(EmbeddingInputError, match="text at index 0 is bytes, expected str"):
        checked_texts([b"abc"])
    with pytest.raises(EmbeddingInputError, match=r"texts is None; pass a list of strings"):
        checked_texts(None)
    with pytest.raises(EmbeddingInputError, match="iterable of strings, got float"):
        checked_texts(1.5)


def test_checked_text_names_the_role_and_the_type():
    assert checked_text("a film", what="query") == ["a film"]
    assert checked_text("") == [""]
    with pytest.raises(EmbeddingInputError, match="the query must be a str, got NoneType"):
        checked_text(None, what="query")
    with pytest.raises(EmbeddingInputError, match="the text must be a str, got list"):
        checked_text(["a film"])


def test_the_wrappers_validate_texts_in_one_place_only():
    # Every wrapper checks texts with _wrapper_common's two functions and nothing else.
    for module in FRAMEWORK_MODULES:
        source = (PACKAGE / f"{module}.py").read_text()
        assert "check_texts" not in source.replace("checked_texts", "")
        assert "isinstance(text" not in source and "isinstance(query" not in source


def test_describe_model_shows_the_class_and_model_name_never_other_settings():
    class Secretive:
        model = "text-embedding-3-small"
        api_key = "sk-very-secret"

        def __repr__(self):
            return f"Secretive(api_key={self.api_key!r})"

    assert describe_model(Secretive()) == "Secretive(model='text-embedding-3-small')"
    assert describe_model(MiniLMEmbeddings(lambda texts: texts)) == (
        "MiniLMEmbeddings(model_name='function')"
    )
    assert describe_model(object()) == "object"
    odd = Secretive()
    odd.model = "line\nbreak"  # not printable: not shown
    assert describe_model(odd) == "Secretive"


def test_checked_texts_reads_a_generator_once():
    # It used to check the generator (consuming it) and then list() what was left: [].
    assert checked_texts(text for text in ("a", "b")) == ["a", "b"]


def test_checked_texts_lets_blanks_through_unless_told_not_to():
    assert checked_texts(["a", "", " \n"]) == ["a", "", " \n"]
    with pytest.raises(EmbeddingInputError, match="index 2 is empty or only whitespace"):
        checked_texts(["a", "b", "\t"], allow_empty=False)


# ---------------------------------------------------------------------- the model's view
class _ViewProxy:
    """A thin wrapper around the encoder that forwards attributes (like tests' MemoEmbedder)."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_discover_view_finds_the_encoders_view_directly_or_through_a_wrapper():
    model = minilm()
    assert discover_view(model) == model.view
    assert discover_view(_ViewProxy(model)) == model.view
    assert discover_view(MiniLMEmbeddings()) == model.view
    assert discover_view(MiniLMEmbedding()) == model.view
    assert discover_view(MiniLMEmbeddingFunction()) == model.view


def test_discover_view_is_none_without_a_view():
    assert discover_view(object()) is None
    assert discover_view(MiniLMEmbeddings(lambda texts: np.ones((len(texts), 4)))) is None


class _NotAView:
    def view(self, dtype):  # like numpy's ndarray.view: a .view that is not a text view
        raise TypeError(f"data type {dtype!r} not understood")


class _WrongAnswer:
    def view(self, texts):
        return "one string"


@pytest.mark.parametrize("embedder", [_NotAView(), _WrongAnswer(), np.zeros(3)])
def test_discover_view_refuses_a_view_attribute_that_is_not_a_text_view(embedder):
    with pytest.raises(TypeError, match=r"\.view is not a text view.*pass view=None"):
        discover_view(embedder)


def test_resolve_view_discovers_takes_none_or_a_callable():
    model = minilm()
    assert resolve_view(DISCOVER, model) == model.view
    assert resolve_view(None, model) is None
    custom = model.view
    assert resolve_view(custom, object()) is custom
    assert resolve_view(None, _NotAView()) is None  # None never asks the embedder
    with pytest.raises(TypeError, match="view must be a callable"):
        resolve_view("minilm", model)


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


def test_the_wrappers_import_no_bundled_model_and_keep_the_demo_names():
    """The offline demo models live with the bundled models; the old import paths still work,
    each with a DeprecationWarning that names the new address and the day it goes."""
    code = """
import sys, warnings
import espew_integrations.chroma, espew_integrations.langchain, espew_integrations.llama_index
print(sorted(m for m in sys.modules if m.startswith(("espew_integrations.offline",
                                                      "espew_integrations.models"))))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from espew_integrations.chroma import MiniLMEmbeddingFunction
    from espew_integrations.langchain import MiniLMEmbeddings
    from espew_integrations.llama_index import MiniLMEmbedding
print(sum("stops working after 2027-06-30; import it from espew_integrations.offline"
          in str(w.message) and w.category is DeprecationWarning for w in caught))
print(MiniLMEmbeddings.__module__, MiniLMEmbedding.__module__, MiniLMEmbeddingFunction.__module__)
"""
    loaded, warned, homes = run_python(code).strip().splitlines()[-3:]
    assert loaded == "[]" and warned == "3"
    assert homes.split() == [
        f"espew_integrations.offline.frameworks.{module}"
        for module in ("langchain", "llama_index", "chroma")
    ]


def test_serving_imports_no_wrapper_module():
    wrappers = {"_wrapper_common", *FRAMEWORK_MODULES}
    for path in sorted((PACKAGE / "http").glob("*.py")):
        for name in _imports(path):
            assert name.lstrip(".").split(".")[0] not in wrappers, (path.name, name)
