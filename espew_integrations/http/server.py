"""An OpenAI-compatible embeddings server in front of any embedder, watermarked or not.

Why: a provider can put ESpeW in front of its model without touching client
code (clients keep calling ``POST /v1/embeddings``), and tests get a real
endpoint to audit. The server speaks the OpenAI embeddings protocol:

- ``POST /v1/embeddings`` and ``POST /embeddings``: ``{"model", "input":
  str | [str, ...], "encoding_format": "float" | "base64"}`` ->
  ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
  "model", "usage"}``; bad requests get a 400 with OpenAI's error JSON;
- ``GET /v1/models`` and ``GET /models``: the one served model;
- ``GET /health``: liveness, no authentication, nothing about the model.

Nothing on the API port says whether a request was marked: the metrics (whose
marked count would tell, request by request) are served by
:func:`~.metrics.create_metrics_app` on the operator's own listener
(``serve(..., metrics_app=..., metrics_port=...)``, ``espew serve
--metrics-port``), and ``GET /metrics`` on the API port is a 404.

Abusive clients are bounded (every refusal is a 4xx in OpenAI's error JSON,
never a 500, and never echoes more than a short prefix of what was sent):

- the body is streamed with a hard byte limit (``max_body_bytes``): a huge or
  endless chunked body is refused with a 413 after at most that many bytes,
  and the connection is closed;
- the body must arrive within ``body_timeout`` seconds, whether it stalls or
  trickles (408, connection closed);
- a request carries at most ``max_request_chars`` characters in all, which
  bounds the model time one request can take (413);
- a request is embedded in chunks of :data:`COMPUTE_CHUNK_TEXTS` texts or
  :data:`COMPUTE_CHUNK_CHARS` characters, and the work stops at the next
  chunk when the client has hung up.

Embeddings travel as float32 values in both encodings, so a float answer and a
base64 answer decode to the same numbers. With a key, every answer goes
through :func:`espew_integrations.watermark`; the key never leaves the process.

>>> app = create_app(minilm(), key=WatermarkKey.load("provider.key"),  # doctest: +SKIP
...                  model_name="acme-embed-1")
>>> with running_server(app) as base_url:                             # doctest: +SKIP
...     OpenAIEndpoint(base_url, "acme-embed-1")(["hello"]).shape
(1, 384)
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.inject import watermark, watermark_and_mask
from ..core.key import WatermarkKey
from ..core.model_check import ModelGuard
from ..core.traffic_sample import TrafficSample
from .client import OpenAIEndpoint
from .upstream import AsyncUpstream, UpstreamError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "LOG_LEVELS",
    "as_async_upstream",
    "bind_socket",
    "check_embedder",
    "check_serve_settings",
    "create_app",
    "encode_embeddings",
    "is_loopback",
    "running_server",
    "serve",
]

logger = logging.getLogger("espew_integrations.http.server")

EmbedFn = Callable[[list[str]], Any]
DEFAULT_HOST = "127.0.0.1"
MAX_INPUTS = 2048  # OpenAI's own limit per request
MAX_TEXT_CHARS = 100_000
MAX_BODY_BYTES = 16 * 1024 * 1024
# One request's model time is roughly proportional to its characters (up to the
# model's window per text). Measured with the offline MiniLM on 2 CPU cores:
# about 8,000 characters per second for short texts, 0.18 s per text of 1,000+
# characters; 200,000 characters is then at most about 40 s of one core.
DEFAULT_MAX_REQUEST_CHARS = 200_000
DEFAULT_BODY_TIMEOUT = 30.0  # seconds for the whole body, stalled or trickling
# Work is split so that a client that hangs up frees the model within one chunk
# (at most a few seconds on a CPU); 64 texts keeps an audit batch one call.
COMPUTE_CHUNK_TEXTS = 64
COMPUTE_CHUNK_CHARS = 16_384
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
_ECHO_CHARS = 60  # how much of a client's value an error message may quote
PROBE_TEXT = "espew serve startup probe"
# Below this many values (rows x dim) an upstream answer is watermarked on the
# event loop: about 0.3 ms of work, less than handing it to a thread.
_INLINE_WATERMARK_VALUES = 64 * 1024


class _RequestError(Exception):
    """A client mistake, answered with OpenAI's error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind


