"""OpenAIEndpoint: query any OpenAI-compatible embeddings API as a ``verify()`` suspect.

A suspect's public endpoint is someone else's server: it rate-limits, fails,
and bills. The client therefore batches, retries with exponential backoff on
429/5xx/connection errors (honouring ``Retry-After``), paces its requests,
and stops before a query budget is exceeded. Every fault is raised as a
:class:`~espew_integrations.core.ground.errors.SuspectError` subclass, which
``verify()`` turns into missing data, never into evidence.

The API key is kept in a wrapper whose ``repr`` is ``'***'``; it is sent only
in the ``Authorization`` header and never appears in a repr, a log line or an
exception message.

The server is untrusted, possibly hostile. It may echo the API key anywhere in
its answer (an error message, an ``embedding``, an ``index``), send terminal
escape sequences, swap rows with odd indices or stream an endless body. So:

- every message built from an answer goes through
  :func:`~espew_integrations.core.ground.untrusted.printable` with the API key (and
  credential-like custom headers) redacted, and is raised outside any
  ``except`` block, so no exception chain carries the raw answer;
- an answer is accepted only if it is exactly what the OpenAI API sends: one
  object per input, each with an ``int`` index in range and used once, and a
  flat, non-empty list of numbers (or base64 float32) of one common length;
- a body larger than ``max_response_bytes``, or one that takes longer than
  ``total_timeout`` to arrive, is abandoned.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from .._optional import ensure
from ..core.ground.defaults import DEFAULT_BATCH_SIZE
from ..core.ground.errors import InputError, InputTypeError, SuspectError
from ..core.ground.untrusted import printable
from .protocol import MalformedAnswer, decode_embeddings, error_message
from .settings import check_endpoint, check_positive_int, check_seconds

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
# Custom headers whose values are credentials (Azure's api-key, X-API-Key, cookies...).
_CREDENTIAL_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "session", "password")
_DEFAULT_MAX_RESPONSE_BYTES = 256 * 2**20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class EndpointError(SuspectError):
    """The endpoint answered, but not with usable embeddings (HTTP error, bad JSON)."""


class EndpointUnreachableError(SuspectError):
    """No connection to the endpoint could be made (refused, DNS, timeout)."""


class QueryBudgetExceeded(SuspectError):
    """Sending the next batch would exceed the client's query budget."""


