"""The OpenAI wire codec: what the server writes, every reader reads back exactly.

No server or process here: these are the rules that the server, the client,
the proxy's upstream and the middleware share through ``http/protocol.py``.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from espew_integrations import ESpeWError
from espew_integrations.http.protocol import (
    MalformedAnswer,
    RequestError,
    RequestLimits,
    decode_embeddings,
    encode_embeddings,
    error_body,
    error_json,
    error_message,
    parse_input,
    parse_request,
    replace_embeddings,
)

VECTORS = np.array([[0.1, -2.5, 3.0], [1e-8, 0.0, -1.0]], dtype=np.float32)


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_both_encodings_decode_to_the_same_float32_values(encoding):
    body = encode_embeddings(VECTORS, encoding, "m", ["a b", "c"])
    answer = json.loads(body)
    assert answer["model"] == "m" and answer["usage"]["prompt_tokens"] == 3
    np.testing.assert_array_equal(decode_embeddings(body, 2), VECTORS)
    as_float64 = decode_embeddings(body, 2, dtype=np.float64)
    assert as_float64.dtype == np.float64
    np.testing.assert_array_equal(as_float64, VECTORS.astype(np.float64))


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_replaced_rows_keep_the_encoding_and_every_other_field(encoding):
    answer = json.loads(encode_embeddings(VECTORS, encoding, "m", ["a", "b"]))
    answer["data"].reverse()  # rows go by index, not by position
    answer["extra"] = "kept"
    new = replace_embeddings(answer, VECTORS * 2)
    parsed = json.loads(new)
    assert parsed["extra"] == "kept"
    assert isinstance(parsed["data"][0]["embedding"], str) == (encoding == "base64")
    np.testing.assert_array_equal(decode_embeddings(new, 2), VECTORS * 2)


def b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": b64([1.0])}], "mix"),
        ([{"index": 0, "embedding": b64([1.0])}, {"index": 1, "embedding": b64([1, 2])}], "mixed"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}], "duplicate"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 2, "embedding": [1.0]}], "out of range"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [float("nan")]}], "NaN"),
    ],
)
def test_a_malformed_answer_is_refused_by_name(data, problem):
    with pytest.raises(MalformedAnswer, match=problem):
        decode_embeddings({"data": data}, 2)


def test_an_auditor_may_keep_non_finite_rows_to_drop_them_one_by_one():
    data = [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [float("inf")]}]
    rows = decode_embeddings({"data": data}, 2, dtype=np.float64, finite=False)
    assert np.isfinite(rows[0]).all() and not np.isfinite(rows[1]).all()


def test_the_input_shape_rule_holds_without_limits_and_limits_add_to_it():
    assert parse_input("one") == ["one"]
    assert parse_input(["", "x" * 10]) == ["", "x" * 10]  # no limits: the shape only
    with pytest.raises(RequestError, match="token ids"):
        parse_input([1, 2, 3])
    with pytest.raises(RequestError, match="empty list"):
        parse_input([])
    limits = RequestLimits(max_inputs=2, max_text_chars=5, max_request_chars=8)
    with pytest.raises(RequestError, match="empty string"):
        parse_input([" "], limits)
    with pytest.raises(RequestError, match="at most 2 per request"):
        parse_input(["a", "b", "c"], limits)
    with pytest.raises(RequestError) as info:
        parse_input(["abcde", "abcde"], limits)
    assert info.value.status == 413 and info.value.code == "request_too_large"


def test_a_request_for_another_model_is_a_404_quoting_a_short_prefix():
    raw = json.dumps({"model": "x" * 500, "input": "hi"}).encode()
    with pytest.raises(RequestError) as info:
        parse_request(raw, "served", RequestLimits())
    assert info.value.status == 404 and len(info.value.message) < 200
    texts, encoding, dims = parse_request(
        b'{"model": "served", "input": ["hi"], "encoding_format": "base64"}',
        "served",
        RequestLimits(),
    )
    assert (texts, encoding, dims) == (["hi"], "base64", None)


def test_error_bodies_have_openais_shape_and_read_back():
    body = error_body("no", param="input", code="c")
    assert body == {
        "error": {"message": "no", "type": "invalid_request_error", "param": "input", "code": "c"}
    }
    assert json.loads(error_json("no", kind="server_error"))["error"]["type"] == "server_error"
    assert RequestError(400, "bad", param="model").body()["error"]["param"] == "model"
    assert error_message(error_json("the reason"), "Bad Request") == "the reason"
    assert error_message(b"", "Bad Request") == "Bad Request"
    with pytest.raises(ValueError, match="max_inputs"):
        RequestLimits(max_inputs=0)


def test_its_errors_join_the_family():
    assert issubclass(MalformedAnswer, ESpeWError) and issubclass(MalformedAnswer, ValueError)
    assert issubclass(RequestError, ESpeWError)
