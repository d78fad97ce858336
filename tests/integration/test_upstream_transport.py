"""The proxy's client of its upstream (``AsyncUpstream``, aiohttp) against a real fake GPU
process: one pooled session per event loop, a slow upstream a timeout naming its
seconds, an oversized answer refused, a refused connection a 502-class failure, and the
rows bit for bit what the upstream sent, in base64 and in floats. ``espew serve`` asks
its upstream for base64 unless ``--encoding-format float`` says otherwise."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from espew_integrations import watermark
from espew_integrations.http.client import OpenAIEndpoint
from espew_integrations.http.upstream import AsyncUpstream, UpstreamError
from tests.fake_upstream import MODEL, vectors
from tests.integration.test_proxy import fake_upstream_url, serve_proxy, texts_for
from tests.support import make_key, stop

DIM = 48
TEXTS = [f"text number {i} about a film" for i in range(40)]


@pytest.fixture(scope="module")
def slow_upstream_url(tmp_path_factory):
    yield from fake_upstream_url(tmp_path_factory, "slow", DIM, "--delay", "0.6", "--slots", "8")


@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_rows_are_what_the_upstream_sent(slow_upstream_url, encoding):
    got = AsyncUpstream(slow_upstream_url, MODEL, encoding_format=encoding)(TEXTS)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert got.tobytes() == vectors(TEXTS, DIM).tobytes()


def test_one_pooled_session_serves_concurrent_requests(slow_upstream_url):
    upstream = AsyncUpstream(slow_upstream_url, MODEL, max_batch=10)

    async def run() -> tuple[np.ndarray, int]:
        try:
            rows = await upstream.embed(TEXTS)  # 4 concurrent batches of 10
            return rows, len(upstream._clients)
        finally:
            await upstream.aclose()

    rows, sessions = asyncio.run(run())
    assert sessions == 1 and upstream._clients == {}
    assert rows.tobytes() == vectors(TEXTS, DIM).tobytes()


def test_a_slow_upstream_times_out_naming_the_seconds(slow_upstream_url):
    upstream = AsyncUpstream(slow_upstream_url, MODEL, timeout=0.2, max_retries=1)
    with pytest.raises(UpstreamError, match=r"failed: timed out after 0\.2 s") as info:
        upstream(TEXTS[:2])
    assert info.value.status == 502


def test_an_answer_past_the_byte_limit_is_refused(slow_upstream_url):
    upstream = AsyncUpstream(slow_upstream_url, MODEL, max_response_bytes=2000)
    with pytest.raises(UpstreamError, match="sent more than 2000 bytes"):
        upstream(TEXTS)
    assert AsyncUpstream(slow_upstream_url, MODEL, max_response_bytes=10**6)(TEXTS).shape == (
        len(TEXTS),
        DIM,
    )


def test_a_refused_connection_is_a_connection_failure_without_the_api_key():
    upstream = AsyncUpstream("http://127.0.0.1:9/v1", MODEL, "sk-secret-upstream", max_retries=1)
    with pytest.raises(UpstreamError, match=r"failed: connection failed \(\w+\)") as info:
        upstream(["hello"])
    assert info.value.status == 502 and "sk-secret-upstream" not in str(info.value)


@pytest.fixture(scope="module")
def float_only_upstream_url(tmp_path_factory):
    yield from fake_upstream_url(
        tmp_path_factory, "float-only", DIM, "--delay", "0", "--float-only"
    )


def test_the_proxy_asks_for_base64_unless_told_float(tmp_path, float_only_upstream_url):
    key = make_key(DIM, seed=3)
    # base64 by default: an upstream that refuses it fails the start-up check (exit 3)
    refused = AsyncUpstream(float_only_upstream_url, MODEL)
    with pytest.raises(UpstreamError, match="encoding_format must be 'float'"):
        refused(TEXTS[:2])
    for folder in ("default", "float"):
        (tmp_path / folder).mkdir()
    with pytest.raises(AssertionError, match="did not start"):
        serve_proxy(tmp_path / "default", key, float_only_upstream_url)
    assert "encoding_format must be 'float'" in (tmp_path / "default" / "proxy.log").read_text()
    # --encoding-format float: the same upstream serves, the rows marked as always
    proc, url, _, _ = serve_proxy(
        tmp_path / "float", key, float_only_upstream_url, "--encoding-format", "float"
    )
    try:
        texts = texts_for(key, 12)
        with OpenAIEndpoint(url, "acme-embed", encoding_format="base64") as client:
            got = client(texts).astype(np.float32)
        assert got.tobytes() == watermark(texts, vectors(texts, DIM), key).tobytes()
    finally:
        stop(proc)


def test_the_codec_in_use_is_pybase64_which_the_http_extra_installs():
    """The [http] extra installs pybase64 (the dev install has it), and the protocol uses
    it; the unit tier, where only numpy and scipy import, tests the stdlib fallback."""
    import pybase64

    from espew_integrations.http import protocol

    assert protocol.base64_codec() == (pybase64.b64encode, pybase64.b64decode)


def first_certificate(bundle: str) -> str:
    text = Path(bundle).read_text(encoding="ascii")
    end = "-----END CERTIFICATE-----"
    start = text.index("-----BEGIN CERTIFICATE-----")
    return text[start : text.index(end, start) + len(end)] + "\n"


def test_an_https_upstream_is_checked_against_certifi_or_the_operators_bundle(
    tmp_path, monkeypatch
):
    """The proxy's aiohttp client trusts what httpx's did: certifi's CAs, or the bundle
    SSL_CERT_FILE names (never nothing, never silently the machine's own store)."""
    import ssl

    import certifi

    from espew_integrations.http.upstream import tls_context

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = tls_context()
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
    assert default.cert_store_stats()["x509_ca"] > 50  # certifi's bundle, well over 50 CAs
    one = tmp_path / "operator-ca.pem"
    one.write_text(first_certificate(certifi.where()), encoding="ascii")
    monkeypatch.setenv("SSL_CERT_FILE", str(one))
    assert tls_context().cert_store_stats()["x509_ca"] == 1
