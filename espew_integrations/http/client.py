"""OpenAIEndpoint: query any OpenAI-compatible embeddings API as a ``verify()`` suspect.

A suspect's public endpoint is someone else's server: it rate-limits, fails,
and bills. The client therefore batches, retries with exponential backoff on
429/5xx/connection errors (honouring ``Retry-After``), paces its requests,
and stops before a query budget is exceeded. Every fault is raised as a
:class:`~espew_integrations.core.errors.SuspectError` subclass, which
``verify()`` turns into missing data, never into evidence.

The API key is kept in a wrapper whose ``repr`` is ``'***'``; it is sent only
in the ``Authorization`` header and never appears in a repr, a log line or an
exception message.
"""

from __future__ import annotations

import base64
import email.utils
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..core.errors import SuspectError

__all__ = [
    "EndpointError",
    "EndpointUnreachableError",
    "OpenAIEndpoint",
    "QueryBudgetExceeded",
]

logger = logging.getLogger("espew_integrations.http")

EncodingFormat = Literal["float", "base64"]
# Worth retrying (the openai SDK retries the same): timeouts, conflicts, rate
# limits and every server error.
_RETRY_STATUSES = frozenset({408, 409, 425, 429})


class EndpointError(SuspectError):
    """The endpoint answered, but not with usable embeddings (HTTP error, bad JSON)."""


class EndpointUnreachableError(SuspectError):
    """No connection to the endpoint could be made (refused, DNS, timeout)."""


class QueryBudgetExceeded(SuspectError):
    """Sending the next batch would exceed the client's query budget."""


