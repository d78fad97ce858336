"""Live watermark metrics in the Prometheus text format (``GET /metrics``).

Why: a provider must see that the watermark is working in production, at the
rate the key was drawn for, without reading any secret. Exposed by
``espew serve`` and by :class:`~.middleware.ESpeWMiddleware`:

- ``espew_requests_total``: embeddings requests answered;
- ``espew_texts_total`` and ``espew_marked_texts_total``: texts embedded and
  those that carried a trigger (their ratio is the live marked rate);
- ``espew_expected_marked_rate``: the marked rate keygen measured on its
  corpus (``key.info["marked_rate"]``, recorded as non-secret), when known;
- ``espew_request_seconds``: a latency histogram of answered requests;
- ``espew_upstream_errors_total``: answers of the model or upstream that
  could not be served (5xx, malformed).

No label or value carries the key, its triggers, target or salt: only counts,
durations and the key's non-secret expected rate. A warning is logged when the
marked rate over the last ``window`` texts drifts more than ``drift_factor``
from the expected one (too few triggers: traffic unlike the keygen corpus, or
the watermark is off; too many: someone may be probing for triggers).

With ``--workers N`` each worker process counts its own traffic; scrape them
through prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``),
see docs/deployment.md.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["WatermarkMetrics", "default_metrics"]

logger = logging.getLogger("espew_integrations.http.metrics")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class WatermarkMetrics:
    """Counters, a histogram and the drift check, in their own prometheus registry.

    ``expected_marked_rate`` is usually ``key.info.get("marked_rate")``; with
    ``None`` there is nothing to drift from and no warning is ever logged.
    """

    def __init__(
        self,
        expected_marked_rate: float | None = None,
        *,
        window: int = 5000,
        drift_factor: float = 2.0,
        registry: Any = None,
    ):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        if expected_marked_rate is not None and not 0 < expected_marked_rate <= 1:
            raise ValueError(
                f"expected_marked_rate must be in (0, 1], got {expected_marked_rate!r}"
            )
        if window < 1 or drift_factor <= 1:
            raise ValueError("window must be >= 1 and drift_factor > 1")
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "espew_requests", "Embeddings requests answered", registry=self.registry
        )
        self.texts = Counter("espew_texts", "Texts embedded", registry=self.registry)
        self.marked = Counter(
            "espew_marked_texts",
            "Texts that carried a trigger (watermarked)",
            registry=self.registry,
        )
        self.upstream_errors = Counter(
            "espew_upstream_errors",
            "Model or upstream answers that could not be served",
            registry=self.registry,
        )
        self.latency = Histogram(
            "espew_request_seconds",
            "Time to answer an embeddings request",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.expected = expected_marked_rate
        if expected_marked_rate is not None:
            gauge = Gauge(
                "espew_expected_marked_rate",
                "Marked rate keygen measured on its corpus",
                registry=self.registry,
            )
            gauge.set(expected_marked_rate)
        self.window = window
        self.drift_factor = drift_factor
        self._lock = threading.Lock()
        self._window_texts = 0
        self._window_marked = 0

    def observe(self, n_texts: int, n_marked: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.inc()
        self.texts.inc(n_texts)
        self.marked.inc(n_marked)
        self.latency.observe(seconds)
        with self._lock:
            self._window_texts += n_texts
            self._window_marked += n_marked
            if self._window_texts < self.window:
                return
            texts, marked = self._window_texts, self._window_marked
            self._window_texts = self._window_marked = 0
        self._check_drift(texts, marked)

    def upstream_error(self) -> None:
        """Count a model or upstream answer that could not be served."""
        self.upstream_errors.inc()

    def _check_drift(self, texts: int, marked: int) -> None:
        if self.expected is None:
            return
        live = marked / texts
        if live > self.expected * self.drift_factor or live < self.expected / self.drift_factor:
            logger.warning(
                "live marked rate %.4f over the last %d texts is more than %gx away from the "
                "%.4f the key expects: check that the traffic resembles the keygen corpus and "
                "that the watermark is on (a much higher rate may mean trigger probing)",
                live,
                texts,
                self.drift_factor,
                self.expected,
            )

    def render(self) -> tuple[bytes, str]:
        """(the text exposition, its content type)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def asgi_response(self, send: Any) -> None:
        """Answer an ASGI request with the exposition."""
        body, content_type = self.render()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def default_metrics(key: Any) -> WatermarkMetrics | None:
    """Metrics for ``key`` (its expected marked rate), or None without prometheus-client."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        logger.info(
            "prometheus-client is not installed, so there is no /metrics: "
            "pip install 'espew-integrations[metrics]'"
        )
        return None
    rate = key.info.get("marked_rate") if key is not None else None
    valid = isinstance(rate, (int, float)) and 0 < rate <= 1
    return WatermarkMetrics(float(rate) if valid else None)
