"""Live watermark metrics in the Prometheus text format, for the operator only.

Why: a provider must see that the watermark is working in production, at the
rate the key was drawn for, without reading any secret. Counted by
``espew serve`` and by :class:`~.middleware.ESpeWMiddleware`, and served by
:func:`create_metrics_app` on a listener of its own (``espew serve
--metrics-port``), never on the API port:

- ``espew_requests_total``: embeddings requests answered;
- ``espew_texts_total`` and ``espew_marked_texts_total``: texts embedded and
  those that carried a trigger (their ratio is the live marked rate);
- ``espew_expected_marked_rate``: the marked rate keygen measured on its
  corpus (``key.info["marked_rate"]``, recorded as non-secret), when known;
- ``espew_request_seconds``: a latency histogram of answered requests;
- ``espew_upstream_errors_total``: answers of the model or upstream that
  could not be served (5xx, malformed).

No label or value carries the key, its triggers, target or salt: only counts,
durations and the key's non-secret expected rate. The counts themselves are
still a secret's shadow: ``espew_marked_texts_total`` read before and after a
request says whether that request carried a trigger, so anyone who can scrape
it while sending one band word at a time recovers every trigger (the band rule
is public: the thief has this code). Serve the exposition only where clients
cannot reach it: the API app never routes ``/metrics``. A warning is logged when the
marked rate over the last ``window`` texts drifts more than ``drift_factor``
from the expected one (too few triggers: traffic unlike the keygen corpus, or
the watermark is off; too many: someone may be probing for triggers).

The counts live in a small anonymous shared memory map, one row per process:
every worker forked after the metrics were built (``espew serve --workers N``,
gunicorn with ``--preload``) adds to its own row, and a scrape of any worker
reports the sum over all of them, so a scrape is the whole server's traffic
whichever process answers it (``espew serve`` answers from its supervisor).
Workers *spawned* afresh (uvicorn's own ``--workers``) build their own metrics
and count alone; scrape each of them.
The drift check runs per process, over the texts that process served.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import threading
import weakref
from typing import Any

import numpy as np

from ..core.ground.errors import InputError, InputTypeError

__all__ = ["WatermarkMetrics", "create_metrics_app", "default_metrics"]

logger = logging.getLogger("espew_integrations.http.metrics")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Columns of a process's row in the shared tallies.
_REQUESTS, _TEXTS, _MARKED, _ERRORS, _SECONDS = range(5)
_FIRST_BUCKET = 5  # then one column per latency bucket, +Inf last
_COLUMNS = _FIRST_BUCKET + len(LATENCY_BUCKETS) + 1


class _SharedTallies:
    """Counts every forked worker adds to (its own row) and any of them can sum.

    The rows sit in an anonymous ``MAP_SHARED`` memory map made before the
    fork, so children write to the same pages as their siblings. Each process
    owns one row (row 0 for the process that built it; each forked child
    claims the next one), so no two processes ever write the same cell and no
    lock is needed across processes; an aligned 8-byte store is atomic, so a
    concurrent sum never reads a torn value.
    """

    def __init__(self, rows: int = 1024):
        self._map = mmap.mmap(-1, rows * _COLUMNS * 8)
        self.table = np.frombuffer(self._map, dtype=np.float64).reshape(rows, _COLUMNS)
        self.row = 0
        self._next_row = 1
        _LIVE_TALLIES.add(self)

    def before_fork(self) -> None:
        self._claim = self._next_row
        self._next_row += 1

    def in_child(self) -> None:
        if self._claim >= len(self.table):
            logger.warning(
                "more than %d processes forked from this server: later ones share the "
                "last metrics row, so their counts may be slightly undercounted",
                len(self.table) - 1,
            )
        self.row = min(self._claim, len(self.table) - 1)
        self.table[self.row] = 0.0

    def totals(self) -> np.ndarray:
        return self.table.sum(axis=0)


_LIVE_TALLIES: weakref.WeakSet[_SharedTallies] = weakref.WeakSet()


def _before_fork() -> None:
    for tallies in list(_LIVE_TALLIES):
        tallies.before_fork()


def _in_child() -> None:
    for tallies in list(_LIVE_TALLIES):
        tallies.in_child()


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


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
        from prometheus_client import CollectorRegistry

        if expected_marked_rate is not None and not 0 < expected_marked_rate <= 1:
            raise InputError(
                f"expected_marked_rate must be in (0, 1], got {expected_marked_rate!r}"
            )
        if window < 1 or drift_factor <= 1:
            raise InputError("window must be >= 1 and drift_factor > 1")
        self.expected = expected_marked_rate
        self.window = window
        self.drift_factor = drift_factor
        self._tallies = _SharedTallies()
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.registry.register(_Collector(self._tallies, expected_marked_rate))
        self._lock = threading.Lock()
        self._window_texts = 0
        self._window_marked = 0

    def observe(self, n_texts: int, n_marked: int, seconds: float) -> None:
        """Count one answered request."""
        bucket = _FIRST_BUCKET + bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            row = self._tallies.table[self._tallies.row]
            row[_REQUESTS] += 1
            row[_TEXTS] += n_texts
            row[_MARKED] += n_marked
            row[_SECONDS] += seconds
            row[bucket] += 1
            self._window_texts += n_texts
            self._window_marked += n_marked
            if self._window_texts < self.window:
                return
            texts, marked = self._window_texts, self._window_marked
            self._window_texts = self._window_marked = 0
        self._check_drift(texts, marked)

    def upstream_error(self) -> None:
        """Count a model or upstream answer that could not be served."""
        with self._lock:
            self._tallies.table[self._tallies.row, _ERRORS] += 1

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

    def asgi_app(self) -> Any:
        """A small ASGI app serving these metrics at ``GET /metrics``: for the operator only.

        See :func:`create_metrics_app`.
        """
        return create_metrics_app(self)

    async def asgi_response(self, send: Any) -> None:
        """Answer an ASGI request with the exposition."""
        body, content_type = self.render()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def create_metrics_app(metrics: WatermarkMetrics) -> Any:
    """A plain ASGI app that serves ``metrics`` at ``GET /metrics`` and nothing else (404).

    Why a separate app: the marked count is a trigger oracle (see the module
    docstring), so it must be served on a listener that only the operator's
    Prometheus reaches (``espew serve --metrics-port``, bound to 127.0.0.1
    unless told otherwise), never mounted on the API that clients call. It
    needs nothing but prometheus-client; any ASGI server runs it::

        uvicorn.run(metrics.asgi_app(), host="127.0.0.1", port=9464)
    """
    if not isinstance(metrics, WatermarkMetrics):
        raise InputTypeError(f"metrics must be a WatermarkMetrics, got {type(metrics).__name__}")
    return _MetricsApp(metrics)


class _MetricsApp:
    """The operator's listener: ``GET``/``HEAD /metrics`` answers the exposition."""

    def __init__(self, metrics: WatermarkMetrics):
        self.metrics = metrics

    def __repr__(self) -> str:
        return "MetricsApp()"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method = scope.get("method")
        if scope.get("path") != "/metrics":
            await _plain(send, 404, b"not found: the metrics are at GET /metrics\n")
        elif method not in ("GET", "HEAD"):
            await _plain(send, 405, b"method not allowed: GET /metrics\n")
        elif method == "HEAD":
            body, content_type = self.metrics.render()
            await _plain(send, 200, b"", content_type, length=len(body))
        else:
            await self.metrics.asgi_response(send)