class _Secret:
    """Holds a credential (or headers holding some); its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        self._value = value

    def reveal(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError("an API key refuses to be pickled")


class OpenAIEndpoint:
    """Client of ``POST {base_url}/embeddings``, callable as ``list[str] -> np.ndarray``.

    ``max_queries`` is the query budget: the most texts this client will ever
    send (retried texts count again, since the endpoint sees them again). A
    batch that would exceed it raises :class:`QueryBudgetExceeded` *before*
    anything is sent. ``requests_per_second`` paces requests client-side.

    ``timeout`` bounds each network wait (connect, each read); ``total_timeout``
    (default four times ``timeout``) bounds a whole request, body included, so
    a server that trickles its answer cannot stall an audit.
    ``max_response_bytes`` (default 256 MiB) bounds the decoded body. Both
    limits end the request with a :class:`SuspectError` subclass.

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
        batch_size: int = DEFAULT_BATCH_SIZE,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        requests_per_second: float | None = None,
        max_queries: int | None = None,
        dimensions: int | None = None,
        headers: dict[str, str] | None = None,
        seed: int | None = None,
        total_timeout: float | None = None,
        max_response_bytes: int = _DEFAULT_MAX_RESPONSE_BYTES,
    ):
        # Here, not at the first query: a missing package is the auditor's fault, and
        # raised from inside an audit it would read as the suspect's.
        ensure("httpx", "http", "OpenAIEndpoint")
        _check_settings(
            base_url=base_url,
            model=model,
            encoding_format=encoding_format,
            batch_size=batch_size,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            requests_per_second=requests_per_second,
            max_queries=max_queries,
            total_timeout=total_timeout,
            max_response_bytes=max_response_bytes,
        )
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
        self.total_timeout = float(total_timeout) if total_timeout else 4.0 * self.timeout
        self.max_response_bytes = int(max_response_bytes)
        self._api_key = _Secret(api_key) if api_key else None
        self._extra_headers = _Secret(dict(headers or {}))
        self._credentials = _Secret(_credentials_of(api_key, self._extra_headers.reveal()))
        self._start(seed)

    def _start(self, seed: int | None) -> None:
        """The client's state before its first request: no connection, nothing sent, the
        retry jitter's generator seeded with ``seed``."""
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_slot = 0.0  # monotonic time before which no request may start
        self._queries_sent = 0
        self._requests_sent = 0
        self._ever_connected = False
        self._unreachable: str | None = None
        self._client: Any = None
        #: Called as ``observer(status, headers, model)`` for every answer accepted (any
        #: thread): how an audit transcript records the server's identity as seen here.
        self.response_observer: Callable[[int, Mapping[str, str], Any], None] | None = None

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
        raise InputTypeError(
            "OpenAIEndpoint refuses to be pickled (it may hold an API key); "
            "build a new one where it is needed"
        )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (in batches of ``batch_size``): float64 array ``(n, d)``."""
        if isinstance(texts, str):
            raise InputTypeError("pass a list of texts, not a single string")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text:
                raise InputError(f"text at index {i} is empty or not a string")
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

    def send_transcript_digest(self, digest: str, text: str) -> np.ndarray:
        """Ask ``text`` again with ``digest`` in the ``X-ESpeW-Transcript-Digest`` header.

        How an audit's transcript tells the suspect its commitment before the
        verdict is computed (``espew verify --send-digest``): the suspect's logs
        then hold what the auditor committed to, out of the auditor's reach. One
        text, counted against the budget and retried like any batch; returns its
        row. The digest must be ``sha256:`` and 64 hex digits (nothing else is
        ever put in a header).
        """
        from ..core.records.transcript import TRANSCRIPT_DIGEST_HEADER

        if not _DIGEST.fullmatch(digest):
            raise InputError(f"a transcript digest is 'sha256:<64 hex digits>', got {digest!r}")
        if not isinstance(text, str) or not text:
            raise InputError("the digest goes with one non-empty text")
        return self._embed_batch([text], headers={TRANSCRIPT_DIGEST_HEADER: digest})

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

        headers = {"Content-Type": "application/json", **self._extra_headers.reveal()}
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

    def _embed_batch(
        self, batch: list[str], headers: Mapping[str, str] | None = None
    ) -> np.ndarray:
        """The rows for one batch, retried with backoff while the failure may pass."""
        if self._unreachable is not None:
            # Never reached it at all: fail fast instead of backing off per batch.
            raise EndpointUnreachableError(self._unreachable)
        payload: dict[str, Any] = {
            "model": self.model,
            "input": batch,
            "encoding_format": self.encoding_format,
        }
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        for attempt in range(self.max_retries + 1):
            self._reserve(len(batch))
            outcome = self._attempt(payload, len(batch), headers)
            if not isinstance(outcome, _Failure):
                return outcome
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, outcome.retry_after)
            logger.warning(
                "POST %s: %s; retry %d/%d in %.2f s",
                self.url,
                outcome.problem,
                attempt + 1,
                self.max_retries,
                delay,
            )
            time.sleep(delay)
        raise self._gave_up(outcome)

    def _attempt(
        self, payload: dict[str, Any], n_expected: int, headers: Mapping[str, str] | None = None
    ) -> np.ndarray | _Failure:
        """One request: its rows, or a failure worth retrying.

        Why apart from the retry loop: this is where an answer is sorted into
        success, a failure that may pass (timeouts, connection errors, 429,
        5xx) and one that will not (other statuses, an oversized body), which
        is raised at once. Errors are raised outside the ``except`` blocks, so
        no exception chain carries what the server sent.
        """
        import httpx

        answer: tuple[int, bytes, str, str | None, dict[str, str]] | None = None
        problem = ""
        too_large = False
        try:
            answer = self._post(payload, headers)
        except httpx.TimeoutException:
            problem = f"timed out after {self.timeout:g} s"
        except _TooSlow:
            problem = f"answer not complete after {self.total_timeout:g} s (timed out)"
        except _TooLarge:
            too_large = True
        except httpx.TransportError as exc:
            problem = f"connection failed ({type(exc).__name__}: {self._clean(exc)})"
        if too_large:  # not retried: the server would only send it again
            raise EndpointError(
                f"{self.url} sent an answer larger than {self.max_response_bytes:,} bytes "
                "(max_response_bytes)"
            )
        if answer is None:
            return _Failure(problem, connection_failed=True)
        self._ever_connected = True
        status, body, reason, retry_header, headers = answer
        if status == 200:
            rows = self._parse(body, n_expected)
            if self.response_observer is not None:
                self.response_observer(status, headers, _model_field(body))
            return rows
        message = self._clean(error_message(body, reason))
        if not _retryable(status):
            raise EndpointError(f"{self.url} answered HTTP {status}: {message}")
        return _Failure(f"HTTP {status}: {message}", retry_after=_retry_after(retry_header))

    def _gave_up(self, failure: _Failure) -> SuspectError:
        """The error once every attempt has failed; the last failure says which and why.

        Why it remembers: an endpoint never reached at all is most likely a
        wrong URL or a server that is down, so later batches fail at once
        (see :meth:`_embed_batch`) instead of backing off again.
        """
        attempts = self.max_retries + 1
        if failure.connection_failed:
            message = (
                f"cannot reach {self.url} after {attempts} attempt(s): {failure.problem}. "
                "Check that the server is running and the base URL (including any /v1) is right."
            )
            if not self._ever_connected:
                self._unreachable = message
            return EndpointUnreachableError(message)
        return EndpointError(
            f"{self.url} kept failing after {attempts} attempt(s): {failure.problem}"
        )

    def _post(
        self, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes, str, str | None, dict[str, str]]:
        """Send one request (with ``headers`` beside the client's own); ``(status, body,
        reason, Retry-After, headers)``, the body within limits."""
        deadline = time.monotonic() + self.total_timeout
        extra = dict(headers) if headers else None
        with self._http().stream("POST", self.url, json=payload, headers=extra) as response:
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_response_bytes:
                raise _TooLarge
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():  # decoded: a compressed bomb counts in full
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise _TooLarge
                if time.monotonic() > deadline:
                    raise _TooSlow
                chunks.append(chunk)
            return (
                response.status_code,
                b"".join(chunks),
                response.reason_phrase,
                response.headers.get("retry-after"),
                dict(response.headers),
            )

    def _clean(self, text: object) -> str:
        """Suspect-supplied text made printable, with every credential of ours redacted."""
        return printable(text, secrets=self._credentials.reveal())

    def _parse(self, body: bytes, n_expected: int) -> np.ndarray:
        """The ``(n_expected, d)`` float64 rows of an OpenAI embeddings answer, in input order.

        Every defect becomes an :class:`EndpointError` whose message is cleaned
        and raised here, outside any ``except`` block: the exception carries no
        chained exception that could hold the raw answer (and an echoed key).
        """
        problem: str
        try:
            # Non-finite rows are kept: verify() drops them one by one as missing
            # answers, where a refusal would lose the whole batch.
            return decode_embeddings(body, n_expected, dtype=np.float64, finite=False)
        except MalformedAnswer as exc:
            problem = str(exc)
        except Exception as exc:  # a hostile body must never escape as anything else
            problem = f"the body is not an OpenAI embeddings answer ({type(exc).__name__}: {exc})"
        raise EndpointError(self._clean(f"{self.url} returned {problem}"))


def _check_settings(
    *,
    base_url: str,
    model: str,
    encoding_format: str,
    batch_size: int,
    timeout: float,
    max_retries: int,
    backoff: float,
    max_backoff: float,
    requests_per_second: float | None,
    max_queries: int | None,
    total_timeout: float | None,
    max_response_bytes: int,
) -> None:
    """Refuse an impossible setting with a ``ValueError`` that names it.

    Why up front: a bad setting found at the first batch would fail an audit
    after it had already spent queries; found here, nothing has been sent.
    """
    check_endpoint(base_url, model, encoding_format, whose="endpoint")
    check_positive_int("batch_size", batch_size)
    check_seconds("timeout", timeout)
    check_positive_int("max_retries", max_retries, minimum=0)
    if backoff < 0 or max_backoff < 0:
        raise InputError("backoff and max_backoff must be >= 0 seconds")
    if requests_per_second is not None and requests_per_second <= 0:
        raise InputError(f"requests_per_second must be > 0, got {requests_per_second!r}")
    if max_queries is not None:
        check_positive_int("max_queries", max_queries, minimum=0)
    if total_timeout is not None:
        check_seconds("total_timeout", total_timeout)
    check_positive_int("max_response_bytes", max_response_bytes)


def _credentials_of(api_key: str | None, headers: dict[str, Any]) -> tuple[str, ...]:
    """Every secret of ours an answer might echo: the API key and credential-like headers.

    Why: redaction (:meth:`OpenAIEndpoint._clean`) must know them all, and a
    custom header such as Azure's ``api-key`` or a cookie is as secret as the key.
    """
    credentials = [api_key] if api_key else []
    credentials += [
        value
        for name, value in headers.items()
        if isinstance(value, str)
        and value
        and any(part in name.lower() for part in _CREDENTIAL_HEADER_PARTS)
    ]
    return tuple(credentials)


class _Failure(NamedTuple):
    """One failed attempt that may be retried: what went wrong, and how long to wait."""

    problem: str
    connection_failed: bool = False
    retry_after: float | None = None


class _TooLarge(Exception):
    """The body exceeded max_response_bytes."""


class _TooSlow(Exception):
    """The body did not arrive within total_timeout."""


def _model_field(body: bytes) -> Any:
    """The answer's ``model`` field (what the server says it ran), None if it has none."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return answer.get("model") if isinstance(answer, dict) else None


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
