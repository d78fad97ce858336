"""Where a server listens: its settings checked up front, its socket, its URL.

Why apart: both ways of running an app (:func:`~.serving.serve`, the
supervised server, and :func:`~.background.running_server`, a thread) bind
the same way and announce the same URL; neither imports the other for it.
"""

from __future__ import annotations

import ipaddress
import socket

from ..core.ground.defaults import DEFAULT_HOST
from ..core.ground.errors import InputError, ListenError
from .protocol import shown

__all__ = [
    "LOG_LEVELS",
    "base_url",
    "bind_socket",
    "check_serve_settings",
    "is_loopback",
    "origin",
]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


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

    Why up front: otherwise a bad log level crashes uvicorn after ``espew serve``
    has announced that it is listening, and a port out of range ends in a
    traceback. Raises ``ValueError`` with a message that names the setting.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError(
            f"port must be an integer from 0 to 65535 (0 picks a free one), got {port!r}"
        )
    level = str(log_level).lower()
    if level not in LOG_LEVELS:
        raise InputError(
            f"log level must be one of {', '.join(LOG_LEVELS)}, got {shown(log_level)}"
        )
    return level


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
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    """The OpenAI base URL of an app listening on ``sock``: ``http://host:port/v1``."""
    return f"{origin(sock)}/v1"


def origin(sock: socket.socket) -> str:
    """``http://host:port`` of ``sock`` (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}"