async def _plain(
    send: Any,
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    *,
    length: int | None = None,
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body) if length is None else length).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Collector:
    """Renders the summed tallies of every process as the ``espew_*`` metric families."""

    def __init__(self, tallies: _SharedTallies, expected: float | None):
        self.tallies = tallies
        self.expected = expected

    def collect(self) -> Any:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        totals = self.tallies.totals()
        yield CounterMetricFamily(
            "espew_requests", "Embeddings requests answered", value=totals[_REQUESTS]
        )
        yield CounterMetricFamily("espew_texts", "Texts embedded", value=totals[_TEXTS])
        yield CounterMetricFamily(
            "espew_marked_texts",
            "Texts that carried a trigger (watermarked)",
            value=totals[_MARKED],
        )
        yield CounterMetricFamily(
            "espew_upstream_errors",
            "Model or upstream answers that could not be served",
            value=totals[_ERRORS],
        )
        cumulative = np.cumsum(totals[_FIRST_BUCKET:])
        bounds = [*(repr(float(b)) for b in LATENCY_BUCKETS), "+Inf"]
        yield HistogramMetricFamily(
            "espew_request_seconds",
            "Time to answer an embeddings request",
            buckets=list(zip(bounds, cumulative.tolist(), strict=True)),
            sum_value=totals[_SECONDS],
        )
        if self.expected is not None:
            yield GaugeMetricFamily(
                "espew_expected_marked_rate",
                "Marked rate keygen measured on its corpus",
                value=self.expected,
            )


def default_metrics(key: Any) -> WatermarkMetrics | None:
    """Metrics for ``key`` (its expected marked rate), or None without prometheus-client."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        from .._optional import install_line

        logger.info(
            "prometheus-client is not installed, so nothing is counted: %s",
            install_line("metrics"),
        )
        return None
    rate = key.info.get("marked_rate") if key is not None else None
    valid = isinstance(rate, (int, float)) and 0 < rate <= 1
    return WatermarkMetrics(float(rate) if valid else None)
