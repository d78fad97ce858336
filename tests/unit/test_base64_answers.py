"""Answers in OpenAI's ``encoding_format: "base64"`` (each row the base64 of its
little-endian float32 bytes): written and read by one vectorised codec, the same bytes
as the stdlib's, and a broken row refused with a message that names its defect."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from espew_integrations.http import protocol
from espew_integrations.http.protocol import MalformedAnswer, decode_embeddings, encode_embeddings

TEXTS = ["one text", "another text", "a third"]


def rows(dim: int = 1536) -> np.ndarray:
    return np.random.default_rng(7).normal(size=(len(TEXTS), dim)).astype(np.float32)


def answer(embeddings: list[object]) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)]
    return json.dumps({"object": "list", "data": data}).encode()


def b64(values: np.ndarray) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


@pytest.mark.parametrize("dim", [1, 2, 3, 384, 1536])  # every length mod 3: padding or not
def test_each_row_is_the_stdlib_base64_of_its_little_endian_float32_bytes(dim):
    vectors = rows(dim)
    body = json.loads(encode_embeddings(vectors, "base64", "m", TEXTS))
    assert [item["embedding"] for item in body["data"]] == [b64(row) for row in vectors]
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert body["model"] == "m" and body["usage"]["prompt_tokens"] == 6


def test_the_stdlib_codec_where_pybase64_is_missing_writes_and_reads_the_same(monkeypatch):
    vectors = rows()
    fast = encode_embeddings(vectors, "base64", "m", TEXTS)
    monkeypatch.setattr(protocol, "_b64encode", base64.b64encode)
    monkeypatch.setattr(protocol, "_b64decode", base64.b64decode)
    assert encode_embeddings(vectors, "base64", "m", TEXTS) == fast
    assert decode_embeddings(fast, 3).tobytes() == vectors.tobytes()
    with pytest.raises(MalformedAnswer, match="item 1 of 'data': embedding is a string but not"):
        decode_embeddings(answer([b64(vectors[0]), "@@@@", b64(vectors[2])]), 3)


def test_the_codec_in_use_is_pybase64_where_the_http_extra_installed_it():
    pybase64 = pytest.importorskip("pybase64")
    assert protocol.base64_codec() == (pybase64.b64encode, pybase64.b64decode)


@pytest.mark.parametrize(
    ("embeddings", "problem"),
    [
        (
            ["@@@@", "AAAAAA==", "AAAAAA=="],
            "item 0 of 'data': embedding is a string but not base64",
        ),
        (["AAAA AAA=", "AAAAAA==", "AAAAAA=="], "item 0 of 'data': embedding is a string but not"),
        (["AAAAAA==", "AAAAAA=", "AAAAAA=="], "item 1 of 'data': embedding is a string but not"),
        (
            ["AAAAAA==", "AAAAAA==", "AAAAAAA="],
            "item 2 of 'data': base64 embedding of 5 bytes is not",
        ),
        (["", "AAAAAA==", "AAAAAA=="], "item 0 of 'data': base64 embedding of 0 bytes is not"),
        (["AAAAAA==", "AAAAAAAAAAA=", "AAAAAA=="], r"embeddings of mixed lengths \[1, 2\]"),
        (["AAAAAA==", [0.0], "AAAAAA=="], "embeddings that mix base64 and lists of numbers"),
        (["AAAAAA==", "AADAfw==", "AAAAAA=="], r"NaN or infinite embedding values \(index 1\)"),
        (["AAAAAA==", "AAAAAA==", "AACAfw=="], r"NaN or infinite embedding values \(index 2\)"),
    ],
    ids=[
        "not-base64",
        "inner-space",
        "bad-padding",
        "not-float32-length",
        "empty",
        "mixed-lengths",
        "mixed-forms",
        "nan",
        "infinity",
    ],
)
def test_a_broken_base64_row_is_refused_naming_its_defect(embeddings, problem):
    with pytest.raises(MalformedAnswer, match=problem):
        decode_embeddings(answer(embeddings), 3)


def test_nan_and_infinity_are_what_those_base64_rows_hold():
    # The rows the NaN and infinity cases above send, decoded by the stdlib.
    nan, inf = (np.frombuffer(base64.b64decode(s), "<f4")[0] for s in ("AADAfw==", "AACAfw=="))
    assert np.isnan(nan) and np.isposinf(inf)
    kept = decode_embeddings(answer(["AAAAAA==", "AADAfw==", "AAAAAA=="]), 3, finite=False)
    assert np.isnan(kept[1, 0]) and kept.shape == (3, 1)
