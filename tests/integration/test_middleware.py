"""ESpeWMiddleware around a real FastAPI app in a real uvicorn process (issue 13).

Clients are the openai SDK (which asks for base64 by default), the same SDK
asking for floats, langchain-openai's ``OpenAIEmbeddings`` and raw HTTP. Each
must get ``watermark(texts, app(texts), key)``; every other route must come
back byte for byte as the bare app sends it, ``/metrics`` included: the
middleware serves no marked count on the app it wraps (a trigger oracle, issue
36). Its operator app, on a port of its own, counts what was served and shows
nothing of the key.
"""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest

from espew_integrations import watermark
from espew_integrations.http.middleware import ESpeWMiddleware
from tests.fake_upstream import vectors
from tests.integration.test_proxy import start, wait_for_url
from tests.support import make_key, metric_values, stop

DIM = 64


@pytest.fixture(scope="module")
def key():
    return make_key(DIM, seed=5)


def run_app(tmp_path, key, *extra):
    key_path = tmp_path / "provider.key"
    if not key_path.exists():
        key.save(key_path)
    log = tmp_path / f"app{'-'.join(extra)}.log"
    proc = start(["-m", "tests.middleware_app", "--key", str(key_path), *extra], log)
    return proc, wait_for_url(proc, log)


@pytest.fixture(scope="module")
def apps(tmp_path_factory, key):
    """(wrapped app URL, bare app URL)."""
    tmp = tmp_path_factory.mktemp("middleware")
    wrapped, wrapped_url = run_app(tmp, key)
    bare, bare_url = run_app(tmp, key, "--bare")
    try:
        yield wrapped_url, bare_url
    finally:
        stop(wrapped)
        stop(bare)


def texts_for(key, n: int, tag: str) -> list[str]:
    triggers = sorted(key.triggers)
    return [
        f"{tag} {i}: a film about {triggers[i % len(triggers)]}" if i % 2 else f"{tag} {i}: plain"
        for i in range(n)
    ]


def expected(texts, key):
    return watermark(texts, vectors(texts, DIM), key)


def test_openai_sdk_base64_default_and_float(apps, key):
    import openai

    client = openai.OpenAI(base_url=apps[0], api_key="unused", max_retries=0)
    texts = texts_for(key, 10, "sdk")
    for options in ({}, {"encoding_format": "float"}):
        answer = client.embeddings.create(model="acme", input=texts, **options)
        got = np.array([item.embedding for item in answer.data], dtype=np.float32)
        np.testing.assert_array_equal(got, expected(texts, key))
    marked = key.contains_trigger(texts)
    assert marked.any() and not marked.all()


def test_langchain_openai_embeddings(apps, key):
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model="acme", base_url=apps[0], api_key="unused", check_embedding_ctx_length=False
    )
    texts = texts_for(key, 6, "langchain")
    got = np.array(embeddings.embed_documents(texts), dtype=np.float32)
    np.testing.assert_array_equal(got, expected(texts, key))
    query = np.array(embeddings.embed_query(texts[1]), dtype=np.float32)
    np.testing.assert_array_equal(query, expected(texts[1:2], key)[0])


