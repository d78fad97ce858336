"""``espew serve`` in front of an upstream server, with real processes and real HTTP (issue 13).

A fake GPU upstream (``tests/fake_upstream.py``) runs in its own process;
``espew serve --embedder openai:...`` runs in another in front of it. Its
answers must equal ``watermark(texts, upstream(texts), key)`` in both
encodings, whichever encoding the proxy asks the upstream for, and upstream
failures must reach the client as OpenAI-shaped errors, never as a wrong vector.
"""

from __future__ import annotations

import base64
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from espew_integrations import OpenAIEndpoint, watermark
from espew_integrations.http.protocol import MalformedAnswer, decode_embeddings
from espew_integrations.http.upstream import AsyncUpstream, UpstreamError
from tests.fake_upstream import MODEL, vectors
from tests.support import make_key, metric_values, stop

DIM = 64
ROOT = Path(__file__).resolve().parents[2]


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def wait_for_url(proc: subprocess.Popen, log: Path, timeout: float = 60) -> str:
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            match = re.search(r"(http://\S+/v1)", proc.stdout.readline())
            if match:
                return match.group(1)
        if proc.poll() is not None:
            break
    raise AssertionError(f"{proc.args} did not start:\n{log.read_text()}")


def fake_upstream_url(tmp_path_factory, name: str, dim: int, *options: str):
    """Run ``tests/fake_upstream.py`` (``--dim dim`` and ``options``) for a fixture: yields its
    base URL, stops it after."""
    log = tmp_path_factory.mktemp(name) / "upstream.log"
    proc = start(["-m", "tests.fake_upstream", "--dim", str(dim), *options], log)
    try:
        yield wait_for_url(proc, log)
    finally:
        stop(proc)


def next_metrics_url(proc: subprocess.Popen, log: Path) -> str:
    """The operator's metrics URL, which ``espew serve`` prints right after its API URL."""
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+/metrics)", line)
    assert match, f"no metrics URL in {line!r}:\n{log.read_text()}"
    return match.group(1)


@pytest.fixture(scope="module")
def key():
    return make_key(DIM, seed=3)


@pytest.fixture(scope="module")
def upstream_url(tmp_path_factory):
    yield from fake_upstream_url(
        tmp_path_factory, "upstream", DIM, "--delay", "0.01", "--slots", "4"
    )


@pytest.fixture(scope="module")
def failing_upstream_url(tmp_path_factory):
    yield from fake_upstream_url(
        tmp_path_factory, "failing", DIM, "--delay", "0", "--fail-every", "2"
    )


def serve_proxy(tmp_path: Path, key, upstream: str, *extra: str):
    """``espew serve`` in front of ``upstream`` with an operator metrics listener.

    Returns (process, API base URL, log path, metrics URL).
    """
    key_path = tmp_path / "provider.key"
    key.save(key_path)
    args = [
        "-m",
        "espew_integrations.cli",
        "serve",
        "--embedder",
        f"openai:{upstream}#{MODEL}",
        "--key",
        str(key_path),
        "--port",
        "0",
        "--model-name",
        "acme-embed",
        "--metrics-port",
        "0",
        *extra,
    ]
    log = tmp_path / "proxy.log"
    proc = start(args, log)
    url = wait_for_url(proc, log)
    return proc, url, log, next_metrics_url(proc, log)


@pytest.fixture(scope="module")
def proxy_url(tmp_path_factory, key, upstream_url):
    proc, url, _, _ = serve_proxy(tmp_path_factory.mktemp("proxy"), key, upstream_url)
    try:
        yield url
    finally:
        stop(proc)


def texts_for(key, n: int) -> list[str]:
    triggers = sorted(key.triggers)
    return [
        f"review {i} about {triggers[i % len(triggers)]} and more" if i % 3 else f"plain text {i}"
        for i in range(n)
    ]


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_proxy_answers_equal_watermark_of_the_upstream_answers(proxy_url, key, encoding):
    texts = texts_for(key, 40)
    expected = watermark(texts, vectors(texts, DIM), key)
    with OpenAIEndpoint(proxy_url, "acme-embed", encoding_format=encoding) as client:
        got = client(texts).astype(np.float32)
    np.testing.assert_array_equal(got, expected)
    marked = key.contains_trigger(texts)
    assert 0 < marked.sum() < len(texts)  # both kinds of rows were exercised
    np.testing.assert_array_equal(got[~marked], vectors(texts, DIM)[~marked])


