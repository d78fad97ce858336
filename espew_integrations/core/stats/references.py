"""Reference copies: models the auditor builds itself from public parts and the clean service.

Why: the field statistic (:func:`..mark.field.field_scores`) adjusts each audit
text's lean for where the clean model already lies along that text's mark
direction. An innocent copy built on an open encoder leans as *that encoder* does
too, which the clean model's position explains only in part; that share is noise
the mark must beat. A reference copy is such an innocent, built by the auditor: a
linear map from public features (an open encoder's embeddings, or hashed word
counts) to the **clean** service's answers. Its leans join the adjustment as
regressors (``verify(..., references=[...])``), so what a copy on a similar base
would lean anyway cancels and the mark stands out.

The test stays exact because a reference never sees the mark: it is fitted to the
clean service's answers, on texts of the auditor's own, so nothing it answers
depends on which units the key drew. Fit it on texts that are **not** the audit's
(neither the keygen audit's nor a traffic audit's): a reference fitted on the audit
texts would memorise their clean rows, and its leans would only repeat the clean
model's. Everything here is numpy; the fit is a closed-form ridge.

>>> import numpy as np
>>> own = [f"text number {i} about films" for i in range(40)]
>>> clean = np.random.default_rng(0).standard_normal((40, 8))
>>> copy = bag_of_words_reference(own, clean, buckets=256)
>>> copy(["another text about films"]).shape
(1, 8)
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ground.errors import InputError, InputTypeError
from ..ground.rows import unit_rows

__all__ = [
    "DEFAULT_BAG_OF_WORDS_RIDGE",
    "DEFAULT_BUCKETS",
    "DEFAULT_REFERENCE_RIDGE",
    "ReferenceCopy",
    "bag_of_words_reference",
    "hashed_word_counts",
    "ridge_reference",
]

#: Columns of :func:`hashed_word_counts` (words and word pairs hashed into them).
DEFAULT_BUCKETS = 4096
#: The ridge of a reference fit: a multiple of the mean diagonal of the centred
#: features' Gram matrix, so the same value suits features of any scale. A reference
#: should answer as an innocent copy on its base would, not memorise its fitting
#: texts: an under-regularised head adds its own noise to every audit text's lean,
#: which the adjustment then cannot tell from the mark. This value is about the lab
#: thieves' ridge (alpha 1 on a few thousand unit rows of an open encoder);
#: docs/results/unavoidable/README.md ("Power") has the measurement.
DEFAULT_REFERENCE_RIDGE = 0.1
#: The ridge of :func:`bag_of_words_reference`, in the same units. Its features are
#: many sparse columns, each seen in a few texts; a ridge of one mean diagonal keeps
#: the map from fitting every text's rare words, as the lab's bag-of-words thief's
#: alpha 1 does.
DEFAULT_BAG_OF_WORDS_RIDGE = 1.0
_WORD = re.compile(r"\w+")

Features = Callable[[list[str]], Any]


class ReferenceCopy:
    """A reference copy: ``features(texts) @ weights + bias``, rows of unit length.

    A callable ``list[str] -> rows`` (what ``verify(..., references=...)`` takes),
    named ``name`` in reports and transcripts. Holds the fitted weights only: no
    text, no key.
    """

    __slots__ = ("_bias", "_features", "_weights", "name")

    def __init__(self, name: str, features: Features, weights: np.ndarray, bias: np.ndarray):
        self.name = name
        self._features = features
        self._weights = weights
        self._bias = bias

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        x = _feature_rows(self._features, list(texts), self._weights.shape[0])
        return unit_rows(x @ self._weights + self._bias)

    def __repr__(self) -> str:
        return f"ReferenceCopy({self.name!r}, {self._weights.shape[0]} features)"


def ridge_reference(
    features: Features,
    texts: Sequence[str],
    clean_rows: Any,
    *,
    ridge: float = DEFAULT_REFERENCE_RIDGE,
    name: str = "ridge reference",
) -> ReferenceCopy:
    """A ridge map from ``features(texts)`` to the clean service's rows for ``texts``.

    ``features``: a public feature function ``list[str] -> (n, f)`` (an open encoder);
    ``texts``: the auditor's own texts, never an audit's; ``clean_rows``: the clean
    service's answers to them. The fit is closed form, with an intercept, and a ridge
    of ``ridge`` times the mean diagonal of the centred features' Gram matrix.
    """
    texts = _checked_texts(texts)
    y = np.asarray(clean_rows, dtype=np.float64)
    if y.ndim != 2 or len(y) != len(texts) or not np.isfinite(y).all():
        raise InputError(
            f"clean_rows must be {len(texts)} finite rows, one per fitting text, got shape "
            f"{getattr(y, 'shape', None)}"
        )
    if not (isinstance(ridge, (int, float)) and not isinstance(ridge, bool) and ridge > 0):
        raise InputError(f"ridge must be a positive number, got {ridge!r}")
    x = _feature_rows(features, texts, None)
    x_mean, y_mean = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - x_mean, y - y_mean
    scale = float(np.einsum("ij,ij->", xc, xc)) / max(1, x.shape[1])
    penalty = ridge * max(scale, np.finfo(np.float64).tiny)
    if x.shape[1] <= len(x):  # primal: (X'X + aI) W = X'Y
        weights = np.linalg.solve(xc.T @ xc + penalty * np.eye(x.shape[1]), xc.T @ yc)
    else:  # dual: W = X' (XX' + aI)^-1 Y, the same solution with fewer unknowns
        weights = xc.T @ np.linalg.solve(xc @ xc.T + penalty * np.eye(len(x)), yc)
    return ReferenceCopy(name, features, weights, y_mean - x_mean @ weights)


def hashed_word_counts(texts: Sequence[str], buckets: int = DEFAULT_BUCKETS) -> np.ndarray:
    """``n x buckets``: each text's words and word pairs (lower case) hashed into
    ``buckets`` columns (BLAKE2b, the same on every platform), counts as ``1 + log``,
    each row of unit length: a bag-of-words feature function in numpy alone."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2:
        raise InputError(f"buckets must be an integer >= 2, got {buckets!r}")
    texts = list(texts)
    column: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for i, text in enumerate(texts):  # tokenising is per text; the counting is vectorised
        words = _WORD.findall(text.lower())
        grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for gram in grams:
            if gram not in column:
                digest = hashlib.blake2b(gram.encode(), digest_size=8).digest()
                column[gram] = int.from_bytes(digest, "little") % buckets
            cols.append(column[gram])
        rows.extend([i] * len(grams))
    flat = np.asarray(rows, dtype=np.int64) * buckets + np.asarray(cols, dtype=np.int64)
    counts = np.bincount(flat, minlength=len(texts) * buckets).reshape(len(texts), buckets)
    tf = np.where(counts > 0, 1.0 + np.log(np.maximum(counts, 1)), 0.0)
    return unit_rows(tf)