class _BodyAbandoned(_RequestError):
    """A refusal sent before the body was read to its end: the connection must close.

    Keeping it open would make the server read (and discard) the rest of an
    oversized or stalled body, which is the work the refusal is meant to spare.
    """


class _ClientGone(Exception):
    """The client hung up; there is nobody to answer."""


def _error_response(error: _RequestError, *, close: bool = False) -> Any:
    from starlette.responses import JSONResponse

    body = {
        "error": {
            "message": error.message,
            "type": error.kind,
            "param": error.param,
            "code": error.code,
        }
    }
    abandoned = close or isinstance(error, _BodyAbandoned)
    headers = {"Connection": "close"} if abandoned else None
    return JSONResponse(body, status_code=error.status, headers=headers)


def _shown(value: Any) -> str:
    """A client's value for an error message: its repr, cut to a short prefix."""
    text = repr(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= _ECHO_CHARS else text[: _ECHO_CHARS - 3] + "..."


def _chunks(texts: Sequence[str]) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` ranges of at most COMPUTE_CHUNK_TEXTS texts / COMPUTE_CHUNK_CHARS chars."""
    start, chars = 0, 0
    for i, text in enumerate(texts):
        if i > start and (
            i - start >= COMPUTE_CHUNK_TEXTS or chars + len(text) > COMPUTE_CHUNK_CHARS
        ):
            yield start, i
            start, chars = i, 0
        chars += len(text)
    if start < len(texts):
        yield start, len(texts)


def create_app(
    embed: EmbedFn,
    *,
    key: WatermarkKey | None = None,
    model_name: str = "espew-embedder",
    api_key: str | None = None,
    max_inputs: int = MAX_INPUTS,
    max_text_chars: int = MAX_TEXT_CHARS,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_request_chars: int = DEFAULT_MAX_REQUEST_CHARS,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    view: Any = "auto",
    metrics: Any = None,
    tenants: Any = None,
    traffic_sample: TrafficSample | None = None,
) -> Any:
    """A Starlette app serving ``embed`` (watermarked with ``key`` if given).

    Triggers are matched on the text as the model reads it: ``view="auto"``
    uses the embedder's own ``.view`` when it has one (the offline models do),
    ``None`` the key's Unicode normalisation and window, or pass a callable.

    ``embed`` is any callable ``list[str] -> array (n, d)``. ``api_key``, if
    set, is required as ``Authorization: Bearer <api_key>`` on every route but
    ``/health``. The limits bound what one client can cost the server:
    ``max_body_bytes`` (read with a hard stop, never buffered beyond it),
    ``body_timeout`` seconds to send the whole body, ``max_request_chars``
    characters per request in all, ``max_inputs`` texts of at most
    ``max_text_chars`` characters each.

    ``embed`` may be an :class:`~.upstream.AsyncUpstream` (or an
    :class:`OpenAIEndpoint`, turned into one): the proxy path, awaited on the
    event loop with pooled connections, no thread per request.
    ``metrics`` (default: a :class:`~.metrics.WatermarkMetrics` when
    prometheus-client is installed; ``False`` for none) counts what is served;
    the app keeps it as ``app.state.metrics`` (None when off) and never
    serves it: its marked count tells whether each request carried a
    trigger. Serve ``app.state.metrics.asgi_app()`` on a listener only the
    operator reaches (``serve(app, metrics_app=..., metrics_port=...)``).
    ``tenants`` (a :class:`~.tenants.TenantKeys`) replaces
    ``key`` and ``api_key``: each client's API key selects its tenant's key
    from a key ring, and an unknown one gets a 401.
    ``traffic_sample`` (a :class:`~..core.traffic_sample.TrafficSample`)
    keeps a keyed sample of the texts answered, per tenant with ``tenants``,
    for audits drawn from what a suspect sent (``espew key reaudit``).

    >>> app = create_app(minilm(), model_name="minilm")  # doctest: +SKIP
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException

    view = _resolve_view(view, embed)
    if not model_name:
        raise ValueError("model_name must be a non-empty string")
    limits = _Limits(max_inputs, max_text_chars, max_body_bytes, max_request_chars, body_timeout)
    service = _EmbeddingService(
        embed,
        _Auth(key, api_key, tenants),
        view=view,
        model_name=model_name,
        limits=limits,
        metrics=_resolve_metrics(metrics, key, tenants),
        traffic_sample=traffic_sample,
    )
    app = Starlette(
        routes=service.routes(),
        exception_handlers={HTTPException: _http_error},
        lifespan=service.lifespan,
    )
    app.state.metrics = service.metrics
    return app


def _resolve_view(view: Any, embed: EmbedFn) -> Any:
    """The trigger view to use (``"auto"`` asks the embedder for its own ``.view``).

    Why: triggers must be matched on the text as *this* model reads it; an
    offline model knows its own normalisation and window, a bare callable does
    not. Checks first that ``embed`` is callable at all.
    """
    if not callable(embed):
        raise TypeError(f"embed must be callable list[str] -> array, got {type(embed).__name__}")
    if not isinstance(view, str):
        return view
    if view != "auto":
        raise ValueError(f"view must be 'auto', None or a callable, got {view!r}")
    from ..core.text import discover_view

    return discover_view(embed)


def _resolve_metrics(metrics: Any, key: WatermarkKey | None, tenants: Any) -> Any:
    """The metrics to count with, or None: the default unless ``False`` was passed.

    Why the key only without tenants: tenant keys mark at different rates (each
    adds its own layer), so there is no single expected rate to drift from.
    """
    if metrics is None:
        from .metrics import default_metrics

        metrics = default_metrics(key if tenants is None else None)
    return metrics or None


class _Auth:
    """Who may call the app, and which key watermarks their answers.

    Why apart from the routes: the one place that reads the ``Authorization``
    header, for both the embeddings and the models route. It holds the API
    key and the watermark key, so its repr names neither.
    """

    __slots__ = ("_expected", "_key", "_tenants")

    def __init__(self, key: WatermarkKey | None, api_key: str | None, tenants: Any):
        if tenants is not None and (key is not None or api_key):
            raise ValueError("pass either tenants (per-client keys) or key/api_key, not both")
        self._key = key
        self._expected = f"Bearer {api_key}".encode() if api_key else None
        self._tenants = tenants

    def __repr__(self) -> str:
        return "_Auth(***)"

    def key_for(self, request: Request) -> WatermarkKey | None:
        """The key this request is watermarked with, or a 401 for a wrong API key."""
        return self.identify(request)[0]

    def identify(self, request: Request) -> tuple[WatermarkKey | None, str | None]:
        """(the request's watermark key, its tenant id or None), or a 401 for a wrong API key."""
        given = request.headers.get("authorization", "")
        if self._tenants is not None:
            token = given[len("Bearer ") :] if given.startswith("Bearer ") else ""
            tenant_key = self._tenants.key_for_api_key(token) if token else None
            if tenant_key is None:
                raise _RequestError(
                    401,
                    "missing or unknown API key: send 'Authorization: Bearer <your key>'",
                    code="invalid_api_key",
                )
            return tenant_key, self._tenants.tenant_for_api_key(token)
        if self._expected is not None and not hmac.compare_digest(given.encode(), self._expected):
            raise _RequestError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
        return self._key, None


class _EmbeddingService:
    """The routes of one app and what they share: the embedder, auth, limits and metrics.

    Why a class: every route needs the same few settings, and the embeddings
    route is a pipeline (authenticate, read, parse, embed, watermark, encode)
    whose steps read best as named methods over that shared state.
    """

    def __init__(
        self,
        embed: EmbedFn,
        auth: _Auth,
        *,
        view: Any,
        model_name: str,
        limits: _Limits,
        metrics: Any,
        traffic_sample: TrafficSample | None = None,
    ):
        self.embed = embed
        self.upstream = as_async_upstream(embed)
        self.auth = auth
        self.view = view
        self.model_name = model_name
        self.limits = limits
        self.metrics = metrics
        self.traffic_sample = traffic_sample

    def __repr__(self) -> str:
        return f"_EmbeddingService(model_name={self.model_name!r})"

    def routes(self) -> list[Any]:
        """The OpenAI routes and ``/health``; never ``/metrics`` (a trigger oracle)."""
        from starlette.routing import Route

        routes = [
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            Route("/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/models", self.models, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
        ]
        return routes

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> Any:
        """On stop: write the traffic sample, close the upstream's pooled connections."""
        try:
            yield
        finally:
            try:
                if self.traffic_sample is not None:
                    self.traffic_sample.flush()
            finally:
                if self.upstream is not None:
                    await self.upstream.aclose()

    # ------------------------------------------------------------------ routes
    async def embeddings(self, request: Request) -> Response:
        """``POST /v1/embeddings``: every refusal is OpenAI's error JSON, a hang-up a 499."""
        from starlette.responses import Response

        started = time.perf_counter()
        body_read = False
        try:
            request_key, account = self.auth.identify(request)
            raw = await _read_body(request, self.limits)
            body_read = True
            texts, encoding, dimensions = _parse_request(raw, self.model_name, self.limits)
        except _RequestError as error:
            # Refused before its body was read (no or wrong API key): close
            # rather than read and discard whatever the client still sends.
            return _error_response(error, close=not body_read)
        except _ClientGone:
            return Response(status_code=499)  # nobody is there to read it
        try:
            vectors, n_marked = await self._compute_while_connected(request, texts, request_key)
        except Exception as exc:
            return self._failure_response(exc, len(texts))
        if dimensions is not None and dimensions != vectors.shape[1]:
            return _error_response(
                _RequestError(
                    400,
                    f"this model returns {vectors.shape[1]}-dimensional embeddings and "
                    f"cannot shorten them to {dimensions}",
                    param="dimensions",
                )
            )
        body = encode_embeddings(vectors, encoding, self.model_name, texts)
        if self.metrics is not None:
            self.metrics.observe(len(texts), n_marked, time.perf_counter() - started)
        if self.traffic_sample is not None:
            await self._sample_traffic(texts, account)
        return Response(body, media_type="application/json")

    async def _sample_traffic(self, texts: list[str], account: str | None) -> None:
        """Offer the answered texts to the sample; merge it into its file when due.

        A failing flush is logged, never the client's error: the answer was
        computed, and the sample retries at the next due flush.
        """
        from starlette.concurrency import run_in_threadpool

        sample = self.traffic_sample
        sample.record(texts, account)
        if sample.flush_due():
            try:
                await run_in_threadpool(sample.flush)
            except (OSError, ValueError) as exc:
                logger.error("could not write the traffic sample %s: %s", sample.path, exc)

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the one served model, behind the same API key."""
        from starlette.responses import JSONResponse

        try:
            self.auth.key_for(request)
        except _RequestError as error:
            return _error_response(error)
        entry = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "espew"}
        return JSONResponse({"object": "list", "data": [entry]})

    # ------------------------------------------------------------------ computing
    def _failure_response(self, exc: Exception, n_texts: int) -> Response:
        """The answer when embedding failed: 499 for a hang-up, the upstream's status, or 500.

        Why one place: each kind of failure is logged and counted in its own
        way (an upstream 4xx is the client's error and not counted), and the
        route then reads as the path of a request that succeeds. A model's own
        exception stays in the server log; the client gets a generic message.
        """
        from starlette.responses import Response

        if isinstance(exc, _ClientGone):
            logger.info("client hung up; stopped embedding %s", exc)
            return Response(status_code=499)
        if isinstance(exc, UpstreamError):
            logger.warning("upstream failed on %d texts: %s", n_texts, exc)
            if exc.status >= 500 and self.metrics is not None:
                self.metrics.upstream_error()
            message = str(exc) if exc.status != 502 else "the upstream embedding server failed"
            kind = "invalid_request_error" if exc.status < 500 else "server_error"
            return _error_response(_RequestError(exc.status, message[:300], kind=kind))
        logger.error("embedding %d texts failed", n_texts, exc_info=exc)
        if self.metrics is not None:
            self.metrics.upstream_error()
        return _error_response(
            _RequestError(
                500,
                "the embedding model failed on this request; see the server log",
                kind="server_error",
            )
        )

    async def _compute_while_connected(
        self, request: Request, texts: list[str], key: WatermarkKey | None
    ) -> tuple[np.ndarray, int]:
        """(the float32 answer, rows marked), stopping early if the client hangs up."""
        from starlette.concurrency import run_in_threadpool

        if self.upstream is not None:
            return await self._compute_upstream(texts, key)
        # Chunk by chunk, so that a client that hangs up stops the work at the
        # next chunk instead of keeping the model busy for nobody.
        parts = []
        for start, stop in _chunks(texts):
            if await request.is_disconnected():
                raise _ClientGone(f"after {start} of {len(texts)} texts")
            parts.append(await run_in_threadpool(self._compute, texts[start:stop], key))
        if len(parts) > 1 and len({p[0].shape[1] for p in parts}) != 1:
            raise RuntimeError("the embedder returned different dimensions for one request")
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts]), sum(p[1] for p in parts)

    async def _compute_upstream(
        self, texts: list[str], key: WatermarkKey | None
    ) -> tuple[np.ndarray, int]:
        """The proxy path: the upstream does the model work, only the watermark runs here.

        Why two ways: a small batch is watermarked on the event loop (a thread
        hop costs more than the arithmetic), a large one in the thread pool.
        """
        from starlette.concurrency import run_in_threadpool

        clean = await self.upstream.embed(texts)
        if clean.size <= _INLINE_WATERMARK_VALUES:
            return self._finish(texts, clean, key)
        return await run_in_threadpool(self._finish, texts, clean, key)

    def _compute(self, texts: list[str], key: WatermarkKey | None) -> tuple[np.ndarray, int]:
        """Embed one chunk with the local model and watermark it (runs in a thread)."""
        return self._finish(texts, self.embed(texts), key)

    def _finish(
        self, texts: list[str], clean: Any, key: WatermarkKey | None
    ) -> tuple[np.ndarray, int]:
        """(the float32 answer, how many rows were marked)."""
        # float32 first: answers travel as float32, and watermarking the
        # float32 values makes an answer a function of what the model sent,
        # whatever precision it computed in (a proxied API sends float32).
        clean = np.asarray(clean, dtype=np.float32)
        if clean.ndim != 2 or clean.shape[0] != len(texts):
            raise RuntimeError(f"the embedder returned shape {clean.shape} for {len(texts)} texts")
        if key is not None:
            # validates NaN, zeros, dimension
            out, marked = watermark_and_mask(texts, clean, key, view=self.view)
            n_marked = int(marked.sum())
        else:
            out, n_marked = clean, 0
            if not np.isfinite(out).all():
                raise RuntimeError("the embedder returned non-finite values")
        return np.ascontiguousarray(out, dtype=np.float32), n_marked


async def _health(request: Request) -> Response:
    """``GET /health``: liveness only, no authentication, nothing about the model."""
    from starlette.responses import JSONResponse

    return JSONResponse({"status": "ok"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 are plain text; clients expect OpenAI's error JSON."""
    from starlette.exceptions import HTTPException

    status = exc.status_code if isinstance(exc, HTTPException) else 400
    if status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    elif status == 404:
        message = f"no route {request.url.path}; use POST /v1/embeddings or GET /v1/models"
    else:
        message = str(getattr(exc, "detail", "")) or "bad request"
    return _error_response(_RequestError(status, message[:200]))


def as_async_upstream(embed: Any) -> AsyncUpstream | None:
    """The embedder as an :class:`AsyncUpstream` when it is a remote API, else None.

    An ``openai:`` embedder (an :class:`OpenAIEndpoint`) becomes an async,
    pooled client of the same URL, model and API key: the proxy path.
    """
    if isinstance(embed, AsyncUpstream):
        return embed
    if isinstance(embed, OpenAIEndpoint):
        return AsyncUpstream.from_endpoint(embed)
    return None


def encode_embeddings(
    vectors: np.ndarray, encoding: str, model_name: str, texts: Sequence[str]
) -> bytes:
    """An OpenAI embeddings answer for float32 ``vectors``, as JSON bytes.

    base64 rows are cut from one little-endian byte buffer of the whole
    matrix and written into the JSON as they are (base64 needs no escaping);
    float rows go through ``tolist``. Both decode to the same float32 values.
    """
    n_tokens = sum(len(t.split()) for t in texts)
    tail = (
        f'],"model":{json.dumps(model_name)},'
        f'"usage":{{"prompt_tokens":{n_tokens},"total_tokens":{n_tokens}}}}}'
    )
    if encoding == "base64":
        raw = memoryview(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
        width = vectors.shape[1] * 4
        items = ",".join(
            f'{{"object":"embedding","index":{i},"embedding":"'
            f'{base64.b64encode(raw[i * width : (i + 1) * width]).decode("ascii")}"}}'
            for i in range(len(vectors))
        )
    else:
        items = ",".join(
            f'{{"object":"embedding","index":{i},"embedding":'
            f"{json.dumps(row, separators=(',', ':'))}}}"
            for i, row in enumerate(vectors.tolist())
        )
    return ('{"object":"list","data":[' + items + tail).encode("ascii")


class _Limits:
    """The per-request limits of one app (see :func:`create_app`), checked when built."""

    __slots__ = (
        "body_timeout",
        "max_body_bytes",
        "max_inputs",
        "max_request_chars",
        "max_text_chars",
    )

    def __init__(
        self,
        max_inputs: int,
        max_text_chars: int,
        max_body_bytes: int,
        max_request_chars: int,
        body_timeout: float,
    ):
        for name, limit in (
            ("max_inputs", max_inputs),
            ("max_text_chars", max_text_chars),
            ("max_body_bytes", max_body_bytes),
            ("max_request_chars", max_request_chars),
        ):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"{name} must be a positive integer, got {limit!r}")
        if not (isinstance(body_timeout, (int, float)) and 0 < body_timeout < float("inf")):
            raise ValueError(
                f"body_timeout must be a positive number of seconds, got {body_timeout!r}"
            )
        self.max_inputs = max_inputs
        self.max_text_chars = max_text_chars
        self.max_body_bytes = max_body_bytes
        self.max_request_chars = max_request_chars
        self.body_timeout = body_timeout


async def _read_body(request: Any, limits: _Limits) -> bytearray:
    """The request body, streamed: refused past ``max_body_bytes`` or ``body_timeout``.

    Why streamed: ``request.body()`` buffers everything before any check, so a
    chunked body (no Content-Length) of any size used to land in memory whole.
    Here at most ``max_body_bytes`` (plus one network chunk) are ever held.
    """
    import anyio
    from starlette.requests import ClientDisconnect

    too_large = _BodyAbandoned(
        413,
        f"request body exceeds {limits.max_body_bytes} bytes; split the input into "
        "smaller requests",
        code="request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_large
    body = bytearray()
    try:
        with anyio.fail_after(limits.body_timeout):
            async for chunk in request.stream():
                if len(body) + len(chunk) > limits.max_body_bytes:
                    raise too_large
                body += chunk
    except TimeoutError:
        raise _BodyAbandoned(
            408,
            f"the request body did not arrive within {limits.body_timeout:g} s",
            code="request_timeout",
        ) from None
    except ClientDisconnect:
        raise _ClientGone("before the body was complete") from None
    return body


def _parse_request(
    raw: bytes | bytearray, model_name: str, limits: _Limits
) -> tuple[list[str], str, int | None]:
    """Validate an embeddings request: (texts, encoding_format, dimensions)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _RequestError(400, "the request body is nested too deeply") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise _RequestError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _RequestError(400, "missing required parameter: 'model'", param="model")
    if model != model_name:
        raise _RequestError(
            404,
            f"the model {_shown(model)} does not exist; this server serves {model_name!r}",
            param="model",
            code="model_not_found",
        )
    texts = _parse_input(body.get("input"), limits)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _RequestError(
            400,
            f"encoding_format must be 'float' or 'base64', got {_shown(encoding)}",
            param="encoding_format",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise _RequestError(400, "dimensions must be a positive integer", param="dimensions")
    return texts, encoding, dimensions


def _parse_input(value: Any, limits: _Limits) -> list[str]:
    if value is None:
        raise _RequestError(400, "missing required parameter: 'input'", param="input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise _RequestError(400, "'input' must be a string or a list of strings", param="input")
    if not texts:
        raise _RequestError(400, "'input' is an empty list; send at least one text", param="input")
    if len(texts) > limits.max_inputs:
        raise _RequestError(
            400,
            f"'input' has {len(texts)} texts; at most {limits.max_inputs} per request",
            param="input",
        )
    total = 0
    for i, text in enumerate(texts):
        if isinstance(text, (int, list)) and not isinstance(text, bool):
            raise _RequestError(
                400,
                f"input[{i}] is a token array or token id; this server embeds text only",
                param="input",
            )
        if not isinstance(text, str):
            raise _RequestError(
                400, f"input[{i}] is {type(text).__name__}, expected a string", param="input"
            )
        if not text.strip():
            raise _RequestError(400, f"input[{i}] is an empty string", param="input")
        if len(text) > limits.max_text_chars:
            raise _RequestError(
                400,
                f"input[{i}] has {len(text)} characters; at most {limits.max_text_chars}",
                param="input",
            )
        total += len(text)
    if total > limits.max_request_chars:
        raise _RequestError(
            413,
            f"'input' has {total} characters in all; at most {limits.max_request_chars} per "
            "request: split it into smaller requests",
            param="input",
            code="request_too_large",
        )
    for i, text in enumerate(texts):
        # JSON allows escaped lone surrogates ("\ud800"); no model can read them
        # (they are not Unicode text), so they are the client's error, not a 500.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _RequestError(
                400,
                f"input[{i}] contains a lone surrogate at character {exc.start}: "
                "not valid Unicode text",
                param="input",
            ) from None
    return texts


# ---------------------------------------------------------------------- running
def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_serve_settings(*, port: int, log_level: str) -> str:
    """Check the port and log level before anything listens; returns the level, lowercased.

    Why up front: a bad log level used to crash uvicorn after ``espew serve``
    had announced that it was listening, and a port out of range ended in a
    traceback. Raises ``ValueError`` with a message that names the setting.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(
            f"port must be an integer from 0 to 65535 (0 picks a free one), got {port!r}"
        )
    level = str(log_level).lower()
    if level not in LOG_LEVELS:
        raise ValueError(
            f"log level must be one of {', '.join(LOG_LEVELS)}, got {_shown(log_level)}"
        )
    return level


def check_embedder(embed: EmbedFn, key: WatermarkKey | None = None) -> int:
    """Embed (and watermark) one probe text; returns the model's dimension.

    Why: a key drawn for another model (another dimension) used to start
    normally and then fail every request with a 500. Run this before serving:
    it raises ``ValueError`` naming both dimensions when they differ, and
    when the embedder fails or returns something that is not one finite
    vector per text.
    """
    try:
        clean = np.asarray(embed([PROBE_TEXT]), dtype=np.float32)
    except Exception as exc:
        raise ValueError(
            f"the embedder failed on a startup probe text: {type(exc).__name__}: {exc}"
        ) from None
    if clean.ndim != 2 or clean.shape[0] != 1 or clean.shape[1] < 1:
        raise ValueError(f"the embedder returned shape {clean.shape} for one probe text")
    if not np.isfinite(clean).all():
        raise ValueError("the embedder returned non-finite values for a probe text")
    dim = int(clean.shape[1])
    if key is not None:
        if key.dim != dim:
            raise ValueError(
                f"the key {key.key_id} is for {key.dim}-dimensional embeddings but this "
                f"embedder returns {dim}-dimensional ones: serve the model the key was "
                "generated with"
            )
        watermark([PROBE_TEXT], clean, key)
        # The key's own model, not merely one of its dimension (KeyModelMismatchError,
        # a ValueError, names the mismatch).
        ModelGuard(key, embed).check()
    return dim


def bind_socket(host: str = DEFAULT_HOST, port: int = 0) -> socket.socket:
    """A listening TCP socket (port 0 picks a free port; read it with getsockname())."""
    check_serve_settings(port=port, log_level="warning")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _base_url(sock: socket.socket) -> str:
    return f"{_origin(sock)}/v1"


def _origin(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def serve(
    app: Any,
    *,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    log_level: str = "warning",
    access_log: bool = False,
    on_ready: Callable[[str], None] | None = None,
    workers: int = 1,
    metrics_app: Any = None,
    metrics_host: str = DEFAULT_HOST,
    metrics_port: int = 0,
    on_metrics_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``app`` until interrupted; ``on_ready(base_url)`` runs once listening.

    The port and log level are checked before binding (``ValueError``), so a
    bad setting never gets as far as announcing a listening server.

    ``workers > 1`` forks that many processes after binding; they share the
    listening socket (the kernel spreads connections over them) and each runs
    its own event loop, so the watermark's CPU work uses that many cores. The
    app, its key and its model are built once, before the fork, and never
    pickled (keys refuse pickling); the parent only waits and passes SIGINT and
    SIGTERM on. Needs ``os.fork`` (Linux, macOS); elsewhere run one process per
    port behind a load balancer (see docs/deployment.md).

    ``metrics_app`` (``app.state.metrics.asgi_app()``) is the operator's
    listener, on ``metrics_host:metrics_port`` (127.0.0.1 by default; port 0
    picks a free one), never on the API port: the marked count it serves tells
    whether each request carried a trigger. This process serves it, on a
    thread: with ``workers > 1`` that is the supervisor, whose scrape sums the
    rows every forked worker counts in, so it reports the whole server.
    ``on_metrics_ready(url)`` gets its ``http://host:port/metrics``.
    """
    import uvicorn

    log_level = check_serve_settings(port=port, log_level=log_level)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if workers > 1 and not hasattr(os, "fork"):
        raise ValueError("workers > 1 needs os.fork (Linux, macOS); run one process per port")
    if metrics_app is not None:
        check_serve_settings(port=metrics_port, log_level=log_level)
        if metrics_port != 0 and metrics_port == port:
            raise ValueError(
                "the metrics port must differ from the API port: the marked count must not "
                "be reachable by clients"
            )
    if not is_loopback(host):
        logger.warning(
            "listening on %s, reachable from other machines: require an API key "
            "(--api-key-env) and put TLS in front",
            host,
        )
    if metrics_app is not None and not is_loopback(metrics_host):
        logger.warning(
            "serving metrics on %s, reachable from other machines: the marked count tells "
            "whether each request carried a trigger; let only your Prometheus reach it",
            metrics_host,
        )
    sock = bind_socket(host, port)
    metrics_sock = None
    try:
        if metrics_app is not None:
            metrics_sock = bind_socket(metrics_host, metrics_port)
        if on_ready is not None:
            on_ready(_base_url(sock))
        if metrics_sock is not None and on_metrics_ready is not None:
            on_metrics_ready(_origin(metrics_sock) + "/metrics")
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on")
        if workers == 1:
            with _serving_in_thread(metrics_app, metrics_sock):
                uvicorn.Server(config).run(sockets=[sock])
        else:
            _run_forked(config, sock, workers, metrics_app, metrics_sock)
    finally:
        sock.close()
        if metrics_sock is not None:
            metrics_sock.close()


def _run_forked(
    config: Any,
    sock: socket.socket,
    workers: int,
    metrics_app: Any = None,
    metrics_sock: socket.socket | None = None,
) -> None:
    """Run ``workers`` uvicorn servers in forked children on one shared socket.

    The parent (the supervisor) serves ``metrics_app`` on ``metrics_sock``
    itself, on a thread started after every fork (a fork copies only the
    calling thread); the children close that socket, so only the supervisor
    ever answers a scrape.
    """
    import signal

    import uvicorn

    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # the child: serve until told to stop, never return into the caller
            code = 0
            try:
                if metrics_sock is not None:
                    metrics_sock.close()
                uvicorn.Server(config).run(sockets=[sock])
            except BaseException:
                logger.exception("worker %d failed", os.getpid())
                code = 1
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, frame: Any) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _serving_in_thread(metrics_app, metrics_sock):
            for child in children:
                while True:
                    try:
                        os.waitpid(child, 0)
                        break
                    except InterruptedError:
                        continue
                    except ChildProcessError:
                        break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _serving_in_thread(
    app: Any, sock: socket.socket | None, *, timeout: float = 10.0
) -> Iterator[None]:
    """Serve ``app`` on ``sock`` from a daemon thread while the block runs (nothing if None).

    Why a thread: the operator's metrics listener must live in the process
    whose counts it sums, next to the server the main thread runs (uvicorn
    installs signal handlers only on the main thread, so this one never
    steals them). Raises ``RuntimeError`` when it does not start in time.
    """
    if app is None or sock is None:
        yield
        return
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="espew-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start within {timeout:g} s")
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout)


@contextlib.contextmanager
def running_server(
    app: Any, *, host: str = DEFAULT_HOST, port: int = 0, timeout: float = 10.0
) -> Iterator[str]:
    """Run ``app`` on a background thread; yields its base URL (``http://host:port/v1``).

    For tests and notebooks: real sockets, real HTTP, stopped on exit. The
    operator's metrics app runs the same way (its scrape URL is the base URL
    without ``/v1``, plus ``/metrics``).

    >>> with running_server(create_app(minilm(), model_name="m")) as url:  # doctest: +SKIP
    ...     print(url)
    http://127.0.0.1:54321/v1
    """
    sock = bind_socket(host, port)
    try:
        with _serving_in_thread(app, sock, timeout=timeout):
            yield _base_url(sock)
    finally:
        sock.close()