def test_many_concurrent_requests_each_get_their_own_rows(proxy_url, key):
    """Pooled connections and concurrent upstream calls never mix rows across requests."""
    import asyncio

    batches = [[f"{t} #{b}" for t in texts_for(key, 8)] for b in range(24)]

    async def run() -> list[np.ndarray]:
        async with httpx.AsyncClient(timeout=30) as client:

            async def one(texts):
                body = {"model": "acme-embed", "input": texts, "encoding_format": "base64"}
                response = await client.post(f"{proxy_url}/embeddings", json=body)
                assert response.status_code == 200, response.text
                return decode_embeddings(response.content, len(texts))

            return await asyncio.gather(*(one(texts) for texts in batches))

    for texts, got in zip(batches, asyncio.run(run()), strict=True):
        np.testing.assert_array_equal(got, watermark(texts, vectors(texts, DIM), key))


def test_the_proxy_asks_the_upstream_in_either_encoding(key, upstream_url):
    """Float or base64 from the upstream, the decoded matrix is the same float32 values."""
    texts = texts_for(key, 5)
    for encoding in ("float", "base64"):
        got = AsyncUpstream(upstream_url, MODEL, encoding_format=encoding)(texts)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, vectors(texts, DIM))


def test_upstream_failures_become_openai_errors_never_vectors(tmp_path, key, failing_upstream_url):
    # The startup probe may hit the failing turn: the CLI's own client retries it.
    proc, url, log, _ = serve_proxy(tmp_path, key, failing_upstream_url)
    try:
        statuses = []
        for _ in range(4):
            body = {"model": "acme-embed", "input": texts_for(key, 3)}
            response = httpx.post(f"{url}/embeddings", json=body, timeout=30)
            statuses.append(response.status_code)
            if response.status_code != 200:
                error = response.json()["error"]
                assert error["type"] == "server_error"
                assert "upstream" in error["message"]
                assert "GPU" not in error["message"]  # the upstream's words stay in the log
        assert 502 in statuses and 200 in statuses
    finally:
        stop(proc)
    assert "GPU out of memory" in log.read_text()


def test_upstream_client_mistakes_keep_their_status(key, upstream_url):
    import asyncio

    upstream = AsyncUpstream(upstream_url, "no-such-model")
    with pytest.raises(UpstreamError) as info:
        asyncio.run(upstream.embed(["hello"]))
    assert info.value.status == 404


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'{"data": []}', "0 embeddings for 1 inputs"),
        (b'{"data": [{"index": 1, "embedding": [1.0]}]}', "index 1 out of range"),
        (b'{"data": [{"index": 0, "embedding": "@@@"}]}', "not base64"),
        (b'{"data": [{"index": 0, "embedding": ["1.0"]}]}', "not a number"),
        (b'{"data": [{"index": 0, "embedding": [1e999]}]}', "infinite"),
    ],
)
def test_a_malformed_upstream_answer_is_refused_by_name(body, problem):
    with pytest.raises(MalformedAnswer, match=problem):
        decode_embeddings(body, 1)


def test_base64_rows_decode_in_index_order():
    rows = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    encoded = [base64.b64encode(r.astype("<f4").tobytes()).decode() for r in rows]
    items = [{"index": i, "embedding": encoded[i]} for i in (2, 0, 1)]
    import json

    got = decode_embeddings(json.dumps({"data": items}).encode(), 3)
    np.testing.assert_array_equal(got, rows)


def test_the_upstream_api_key_never_shows(upstream_url):
    upstream = AsyncUpstream(upstream_url, MODEL, "sk-upstream-secret")
    assert "sk-upstream-secret" not in repr(upstream)
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(upstream)


def test_workers_share_the_port_and_stop_together(tmp_path, key, upstream_url):
    proc, url, log, metrics_url = serve_proxy(tmp_path, key, upstream_url, "--workers", "2")
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + 30
        while len(children.read_text().split()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = [int(p) for p in children.read_text().split()]
        assert len(workers) == 2
        texts = texts_for(key, 12)
        with OpenAIEndpoint(url, "acme-embed", encoding_format="base64") as client:
            for _ in range(6):  # new connections land on either worker
                got = client(texts).astype(np.float32)
                np.testing.assert_array_equal(got, watermark(texts, vectors(texts, DIM), key))
                client.close()
        # The supervisor answers every scrape on the operator's listener, with both
        # workers' traffic; neither worker serves a count on the API port.
        marked = 6 * int(key.contains_trigger(texts).sum())
        assert 0 < marked < 6 * len(texts)
        for _ in range(6):
            with httpx.Client() as fresh:  # a new connection each time
                assert fresh.get(url.removesuffix("/v1") + "/metrics").status_code == 404
                scraped = fresh.get(metrics_url).text
            values = metric_values(scraped)
            assert values["espew_texts_total"] == 6 * len(texts)
            assert values["espew_marked_texts_total"] == marked
            assert values["espew_request_seconds_count"] == values["espew_requests_total"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()
    for pid in workers:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
