"""Numbers a verdict rests on, the same on every CPU: fixed-order sums and a residual grid.

Why: a matrix product goes through BLAS, and BLAS picks its kernel (and with it the
order of every sum) by the processor it runs on, so a product's last bits differ
between an AVX-512 machine and an AVX2 one. That is harmless for a score that is a
real quantity (two words' scores are almost never within 1e-15 of each other, so
their ranks agree), but not for a *residual* that is zero in exact arithmetic: the
suspect's score less the part the clean model explains. For the clean model itself
that residual is pure rounding, and the rank test would rank rounding noise, whose
order (and so the p-value) changes with the kernel.

Two rules keep a verdict the same everywhere:

- The sums a decision reads (a slope, a cosine) are taken in numpy's own fixed order
  (:func:`fixed_dot`: an elementwise product, then a pairwise sum), never through BLAS.
- A residual of numbers bounded by 1 (cosines, leans) is snapped to a grid of
  :data:`RESIDUAL_GRID` (:func:`snap_residual`) before anything is ranked: rounding
  noise (about 1e-16) becomes an exact zero, a tie, while any residual a model really
  has is far larger than the grid and keeps its order. The snap is a function of the
  scores alone, never of which words or units are the key's, so every rank test
  stays exact.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RESIDUAL_GRID", "fixed_dot", "least_squares_slope", "snap_residual"]

#: The grid a residual of unit-bounded numbers is snapped to: 2^-40 (about 9.1e-13).
#: Rounding differences between BLAS kernels are about 1e-16, four orders below it, and
#: a copy's or an innocent model's residuals (its own noise, float32 answers at 1e-7)
#: are orders above it. A power of two, so the snap itself is exact arithmetic.
RESIDUAL_GRID = 2.0**-40


def fixed_dot(a: np.ndarray, b: np.ndarray) -> float:
    """``sum(a * b)`` of two 1-D arrays, summed in numpy's fixed (pairwise) order.

    Unlike ``a @ b``, which BLAS sums in an order chosen by the CPU, the result is
    the same bits on every machine with the same numpy.

    >>> fixed_dot(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    11.0
    """
    return float(np.add.reduce(np.multiply(a, b)))


def least_squares_slope(y: np.ndarray, x: np.ndarray) -> float:
    """The least-squares slope of ``y`` on ``x`` (with an intercept); 0 when ``x`` is constant.

    Computed with :func:`fixed_dot`, so the same on every CPU.

    >>> least_squares_slope(np.array([1.0, 3.0, 5.0]), np.array([0.0, 1.0, 2.0]))
    2.0
    """
    centred = x - np.add.reduce(x) / len(x)
    denominator = fixed_dot(centred, centred)
    if denominator <= 0.0:
        return 0.0
    return fixed_dot(centred, y - np.add.reduce(y) / len(y)) / denominator


def snap_residual(residual: np.ndarray) -> np.ndarray:
    """``residual`` rounded to the nearest multiple of :data:`RESIDUAL_GRID`.

    For residuals of numbers bounded by 1 in magnitude: rounding noise snaps to
    exactly 0 on every CPU (module docstring). NaN stays NaN.

    >>> snap_residual(np.array([3e-17, -2e-16, 0.25])).tolist()
    [0.0, -0.0, 0.25]
    """
    return np.rint(np.asarray(residual, dtype=np.float64) / RESIDUAL_GRID) * RESIDUAL_GRID