def bag_of_words_reference(
    texts: Sequence[str],
    clean_rows: Any,
    *,
    buckets: int = DEFAULT_BUCKETS,
    ridge: float = DEFAULT_BAG_OF_WORDS_RIDGE,
    name: str = "bag-of-words reference",
) -> ReferenceCopy:
    """:func:`ridge_reference` on :func:`hashed_word_counts`: a reference on no model at
    all, for a thief whose base is not among the auditor's open encoders."""
    hashed_word_counts([], buckets)  # the rule on buckets, before any fit

    def features(batch: list[str]) -> np.ndarray:
        return hashed_word_counts(batch, buckets)

    return ridge_reference(features, texts, clean_rows, ridge=ridge, name=name)


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InputTypeError("texts must be a sequence of strings (the auditor's own texts)")
    texts = list(texts)
    if len(texts) < 2:
        raise InputError(f"a reference is fitted to at least 2 texts, got {len(texts)}")
    return texts


def _feature_rows(features: Features, texts: list[str], width: int | None) -> np.ndarray:
    x = np.asarray(features(texts), dtype=np.float64)
    if x.ndim != 2 or len(x) != len(texts) or (width is not None and x.shape[1] != width):
        raise InputError(
            f"the feature function must give one row of {width or 'equal'} numbers per text, "
            f"got shape {x.shape} for {len(texts)} texts"
        )
    if not np.isfinite(x).all():
        raise InputError("the feature function gave a NaN or infinite value")
    return x