class _Secret:
    """Holds a credential; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError("an API key refuses to be pickled")


class OpenAIEndpoint:
    """Client of ``POST {base_url}/embeddings``, callable as ``list[str] -> np.ndarray``.

    ``max_queries`` is the query budget: the most texts this client will ever
    send (retried texts count again, since the endpoint sees them again). A
    batch that would exceed it raises :class:`QueryBudgetExceeded` *before*
    anything is sent. ``requests_per_second`` paces requests client-side.

    >>> suspect = OpenAIEndpoint("http://127.0.0.1:8000/v1", "their-model",   # doctest: +SKIP
    ...                          max_queries=500, requests_per_second=2)
    >>> report = verify(suspect, key)                                       # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        encoding_format: EncodingFormat = "float",
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        requests_per_second: float | None = None,
        max_queries: int | None = None,
        dimensions: int | None = None,
        headers: dict[str, str] | None = None,
        seed: int | None = None,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty string (the endpoint's model name)")
        if encoding_format not in ("float", "base64"):
            raise ValueError(f"encoding_format must be float or base64, got {encoding_format!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if backoff < 0 or max_backoff < 0:
            raise ValueError("backoff and max_backoff must be >= 0 seconds")
        if requests_per_second is not None and requests_per_second <= 0:
            raise ValueError(f"requests_per_second must be > 0, got {requests_per_second!r}")
        if max_queries is not None and max_queries < 0:
            raise ValueError(f"max_queries must be >= 0, got {max_queries!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.encoding_format: EncodingFormat = encoding_format
        self.batch_size = int(batch_size)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.requests_per_second = requests_per_second
        self.max_queries = max_queries
        self.dimensions = dimensions
        self._api_key = _Secret(api_key) if api_key else None
        self._extra_headers = dict(headers or {})
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_slot = 0.0  # monotonic time before which no request may start
        self._queries_sent = 0
        self._requests_sent = 0
        self._ever_connected = False
        self._unreachable: str | None = None
        self._client: Any = None

    # ------------------------------------------------------------------ public
    @property
    def url(self) -> str:
        """The full embeddings URL."""
        return f"{self.base_url}/embeddings"

    @property
    def queries_sent(self) -> int:
        """Texts sent so far, retries included."""
        return self._queries_sent

    @property
    def requests_sent(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._requests_sent

    @property
    def budget_left(self) -> int | None:
        """Texts that may still be sent, or None when there is no budget."""
        if self.max_queries is None:
            return None
        return max(self.max_queries - self._queries_sent, 0)

    def __repr__(self) -> str:
        key = "'***'" if self._api_key is not None else "None"
        return (
            f"OpenAIEndpoint(base_url={self.base_url!r}, model={self.model!r}, api_key={key}, "
            f"encoding_format={self.encoding_format!r}, batch_size={self.batch_size}, "
            f"max_queries={self.max_queries})"
        )

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            "OpenAIEndpoint refuses to be pickled (it may hold an API key); "
            "build a new one where it is needed"
        )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (in batches of ``batch_size``): float64 array ``(n, d)``."""
        if isinstance(texts, str):
            raise TypeError("pass a list of texts, not a single string")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text:
                raise ValueError(f"text at index {i} is empty or not a string")
        if not texts:
            return np.zeros((0, 0), dtype=np.float64)
        parts = [
            self._embed_batch(texts[start : start + self.batch_size])
            for start in range(0, len(texts), self.batch_size)
        ]
        dims = {p.shape[1] for p in parts}
        if len(dims) != 1:
            raise EndpointError(f"{self.url} returned mixed dimensions {sorted(dims)}")
        return np.concatenate(parts)

    embed = __call__

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> OpenAIEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _http(self) -> Any:
        with self._lock:  # one connection pool, even when threads race to open it
            if self._client is None:
                self._client = self._open()
            return self._client

    def _open(self) -> Any:
        import httpx

        headers = {"Content-Type": "application/json", **self._extra_headers}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
        return httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            headers=headers,
            follow_redirects=False,
        )

    def _reserve(self, n_texts: int) -> None:
        """Charge the budget and wait for the rate limit; raise if over budget."""
        with self._lock:
            if self.max_queries is not None and self._queries_sent + n_texts > self.max_queries:
                raise QueryBudgetExceeded(
                    f"query budget of {self.max_queries} texts reached: {self._queries_sent} "
                    f"already sent, this batch needs {n_texts} more; nothing was sent"
                )
            self._queries_sent += n_texts
            self._requests_sent += 1
            now = time.monotonic()
            start = max(now, self._next_slot)
            if self.requests_per_second:
                self._next_slot = start + 1.0 / self.requests_per_second
        if start > now:
            time.sleep(start - now)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, or the server's Retry-After (capped)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff)
        base = min(self.backoff * (2**attempt), self.max_backoff)
        return base * (0.5 + 0.5 * self._rng.random())

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        if self._unreachable is not None:
            # Never reached it at all: fail fast instead of backing off per batch.
            raise EndpointUnreachableError(self._unreachable)
        import httpx

        payload: dict[str, Any] = {
            "model": self.model,
            "input": batch,
            "encoding_format": self.encoding_format,
        }
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            self._reserve(len(batch))
            retry_after: float | None = None
            try:
                response = self._http().post(self.url, json=payload)
            except httpx.TimeoutException:
                last_problem = f"timed out after {self.timeout:g} s"
                connection_failed = True
            except httpx.TransportError as exc:
                last_problem = f"connection failed ({type(exc).__name__}: {_first_line(exc)})"
                connection_failed = True
            else:
                connection_failed = False
                self._ever_connected = True
                if response.status_code == 200:
                    return self._parse(response, len(batch))
                message = self._redact(_error_message(response))
                if not _retryable(response.status_code):
                    raise EndpointError(
                        f"{self.url} answered HTTP {response.status_code}: {message}"
                    ) from None
                last_problem = f"HTTP {response.status_code}: {message}"
                retry_after = _retry_after(response.headers.get("retry-after"))
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, retry_after)
            logger.warning(
                "POST %s: %s; retry %d/%d in %.2f s",
                self.url,
                last_problem,
                attempt + 1,
                self.max_retries,
                delay,
            )
            time.sleep(delay)
        attempts = self.max_retries + 1
        if connection_failed:
            message = (
                f"cannot reach {self.url} after {attempts} attempt(s): {last_problem}. "
                "Check that the server is running and the base URL (including any /v1) is right."
            )
            if not self._ever_connected:
                self._unreachable = message
            raise EndpointUnreachableError(message)
        raise EndpointError(f"{self.url} kept failing after {attempts} attempt(s): {last_problem}")

    def _redact(self, text: str) -> str:
        """Hide the API key should a server echo it back in an error message."""
        if self._api_key is not None and self._api_key.reveal() in text:
            return text.replace(self._api_key.reveal(), "***")
        return text

    def _parse(self, response: Any, n_expected: int) -> np.ndarray:
        try:
            body = response.json()
            items = body["data"]
            if not isinstance(items, list):
                raise TypeError("'data' is not a list")
        except Exception as exc:
            raise EndpointError(
                f"{self.url} returned a body that is not an OpenAI embeddings answer "
                f"({type(exc).__name__}: {exc})"
            ) from None
        if len(items) != n_expected:
            raise EndpointError(
                f"{self.url} returned {len(items)} embeddings for {n_expected} inputs"
            )
        rows: list[np.ndarray | None] = [None] * n_expected
        for position, item in enumerate(items):
            try:
                index = int(item.get("index", position))
                rows[index] = _decode(item["embedding"])
            except (IndexError, KeyError, TypeError, ValueError) as exc:
                raise EndpointError(
                    f"{self.url} returned a malformed embedding at position {position} "
                    f"({type(exc).__name__}: {exc})"
                ) from None
        if any(row is None for row in rows):
            raise EndpointError(f"{self.url} returned duplicate or missing indices")
        dims = {row.shape[0] for row in rows}  # type: ignore[union-attr]
        if len(dims) != 1:
            raise EndpointError(f"{self.url} returned embeddings of mixed lengths {sorted(dims)}")
        return np.stack(rows).astype(np.float64, copy=False)  # type: ignore[arg-type]


def _decode(embedding: Any) -> np.ndarray:
    """A float list, or base64 of little-endian float32 (what OpenAI sends)."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding, validate=True)
        if len(raw) % 4:
            raise ValueError(f"base64 embedding of {len(raw)} bytes is not float32 data")
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if not isinstance(embedding, list) or not embedding:
        raise TypeError("embedding is neither a non-empty float list nor a base64 string")
    return np.asarray(embedding, dtype=np.float64)


def _retryable(status: int) -> bool:
    return status in _RETRY_STATUSES or status >= 500


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date)."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def _error_message(response: Any) -> str:
    """The OpenAI error message if present, else the start of the body."""
    try:
        body = response.json()
        message = body["error"]["message"]
        if isinstance(message, str):
            return message[:300]
    except Exception:
        pass
    return (response.text or response.reason_phrase or "no body")[:300]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no detail"
