"""Running an ASGI app on a background thread: for notebooks, tests and the metrics listener.

Why public: the user guide (docs/http.md) and the example notebook serve a
model with :func:`running_server` in a ``with`` block, and :func:`~.serving.serve`
runs the operator's metrics listener with :func:`serving_in_thread` next to
the API server. Real sockets, real HTTP, stopped when the block ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..core.ground.defaults import DEFAULT_HOST
from ..core.ground.errors import ServingError
from .listen import base_url, bind_socket

__all__ = ["running_server", "serving_in_thread"]


@contextlib.contextmanager
def serving_in_thread(
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
            raise ServingError(f"the server did not start within {timeout:g} s")
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
        with serving_in_thread(app, sock, timeout=timeout):
            yield base_url(sock)
    finally:
        sock.close()
