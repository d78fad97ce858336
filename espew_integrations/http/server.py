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

Where each part lives (this module re-exports them, so ``from
espew_integrations.http.server import create_app, serve, running_server``
keeps working): the wire format in :mod:`.protocol`, the app and its routes
in :mod:`.app`, body reading in :mod:`.body`, the listening socket in
:mod:`.listen`, the supervised process in :mod:`.serving` and the background
thread in :mod:`.background`.

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

from .app import (
    COMPUTE_CHUNK_CHARS,
    COMPUTE_CHUNK_TEXTS,
    PROBE_TEXT,
    as_async_upstream,
    check_embedder,
    create_app,
)
from .background import running_server, serving_in_thread
from .listen import DEFAULT_HOST, LOG_LEVELS, bind_socket, check_serve_settings, is_loopback
from .protocol import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_REQUEST_CHARS,
    MAX_BODY_BYTES,
    MAX_INPUTS,
    MAX_TEXT_CHARS,
    encode_embeddings,
)
from .serving import serve

__all__ = [
    "COMPUTE_CHUNK_CHARS",
    "COMPUTE_CHUNK_TEXTS",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HOST",
    "DEFAULT_MAX_REQUEST_CHARS",
    "LOG_LEVELS",
    "MAX_BODY_BYTES",
    "MAX_INPUTS",
    "MAX_TEXT_CHARS",
    "PROBE_TEXT",
    "as_async_upstream",
    "bind_socket",
    "check_embedder",
    "check_serve_settings",
    "create_app",
    "encode_embeddings",
    "is_loopback",
    "running_server",
    "serve",
    "serving_in_thread",
]
