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
from types import SimpleNamespace

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from espew_integrations import OpenAIEndpoint, verify
from espew_integrations.core.ground.errors import SuspectError
from espew_integrations.http import client as client_module
from espew_integrations.http.background import running_server
from espew_integrations.http.client import (
    EndpointError,
    EndpointUnreachableError,
    QueryBudgetExceeded,
)

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


def test_retry_after_longer_than_max_backoff_is_capped(scripted, monkeypatch):
    script, url = scripted
    script.faults = [(429, {"Retry-After": "3600"})]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    monkeypatch.setattr(
        client_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep)
    )
    OpenAIEndpoint(url, "m", max_backoff=0.05)(TEXTS[:1])
    assert len(script.arrivals) == 2
    assert sleeps and max(sleeps) <= 0.05


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
    assert report.reason.startswith("every query to the suspect failed")
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
    from tests.support import make_key

    return make_key(DIM, n_band=60, n_triggers=10)


# ---------------------------------------------------------------------- hostile endpoint
class Hostile:
    """A server that answers whatever the test scripts, built from the request."""

    def __init__(self) -> None:
        self.respond = lambda n, auth: (200, {"data": []})

    def app(self) -> Starlette:
        from starlette.responses import Response

        async def embeddings(request: Request) -> Response:
            body = await request.json()
            auth = request.headers.get("authorization", "")
            status, answer = self.respond(len(body["input"]), auth)
            if isinstance(answer, (bytes, str)):
                return Response(answer, status_code=status, media_type="application/json")
            return JSONResponse(answer, status_code=status)

        return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def hostile_server():
    hostile = Hostile()
    with running_server(hostile.app()) as base_url:
        yield hostile, base_url


@pytest.fixture
def hostile(hostile_server):
    hostile, base_url = hostile_server
    hostile.respond = lambda n, auth: (200, {"data": []})
    return hostile, base_url


def rows(n: int, dim: int = 4) -> list[dict]:
    return [{"object": "embedding", "index": i, "embedding": [0.5] * dim} for i in range(n)]


def with_item(n: int, position: int, **fields) -> dict:
    data = rows(n)
    data[position] = {**data[position], **fields}
    return {"object": "list", "data": data}


def without_index(n: int, position: int) -> dict:
    data = rows(n)
    del data[position]["index"]
    return {"object": "list", "data": data}


def leak_free(exc: BaseException, *secrets: str) -> None:
    """Nothing reachable from the exception shows a secret: message, repr, chain, args."""
    shown = "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args)
    assert exc.__context__ is None and exc.__cause__ is None
    for secret in secrets:
        assert secret not in shown
        assert base64.b64encode(secret.encode()).decode() not in shown


def caught(url: str, n: int = 3, **options) -> SuspectError:
    client = OpenAIEndpoint(url, "m", api_key=SECRET, max_retries=0, **options)
    with pytest.raises(SuspectError) as info:
        client([f"text {i}" for i in range(n)])
    return info.value


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda n, auth: with_item(n, 1, embedding=auth), id="embedding-string"),
        pytest.param(lambda n, auth: with_item(n, 1, embedding=[0.1, auth]), id="embedding-item"),
        pytest.param(lambda n, auth: with_item(n, 0, index=auth), id="index"),
        pytest.param(lambda n, auth: with_item(n, 2, embedding={auth: 1}), id="embedding-dict"),
        pytest.param(
            lambda n, auth: with_item(n, 0, embedding=base64.b64encode(auth.encode()).decode()),
            id="embedding-base64-of-key",
        ),
        pytest.param(lambda n, auth: {"data": auth}, id="data"),
        pytest.param(lambda n, auth: f"not json {auth}", id="body"),
        pytest.param(lambda n, auth: [auth], id="body-list"),
        pytest.param(lambda n, auth: {"data": [auth] * n}, id="items"),
    ],
)
def test_api_key_echoed_anywhere_in_an_answer_never_reaches_the_error(hostile, answer):
    server, url = hostile
    server.respond = lambda n, auth: (200, answer(n, auth))
    exc = caught(url)
    assert isinstance(exc, EndpointError)
    leak_free(exc, SECRET)


