"""AsyncUpstream: the embedding server ``espew serve`` sits in front of, called without threads.

Why a second client next to :class:`~.client.OpenAIEndpoint`: that one is an
auditor's tool (synchronous, a query budget, patient retries). A proxy in a
provider's serving path needs the opposite trade-offs: every request of every
client goes through it, so it must not tie up a thread per request, must reuse
keep-alive connections, and must not turn vectors into Python floats and back.
So this client

- runs on the server's event loop with one pooled ``aiohttp.ClientSession``
  per loop (HTTP keep-alive, ``max_connections`` in flight). Why aiohttp and
  not httpx, which the auditor's client uses: its C HTTP parser reads a
  many-megabyte answer in a fraction of httpx's CPU, and at a GPU's pace the
  proxy's CPU is what limits it (benchmarks/bench_proxy.py --stages);
- asks the upstream for ``base64`` by default and decodes the answer straight
  into one float32 numpy matrix (``float`` answers are accepted too);
- validates the answer as strictly as the auditor's client does (one row per
  input, each index once, one common dimension, finite values) and raises
  :class:`UpstreamError` with a message free of the upstream's API key.

>>> upstream = AsyncUpstream("http://gpu-box:8080/v1", "bge-large")   # doctest: +SKIP
>>> app = create_app(upstream, key=key, model_name="acme-embed-1")    # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.ground.errors import ESpeWError, InputError, InputTypeError
from ..core.ground.untrusted import printable
from .client import OpenAIEndpoint
from .protocol import MalformedAnswer, decode_embeddings, error_message
from .settings import check_endpoint, check_positive_int, check_seconds

__all__ = ["AsyncUpstream", "UpstreamError", "tls_context"]

#: Statuses that a retry may cure: the upstream restarting or overloaded.
_RETRY_STATUSES = frozenset({502, 503, 504})
#: Client mistakes the upstream reports that the proxy's client should see as such.
_PASSED_THROUGH = frozenset({400, 404, 413, 422, 429})


class UpstreamError(ESpeWError):
    """The upstream failed or sent something that is not an embeddings answer.

    ``status`` is what the proxy answers its own client: the upstream's status
    for a client mistake it reports (400, 413, 429...), 502 otherwise.
    """

    def __init__(self, message: str, *, status: int = 502):
        super().__init__(message)
        self.status = status


class AsyncUpstream:
    """An OpenAI-compatible embeddings API, awaited as ``await upstream.embed(texts)``.

    ``embed`` returns a C-contiguous float32 ``(n, d)`` matrix (what the
    upstream sent, bit for bit, when it answers in base64). Calling the
    object synchronously (``upstream(texts)``) runs one request on a private
    event loop: for start-up checks and scripts, never inside a running loop.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        encoding_format: str = "base64",
        timeout: float = 30.0,
        max_connections: int = 64,
        max_retries: int = 2,
        max_batch: int = 2048,
        max_response_bytes: int = 256 * 2**20,
    ):
        check_endpoint(base_url, model, encoding_format, whose="upstream")
        for name, value in (
            ("max_connections", max_connections),
            ("max_batch", max_batch),
            ("max_response_bytes", max_response_bytes),
        ):
            check_positive_int(name, value)
        check_positive_int("max_retries", max_retries, minimum=0)
        check_seconds("timeout", timeout)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.encoding_format = encoding_format
        self.timeout = float(timeout)
        self.max_connections = max_connections
        self.max_retries = max_retries
        self.max_batch = max_batch
        self.max_response_bytes = max_response_bytes
        self._api_key = api_key or None
        self._clients: dict[int, Any] = {}  # one pool per event loop (per worker process)

    @classmethod
    def from_endpoint(cls, endpoint: OpenAIEndpoint, **options: Any) -> AsyncUpstream:
        """The same upstream as an ``openai:`` embedder (URL, model, API key, timeout)."""
        api_key = endpoint._api_key.reveal() if endpoint._api_key is not None else None
        options.setdefault("timeout", endpoint.timeout)
        return cls(endpoint.base_url, endpoint.model, api_key, **options)

    @property
    def url(self) -> str:
        """The full embeddings URL."""
        return f"{self.base_url}/embeddings"

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return (
            f"AsyncUpstream(base_url={self.base_url!r}, model={self.model!r}, api_key={key}, "
            f"encoding_format={self.encoding_format!r})"
        )

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError("AsyncUpstream refuses to be pickled (it may hold an API key)")

    # ------------------------------------------------------------------ calling
    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), d)``: the upstream's embeddings, in input order.

        Requests larger than ``max_batch`` texts go out as concurrent batches.
        """
        texts = list(texts)
        if not texts:
            raise InputError("embed needs at least one text")
        if len(texts) <= self.max_batch:
            return await self._embed_batch(texts)
        parts = await asyncio.gather(
            *(
                self._embed_batch(texts[start : start + self.max_batch])
                for start in range(0, len(texts), self.max_batch)
            )
        )
        if len({p.shape[1] for p in parts}) != 1:
            raise UpstreamError(f"{self.url} returned different dimensions for one request")
        return np.concatenate(parts)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Synchronous :meth:`embed` on a private event loop (start-up checks, scripts)."""

        async def once() -> np.ndarray:
            try:
                return await self.embed(texts)
            finally:
                await self.aclose()

        return asyncio.run(once())

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop."""
        client = self._clients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.close()

    # ------------------------------------------------------------------ internals
    def _client(self) -> Any:
        import aiohttp

        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None or client.closed:
            headers = {"Content-Type": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            client = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout, connect=min(self.timeout, 10.0)),
                connector=aiohttp.TCPConnector(limit=self.max_connections, ssl=tls_context()),
                trust_env=True,  # HTTP(S)_PROXY and NO_PROXY, as httpx's clients read them
            )
            self._clients[loop] = client
        return client

    async def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import aiohttp

        payload = json.dumps(
            {"model": self.model, "input": texts, "encoding_format": self.encoding_format},
            ensure_ascii=False,
        ).encode("utf-8")
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
            try:
                status, reason, body = await self._post(payload)
            except asyncio.TimeoutError:  # aiohttp's timeouts are TimeoutErrors
                problem = f"timed out after {self.timeout:g} s"
                continue
            except aiohttp.ClientError as exc:
                problem = f"connection failed ({type(exc).__name__})"
                continue
            if status == 200:
                return self._rows(body, len(texts))
            message = self._clean(error_message(body, reason))
            if status in _PASSED_THROUGH:
                raise UpstreamError(f"upstream: {message}", status=status)
            problem = f"HTTP {status}: {message}"
            if status not in _RETRY_STATUSES:
                break
        raise UpstreamError(f"{self.url} failed: {problem}")

    async def _post(self, payload: bytes) -> tuple[int, str, bytes]:
        """(status, reason, body) of one POST of ``payload``; the body is refused once
        it passes ``max_response_bytes``."""
        async with self._client().post(self.url, data=payload, allow_redirects=False) as response:
            return response.status, response.reason or "", await self._read(response)

    async def _read(self, response: Any) -> bytes:
        """The body, refused as soon as its announced or received size passes the limit."""
        too_large = UpstreamError(f"{self.url} sent more than {self.max_response_bytes} bytes")
        length = response.content_length
        if length is not None and length > self.max_response_bytes:
            raise too_large
        chunks, size = [], 0
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > self.max_response_bytes:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    def _clean(self, text: object) -> str:
        return printable(text, secrets=(self._api_key,) if self._api_key else ())

    def _rows(self, body: bytes, n_expected: int) -> np.ndarray:
        problem: str
        try:
            return decode_embeddings(body, n_expected)
        except MalformedAnswer as exc:
            problem = str(exc)
        except Exception as exc:  # a broken body must never escape as anything else
            problem = f"not an OpenAI embeddings answer ({type(exc).__name__})"
        raise UpstreamError(self._clean(f"{self.url} returned {problem}"))


def tls_context() -> ssl.SSLContext:
    """The certificates an HTTPS upstream is checked against: ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` where set, else certifi's bundle.

    The same trust as httpx's clients (the auditor's, and the proxy's before aiohttp),
    so moving the proxy to aiohttp neither drops a CA an operator named nor depends on
    the machine's own store (absent from slim containers)."""
    import certifi

    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)