def test_the_rest_of_the_answer_is_kept(apps, key):
    body = {"model": "acme", "input": "one review of a film", "encoding_format": "base64"}
    wrapped = httpx.post(f"{apps[0]}/embeddings", json=body).json()
    bare = httpx.post(f"{apps[1]}/embeddings", json=body).json()
    assert {k: v for k, v in wrapped.items() if k != "data"} == {
        k: v for k, v in bare.items() if k != "data"
    }
    assert wrapped["provider_extra"] == "kept"
    row = np.frombuffer(base64.b64decode(wrapped["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(row, expected(["one review of a film"], key)[0])


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/echo", {"input": ["a", "b"], "embedding": [1, 2]}), ("GET", "/models", None)],
)
def test_other_routes_pass_through_byte_for_byte(apps, method, path, body):
    wrapped = httpx.request(method, f"{apps[0]}{path}", json=body)
    bare = httpx.request(method, f"{apps[1]}{path}", json=body)
    assert wrapped.status_code == bare.status_code == 200
    assert wrapped.content == bare.content


def test_app_errors_pass_through_and_bad_answers_are_refused(apps):
    invalid = httpx.post(f"{apps[0]}/embeddings", json={"model": "acme"})
    assert invalid.status_code == 422  # FastAPI's own validation error, untouched
    assert invalid.content == httpx.post(f"{apps[1]}/embeddings", json={"model": "acme"}).content
    broken = httpx.post(f"{apps[0]}/broken/embeddings", json={"model": "acme", "input": ["x"]})
    assert broken.status_code == 500
    assert broken.json()["error"]["type"] == "server_error"
    tokens = httpx.post(f"{apps[0]}/embeddings", json={"model": "acme", "input": [1, 2, 3]})
    assert tokens.status_code == 400
    assert "token ids" in tokens.json()["error"]["message"]


def test_metrics_count_requests_and_marked_texts_and_hide_the_key(tmp_path, key, apps):
    proc, url = run_app(tmp_path, key, "--metrics-port", "0")
    try:
        line = proc.stdout.readline()  # printed right after the app's URL
        assert line.startswith("metrics on http://127.0.0.1:"), line
        metrics_url = line.split()[-1]
        texts = texts_for(key, 9, "metrics")
        for _ in range(3):
            body = {"model": "acme", "input": texts}
            assert httpx.post(f"{url}/embeddings", json=body).status_code == 200
        httpx.post(f"{url}/broken/embeddings", json={"model": "acme", "input": ["x"]})
        on_app = httpx.get(url.removesuffix("/v1") + "/metrics")
        exposition = httpx.get(metrics_url).text
    finally:
        stop(proc)
    bare = httpx.get(apps[1].removesuffix("/v1") + "/metrics")
    assert on_app.status_code == bare.status_code == 404  # the app's own answer, untouched
    assert on_app.content == bare.content
    values = metric_values(exposition)
    assert values["espew_requests_total"] == 3
    assert values["espew_texts_total"] == 27
    assert values["espew_marked_texts_total"] == 3 * key.contains_trigger(texts).sum()
    assert values["espew_upstream_errors_total"] == 1
    assert values["espew_request_seconds_count"] == 3
    assert_no_secret(exposition, key)


def test_the_counter_attack_finds_nothing_on_the_wrapped_app(apps, key):
    """Each band word alone, /metrics read before and after: the app's own 404 every time."""
    scrape = apps[0].removesuffix("/v1") + "/metrics"
    bare = httpx.get(apps[1].removesuffix("/v1") + "/metrics").content
    seen = set()
    with httpx.Client(timeout=30) as client:
        for word in sorted(key.band):
            before = client.get(scrape)
            body = {"model": "acme", "input": [word]}
            assert client.post(f"{apps[0]}/embeddings", json=body).status_code == 200
            after = client.get(scrape)
            seen.add((before.status_code, before.content, after.status_code, after.content))
    assert seen == {(404, bare, 404, bare)}


def test_metrics_path_is_refused_and_metrics_app_needs_metrics(key):
    async def app(scope, receive, send):  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(ValueError, match="metrics_app"):
        ESpeWMiddleware(app, key=key, metrics_path="/metrics")
    with pytest.raises(RuntimeError, match="no metrics"):
        ESpeWMiddleware(app, key=key, metrics=False).metrics_app()
    assert callable(ESpeWMiddleware(app, key=key).metrics_app())


def assert_no_secret(text: str, key) -> None:
    """No trigger, salt (hex or base64) or target value appears in ``text``."""
    lowered = text.lower()
    for trigger in key.triggers:
        assert trigger.lower() not in lowered, trigger
    assert key.salt.hex() not in lowered
    assert base64.b64encode(key.salt).decode().lower() not in lowered
    for value in key.target[:8]:
        assert f"{value:.6f}"[:8] not in text
    assert json.dumps(key.target_text)[1:-1].lower() not in lowered


def test_traffic_sample_records_answered_texts_per_account_and_flushes_on_shutdown(tmp_path, key):
    """The app's own accounts (here a header) each get a sample; shutdown writes the file."""
    from starlette.testclient import TestClient

    from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
    from tests.middleware_app import build

    sample_path = tmp_path / "traffic.jsonl"

    def account(scope) -> str | None:
        headers = dict(scope["headers"])
        return headers.get(b"x-account", b"").decode() or None

    app = ESpeWMiddleware(
        build(),
        key=key,
        metrics=False,
        traffic_sample=TrafficSample(sample_path, capacity=5),
        traffic_account=account,
    )
    with TestClient(app) as client:
        for tenant in ("acme", "globex"):
            for batch in range(3):
                answer = client.post(
                    "/v1/embeddings",
                    json={"model": "m", "input": [f"{tenant} {batch} {i}" for i in range(4)]},
                    headers={"x-account": tenant},
                )
                assert answer.status_code == 200
        echo = client.post("/v1/echo", json={"input": ["not an embeddings route"]})
        assert echo.status_code == 200  # passed through, not sampled
        assert not sample_path.exists()  # not due yet: written on shutdown
    for tenant in ("acme", "globex"):
        kept = read_traffic_texts(sample_path, account=tenant)
        assert len(kept) == 5 and all(t.startswith(tenant) for t in kept)
    assert "not an embeddings route" not in sample_path.read_text()
    with pytest.raises(ValueError, match="needs a traffic_sample"):
        ESpeWMiddleware(build(), key=key, traffic_account=account)


def test_without_traffic_account_each_credential_is_sampled_apart(tmp_path, key):
    """No traffic_account: the Authorization header names the account (hashed), so one
    client's flood of texts never pushes out another's."""
    from starlette.testclient import TestClient

    from espew_integrations.core.records.traffic_sample import TrafficSample, read_traffic_texts
    from tests.middleware_app import build

    sample = TrafficSample(tmp_path / "traffic.jsonl", capacity=5)
    app = ESpeWMiddleware(build(), key=key, metrics=False, traffic_sample=sample)
    with TestClient(app) as client:
        for who, headers in (("quiet", {"Authorization": "Bearer sk-quiet-1234"}), ("anon", {})):
            body = {"model": "m", "input": [f"{who} {i}" for i in range(5)]}
            assert client.post("/v1/embeddings", json=body, headers=headers).status_code == 200
        flood = {"model": "m", "input": [f"flood {i}" for i in range(500)]}
        headers = {"Authorization": "Bearer sk-flood-5678"}
        assert client.post("/v1/embeddings", json=flood, headers=headers).status_code == 200
    quiet = read_traffic_texts(sample.path, account=sample.account_for("sk-quiet-1234"))
    assert sorted(quiet) == [f"quiet {i}" for i in range(5)]
    assert sorted(read_traffic_texts(sample.path, account="anonymous")) == [
        f"anon {i}" for i in range(5)
    ]
    assert "sk-quiet" not in sample.path.read_text()
