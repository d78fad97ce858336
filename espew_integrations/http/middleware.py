"""ESpeWMiddleware: watermark an existing Starlette/FastAPI embeddings app with one line.

Why: many providers already run their own embedding app. Rewriting it around
:func:`~espew_integrations.http.app.create_app` is a migration; wrapping it
is one line::

    app = ESpeWMiddleware(app, key=WatermarkKey.load("provider.key"))

The middleware is plain ASGI (no dependency beyond what the app already has):

- ``POST /v1/embeddings`` and ``POST /embeddings`` (``paths``): the request
  body is recorded as it streams to the app (the texts), the app's answer is
  held until complete, and a ``200`` OpenAI embeddings answer has each
  ``embedding`` replaced by its watermarked float32 value, in the encoding the
  app used (``float`` lists or ``base64``). Everything else in the answer
  (``model``, ``usage``, extra fields) is kept;
- every other route, method and non-200 answer passes through untouched;
- an answer it cannot watermark (not OpenAI-shaped, compressed, rows that do
  not match the texts, token-id inputs) becomes a 500 in OpenAI's error shape
  with the reason in the server log: never an unwatermarked or wrong vector;
- requests, texts, marked texts and latency are counted (when
  ``prometheus-client`` is installed, see :mod:`.metrics`) but never served on
  the wrapped app: ``GET /metrics`` there is the app's own business (usually a
  404). The marked count tells whether each request carried a trigger, so it
  is served by :meth:`ESpeWMiddleware.metrics_app`, a separate ASGI app to run
  on a listener only the operator's Prometheus reaches::

      uvicorn.run(middleware.metrics_app(), host="127.0.0.1", port=9464)

Put it *inside* any compression middleware (closer to the app), so that it
sees the JSON before it is compressed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..core.ground.errors import InputError, InputTypeError, ServingError
from ..core.keys.key import WatermarkKey
from ..core.mark.inject import watermark_and_mask
from ..core.records.traffic_sample import TrafficSample
from .protocol import (
    MalformedAnswer,
    RequestError,
    decode_embeddings,
    error_json,
    parse_input,
    replace_embeddings,
)
from .traffic import credential_account, sample_answered

__all__ = ["ESpeWMiddleware"]

logger = logging.getLogger("espew_integrations.http.middleware")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_PATHS = ("/v1/embeddings", "/embeddings")


class _Refused(Exception):
    """An answer the middleware will not pass on; the message goes to the log.

    ``client_message`` is set when the client can fix it (status 400).
    """

    def __init__(self, message: str, *, client_message: str | None = None):
        super().__init__(message)
        self.client_message = client_message


class ESpeWMiddleware:
    """ASGI middleware that watermarks the OpenAI-shaped embeddings answers of ``app``.

    ``key`` watermarks every answer; ``view`` is the model's text view for
    trigger matching (``None``: the key's own normalisation and window).
    ``metrics`` (default: a fresh :class:`~.metrics.WatermarkMetrics` when
    prometheus-client is installed, ``False`` for none) counts requests,
    texts, marked texts and latency; :meth:`metrics_app` serves them to the
    operator, on a listener of its own. ``metrics_path`` is refused: the
    middleware never serves metrics on the app it wraps, where any
    client could read the marked count (a trigger oracle).

    ``traffic_sample`` (a :class:`~..core.records.traffic_sample.TrafficSample`)
    keeps a keyed sample of the texts answered, for audits drawn from what a
    suspect sent; ``traffic_account`` maps a request's ASGI scope to its
    account id (e.g. from your authentication), so that each account is
    sampled apart. Without it the account is the request's credential (its
    ``Authorization`` header, hashed under the sample's salt: one client's
    traffic never pushes out another's). The sample is merged into its file
    when due and when the app shuts down.

    >>> app = ESpeWMiddleware(app, key=WatermarkKey.load("provider.key"))  # doctest: +SKIP
    """

    def __init__(
        self,
        app: Any,
        *,
        key: WatermarkKey,
        view: Callable[[Sequence[str]], Sequence[str]] | None = None,
        paths: Sequence[str] = DEFAULT_PATHS,
        metrics: Any = None,
        metrics_path: str | None = None,
        traffic_sample: TrafficSample | None = None,
        traffic_account: Callable[[Scope], str | None] | None = None,
    ):
        if not isinstance(key, WatermarkKey):
            raise InputTypeError(f"key must be a WatermarkKey, got {type(key).__name__}")
        if metrics_path is not None:
            raise InputError(
                "ESpeWMiddleware does not serve metrics on the app it wraps: any client could "
                "read the marked count there and learn which requests carried a trigger. "
                "Serve middleware.metrics_app() on a listener only your Prometheus reaches"
            )
        self.app = app
        self._key = key
        self._view = view
        self.paths = frozenset(paths)
        if metrics is None:
            from .metrics import default_metrics

            metrics = default_metrics(key)
        self.metrics = metrics or None
        if traffic_account is not None and traffic_sample is None:
            raise InputError("traffic_account needs a traffic_sample to record into")
        self.traffic_sample = traffic_sample
        self._traffic_account = traffic_account

    def __repr__(self) -> str:
        return f"ESpeWMiddleware(app={self.app!r}, key_id={self._key.key_id!r})"

    def metrics_app(self) -> Any:
        """The operator's ASGI app: these metrics at ``GET /metrics``, every other path 404.

        Run it on its own port, bound to an address clients cannot reach (see
        :func:`~.metrics.create_metrics_app`); with workers forked after the
        middleware was built, run it in the process that forks them, whose
        scrape sums every worker's counts. Raises ``RuntimeError`` when the
        middleware counts nothing (``metrics=False``, or no prometheus-client).
        """
        if self.metrics is None:
            from .._optional import install_line

            raise ServingError(
                f"this middleware has no metrics: {install_line('metrics')}; "
                "and leave metrics unset (or pass a WatermarkMetrics)"
            )
        return self.metrics.asgi_app()

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError("ESpeWMiddleware refuses to be pickled (it holds a watermark key)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and self.traffic_sample is not None:
            await self.app(scope, receive, self._flushing_on_shutdown(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path not in self.paths or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        await self._embeddings(scope, receive, send)

    async def _embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        request_chunks: list[bytes] = []

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                request_chunks.append(message.get("body", b""))
            return message

        start: Message | None = None
        body_chunks: list[bytes] = []
        passing_through = False

        async def holding_send(message: Message) -> None:
            nonlocal start, passing_through
            if message["type"] == "http.response.start":
                start = message
                if message["status"] != 200:  # errors and the like are the app's business
                    passing_through = True
                    await send(message)
                return
            if message["type"] != "http.response.body" or passing_through:
                await send(message)
                return
            body_chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            assert start is not None
            try:
                new_body, texts, n_marked = self._rewrite(
                    start, b"".join(request_chunks), b"".join(body_chunks)
                )
            except _Refused as refusal:
                if refusal.client_message is not None:
                    await _send_error(send, 400, refusal.client_message, "invalid_request_error")
                    return
                logger.error("refused to pass on an embeddings answer: %s", refusal)
                if self.metrics is not None:
                    self.metrics.upstream_error()
                await _send_error(
                    send, 500, "the embedding model's answer could not be watermarked"
                )
                return
            headers = [
                (name, value)
                for name, value in start.get("headers", [])
                if name.lower() != b"content-length"
            ]
            headers.append((b"content-length", str(len(new_body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": new_body, "more_body": False})
            if self.metrics is not None:
                self.metrics.observe(len(texts), n_marked, time.perf_counter() - started)
            if self.traffic_sample is not None:
                await sample_answered(self.traffic_sample, texts, self._account(scope), logger)

        await self.app(scope, recording_receive, holding_send)

    def _account(self, scope: Scope) -> str | None:
        """The sample account: ``traffic_account(scope)``, else the request's credential's."""
        if self._traffic_account is not None:
            return self._traffic_account(scope)
        assert self.traffic_sample is not None
        authorization = next(
            (v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), None
        )
        return credential_account(self.traffic_sample, authorization)

    def _flushing_on_shutdown(self, send: Send) -> Send:
        """``send`` for the lifespan scope, writing the traffic sample before shutdown ends."""

        async def flushing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                try:
                    await asyncio.to_thread(self.traffic_sample.flush)
                except (OSError, ValueError) as exc:
                    logger.error("could not write the traffic sample on shutdown: %s", exc)
            await send(message)

        return flushing_send

    def _rewrite(
        self, start: Message, request: bytes, response: bytes
    ) -> tuple[bytes, list[str], int]:
        """(the watermarked answer, the texts, marked texts), or :class:`_Refused`."""
        for name, value in start.get("headers", []):
            if name.lower() == b"content-encoding" and value.lower() != b"identity":
                raise _Refused(
                    f"the answer is {value.decode('latin-1')}-encoded: put ESpeWMiddleware "
                    "inside the compression middleware"
                )
        texts = _request_texts(request)
        try:
            answer = json.loads(response)
            clean = decode_embeddings(answer, len(texts))
        except MalformedAnswer as exc:
            raise _Refused(f"the app's answer is not an embeddings answer: {exc}") from None
        except ValueError:
            raise _Refused("the app's answer is not JSON") from None
        if clean.shape[1] != self._key.dim:
            raise _Refused(
                f"the app returns {clean.shape[1]}-dimensional embeddings but the key is for "
                f"{self._key.dim}; wrap the app with the key made for its model"
            )
        marked_rows, marked = watermark_and_mask(texts, clean, self._key, view=self._view)
        return replace_embeddings(answer, marked_rows), texts, int(marked.sum())


def _request_texts(request: bytes) -> list[str]:
    """The texts of the request the app answered; the shape rule is the server's own.

    Only the shape is checked (no limits): the app has already accepted the
    request, and whatever it accepted is watermarked, never refused here.
    """
    try:
        body = json.loads(request)
    except ValueError:
        raise _Refused("the request the app answered is not JSON") from None
    try:
        return parse_input(body.get("input") if isinstance(body, dict) else None)
    except RequestError as error:
        raise _Refused(error.message, client_message=error.message) from None


async def _send_error(send: Send, status: int, message: str, kind: str = "server_error") -> None:
    body = error_json(message, kind=kind)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
