"""Reading a request body within the server's limits: a byte cap and a deadline.

Why apart from the routes: this is the server's first line against abusive
clients, and its rules are about the connection, not the wire format. A
refusal here is sent before the body was read to its end, so the connection
must close (:class:`BodyAbandoned`); a client that hangs up mid-body is
nobody to answer (:class:`ClientGone`).
"""

from __future__ import annotations

from typing import Any

from ..core.ground.errors import ESpeWError
from .protocol import RequestError, RequestLimits

__all__ = ["BodyAbandoned", "ClientGone", "read_body"]


class BodyAbandoned(RequestError):
    """A refusal sent before the body was read to its end: the connection must close.

    Keeping it open would make the server read (and discard) the rest of an
    oversized or stalled body, which is the work the refusal is meant to spare.
    """


class ClientGone(ESpeWError):
    """The client hung up; there is nobody to answer."""


async def read_body(request: Any, limits: RequestLimits) -> bytearray:
    """The request body, streamed: refused past ``max_body_bytes`` or ``body_timeout``.

    Why streamed: ``request.body()`` buffers everything before any check, so a
    chunked body (no Content-Length) of any size would land in memory whole.
    Here at most ``max_body_bytes`` (plus one network chunk) are ever held.
    Raises :class:`BodyAbandoned` (413, 408) or :class:`ClientGone`.
    """
    import anyio
    from starlette.requests import ClientDisconnect

    too_large = BodyAbandoned(
        413,
        f"request body exceeds {limits.max_body_bytes} bytes; split the input into "
        "smaller requests",
        code="request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_large
    body = bytearray()
    try:
        with anyio.fail_after(limits.body_timeout):
            async for chunk in request.stream():
                if len(body) + len(chunk) > limits.max_body_bytes:
                    raise too_large
                body += chunk
    except TimeoutError:
        raise BodyAbandoned(
            408,
            f"the request body did not arrive within {limits.body_timeout:g} s",
            code="request_timeout",
        ) from None
    except ClientDisconnect:
        raise ClientGone("before the body was complete") from None
    return body