@pytest.mark.parametrize("status", [400, 401, 404, 500])
def test_api_key_echoed_in_an_error_body_or_a_retry_log_is_redacted(hostile, status, caplog):
    server, url = hostile
    server.respond = lambda n, auth: (
        status,
        {"error": {"message": f"bad key \x1b[31m{auth}\x1b[0m \u202eeton"}},
    )
    client = OpenAIEndpoint(url, "m", api_key=SECRET, max_retries=1, backoff=0.0)
    with (
        caplog.at_level("WARNING", logger="espew_integrations.http"),
        pytest.raises(EndpointError) as info,
    ):
        client(["a"])
    leak_free(info.value, SECRET)
    message = str(info.value)
    assert f"HTTP {status}" in message and "[REDACTED]" in message
    assert "\x1b" not in message and "\u202e" not in message
    assert SECRET not in caplog.text and "\x1b" not in caplog.text


def test_a_key_in_a_custom_auth_header_is_redacted_too(hostile):
    server, url = hostile
    token = "azure-key-9f8e7d6c5b4a"

    def respond(n, auth):
        return 400, {"error": {"message": f"wrong api-key {token}"}}

    server.respond = respond
    client = OpenAIEndpoint(url, "m", headers={"api-key": token}, max_retries=0)
    with pytest.raises(EndpointError) as info:
        client(["a"])
    leak_free(info.value, token)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        pytest.param(lambda n: with_item(n, 0, index=-1), "index -1", id="negative"),
        pytest.param(lambda n: with_item(n, 0, index=1.0), "index 1.0", id="float"),
        pytest.param(lambda n: with_item(n, 0, index=0.0), "index 0.0", id="float-zero"),
        pytest.param(lambda n: with_item(n, 1, index=True), "index True", id="bool"),
        pytest.param(lambda n: with_item(n, 0, index="0"), "index '0'", id="string"),
        pytest.param(lambda n: with_item(n, 0, index=1), "duplicate index 1", id="duplicate"),
        pytest.param(lambda n: with_item(n, 2, index=3), "index 3 out of range", id="range"),
        pytest.param(lambda n: without_index(n, 1), "no index", id="missing"),
        pytest.param(lambda n: with_item(n, 1, embedding=[[0.5] * 4]), "nested", id="nested"),
        pytest.param(lambda n: with_item(n, 1, embedding=[0.5] * 5), "mixed lengths", id="ragged"),
        pytest.param(lambda n: with_item(n, 1, embedding=[]), "empty", id="empty"),
        pytest.param(
            lambda n: with_item(n, 1, embedding=[0.5, "0.5", 0.5, 0.5]), "not a number", id="str"
        ),
        pytest.param(
            lambda n: with_item(n, 1, embedding=[0.5, True, 0.5, 0.5]), "not a number", id="bool"
        ),
        pytest.param(
            lambda n: with_item(n, 1, embedding=[0.5, None, 0.5, 0.5]), "not a number", id="null"
        ),
        pytest.param(
            lambda n: with_item(n, 1, embedding=[10**400, 0.5, 0.5, 0.5]), "too large", id="huge"
        ),
        pytest.param(lambda n: with_item(n, 1, embedding="!!notb64"), "base64", id="b64"),
        pytest.param(lambda n: with_item(n, 1, embedding="AAA="), "float32", id="b64-odd"),
        pytest.param(lambda n: with_item(n, 1, embedding=None), "embedding", id="none"),
        pytest.param(lambda n: {"data": ["x"] * n}, "not an object", id="item"),
        pytest.param(lambda n: {"object": "list"}, "'data'", id="no-data"),
        pytest.param(lambda n: "[" * 100_000 + "]" * 100_000, "JSON", id="deep-json"),
        pytest.param(lambda n: b"\xff\xfe{", "JSON", id="bad-utf8"),
    ],
)
def test_every_malformed_answer_is_a_suspect_error_that_names_the_problem(hostile, answer, problem):
    server, url = hostile
    server.respond = lambda n, auth: (200, answer(n))
    exc = caught(url)
    assert isinstance(exc, EndpointError)
    assert problem in str(exc)
    leak_free(exc, SECRET)


