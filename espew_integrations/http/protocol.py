"""The OpenAI embeddings wire format, written once: requests, answers and error bodies.

Why one module: the server, the auditor's client, the proxy's upstream and the
ASGI middleware all speak this format, from both ends. Written four times it
drifted (one decoder checked finite values, another the index of every item;
one error body had ``param``, another not). Here each rule exists once:

- :func:`parse_request` / :func:`parse_input`: an embeddings request as a
  server must read it (``model``, ``input``, ``encoding_format``,
  ``dimensions``), within :class:`RequestLimits`; every refusal is a
  :class:`RequestError`;
- :func:`encode_embeddings` / :func:`replace_embeddings`: an answer written
  as float lists or base64 of little-endian float32, so both encodings decode
  to the same numbers;
- :func:`decode_embeddings`: an answer read back, refused with a
  :class:`MalformedAnswer` that names the defect unless it is exactly what
  the OpenAI API sends (one item per input, each ``int`` index in range and
  used once, one form and one length for every row, numbers only);
- :func:`error_body` / :func:`error_message`: OpenAI's error JSON, written
  and read.

Messages built here from what the other side sent quote scalars whole and
containers by type only; the caller redacts its own secrets and cuts them
(see :func:`~espew_integrations.core.ground.untrusted.printable`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.ground.defaults import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUEST_CHARS
from ..core.ground.errors import ESpeWError, InputError

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_INPUTS",
    "MAX_TEXT_CHARS",
    "MalformedAnswer",
    "RequestError",
    "RequestLimits",
    "base64_codec",
    "decode_embeddings",
    "encode_embeddings",
    "error_body",
    "error_json",
    "error_message",
    "parse_input",
    "parse_request",
    "replace_embeddings",
    "shown",
]

MAX_INPUTS = 2048  # OpenAI's own limit per request
MAX_TEXT_CHARS = 100_000
MAX_BODY_BYTES = 16 * 1024 * 1024
_ECHO_CHARS = 60  # how much of a client's value an error message may quote


def base64_codec() -> tuple[Callable[..., bytes], Callable[..., bytes]]:
    """(b64encode, b64decode): pybase64's SIMD ones where the [http] extra installed it,
    else the stdlib's. Both write the same bytes and refuse what is not base64 when
    decoding with ``validate=True`` (pybase64 also refuses padding past the end)."""
    try:
        import pybase64
    except ImportError:
        return base64.b64encode, base64.b64decode
    return pybase64.b64encode, pybase64.b64decode


_b64encode, _b64decode = base64_codec()


# ---------------------------------------------------------------------- errors
class RequestError(ESpeWError):
    """A client mistake, answered with OpenAI's error JSON (:meth:`body`) and ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """This error as OpenAI's error JSON object."""
        return error_body(self.message, kind=self.kind, param=self.param, code=self.code)


def error_body(
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error JSON: ``{"error": {"message", "type", "param", "code"}}``.

    Why every field, always: OpenAI's SDKs read ``type`` and ``code`` to pick
    an exception class, and a body missing one reads as a different error.
    """
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_json(
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """:func:`error_body` as compact UTF-8 JSON bytes (what Starlette's JSONResponse writes)."""
    body = error_body(message, kind=kind, param=param, code=code)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def error_message(body: bytes, reason: str) -> str:
    """The message of an error answer: OpenAI's ``error.message``, else the body's start.

    Neither is cleaned: the caller makes it printable and redacts its secrets.
    """
    try:
        message = json.loads(body)["error"]["message"]
        if isinstance(message, str):
            return message
    except Exception:
        pass
    text = body[:8192].decode("utf-8", errors="replace")
    return text or reason or "no body"


def shown(value: Any) -> str:
    """A client's value for an error message: a string's repr cut short, else its type.

    Why cut: an error must never echo back more than a short prefix of what
    was sent (a huge value would make the refusal as costly as the request).
    """
    text = repr(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= _ECHO_CHARS else text[: _ECHO_CHARS - 3] + "..."


# ---------------------------------------------------------------------- requests
class RequestLimits:
    """What one request may hold and cost; checked when built (``ValueError`` names it).

    ``max_inputs`` texts of at most ``max_text_chars`` characters each,
    ``max_request_chars`` characters in all, a body of at most
    ``max_body_bytes`` bytes that arrives within ``body_timeout`` seconds.
    """

    __slots__ = (
        "body_timeout",
        "max_body_bytes",
        "max_inputs",
        "max_request_chars",
        "max_text_chars",
    )

    def __init__(
        self,
        max_inputs: int = MAX_INPUTS,
        max_text_chars: int = MAX_TEXT_CHARS,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_request_chars: int = DEFAULT_MAX_REQUEST_CHARS,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
    ):
        for name, limit in (
            ("max_inputs", max_inputs),
            ("max_text_chars", max_text_chars),
            ("max_body_bytes", max_body_bytes),
            ("max_request_chars", max_request_chars),
        ):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise InputError(f"{name} must be a positive integer, got {limit!r}")
        if not (isinstance(body_timeout, (int, float)) and 0 < body_timeout < float("inf")):
            raise InputError(
                f"body_timeout must be a positive number of seconds, got {body_timeout!r}"
            )
        self.max_inputs = max_inputs
        self.max_text_chars = max_text_chars
        self.max_body_bytes = max_body_bytes
        self.max_request_chars = max_request_chars
        self.body_timeout = body_timeout

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"RequestLimits({fields})"


def parse_request(
    raw: bytes | bytearray, model_name: str, limits: RequestLimits
) -> tuple[list[str], str, int | None]:
    """An embeddings request for ``model_name``: (texts, encoding_format, dimensions).

    Raises :class:`RequestError` (400, 404 for another model, 413 past the
    character limit) with a message that quotes at most a short prefix.
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError(400, "the request body is nested too deeply") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise RequestError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "missing required parameter: 'model'", param="model")
    if model != model_name:
        raise RequestError(
            404,
            f"the model {shown(model)} does not exist; this server serves {model_name!r}",
            param="model",
            code="model_not_found",
        )
    texts = parse_input(body.get("input"), limits)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise RequestError(
            400,
            f"encoding_format must be 'float' or 'base64', got {shown(encoding)}",
            param="encoding_format",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise RequestError(400, "dimensions must be a positive integer", param="dimensions")
    return texts, encoding, dimensions


def parse_input(value: Any, limits: RequestLimits | None = None) -> list[str]:
    """The texts of an ``input`` field, or a :class:`RequestError` naming the defect.

    Always: a string or a non-empty list of strings, never token ids (this
    service watermarks embeddings of text). With ``limits`` (a server reading
    a request it will embed), also: non-blank texts within the per-text,
    per-request and count limits, and valid Unicode. Without (the middleware,
    reading a request its app has already answered), nothing the app accepted
    is refused beyond the shape.
    """
    if value is None:
        raise RequestError(400, "missing required parameter: 'input'", param="input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise RequestError(400, "'input' must be a string or a list of strings", param="input")
    if not texts:
        raise RequestError(400, "'input' is an empty list; send at least one text", param="input")
    if limits is not None and len(texts) > limits.max_inputs:
        raise RequestError(
            400,
            f"'input' has {len(texts)} texts; at most {limits.max_inputs} per request",
            param="input",
        )
    total = 0
    for i, text in enumerate(texts):
        if isinstance(text, (int, list)) and not isinstance(text, bool):
            raise RequestError(
                400,
                f"input[{i}] is a token array or token id; this server embeds text, not token ids",
                param="input",
            )
        if not isinstance(text, str):
            raise RequestError(
                400, f"input[{i}] is {type(text).__name__}, expected a string", param="input"
            )
        if limits is None:
            continue
        if not text.strip():
            raise RequestError(400, f"input[{i}] is an empty string", param="input")
        if len(text) > limits.max_text_chars:
            raise RequestError(
                400,
                f"input[{i}] has {len(text)} characters; at most {limits.max_text_chars}",
                param="input",
            )
        total += len(text)
    if limits is not None:
        _check_request_chars(total, limits)
        _check_unicode(texts)
    return texts


def _check_request_chars(total: int, limits: RequestLimits) -> None:
    if total > limits.max_request_chars:
        raise RequestError(
            413,
            f"'input' has {total} characters in all; at most {limits.max_request_chars} per "
            "request: split it into smaller requests",
            param="input",
            code="request_too_large",
        )


def _check_unicode(texts: list[str]) -> None:
    for i, text in enumerate(texts):
        # JSON allows escaped lone surrogates ("\ud800"); no model can read them
        # (they are not Unicode text), so they are the client's error, not a 500.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(
                400,
                f"input[{i}] contains a lone surrogate at character {exc.start}: "
                "not valid Unicode text",
                param="input",
            ) from None


# ---------------------------------------------------------------------- answers
def encode_embeddings(
    vectors: np.ndarray, encoding: str, model_name: str, texts: Sequence[str]
) -> bytes:
    """An OpenAI embeddings answer for float32 ``vectors``, as JSON bytes.

    base64 rows are cut from one little-endian byte buffer of the whole
    matrix, encoded as bytes and joined into the JSON once (base64 needs no
    escaping); float rows go through ``tolist``. Both decode to the same float32 values.
    """
    n_tokens = sum(len(t.split()) for t in texts)
    tail = (
        f'],"model":{json.dumps(model_name)},'
        f'"usage":{{"prompt_tokens":{n_tokens},"total_tokens":{n_tokens}}}}}'
    )
    if encoding == "base64":
        pieces = [b'{"object":"list","data":[']
        for i, row in enumerate(_base64_rows(vectors)):
            pieces += (b'{"object":"embedding","index":%d,"embedding":"' % i, row, b'"},')
        if len(pieces) > 1:
            pieces[-1] = b'"}'  # no comma after the last item
        pieces.append(tail.encode("ascii"))
        return b"".join(pieces)  # one copy of the rows into the answer
    rows = (json.dumps(values, separators=(",", ":")) for values in vectors.tolist())
    items = ",".join(
        f'{{"object":"embedding","index":{i},"embedding":{row}}}' for i, row in enumerate(rows)
    )
    return ('{"object":"list","data":[' + items + tail).encode("ascii")


def replace_embeddings(answer: dict[str, Any], vectors: np.ndarray) -> bytes:
    """``answer`` (already checked by :func:`decode_embeddings`) with its rows set to ``vectors``.

    Row ``i`` of ``vectors`` goes to the item of index ``i``, in the encoding
    the answer used; every other field is kept. Returns compact JSON bytes.
    """
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    items = sorted(answer["data"], key=lambda item: item["index"])
    if isinstance(items[0]["embedding"], str):
        for item, row in zip(items, _base64_rows(vectors), strict=True):
            item["embedding"] = row.decode("ascii")
    else:
        for item, values in zip(items, vectors.tolist(), strict=True):
            item["embedding"] = values
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()


def _base64_rows(vectors: np.ndarray) -> list[bytes]:
    """Each row as base64 (ASCII bytes) of its little-endian float32 bytes, cut from one buffer."""
    raw = np.ascontiguousarray(vectors, dtype="<f4").data.cast("B")
    width = vectors.shape[1] * 4
    return [_b64encode(raw[i * width : (i + 1) * width]) for i in range(len(vectors))]


class MalformedAnswer(ESpeWError, ValueError):
    """An answer that is not an OpenAI embeddings answer; the message names the defect."""


def decode_embeddings(
    body: bytes | bytearray | str | dict[str, Any],
    n_expected: int,
    *,
    dtype: Any = np.float32,
    finite: bool = True,
) -> np.ndarray:
    """The ``(n_expected, d)`` rows of an OpenAI embeddings answer, in input order.

    ``body`` is the JSON text or the parsed answer. Every item must be an
    object with an ``int`` index in ``0..n_expected-1``, each used once, and
    an ``embedding`` that is a flat, non-empty list of numbers or base64 of
    little-endian float32; all rows share one form and one length. base64
    rows are joined as bytes and read by one ``np.frombuffer`` (no Python
    float is made). ``finite`` refuses NaN and infinite values; an auditor
    passes ``False`` to keep them, so that one broken row is dropped alone
    rather than its whole batch. Raises :class:`MalformedAnswer`.
    """
    answer = body
    if isinstance(body, (bytes, bytearray, str)):
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise MalformedAnswer(f"a body that is not valid JSON ({type(exc).__name__})") from None
    placed = _placed_embeddings(answer, n_expected)
    if all(isinstance(value, bytes) for _, value in placed):
        matrix = _matrix_from_base64([value for _, value in placed], dtype)
    else:
        matrix = _matrix_from_lists(placed, dtype)
    if finite and not np.isfinite(matrix).all():
        row = int(np.flatnonzero(~np.isfinite(matrix).all(axis=1))[0])
        raise MalformedAnswer(f"NaN or infinite embedding values (index {row})")
    return matrix


def _placed_embeddings(answer: Any, n_expected: int) -> list[tuple[str, Any]]:
    """``(where, embedding)`` in index order, each checked alone (base64 decoded to bytes)."""
    if not isinstance(answer, dict):
        raise MalformedAnswer(f"a JSON {_show(answer)} where an object with 'data' was expected")
    items = answer.get("data")
    if not isinstance(items, list):
        raise MalformedAnswer(f"no 'data' list (found {_show(items)})")
    if len(items) != n_expected:
        raise MalformedAnswer(f"{len(items)} embeddings for {n_expected} inputs")
    placed: list[tuple[str, Any] | None] = [None] * n_expected
    for position, item in enumerate(items):
        where = f"item {position} of 'data'"
        if not isinstance(item, dict):
            raise MalformedAnswer(f"{where}: not an object ({_show(item)})")
        index = _index(item, where, n_expected)
        if placed[index] is not None:
            raise MalformedAnswer(f"{where}: duplicate index {index}")
        if "embedding" not in item:
            raise MalformedAnswer(f"{where}: no embedding")
        placed[index] = (where, _checked_embedding(item["embedding"], where))
    forms = {isinstance(value, bytes) for _, value in placed}  # type: ignore[misc]
    if len(forms) != 1:
        raise MalformedAnswer("embeddings that mix base64 and lists of numbers")
    return placed  # type: ignore[return-value]


def _index(item: dict[str, Any], where: str, n_expected: int) -> int:
    if "index" not in item:
        raise MalformedAnswer(f"{where}: no index")
    index = item["index"]
    if type(index) is not int:  # bool, float (1.0 too), str...: refused, never coerced
        raise MalformedAnswer(f"{where}: index {_show(index)} is not an integer")
    if index < 0:
        raise MalformedAnswer(f"{where}: index {index} is negative")
    if index >= n_expected:
        raise MalformedAnswer(f"{where}: index {index} out of range for {n_expected} inputs")
    return index


def _checked_embedding(embedding: Any, where: str) -> bytes | list[Any]:
    """The row's float32 bytes (base64) or its list of numbers, each checked."""
    if isinstance(embedding, str):
        try:
            raw = _b64decode(embedding, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedAnswer(f"{where}: embedding is a string but not base64") from None
        if not raw or len(raw) % 4:
            raise MalformedAnswer(
                f"{where}: base64 embedding of {len(raw)} bytes is not float32 data"
            )
        return raw
    if not isinstance(embedding, list):
        raise MalformedAnswer(
            f"{where}: embedding is {_show(embedding)}, neither a list of numbers nor base64"
        )
    if not embedding:
        raise MalformedAnswer(f"{where}: embedding is empty")
    for i, value in enumerate(embedding):
        if type(value) not in (float, int):  # bool and numeric strings are refused too
            kind = "a nested list" if isinstance(value, list) else _show(value)
            if isinstance(value, str):
                kind = "a string"  # its content is not worth showing
            raise MalformedAnswer(f"{where}: embedding value {i} is {kind}, not a number")
    return embedding


def _matrix_from_base64(rows: list[bytes], dtype: Any) -> np.ndarray:
    widths = {len(row) // 4 for row in rows}
    if len(widths) != 1:
        raise MalformedAnswer(f"embeddings of mixed lengths {sorted(widths)}")
    matrix = np.frombuffer(b"".join(rows), dtype="<f4").reshape(len(rows), widths.pop())
    return matrix.astype(dtype, copy=False)


def _matrix_from_lists(placed: list[tuple[str, Any]], dtype: Any) -> np.ndarray:
    widths = {len(row) for _, row in placed}
    if len(widths) != 1:
        raise MalformedAnswer(f"embeddings of mixed lengths {sorted(widths)}")
    try:
        return np.asarray([row for _, row in placed], dtype=dtype)
    except OverflowError:
        pass
    for where, row in placed:  # find the row to name it
        try:
            np.asarray(row, dtype=dtype)
        except OverflowError:
            raise MalformedAnswer(
                f"{where}: embedding holds an integer too large for a float"
            ) from None
    raise MalformedAnswer("an embedding holds an integer too large for a float")


def _show(value: Any) -> str:
    """A scalar as it was sent (redaction comes later), a container by its type only.

    Nothing is cut here: a cut could leave a piece of an echoed key that redaction,
    which looks for the whole key, would miss. The caller's printable() cuts.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return f"a {type(value).__name__}"
