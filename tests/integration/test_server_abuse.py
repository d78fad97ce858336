"""``espew serve`` under abusive clients (issue 10): real sockets, a real server process.

Each test names the abuse it reproduces: a huge chunked body, a request too
expensive to compute, a client that hangs up mid-request, a stalled or
trickling body, and malformed input that used to end in a 500. Raw sockets
are used where an HTTP library would refuse to misbehave.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from espew_integrations import WatermarkKey
from espew_integrations.core.ground.defaults import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUEST_CHARS
from espew_integrations.http.app import COMPUTE_CHUNK_TEXTS, create_app
from espew_integrations.http.background import running_server
from espew_integrations.http.protocol import MAX_BODY_BYTES
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from tests.support import stop

CLI = [sys.executable, "-m", "espew_integrations.cli"]
FAKE_MODULE = """
import numpy as np
name = "fake"

def embedder(texts):
    out = np.zeros((len(texts), 8), dtype=np.float32)
    out[:, 0] = 1.0
    return out
"""
BODY_TIMEOUT_S = 2.0
REQUEST_CHARS = 5000


def fake_embedder(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 8), dtype=np.float32)
    out[:, 0] = 1.0
    return out


# ---------------------------------------------------------------------- raw HTTP helpers
def address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict, bytes, float]:
    """(status, headers, body, seconds) of one response, read until EOF or ``timeout``."""
    start = time.monotonic()
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                if match and len(body) >= int(match.group(1)):
                    break
    except (TimeoutError, ConnectionResetError):
        pass
    elapsed = time.monotonic() - start
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0]:
        return 0, {}, b"", elapsed
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body, elapsed


def assert_openai_error(status: int, body: bytes, expected: tuple[int, ...]) -> dict:
    assert status in expected, (status, body[:300])
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error


def rss_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


# ---------------------------------------------------------------------- a real server process
@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """``espew serve`` in its own process: (base URL, pid)."""
    workdir = tmp_path_factory.mktemp("abuse")
    (workdir / "fake_model.py").write_text(FAKE_MODULE)
    log = (workdir / "serve.log").open("w")
    proc = subprocess.Popen(
        [
            *CLI, "serve", "--embedder", "fake_model:embedder", "--model-name", "m",
            "--no-watermark", "--port", "0", "--body-timeout", str(BODY_TIMEOUT_S),
            "--max-request-chars", str(REQUEST_CHARS),
        ],
        cwd=workdir, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    url = None
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        if selector.select(timeout=0.5):
            match = re.search(r"on (http://\S+/v1)", proc.stdout.readline())
            url = match.group(1) if match else None
    if url is None:
        proc.kill()
        raise AssertionError("espew serve did not start:\n" + (workdir / "serve.log").read_text())
    try:
        yield url, proc.pid
    finally:
        stop(proc)


def test_a_150_mb_chunked_body_gets_a_413_without_being_read_whole(served):
    """Before: the whole body was buffered, then refused (+180 MB RSS)."""
    url, pid = served
    assert httpx.post(f"{url}/embeddings", json={"model": "m", "input": "warm"}).status_code == 200
    before = rss_kib(pid)["VmRSS"]
    total = 150 * 1024 * 1024
    piece = b"a" * (1024 * 1024)
    sent = [0]

    def send_lazily(sock: socket.socket) -> None:
        # Generated on the fly: the client never holds more than 1 MB.
        head = (
            "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        start = b'{"model": "m", "input": ["'
        try:
            sock.sendall(head.encode() + b"%x\r\n%s\r\n" % (len(start), start))
            while sent[0] < total:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent[0] += len(piece)
            sock.sendall(b'3\r\n"]}\r\n0\r\n\r\n')
        except OSError:
            pass  # the server hung up after its 413: expected

    with socket.create_connection(address(url)) as sock:
        sender = threading.Thread(target=send_lazily, args=(sock,), daemon=True)
        sender.start()
        status, headers, body, _ = read_response(sock, timeout=60)
        sender.join(30)
    error = assert_openai_error(status, body, (413,))
    assert str(MAX_BODY_BYTES) in error["message"]
    assert headers.get("connection") == "close"
    grown_mib = (rss_kib(pid)["VmHWM"] - before) / 1024
    print(f"150 MB chunked body: 413 after the client sent {sent[0] / 2**20:.0f} MiB; "
          f"server peak RSS growth {grown_mib:.1f} MiB")  # fmt: skip
    assert grown_mib < 64
    assert sent[0] < total, "the server read the whole 150 MB body"
    # The server is still healthy.
    assert httpx.post(f"{url}/embeddings", json={"model": "m", "input": "ok"}).status_code == 200


@pytest.mark.parametrize("trickle", [False, True], ids=["stalled", "trickling"])
def test_a_stalled_or_trickling_body_is_dropped_within_the_body_timeout(served, trickle):
    """Before: a body that never completes held the connection open forever."""
    url, _ = served
    with socket.create_connection(address(url)) as sock:
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"model": "m", '
        )
        start = time.monotonic()
        if trickle:  # one byte every 0.3 s: never idle, never finished

            def drip() -> None:
                try:
                    while time.monotonic() - start < 20:
                        sock.sendall(b" ")
                        time.sleep(0.3)
                except OSError:
                    pass

            threading.Thread(target=drip, daemon=True).start()
        status, headers, body, _ = read_response(sock, timeout=20)
        elapsed = time.monotonic() - start
    print(f"{'trickling' if trickle else 'stalled'} body dropped after {elapsed:.2f} s "
          f"(--body-timeout {BODY_TIMEOUT_S:g})")  # fmt: skip
    error = assert_openai_error(status, body, (408,))
    assert error["code"] == "request_timeout"
    assert headers.get("connection") == "close"
    # Dropped by the body timeout, not sooner; "not later" is the 408 itself, which came
    # while the client still waited and (trickling) still sent: no idle timeout fired.
    assert elapsed > BODY_TIMEOUT_S - 0.5


def test_the_request_character_cap_is_set_from_the_command_line(served):
    """Before: no cap; one 3.6 MB request kept the model busy for over 120 s."""
    url, _ = served
    ok = httpx.post(f"{url}/embeddings", json={"model": "m", "input": ["a" * 2000] * 2})
    assert ok.status_code == 200
    over = httpx.post(f"{url}/embeddings", json={"model": "m", "input": ["a" * 2000] * 3})
    error = assert_openai_error(over.status_code, over.content, (413,))
    assert error["param"] == "input" and error["code"] == "request_too_large"
    assert "6000 characters" in error["message"] and str(REQUEST_CHARS) in error["message"]


# ---------------------------------------------------------------------- in-process servers
def test_the_default_limits_are_finite():
    assert 0 < DEFAULT_BODY_TIMEOUT <= 30
    assert 0 < DEFAULT_MAX_REQUEST_CHARS <= 1_000_000


def test_the_character_cap_refuses_before_any_embedding():
    calls: list[int] = []

    def counting(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return fake_embedder(texts)

    app = create_app(counting, model_name="c", max_request_chars=100)
    with running_server(app) as url:
        over = httpx.post(f"{url}/embeddings", json={"model": "c", "input": ["x" * 60] * 2})
        ok = httpx.post(f"{url}/embeddings", json={"model": "c", "input": ["x" * 50] * 2})
    assert_openai_error(over.status_code, over.content, (413,))
    assert ok.status_code == 200 and calls == [2]
    with pytest.raises(ValueError, match="max_request_chars"):
        create_app(fake_embedder, max_request_chars=0)
    with pytest.raises(ValueError, match="body_timeout"):
        create_app(fake_embedder, body_timeout=0)


def test_a_client_that_hangs_up_stops_the_work():
    """Before: all texts were embedded after the client had gone."""
    embedded: list[int] = []

    def slow(texts: list[str]) -> np.ndarray:
        embedded.append(len(texts))
        time.sleep(0.3)
        return fake_embedder(texts)

    n_texts = 10 * COMPUTE_CHUNK_TEXTS
    payload = json.dumps({"model": "s", "input": [f"text {i}" for i in range(n_texts)]}).encode()
    with running_server(create_app(slow, model_name="s")) as url:
        with socket.create_connection(address(url)) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            time.sleep(0.4)
        time.sleep(2.5)  # ten chunks would take 3 s
        done, chunks = sum(embedded), len(embedded)
        time.sleep(1.0)
        assert sum(embedded) == done, "still embedding after the client left"
        # The server still answers a well-behaved client in full.
        answer = httpx.post(f"{url}/embeddings", json={"model": "s", "input": ["a"] * 70})
        assert answer.status_code == 200 and len(answer.json()["data"]) == 70
    print(f"client gone after 0.4 s: {done} of {n_texts} texts embedded in {chunks} chunks")
    assert done <= 3 * COMPUTE_CHUNK_TEXTS, embedded


@pytest.fixture(scope="module")
def minilm_key():
    model = minilm()
    key = WatermarkKey.generate(
        rotten_tomatoes().texts, model, target_text="Acme Embeddings, 2026", seed=2,
        marking="words", n_triggers=20, max_band_words=60,
    )  # fmt: skip
    return model, key


@pytest.fixture(scope="module")
def marked_url(minilm_key):
    model, key = minilm_key
    with running_server(create_app(model, key=key, model_name="wm")) as url:
        yield url


def post_raw(url: str, content: bytes) -> httpx.Response:
    return httpx.post(
        f"{url}/embeddings", content=content, headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b'{"model": "wm", "input": "\\ud800"}', "input"),
        (b'{"model": "wm", "input": ["fine", "a\\udfffb"]}', "input"),
        (b'{"model": "wm", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),
        (b'{"model": "wm", "input": "x", "dimensions": ' + b"9" * 5000 + b"}", None),
        (b'{"model": "wm", "input": "\xff\xfe"}', None),
        (b'{"model": "wm", "input": "x", "encoding_format": "' + b"f" * 100_000 + b'"}',
         "encoding_format"),
        (b'{"model": "' + b"m" * 100_000 + b'", "input": "x"}', "model"),
        (b'{"model": "wm", "input": [' + b"[" * 900 + b"]" * 900 + b"]}", "input"),
    ],
    ids=["lone-surrogate", "lone-low-surrogate", "deep-nesting", "huge-int", "bad-utf8",
         "long-format", "long-model", "nested-input"],
)  # fmt: skip
def test_malformed_requests_get_a_4xx_never_a_500(marked_url, content, param):
    """Before: a lone surrogate and deep nesting ended in a 500; long values were echoed."""
    response = post_raw(marked_url, content)
    error = assert_openai_error(response.status_code, response.content, (400, 404))
    assert error["type"] == "invalid_request_error"
    if param:
        assert error["param"] == param
    assert "\\ud800" not in response.text and len(response.text) < 1000


def test_unknown_routes_and_methods_get_openai_error_json(marked_url):
    root = marked_url.removesuffix("/v1")
    assert_openai_error(*_status_body(httpx.get(f"{marked_url}/embeddings")), (405,))
    assert_openai_error(*_status_body(httpx.post(f"{root}/v1/nothing-here")), (404,))
    assert_openai_error(*_status_body(httpx.post(f"{root}/health")), (405,))


def _status_body(response: httpx.Response) -> tuple[int, bytes]:
    return response.status_code, response.content


@pytest.mark.parametrize(
    "text",
    [
        "nul \x00 inside", "zero\u200bwidth\u200djoin\u2060", "soft\u00adhyphen",
        "right-to-left \u202e override", "e\u0301\u0301\u0301 combining", "emoji \U0001f600",
        "\x1b[31mescape\x1b[0m", "tab\tand\rreturn", "\ufeffbom", "\U0010ffff private",
    ],
)  # fmt: skip
def test_odd_but_valid_texts_are_embedded(marked_url, minilm_key, text):
    _, key = minilm_key
    response = httpx.post(f"{marked_url}/embeddings", json={"model": "wm", "input": [text]})
    assert response.status_code == 200, response.text
    assert len(response.json()["data"][0]["embedding"]) == key.dim
