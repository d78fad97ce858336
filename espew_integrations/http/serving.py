"""Running an app as a server process: checked settings, optional forked workers, signals.

Why apart from the app: how requests are answered (:mod:`.app`) does not
depend on how many processes answer them. :func:`serve` binds before it
forks, so every worker shares one listening socket, and the supervisor that
forks them forwards SIGINT and SIGTERM and serves the operator's metrics.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from ..core.ground.defaults import DEFAULT_HOST
from ..core.ground.errors import InputError
from .background import serving_in_thread
from .listen import base_url, bind_socket, check_serve_settings, is_loopback, origin

__all__ = ["keep_large_buffers", "serve"]

logger = logging.getLogger("espew_integrations.http.server")

#: glibc's mallopt parameters (malloc.h) and what a serving process sets them to.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_LARGE_BUFFERS = 256 * 2**20
_MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


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

    log_level = _checked_serving(port, log_level, workers, metrics_app, metrics_port)
    keep_large_buffers()
    _warn_reachable(host, metrics_host if metrics_app is not None else None)
    sock = bind_socket(host, port)
    metrics_sock = None
    try:
        if metrics_app is not None:
            metrics_sock = bind_socket(metrics_host, metrics_port)
        if on_ready is not None:
            on_ready(base_url(sock))
        if metrics_sock is not None and on_metrics_ready is not None:
            on_metrics_ready(origin(metrics_sock) + "/metrics")
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on")
        if workers == 1:
            with serving_in_thread(metrics_app, metrics_sock):
                uvicorn.Server(config).run(sockets=[sock])
        else:
            _run_forked(config, sock, workers, metrics_app, metrics_sock)
    finally:
        sock.close()
        if metrics_sock is not None:
            metrics_sock.close()


def keep_large_buffers() -> bool:
    """Keep this process's freed buffers of up to 256 MiB for reuse (glibc only): True
    if set.

    Why: every proxied request of 2,048 x 1,536 values makes and frees about ten
    buffers of 12 to 17 MB (the upstream's answer, its text, the matrix, the marked
    rows, the answer). By default glibc maps each from the kernel and returns it
    when freed, so every request pays tens of thousands of page faults, a third of
    the proxy's CPU at a GPU's pace. Kept in the heap, the same pages serve the
    next request; the resident size stays near the busiest moment's instead.
    Nothing changes where the C library is not glibc, or where the operator set
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (their choice wins).
    """
    if any(name in os.environ for name in _MALLOC_ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc: no mallopt to call
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim = mallopt(_M_TRIM_THRESHOLD, 2 * _LARGE_BUFFERS)
    mmap = mallopt(_M_MMAP_THRESHOLD, _LARGE_BUFFERS)
    return trim == 1 and mmap == 1


def _warn_reachable(host: str, metrics_host: str | None) -> None:
    """A warning for each listener other machines can reach (``metrics_host``: None
    when there is no metrics listener)."""
    if not is_loopback(host):
        logger.warning(
            "listening on %s, reachable from other machines: require an API key "
            "(--api-key-env) and put TLS in front",
            host,
        )
    if metrics_host is not None and not is_loopback(metrics_host):
        logger.warning(
            "serving metrics on %s, reachable from other machines: the marked count tells "
            "whether each request carried a trigger; let only your Prometheus reach it",
            metrics_host,
        )


def _checked_serving(
    port: int, log_level: str, workers: int, metrics_app: Any, metrics_port: int
) -> str:
    """The settings of :func:`serve` checked before anything binds; returns the log level."""
    log_level = check_serve_settings(port=port, log_level=log_level)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers must be a positive integer, got {workers!r}")
    if workers > 1 and not hasattr(os, "fork"):
        raise InputError("workers > 1 needs os.fork (Linux, macOS); run one process per port")
    if metrics_app is not None:
        check_serve_settings(port=metrics_port, log_level=log_level)
        if metrics_port != 0 and metrics_port == port:
            raise InputError(
                "the metrics port must differ from the API port: the marked count must not "
                "be reachable by clients"
            )
    return log_level


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
        with serving_in_thread(metrics_app, metrics_sock):
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
