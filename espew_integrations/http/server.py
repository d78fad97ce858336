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
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..core.inject import watermark
from ..core.key import WatermarkKey

__all__ = ["bind_socket", "create_app", "is_loopback", "running_server", "serve"]

logger = logging.getLogger("espew_integrations.http.server")

EmbedFn = Callable[[list[str]], Any]
DEFAULT_HOST = "127.0.0.1"
MAX_INPUTS = 2048  # OpenAI's own limit per request
MAX_TEXT_CHARS = 100_000
MAX_BODY_BYTES = 16 * 1024 * 1024


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


def _error_response(error: _RequestError) -> Any:
    from starlette.responses import JSONResponse

    body = {
        "error": {
            "message": error.message,
            "type": error.kind,
            "param": error.param,
            "code": error.code,
        }
    }
    return JSONResponse(body, status_code=error.status)


def create_app(
    embed: EmbedFn,
    *,
    key: WatermarkKey | None = None,
    model_name: str = "espew-embedder",
    api_key: str | None = None,
    max_inputs: int = MAX_INPUTS,
    max_text_chars: int = MAX_TEXT_CHARS,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Any:
    """A Starlette app serving ``embed`` (watermarked with ``key`` if given).

    ``embed`` is any callable ``list[str] -> array (n, d)``. ``api_key``, if
    set, is required as ``Authorization: Bearer <api_key>`` on every route but
    ``/health``.

    >>> app = create_app(minilm(), model_name="minilm")  # doctest: +SKIP
    """
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    if not callable(embed):
        raise TypeError(f"embed must be callable list[str] -> array, got {type(embed).__name__}")
    if not model_name:
        raise ValueError("model_name must be a non-empty string")
    expected_auth = f"Bearer {api_key}".encode() if api_key else None

    def check_auth(request: Request) -> None:
        if expected_auth is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected_auth):
            raise _RequestError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )

    def compute(texts: list[str]) -> np.ndarray:
        # float32 first: answers travel as float32, and watermarking the
        # float32 values makes an answer a function of what the model sent,
        # whatever precision it computed in (a proxied API sends float32).
        clean = np.asarray(embed(texts), dtype=np.float32)
        if clean.ndim != 2 or clean.shape[0] != len(texts):
            raise RuntimeError(f"the embedder returned shape {clean.shape} for {len(texts)} texts")
        if key is not None:
            out = watermark(texts, clean, key)  # validates NaN, zeros, dimension
        else:
            out = clean
            if not np.isfinite(out).all():
                raise RuntimeError("the embedder returned non-finite values")
        return np.ascontiguousarray(out, dtype=np.float32)

    async def embeddings(request: Request) -> Response:
        try:
            check_auth(request)
            texts, encoding, dimensions = await _parse_request(
                request, model_name, max_inputs, max_text_chars, max_body_bytes
            )
        except _RequestError as error:
            return _error_response(error)
        try:
            vectors = await run_in_threadpool(compute, texts)
        except Exception:
            logger.exception("embedding %d texts failed", len(texts))
            return _error_response(
                _RequestError(
                    500,
                    "the embedding model failed on this request; see the server log",
                    kind="server_error",
                )
            )
        if dimensions is not None and dimensions != vectors.shape[1]:
            return _error_response(
                _RequestError(
                    400,
                    f"this model returns {vectors.shape[1]}-dimensional embeddings and "
                    f"cannot shorten them to {dimensions}",
                    param="dimensions",
                )
            )
        if encoding == "base64":
            encoded: list[Any] = [
                base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors
            ]
        else:
            encoded = vectors.tolist()
        n_tokens = sum(len(t.split()) for t in texts)
        body = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)
            ],
            "model": model_name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")

    async def models(request: Request) -> Response:
        try:
            check_auth(request)
        except _RequestError as error:
            return _error_response(error)
        entry = {"id": model_name, "object": "model", "created": 0, "owned_by": "espew"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def not_allowed(request: Request) -> Response:
        return _error_response(
            _RequestError(405, f"{request.method} is not allowed here; use POST")
        )

    routes = [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes)


async def _parse_request(
    request: Any, model_name: str, max_inputs: int, max_text_chars: int, max_body_bytes: int
) -> tuple[list[str], str, int | None]:
    """Validate an embeddings request: (texts, encoding_format, dimensions)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise _RequestError(413, f"request body exceeds {max_body_bytes} bytes")
    raw = await request.body()
    if len(raw) > max_body_bytes:
        raise _RequestError(413, f"request body exceeds {max_body_bytes} bytes")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _RequestError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _RequestError(400, "missing required parameter: 'model'", param="model")
    if model != model_name:
        raise _RequestError(
            404,
            f"the model {model!r} does not exist; this server serves {model_name!r}",
            param="model",
            code="model_not_found",
        )
    texts = _parse_input(body.get("input"), max_inputs, max_text_chars)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _RequestError(
            400,
            f"encoding_format must be 'float' or 'base64', got {encoding!r}",
            param="encoding_format",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise _RequestError(400, "dimensions must be a positive integer", param="dimensions")
    return texts, encoding, dimensions


def _parse_input(value: Any, max_inputs: int, max_text_chars: int) -> list[str]:
    if value is None:
        raise _RequestError(400, "missing required parameter: 'input'", param="input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise _RequestError(400, "'input' must be a string or a list of strings", param="input")
    if not texts:
        raise _RequestError(400, "'input' is an empty list; send at least one text", param="input")
    if len(texts) > max_inputs:
        raise _RequestError(
            400, f"'input' has {len(texts)} texts; at most {max_inputs} per request", param="input"
        )
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
        if len(text) > max_text_chars:
            raise _RequestError(
                400,
                f"input[{i}] has {len(text)} characters; at most {max_text_chars}",
                param="input",
            )
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


def bind_socket(host: str = DEFAULT_HOST, port: int = 0) -> socket.socket:
    """A listening TCP socket (port 0 picks a free port; read it with getsockname())."""
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
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def serve(
    app: Any,
    *,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    log_level: str = "warning",
    access_log: bool = False,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``app`` until interrupted; ``on_ready(base_url)`` runs once listening."""
    import uvicorn

    if not is_loopback(host):
        logger.warning(
            "listening on %s, reachable from other machines: require an API key "
            "(--api-key-env) and put TLS in front",
            host,
        )
    sock = bind_socket(host, port)
    if on_ready is not None:
        on_ready(_base_url(sock))
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def running_server(
    app: Any, *, host: str = DEFAULT_HOST, port: int = 0, timeout: float = 10.0
) -> Iterator[str]:
    """Run ``app`` on a background thread; yields its base URL (``http://host:port/v1``).

    For tests and notebooks: real sockets, real HTTP, stopped on exit.

    >>> with running_server(create_app(minilm(), model_name="m")) as url:  # doctest: +SKIP
    ...     print(url)
    http://127.0.0.1:54321/v1
    """
    import uvicorn

    sock = bind_socket(host, port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="espew-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the server did not start within {timeout:g} s")
        time.sleep(0.01)
    try:
        yield _base_url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
