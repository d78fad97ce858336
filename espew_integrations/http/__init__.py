"""OpenAI-compatible HTTP on both sides of the watermark.

- :class:`~.client.OpenAIEndpoint` (:mod:`.client`): query a suspect's embeddings API
  as a ``verify()`` suspect (needs ``httpx``).
- :func:`~.app.create_app` / :func:`~.background.running_server` (:mod:`.server`, which
  re-exports :mod:`.app`, :mod:`.serving` and :mod:`.background`): serve any
  embedder, watermarked or not, as ``POST /v1/embeddings`` (needs
  ``starlette`` and ``uvicorn``); ``espew serve`` on the command line.
- :mod:`.protocol`: the OpenAI embeddings wire format, written once and
  shared by the server, the client, the upstream and the middleware.
- :class:`~.upstream.AsyncUpstream` (:mod:`.upstream`): the pooled async client of the
  server ``espew serve`` proxies (the ``openai:`` embedder).
- :class:`~.middleware.ESpeWMiddleware` (:mod:`.middleware`): wrap an existing
  Starlette/FastAPI embeddings app in one line.
- :class:`~.metrics.WatermarkMetrics` (:mod:`.metrics`): what both count, served by
  :func:`~.metrics.create_metrics_app` on the operator's own listener, never on the API
  (``pip install '.[metrics]'``).
- :class:`~.tenants.TenantKeys` (:mod:`.tenants`): per-customer keys from a key ring.

Install with ``pip install '.[http]'``.
"""

from __future__ import annotations

from typing import Any

from .client import EndpointError, EndpointUnreachableError, OpenAIEndpoint, QueryBudgetExceeded
from .metrics import WatermarkMetrics, create_metrics_app
from .middleware import ESpeWMiddleware
from .tenants import TenantKeys
from .upstream import AsyncUpstream, UpstreamError

__all__ = [
    "AsyncUpstream",
    "ESpeWMiddleware",
    "EndpointError",
    "EndpointUnreachableError",
    "OpenAIEndpoint",
    "QueryBudgetExceeded",
    "TenantKeys",
    "UpstreamError",
    "WatermarkMetrics",
    "create_app",
    "create_metrics_app",
    "running_server",
]


def __getattr__(name: str) -> Any:
    # The server pulls in starlette and uvicorn: only when asked for.
    if name in ("create_app", "running_server"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
