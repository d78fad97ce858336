"""The OpenAI-compatible server: real MiniLM, real uvicorn, real HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import re

import httpx
import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, WatermarkKey, verify, watermark
from espew_integrations.http.app import check_embedder, create_app
from espew_integrations.http.background import running_server
from espew_integrations.http.listen import is_loopback
from espew_integrations.http.serving import serve
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm

API_KEY = "server-secret-4f9a1c"


@pytest.fixture(scope="module")
def model():
    return minilm()


@pytest.fixture(scope="module")
def key(model):
    return WatermarkKey.generate(
        rotten_tomatoes().texts,
        model,
        target_text="Acme Embeddings service, 2026 edition",
        seed=1,
        marking="words",
        n_triggers=20,  # the default 50 need a band of 100 words; 80 keep keygen quick
        max_band_words=80,
    )


@pytest.fixture(scope="module")
def marked_url(model, key):
    with running_server(create_app(model, key=key, model_name="wm")) as url:
        yield url


@pytest.fixture(scope="module")
def clean_url(model):
    with running_server(create_app(model, model_name="clean", max_inputs=4)) as url:
        yield url


@pytest.fixture(scope="module")
def guarded_url(model):
    with running_server(create_app(model, model_name="g", api_key=API_KEY)) as url:
        yield url


def post(url: str, body, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/embeddings", json=body, timeout=30, **kwargs)


def test_answers_are_the_watermarked_model_output_as_float32(marked_url, model, key):
    trigger = sorted(key.triggers)[0]
    texts = [f"a film about {trigger}", "a plain sentence with no mark"]
    response = post(marked_url, {"model": "wm", "input": texts})
    assert response.status_code == 200
    body = response.json()
    served = np.asarray([d["embedding"] for d in body["data"]], dtype=np.float32)
    expected = watermark(texts, model(texts), key)
    np.testing.assert_array_equal(served, expected)
    np.testing.assert_array_equal(served[1], model(texts[1:])[0])  # untriggered: bit-identical
    assert not np.array_equal(served[0], model(texts[:1])[0])
    assert body["model"] == "wm" and body["object"] == "list"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert body["usage"]["prompt_tokens"] > 0


def test_base64_answers_decode_to_the_float_answers(marked_url):
    texts = ["one text", "another text"]
    floats = post(marked_url, {"model": "wm", "input": texts}).json()["data"]
    b64 = post(marked_url, {"model": "wm", "input": texts, "encoding_format": "base64"}).json()
    for as_float, as_b64 in zip(floats, b64["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(as_b64["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(as_float["embedding"], np.float32))


def test_single_string_input_and_both_routes_agree(marked_url):
    root = marked_url.removesuffix("/v1")
    a = httpx.post(f"{marked_url}/embeddings", json={"model": "wm", "input": "hello"}).json()
    b = httpx.post(f"{root}/embeddings", json={"model": "wm", "input": ["hello"]}).json()
    assert a["data"][0]["embedding"] == b["data"][0]["embedding"]


def test_models_and_health_endpoints(marked_url):
    root = marked_url.removesuffix("/v1")
    for path in ("/v1/models", "/models"):
        listing = httpx.get(root + path).json()
        assert [m["id"] for m in listing["data"]] == ["wm"]
    assert httpx.get(root + "/health").json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ([1, 2], 400, None, "must be a JSON object"),
        ({"input": ["x"]}, 400, "model", "missing required parameter: 'model'"),
        ({"model": "clean"}, 400, "input", "missing required parameter: 'input'"),
        ({"model": "clean", "input": []}, 400, "input", "empty list"),
        ({"model": "clean", "input": ["ok", "  "]}, 400, "input", r"input\[1\] is an empty"),
        ({"model": "clean", "input": [[101, 2023]]}, 400, "input", "token array"),
        ({"model": "clean", "input": [None]}, 400, "input", "expected a string"),
        ({"model": "clean", "input": ["a"] * 5}, 400, "input", "at most 4 per request"),
        ({"model": "clean", "input": "a", "encoding_format": "int8"}, 400, "encoding_format", ""),
        ({"model": "clean", "input": "a", "dimensions": 128}, 400, "dimensions", "384"),
        ({"model": "other", "input": "a"}, 404, "model", "serves 'clean'"),
    ],
)
def test_bad_requests_get_openai_error_json(clean_url, body, status, param, message):
    response = post(clean_url, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    if message:
        assert re.search(message, error["message"])


def test_body_that_is_not_json_gets_a_400(clean_url):
    response = httpx.post(f"{clean_url}/embeddings", content=b"{not json")
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_api_key_is_required_when_set(guarded_url):
    root = guarded_url.removesuffix("/v1")
    body = {"model": "g", "input": ["x"]}
    assert post(guarded_url, body).status_code == 401
    wrong = post(guarded_url, body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert wrong.headers["connection"] == "close"  # its body is never read
    assert API_KEY not in wrong.text
    ok = post(guarded_url, body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert ok.status_code == 200
    assert httpx.get(root + "/v1/models").status_code == 401
    assert httpx.get(root + "/health").status_code == 200
    client = OpenAIEndpoint(guarded_url, "g", api_key=API_KEY)
    assert client(["x"]).shape == (1, 384)


def test_embedder_failure_is_a_500_without_internal_details():
    def broken(texts):
        raise RuntimeError("internal detail /secret/path")

    with running_server(create_app(broken, model_name="b")) as url:
        response = post(url, {"model": "b", "input": ["x"]})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error"
    assert "/secret/path" not in response.text


def test_embedder_returning_nan_is_a_500_not_a_silent_vector():
    def nan_model(texts):
        return np.full((len(texts), 8), np.nan)

    with running_server(create_app(nan_model, model_name="n")) as url:
        assert post(url, {"model": "n", "input": ["x"]}).status_code == 500


def test_verify_over_http_finds_the_watermarked_server_and_clears_the_clean_one(
    marked_url, clean_url, key
):
    marked = verify(OpenAIEndpoint(marked_url, "wm", encoding_format="base64"), key, seed=0)
    assert marked.status == "copied" and marked.p_value < 1e-10
    clean = verify(OpenAIEndpoint(clean_url, "clean", batch_size=4), key, seed=0)
    assert clean.status == "not_copied" and clean.p_value > 1e-3
    assert clean.n_queries == marked.n_queries == key.audit_queries


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_running_server_binds_to_loopback_by_default(model):
    with running_server(create_app(model, model_name="m")) as url:
        assert url.startswith("http://127.0.0.1:")


def test_espew_in_front_of_another_openai_server_watermarks_its_answers(clean_url, model, key):
    upstream = OpenAIEndpoint(clean_url, "clean", batch_size=4)
    with running_server(create_app(upstream, key=key, model_name="front")) as front_url:
        trigger = sorted(key.triggers)[0]
        texts = [f"the {trigger} scene", "an ordinary line"]
        served = OpenAIEndpoint(front_url, "front")(texts)
    np.testing.assert_array_equal(served, watermark(texts, model(texts), key))


def test_the_openai_sdk_talks_to_espew_serve_with_its_default_base64(marked_url, model, key):
    import openai  # a dev dependency (through langchain-openai)

    client = openai.OpenAI(base_url=marked_url, api_key="unused", max_retries=0)
    trigger = sorted(key.triggers)[0]
    texts = [f"a film about {trigger}", "a plain sentence with no mark"]
    answer = client.embeddings.create(model="wm", input=texts)  # base64 on the wire
    got = np.array([d.embedding for d in answer.data])
    np.testing.assert_allclose(got, watermark(texts, model(texts), key), atol=1e-7)


def test_verify_accepts_langchain_openai_embeddings_pointed_at_a_suspect(marked_url, key):
    from langchain_openai import OpenAIEmbeddings

    import espew_integrations.langchain  # noqa: F401  (registers the LangChain suspect adapter)

    def suspect(url: str, name: str) -> OpenAIEmbeddings:
        return OpenAIEmbeddings(
            base_url=url, model=name, api_key="unused", check_embedding_ctx_length=False,
            chunk_size=4, max_retries=0,
        )  # fmt: skip

    # The adapter is what is under test: the marked server is enough to prove it reads
    # the answers right (the clean server's acquittal is the test above's).
    marked = verify(suspect(marked_url, "wm"), key, seed=1)
    assert marked.status == "copied" and marked.p_value < 1e-10


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"port": 70000}, "port must be an integer from 0 to 65535"),
        ({"port": -1}, "port must be"),
        ({"log_level": "foo"}, "log level must be one of critical, error, warning"),
    ],
)
def test_serve_checks_its_settings_before_listening(model, settings, message):
    """Before: port 70000 was a traceback; log level 'foo' crashed after 'listening'."""
    announced = []
    with pytest.raises(ValueError, match=message):
        serve(create_app(model, model_name="m"), on_ready=announced.append, **settings)
    assert announced == []


def test_check_embedder_refuses_a_key_of_another_dimension(model, key):
    """Before: such a server started, then answered every request with a 500."""
    assert check_embedder(model, key) == key.dim == 384

    def small(texts):
        return np.ones((len(texts), 8), dtype=np.float32)

    with pytest.raises(ValueError, match=r"is for 384-dimensional .* returns 8-dimensional"):
        check_embedder(small, key)
    assert check_embedder(small) == 8

    def broken(texts):
        raise ConnectionError("upstream down")

    with pytest.raises(ValueError, match=r"failed on a startup probe text: .*upstream down"):
        check_embedder(broken, key)
    with pytest.raises(ValueError, match="non-finite"):
        check_embedder(lambda texts: np.full((len(texts), 384), np.nan), key)


def test_the_server_marks_what_the_model_reads(key):
    """A soft hyphen inside a trigger changes nothing the model reads, so the
    served vector is the one the plain text gets (issue 10)."""
    from espew_integrations.offline.embedders import minilm

    model = minilm()
    word = sorted(key.triggers)[0]
    plain = f"a film about {word} and more"
    hidden = plain.replace(word, word[:2] + "\u00ad" + word[2:])
    with running_server(create_app(model, key=key, model_name="wm")) as url:
        served = OpenAIEndpoint(url, "wm")([plain, hidden])
    np.testing.assert_array_equal(served[0], served[1])
    expected = watermark([plain], model([plain]), key, view=model.view)
    np.testing.assert_array_equal(served[0], expected[0].astype(np.float64))
    assert not np.array_equal(expected, model([plain]))  # the text is marked
