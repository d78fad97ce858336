"""A key knows its model: the same model in another precision passes, another is refused.

Issue 38 asks that the key's own model served in another precision (int8 against
float32 weights moved all-MiniLM-L6-v2's embeddings to cos 0.9996) pass the check, and
that another 384-dimensional model, or the key's own behind a rotation, be refused.
The fingerprint is measured on the offline MiniLM's embeddings of the six canary texts,
read from ``tests/data/minilm_canaries.json`` so that this tier needs no model runtime
(``tests/integration/test_model_check_real.py`` checks the file against the model and
refuses another real model); only the fingerprint is stored with a synthetic key.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import espew_integrations
from espew_integrations.core.ground import errors
from espew_integrations.core.keys.model_check import (
    CANARY_TEXTS,
    MIN_CANARY_COSINE,
    ModelFingerprint,
    ModelGuard,
)
from tests.support import make_key

CANARIES = Path(__file__).resolve().parents[1] / "data" / "minilm_canaries.json"


@cache
def _canaries() -> np.ndarray:
    """The offline MiniLM's float32 embeddings of the canaries, as the model gave them."""
    document = json.loads(CANARIES.read_text())
    assert document["texts"] == list(CANARY_TEXTS)  # recorded for these canaries
    return np.asarray(document["rows"], dtype=np.float32)


def _model(texts: list[str]) -> np.ndarray:
    """The key's model: the offline MiniLM, its canary answers remembered."""
    assert list(texts) == list(CANARY_TEXTS)
    return _canaries().copy()


@cache
def _key():
    fingerprint = ModelFingerprint.measure(_model)
    return make_key(384).replace(model_fingerprint=fingerprint)


def _int8_rows(rows: np.ndarray) -> np.ndarray:
    """Each row through a symmetric per-row int8 code and back, as an int8 model's output."""
    scale = np.abs(rows).max(axis=1, keepdims=True) / 127.0
    return (np.round(rows / scale) * scale).astype(np.float32)


def _moved_to_cosine(rows: np.ndarray, cosine: float) -> np.ndarray:
    """Each row moved off itself in a random direction, to exactly ``cosine`` with it."""
    rng = np.random.default_rng(38)
    noise = rng.normal(size=rows.shape)
    noise -= (np.einsum("ij,ij->i", noise, rows) / np.einsum("ij,ij->i", rows, rows))[
        :, None
    ] * rows  # orthogonal to each row
    noise *= (np.linalg.norm(rows, axis=1) / np.linalg.norm(noise, axis=1))[:, None]
    angle = np.arccos(cosine)
    return (np.cos(angle) * rows + np.sin(angle) * noise).astype(np.float32)


def _rotation(dim: int = 384) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(0).normal(size=(dim, dim)))[0]


SAME_MODEL_OTHER_PRECISION = {
    "float16": lambda texts: _model(texts).astype(np.float16),
    "bfloat16-like (8 mantissa bits)": lambda texts: (
        _model(texts).view(np.uint32) & np.uint32(0xFFFF0000)
    ).view(np.float32),
    "int8 rows": lambda texts: _int8_rows(_model(texts)),
    "cos 0.9996 (issue 38's int8 weights)": lambda texts: _moved_to_cosine(_model(texts), 0.9996),
}


@pytest.mark.parametrize("precision", sorted(SAME_MODEL_OTHER_PRECISION))
def test_the_same_model_in_another_precision_passes(precision):
    embed = SAME_MODEL_OTHER_PRECISION[precision]
    rows = np.asarray(embed(list(CANARY_TEXTS)), dtype=np.float64)
    assert not np.array_equal(rows, _canaries())  # the rows did change
    guard = ModelGuard(_key(), embed)
    guard.check()  # passes: no KeyModelMismatchError
    guard.check()  # and stays passed
    # With a margin: the stored int8 fingerprint and the precision cost far less than it.
    assert _key().model_fingerprint.similarity(rows) > MIN_CANARY_COSINE + 0.009


OTHER_MODELS = {
    "rotated": lambda texts: _model(texts) @ _rotation(),
    "coordinates permuted": lambda texts: _model(texts)[
        :, np.random.default_rng(1).permutation(384)
    ],
    "sign-flipped half": lambda texts: _model(texts) * np.repeat([1.0, -1.0], 192),
}


@pytest.mark.parametrize("other", sorted(OTHER_MODELS))
def test_the_key_s_model_with_its_coordinates_moved_is_refused(other):
    embed = OTHER_MODELS[other]
    guard = ModelGuard(_key(), embed)
    with pytest.raises(espew_integrations.KeyModelMismatchError, match="belongs to another model"):
        guard.check()
    with pytest.raises(errors.KeyModelMismatchError):  # on every call, not just the first
        guard.check()
    rows = np.asarray(embed(list(CANARY_TEXTS)), dtype=np.float64)
    assert _key().model_fingerprint.similarity(rows) < 0.5  # far below the 0.99 needed


def test_the_mismatch_error_is_one_of_the_package_s_errors():
    error = espew_integrations.KeyModelMismatchError
    assert error is errors.KeyModelMismatchError
    assert issubclass(error, espew_integrations.ESpeWError) and issubclass(error, ValueError)
    assert "KeyModelMismatchError" in espew_integrations.__all__
