"""The library's one row normaliser: each row of a matrix scaled to unit Euclidean norm.

The watermark (:mod:`..mark.inject`) renormalises marked rows with it, and the verifier,
the alignment and the lab take cosines through it (:func:`..mark.probes.row_cosines`),
so every part of the library agrees on what a unit row is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["unit_rows"]


def unit_rows(matrix: Any, *, dtype: DTypeLike = np.float64) -> np.ndarray:
    """Each row of ``matrix`` divided by its norm, computed in ``dtype``; a zero row stays zero.

    Safe for any finite rows, however large or small: each row is first
    multiplied by the power of two that brings its largest magnitude into
    [0.5, 1) (exact: only the exponents change, except for elements that become
    subnormal, which are far below the row's precision anyway), so the squares
    can neither overflow nor all underflow. The watermark passes its own
    dtype, so a float32 or float16 answer is normalised in that precision.

    >>> unit_rows(np.array([[3.0, 4.0], [0.0, 0.0], [1e300, 1e300]])).round(4).tolist()
    [[0.6, 0.8], [0.0, 0.0], [0.7071, 0.7071]]
    """
    rows = np.asarray(matrix, dtype=dtype)
    _, exponent = np.frexp(np.abs(rows).max(axis=1, keepdims=True))
    scaled = np.ldexp(rows, -exponent)
    norms = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))[:, None]
    return scaled / np.where(norms > 0, norms, 1)