def test_a_negative_index_no_longer_swaps_rows_silently(hostile):
    server, url = hostile

    def respond(n, auth):
        data = [{"index": i, "embedding": [float(i), 1.0]} for i in range(n)]
        data[0]["index"] = -1  # Python's rows[-1]: would overwrite the last row
        data[-1]["index"] = 0
        return 200, {"data": data}

    server.respond = respond
    with pytest.raises(EndpointError, match="index -1"):
        OpenAIEndpoint(url, "m", max_retries=0)(["a", "b", "c"])


def test_a_shuffled_answer_with_valid_indices_is_put_back_in_order(hostile):
    server, url = hostile

    def respond(n, auth):
        data = [{"index": i, "embedding": [float(i), 1.0]} for i in range(n)]
        return 200, {"data": data[::-1]}

    server.respond = respond
    out = OpenAIEndpoint(url, "m")(["a", "b", "c"])
    np.testing.assert_array_equal(out[:, 0], [0.0, 1.0, 2.0])


def test_server_error_text_is_made_printable(hostile):
    server, url = hostile
    server.respond = lambda n, auth: (400, "\x1b]0;owned\x07\x1b[2Jline1\nline2\u202e" + "x" * 999)
    with pytest.raises(EndpointError) as info:
        OpenAIEndpoint(url, "m", max_retries=0)(["a"])
    message = str(info.value)
    assert "line1 line2" in message and "owned" not in message
    assert all(ch.isprintable() for ch in message) and len(message) < 500


def test_evidence_from_a_key_echoing_endpoint_holds_no_key(hostile, small_key, tmp_path):
    from espew_integrations.core.records.evidence import save_evidence

    server, url = hostile
    server.respond = lambda n, auth: (200, with_item(n, 0, embedding=f"\x1b[1m{auth}"))
    report = verify(OpenAIEndpoint(url, "m", api_key=SECRET, max_retries=0), small_key, seed=0)
    assert report.status == "inconclusive"
    assert report.errors and SECRET not in " ".join(report.errors) + str(report)
    save_evidence(report, tmp_path / "evidence")
    for path in (tmp_path / "evidence").iterdir():
        content = path.read_bytes()
        assert SECRET.encode() not in content, path.name
        if path.suffix in (".json", ".md"):
            assert b"\x1b" not in content, path.name


def test_a_body_over_max_response_bytes_is_abandoned_not_read_whole(hostile):
    server, url = hostile
    server.respond = lambda n, auth: (200, {"data": rows(n, dim=2000)})
    client = OpenAIEndpoint(url, "m", max_retries=2, max_response_bytes=10_000)
    with pytest.raises(EndpointError, match=r"larger than 10,000 bytes \(max_response_bytes\)"):
        client(["a", "b"])
    assert client.requests_sent == 1  # not retried: it would come again
    assert OpenAIEndpoint(url, "m")(["a", "b"]).shape == (2, 2000)


def test_a_trickled_body_is_dropped_at_total_timeout():
    import asyncio

    from starlette.responses import StreamingResponse

    sent: list[int] = []

    async def trickle():
        yield b'{"data": ['
        for _ in range(100):
            await asyncio.sleep(0.1)  # each read well within timeout
            sent.append(1)
            yield b" "

    async def embeddings(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(trickle(), media_type="application/json")

    app = Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])
    with running_server(app) as url:
        client = OpenAIEndpoint(url, "m", timeout=1.0, total_timeout=0.6, max_retries=0)
        with pytest.raises(EndpointUnreachableError, match=r"not complete after 0.6 s"):
            client(["a"])
        assert len(sent) < 100  # dropped before the body was done, not when it ended


def test_custom_credential_headers_never_show_in_the_client(hostile):
    token = "azure-key-9f8e7d6c5b4a"
    client = OpenAIEndpoint("http://x", "m", headers={"api-key": token, "X-Trace": "t1"})
    assert token not in repr(client) + repr(vars(client))
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(client)
