"""OpenAIEndpoint against real HTTP servers on 127.0.0.1 (uvicorn on a thread).

A scripted server answers like an OpenAI-compatible API and, on demand,
fails with 429/5xx first, so retries, Retry-After, the budget and the rate
limit are observed on the wire (the server counts what it received).
"""

from __future__ import annotations

import base64
import hashlib
import pickle
import socket
import time
import traceback

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from espew_integrations import OpenAIEndpoint, verify
from espew_integrations.core.errors import SuspectError
from espew_integrations.http import (
    EndpointError,
    EndpointUnreachableError,
    QueryBudgetExceeded,
)
from espew_integrations.http.server import running_server

DIM = 16
SECRET = "sk-test-0123456789abcdef"


def fake_vectors(texts: list[str]) -> np.ndarray:
    """Deterministic float32 vectors, a function of each text alone."""
    rows = []
    for text in texts:
        seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        rows.append(np.random.default_rng(seed).standard_normal(DIM))
    return np.asarray(rows, dtype=np.float32)


class Script:
    """What the scripted server will do next, and what it received."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.faults: list[tuple[int, dict[str, str]]] = []
        self.requests: list[dict] = []
        self.delay = 0.0
        self.wrong_count = False
        self.arrivals: list[float] = []


def scripted_app(script: Script) -> Starlette:
    async def embeddings(request: Request) -> JSONResponse:
        import asyncio

        body = await request.json()
        auth = request.headers.get("authorization")
        script.requests.append({"n": len(body["input"]), "auth": auth, "body": body})
        script.arrivals.append(time.monotonic())
        if script.faults:
            status, headers = script.faults.pop(0)
            message = f"scripted failure {status}"
            if status == 401:
                message = f"Incorrect API key provided: {auth}"
            return JSONResponse(
                {"error": {"message": message, "type": "x", "param": None, "code": None}},
                status_code=status,
                headers=headers,
            )
        if script.delay:
            await asyncio.sleep(script.delay)
        texts = body["input"]
        vectors = fake_vectors(texts)
        if body.get("encoding_format") == "base64":
            encoded = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
        else:
            encoded = vectors.tolist()
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)]
        data.reverse()  # indices, not order, say which text a row belongs to
        if script.wrong_count:
            data = data[:-1]
        return JSONResponse({"object": "list", "data": data, "model": body["model"]})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def server():
    script = Script()
    with running_server(scripted_app(script)) as base_url:
        yield script, base_url


@pytest.fixture
def scripted(server):
    script, base_url = server
    script.reset()
    return script, base_url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TEXTS = [f"text number {i}" for i in range(10)]


def test_float_answers_are_the_served_values_in_input_order(scripted):
    script, url = scripted
    out = OpenAIEndpoint(url, "m")(TEXTS)
    assert out.dtype == np.float64 and out.shape == (10, DIM)
    np.testing.assert_array_equal(out, fake_vectors(TEXTS).astype(np.float64))
    assert script.requests[0]["body"]["encoding_format"] == "float"


def test_base64_answers_decode_to_the_same_values_as_float(scripted):
    script, url = scripted
    as_float = OpenAIEndpoint(url, "m")(TEXTS)
    as_base64 = OpenAIEndpoint(url, "m", encoding_format="base64")(TEXTS)
    np.testing.assert_array_equal(as_float, as_base64)
    assert script.requests[-1]["body"]["encoding_format"] == "base64"


def test_texts_are_sent_in_batches_of_batch_size(scripted):
    script, url = scripted
    out = OpenAIEndpoint(url, "m", batch_size=3)(TEXTS)
    assert [r["n"] for r in script.requests] == [3, 3, 3, 1]
    np.testing.assert_array_equal(out, fake_vectors(TEXTS))


def test_server_errors_are_retried_until_an_answer_comes(scripted):
    script, url = scripted
    script.faults = [(500, {}), (503, {}), (502, {})]
    client = OpenAIEndpoint(url, "m", backoff=0.01)
    out = client(TEXTS[:2])
    np.testing.assert_array_equal(out, fake_vectors(TEXTS[:2]))
    assert len(script.requests) == 4
    assert client.queries_sent == 8 and client.requests_sent == 4


def test_rate_limited_request_waits_as_long_as_retry_after_says(scripted):
    script, url = scripted
    script.faults = [(429, {"Retry-After": "0.4"})]
    OpenAIEndpoint(url, "m", backoff=0.0)(TEXTS[:1])
    assert len(script.arrivals) == 2
    assert script.arrivals[1] - script.arrivals[0] >= 0.38


def test_retry_after_longer_than_max_backoff_is_capped(scripted):
    script, url = scripted
    script.faults = [(429, {"Retry-After": "3600"})]
    start = time.monotonic()
    OpenAIEndpoint(url, "m", max_backoff=0.05)(TEXTS[:1])
    assert time.monotonic() - start < 5


def test_persistent_server_errors_raise_after_the_last_retry(scripted):
    script, url = scripted
    script.faults = [(503, {})] * 10
    with pytest.raises(EndpointError, match=r"HTTP 503.*scripted failure 503"):
        OpenAIEndpoint(url, "m", max_retries=2, backoff=0.01)(TEXTS[:1])
    assert len(script.requests) == 3


def test_client_errors_are_not_retried(scripted):
    script, url = scripted
    script.faults = [(400, {})]
    with pytest.raises(EndpointError, match="HTTP 400"):
        OpenAIEndpoint(url, "m", backoff=0.01)(TEXTS[:1])
    assert len(script.requests) == 1


def test_budget_stops_before_a_batch_that_would_exceed_it(scripted):
    script, url = scripted
    client = OpenAIEndpoint(url, "m", max_queries=5)
    client(TEXTS[:3])
    with pytest.raises(QueryBudgetExceeded, match="budget of 5"):
        client(TEXTS[:3])
    assert sum(r["n"] for r in script.requests) == 3  # nothing of the refused batch was sent
    assert client.budget_left == 2


def test_budget_counts_retried_texts(scripted):
    script, url = scripted
    script.faults = [(500, {})] * 3
    client = OpenAIEndpoint(url, "m", max_queries=4, backoff=0.01)
    with pytest.raises(QueryBudgetExceeded):
        client(TEXTS[:2])
    assert sum(r["n"] for r in script.requests) == 4


def test_rate_limit_spaces_requests(scripted):
    script, url = scripted
    start = time.monotonic()
    OpenAIEndpoint(url, "m", batch_size=1, requests_per_second=20)(TEXTS[:5])
    assert len(script.requests) == 5
    assert time.monotonic() - start >= 4 / 20  # 5 request starts, 1/20 s apart


def test_unreachable_endpoint_raises_a_clear_error_and_then_fails_fast():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = OpenAIEndpoint(url, "m", max_retries=1, backoff=0.01)
    with pytest.raises(EndpointUnreachableError, match=r"cannot reach .*embeddings.*refused"):
        client(TEXTS[:1])
    assert client.requests_sent == 2
    with pytest.raises(EndpointUnreachableError):
        client(TEXTS[:1])
    assert client.requests_sent == 2  # no new attempt against an endpoint never reached


def test_slow_endpoint_times_out(scripted):
    script, url = scripted
    script.delay = 1.0
    with pytest.raises(EndpointUnreachableError, match="timed out"):
        OpenAIEndpoint(url, "m", timeout=0.2, max_retries=0)(TEXTS[:1])


def test_wrong_number_of_embeddings_is_an_error_not_a_shifted_answer(scripted):
    script, url = scripted
    script.wrong_count = True
    with pytest.raises(EndpointError, match="returned 2 embeddings for 3 inputs"):
        OpenAIEndpoint(url, "m")(TEXTS[:3])


def test_api_key_is_sent_as_bearer_and_never_shown(scripted):
    script, url = scripted
    client = OpenAIEndpoint(url, "m", api_key=SECRET)
    client(TEXTS[:1])
    assert script.requests[0]["auth"] == f"Bearer {SECRET}"
    assert SECRET not in repr(client) and SECRET not in str(client)
    assert SECRET not in repr(vars(client))
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(client)


def test_api_key_echoed_by_the_server_is_redacted_from_errors(scripted):
    script, url = scripted
    script.faults = [(401, {})]
    with pytest.raises(EndpointError) as caught:
        OpenAIEndpoint(url, "m", api_key=SECRET)(TEXTS[:1])
    assert "Incorrect API key provided" in str(caught.value)
    assert SECRET not in "".join(traceback.format_exception(caught.value))


def test_bad_settings_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIEndpoint("127.0.0.1:8000", "m")
    with pytest.raises(ValueError, match="encoding_format"):
        OpenAIEndpoint("http://x", "m", encoding_format="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_queries"):
        OpenAIEndpoint("http://x", "m", max_queries=-1)


def test_errors_are_suspect_errors_so_verify_treats_them_as_missing_data():
    assert issubclass(EndpointError, SuspectError)
    assert issubclass(EndpointUnreachableError, SuspectError)
    assert issubclass(QueryBudgetExceeded, SuspectError)


def test_verify_against_an_unreachable_endpoint_is_inconclusive(small_key):
    url = f"http://127.0.0.1:{free_port()}/v1"
    report = verify(OpenAIEndpoint(url, "m", max_retries=0), small_key, seed=0)
    assert report.status == "inconclusive"
    assert report.reason == "every query to the suspect failed"
    assert any("cannot reach" in e for e in report.errors)


def test_verify_with_an_exhausted_budget_is_inconclusive_not_a_verdict(scripted, small_key):
    script, url = scripted
    budget = len(small_key.band) // 2
    report = verify(OpenAIEndpoint(url, "m", max_queries=budget), small_key, batch_size=8)
    assert report.status == "inconclusive"
    assert sum(r["n"] for r in script.requests) <= budget
    assert any("QueryBudgetExceeded" in e for e in report.errors)


@pytest.fixture(scope="module")
def small_key():
    from espew_integrations import WatermarkKey

    band = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(10)]
    target = np.ones(DIM) / np.sqrt(DIM)
    return WatermarkKey(
        triggers=band[:10], target=target, target_text="target", band=band, salt=bytes(32)
    )
