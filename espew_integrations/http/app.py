"""The app: :func:`create_app`, an OpenAI-compatible embeddings server in front of any
embedder, watermarked or not.

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

Why apart from the wire format and the process: this module decides who may
call (:class:`_Auth`), what is computed for them (embed in chunks while the
client is connected, or await the upstream; watermark with their key) and how
each failure is answered. Parsing and encoding are :mod:`.protocol`'s, the body
is read by :mod:`.body`, the listening socket is :mod:`.listen`'s, and :mod:`.serving`
(a supervised process) or :mod:`.background` (a thread) runs the app.

What :func:`create_app` takes besides the model and the key. ``embed`` may be an
:class:`~.upstream.AsyncUpstream` (or an :class:`OpenAIEndpoint`, turned into one),
awaited on the event loop with pooled connections, no thread per request.
``metrics`` (default: a :class:`~.metrics.WatermarkMetrics` when prometheus-client is
installed; ``False`` for none) counts what is served; the app keeps it as
``app.state.metrics`` (None when off) and never serves it: its marked count tells
whether each request carried a trigger. Serve ``app.state.metrics.asgi_app()`` on a
listener only the operator reaches (``serve(app, metrics_app=..., metrics_port=...)``).
``tenants`` (a :class:`~.tenants.TenantKeys`) replaces ``key`` and ``api_key``: each
client's API key selects its tenant's key from a key ring, and an unknown one gets a
401. ``traffic_sample`` (a :class:`~..core.records.traffic_sample.TrafficSample`) keeps a keyed
sample of the texts answered, per tenant with ``tenants``, otherwise per credential (a
keyed hash of the client's API key), for audits drawn from what a suspect sent
(``espew key reaudit``).

>>> app = create_app(minilm(), key=WatermarkKey.load("provider.key"),  # doctest: +SKIP
...                  model_name="acme-embed-1")
>>> with running_server(app) as base_url:                             # doctest: +SKIP
...     OpenAIEndpoint(base_url, "acme-embed-1")(["hello"]).shape
(1, 384)
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.ground.defaults import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUEST_CHARS
from ..core.ground.errors import InputError, InputTypeError, ServingError
from ..core.keys.key import WatermarkKey
from ..core.keys.model_check import ModelGuard
from ..core.mark.inject import watermark, watermark_and_mask
from ..core.mark.key_types import EmbedFn
from ..core.records.traffic_sample import TrafficSample
from .body import BodyAbandoned, ClientGone, read_body
from .client import OpenAIEndpoint
from .protocol import (
    MAX_BODY_BYTES,
    MAX_INPUTS,
    MAX_TEXT_CHARS,
    RequestError,
    RequestLimits,
    encode_embeddings,
    parse_request,
)
from .traffic import credential_account, sample_answered
from .upstream import AsyncUpstream, UpstreamError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "COMPUTE_CHUNK_CHARS",
    "COMPUTE_CHUNK_TEXTS",
    "PROBE_TEXT",
    "as_async_upstream",
    "check_embedder",
    "create_app",
]

logger = logging.getLogger("espew_integrations.http.server")

# Work is split so that a client that hangs up frees the model within one chunk
# (at most a few seconds on a CPU); 64 texts keeps an audit batch one call.
COMPUTE_CHUNK_TEXTS = 64
COMPUTE_CHUNK_CHARS = 16_384
PROBE_TEXT = "espew serve startup probe"
# Below this many values (rows x dim) an upstream answer is watermarked on the
# event loop: so little work that handing it to a thread would cost more.
_INLINE_WATERMARK_VALUES = 64 * 1024


def _error_response(error: RequestError, *, close: bool = False) -> Any:
    """OpenAI's error JSON for ``error``; ``Connection: close`` when the body was abandoned."""
    from starlette.responses import JSONResponse

    abandoned = close or isinstance(error, BodyAbandoned)
    headers = {"Connection": "close"} if abandoned else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


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
    :class:`OpenAIEndpoint`, turned into one): the proxy path. ``metrics``,
    ``tenants`` and ``traffic_sample`` are as the module docstring says.

    >>> app = create_app(minilm(), model_name="minilm")  # doctest: +SKIP
    """
    view = _resolve_view(view, embed)
    if not model_name:
        raise InputError("model_name must be a non-empty string")
    limits = RequestLimits(
        max_inputs, max_text_chars, max_body_bytes, max_request_chars, body_timeout
    )
    service = _EmbeddingService(
        embed,
        _Auth(key, api_key, tenants),
        view=view,
        model_name=model_name,
        limits=limits,
        metrics=_resolve_metrics(metrics, key, tenants),
        traffic_sample=traffic_sample,
    )
    return _starlette_app(service)


def _starlette_app(service: _EmbeddingService) -> Any:
    """The Starlette app of ``service``'s routes, its metrics kept as ``app.state.metrics``."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException

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
        raise InputTypeError(
            f"embed must be callable list[str] -> array, got {type(embed).__name__}"
        )
    if not isinstance(view, str):
        return view
    if view != "auto":
        raise InputError(f"view must be 'auto', None or a callable, got {view!r}")
    from ..core.ground.text import discover_view

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
            raise InputError("pass either tenants (per-client keys) or key/api_key, not both")
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
                raise RequestError(
                    401,
                    "missing or unknown API key: send 'Authorization: Bearer <your key>'",
                    code="invalid_api_key",
                )
            return tenant_key, self._tenants.tenant_for_api_key(token)
        if self._expected is not None and not hmac.compare_digest(given.encode(), self._expected):
            raise RequestError(
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
        limits: RequestLimits,
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
            raw = await read_body(request, self.limits)
            body_read = True
            texts, encoding, dimensions = parse_request(raw, self.model_name, self.limits)
        except RequestError as error:
            # Refused before its body was read (no or wrong API key): close
            # rather than read and discard whatever the client still sends.
            return _error_response(error, close=not body_read)
        except ClientGone:
            return Response(status_code=499)  # nobody is there to read it
        try:
            vectors, n_marked = await self._compute_while_connected(request, texts, request_key)
        except Exception as exc:
            return self._failure_response(exc, len(texts))
        if dimensions is not None and dimensions != vectors.shape[1]:
            return _error_response(
                RequestError(
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
            if account is None:  # no key ring: the account the credential names
                account = credential_account(
                    self.traffic_sample, request.headers.get("authorization")
                )
            await sample_answered(self.traffic_sample, texts, account, logger)
        return Response(body, media_type="application/json")

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the one served model, behind the same API key."""
        from starlette.responses import JSONResponse

        try:
            self.auth.key_for(request)
        except RequestError as error:
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

        if isinstance(exc, ClientGone):
            logger.info("client hung up; stopped embedding %s", exc)
            return Response(status_code=499)
        if isinstance(exc, UpstreamError):
            logger.warning("upstream failed on %d texts: %s", n_texts, exc)
            if exc.status >= 500 and self.metrics is not None:
                self.metrics.upstream_error()
            message = str(exc) if exc.status != 502 else "the upstream embedding server failed"
            kind = "invalid_request_error" if exc.status < 500 else "server_error"
            return _error_response(RequestError(exc.status, message[:300], kind=kind))
        logger.error("embedding %d texts failed", n_texts, exc_info=exc)
        if self.metrics is not None:
            self.metrics.upstream_error()
        return _error_response(
            RequestError(
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
                raise ClientGone(f"after {start} of {len(texts)} texts")
            parts.append(await run_in_threadpool(self._compute, texts[start:stop], key))
        if len(parts) > 1 and len({p[0].shape[1] for p in parts}) != 1:
            raise ServingError("the embedder returned different dimensions for one request")
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
            raise ServingError(f"the embedder returned shape {clean.shape} for {len(texts)} texts")
        if key is not None:
            # validates NaN, zeros, dimension
            out, marked = watermark_and_mask(texts, clean, key, view=self.view)
            n_marked = int(marked.sum())
        else:
            out, n_marked = clean, 0
            if not np.isfinite(out).all():
                raise ServingError("the embedder returned non-finite values")
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
    return _error_response(RequestError(status, message[:200]))


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


def check_embedder(embed: EmbedFn, key: WatermarkKey | None = None) -> int:
    """Embed (and watermark) one probe text; returns the model's dimension.

    Why: without it, a key drawn for another model (another dimension) starts
    normally and then fails every request with a 500. Run this before serving:
    it raises ``ValueError`` naming both dimensions when they differ, and
    when the embedder fails or returns something that is not one finite
    vector per text.
    """
    try:
        clean = np.asarray(embed([PROBE_TEXT]), dtype=np.float32)
    except Exception as exc:
        raise InputError(
            f"the embedder failed on a startup probe text: {type(exc).__name__}: {exc}"
        ) from None
    if clean.ndim != 2 or clean.shape[0] != 1 or clean.shape[1] < 1:
        raise InputError(f"the embedder returned shape {clean.shape} for one probe text")
    if not np.isfinite(clean).all():
        raise InputError("the embedder returned non-finite values for a probe text")
    dim = int(clean.shape[1])
    if key is not None:
        if key.dim != dim:
            raise InputError(
                f"the key {key.key_id} is for {key.dim}-dimensional embeddings but this "
                f"embedder returns {dim}-dimensional ones: serve the model the key was "
                "generated with"
            )
        watermark([PROBE_TEXT], clean, key)
        # The key's own model, not merely one of its dimension (KeyModelMismatchError,
        # a ValueError, names the mismatch).
        ModelGuard(key, embed).check()
    return dim
