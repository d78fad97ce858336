"""Thieves that estimate the mark's direction from their own stolen answers, then project it out.

A field answer is ``unit(e + g(e) * D(e))``, and ESpeW's displacement ``D(e)``
moves the row's smallest ``alpha * d`` coordinates toward one target ``t``: the
gain signs and scales it, but in every answer the mark lies mostly along ``t``
(issue 53). An informed thief (the repository, a similar corpus, an open model
and its own stolen answers; no key, no clean model) can estimate ``t`` and serve
its copy's outputs with the estimate projected out. Everything here uses only
what such a thief holds:

- :func:`regime_slope_directions`, the regime-slope estimator. For each
  coordinate ``j`` the public ESpeW rule splits the answers into two regimes
  (``j`` among the row's smallest ``alpha * d`` magnitudes, where the mark writes
  it, or not), and every other coordinate is regressed on coordinate ``j`` within
  each regime. On clean rows the two regimes' slopes differ only by what the
  selection does to the data; a mark adds a rank-one term ``t_j * Cov(a_k, g)``
  inside the marked regime. The same slope differences computed on the thief's
  own copy's predictions (a linear function of its open features, so they keep
  the data's background and most of nothing else) are subtracted, each entry is
  divided by its standard error, and the leading left singular vectors of these
  z-scores estimate ``t`` (then the next directions). Every regression of every
  pair is one of a few matrix products.
- :func:`residual_directions`: the principal axes of the residuals (answers
  less the copy's own predictions), where whatever the copy could not explain
  from its features lies.
- :func:`project_out` and :class:`ProjectedCopy`: a copy that serves its outputs
  with a set of directions removed.

``benchmarks/bench_informed_thieves.py`` runs these thieves against a key and
records what each costs the thief and whether its copy is still convicted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from espew_integrations.core.ground.defaults import DEFAULT_ALPHA

__all__ = [
    "MIN_REGIME_ROWS",
    "ProjectedCopy",
    "orthonormal",
    "project_out",
    "regime_masks",
    "regime_slope_directions",
    "regime_slopes",
    "residual_directions",
    "subspace_cosine",
]

#: A coordinate's slopes are compared only when each of its regimes holds this many rows.
MIN_REGIME_ROWS = 10
_TINY = np.finfo(np.float64).tiny


def regime_masks(rows: np.ndarray, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """``(n, d)`` booleans: True where a coordinate is among its row's ``floor(alpha * d)``
    smallest magnitudes (the public ESpeW rule for where a mark is written)."""
    rows = np.asarray(rows)
    if rows.ndim != 2:
        raise ValueError(f"rows must be a 2-D matrix, got shape {rows.shape}")
    n, d = rows.shape
    k = int(np.floor(alpha * d))
    if not 0 < k < d:
        raise ValueError(f"alpha * d must select between 1 and d - 1 coordinates, got {k} of {d}")
    smallest = np.argpartition(np.abs(rows), k - 1, axis=1)[:, :k]
    mask = np.zeros((n, d), dtype=bool)
    np.put_along_axis(mask, smallest, True, axis=1)
    return mask


def regime_slopes(rows: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slope differences between the two regimes, and their sampling variances.

    Returns two ``(d, d)`` matrices: ``[j, k]`` of the first is the least-squares slope
    of coordinate ``k`` on coordinate ``j`` over the rows where ``masks[:, j]`` holds,
    less that slope over the rows where it does not; the second is the variance of that
    difference (each regime's residual variance over its rows times the variance of
    coordinate ``j`` there, summed). The diagonal of the first is zero, and so is every
    row ``j`` with fewer than :data:`MIN_REGIME_ROWS` rows in either regime (its
    variance is then infinite). All ``2 d^2`` regressions come from a few ``d x n x d``
    products.
    """
    a = np.asarray(rows, dtype=np.float64)
    inside = np.asarray(masks, dtype=np.float64)
    if a.shape != inside.shape or a.ndim != 2:
        raise ValueError(
            f"rows and masks must be matrices of one shape, got {a.shape}, {inside.shape}"
        )
    squares = a * a
    slopes, variances, counts = [], [], []
    for m in (inside, 1.0 - inside):
        count = m.sum(axis=0)
        size = np.maximum(count, 1.0)
        ma = m * a
        mean_j = ma.sum(axis=0) / size
        mean_k = (m.T @ a) / size[:, None]  # [j, k]: mean of a_k over regime of j
        covariance = (ma.T @ a) / size[:, None] - mean_j[:, None] * mean_k
        variance_j = np.maximum((ma * a).sum(axis=0) / size - mean_j**2, _TINY)
        variance_k = (m.T @ squares) / size[:, None] - mean_k**2
        slope = covariance / variance_j[:, None]
        residual = np.maximum(variance_k - slope * covariance, 0.0)
        slopes.append(slope)
        variances.append(residual / (size * variance_j)[:, None])
        counts.append(count)
    difference = slopes[0] - slopes[1]
    variance = variances[0] + variances[1]
    np.fill_diagonal(difference, 0.0)
    np.fill_diagonal(variance, 1.0)
    # A coordinate (nearly) always in one regime has no second regime to compare with.
    thin = np.minimum(*counts) < MIN_REGIME_ROWS
    difference[thin] = 0.0
    variance[thin] = np.inf
    return difference, variance


def regime_slope_directions(
    answers: np.ndarray,
    predictions: np.ndarray,
    *,
    n_directions: int = 1,
    alpha: float = DEFAULT_ALPHA,
) -> np.ndarray:
    """The regime-slope estimate: ``(n_directions, d)`` orthonormal rows, the first the
    estimate of the mark's target (up to sign).

    ``answers``: the stolen answers; ``predictions``: the thief's own copy's outputs for
    the same texts (its background). Both are split by the rule applied to the answers,
    so the two slope matrices differ by the mark and by what the copy did not learn, not
    by a different split. Each entry of the difference is divided by its standard error
    (a z-score), so a coordinate whose one regime holds few rows, whose slopes are
    noise, does not take the leading singular vector.
    """
    answers = np.asarray(answers, dtype=np.float64)
    predictions = np.asarray(predictions, dtype=np.float64)
    if answers.shape != predictions.shape:
        raise ValueError(
            f"answers and predictions must have one shape, got {answers.shape}, {predictions.shape}"
        )
    if not 1 <= n_directions <= answers.shape[1]:
        raise ValueError(f"n_directions must lie in 1..{answers.shape[1]}, got {n_directions}")
    masks = regime_masks(answers, alpha)
    marked, marked_variance = regime_slopes(answers, masks)
    background, background_variance = regime_slopes(predictions, masks)
    scores = (marked - background) / np.sqrt(marked_variance + background_variance)
    left, _, _ = np.linalg.svd(scores)
    return left[:, :n_directions].T.copy()


def residual_directions(
    answers: np.ndarray, predictions: np.ndarray, *, n_directions: int = 1
) -> np.ndarray:
    """``(n_directions, d)``: the leading principal axes of ``answers - predictions``
    (centred), orthonormal."""
    residuals = np.asarray(answers, dtype=np.float64) - np.asarray(predictions, dtype=np.float64)
    residuals -= residuals.mean(axis=0)
    _, _, axes = np.linalg.svd(residuals, full_matrices=False)
    return axes[:n_directions].copy()


def orthonormal(directions: np.ndarray) -> np.ndarray:
    """An orthonormal basis (rows) of the span of ``directions``' rows."""
    directions = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    q, r = np.linalg.qr(directions.T)
    keep = np.abs(np.diag(r)) > 1e-10 * max(np.abs(r).max(), 1e-300)
    return q[:, keep].T.copy()


def project_out(rows: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """``rows`` less their components along the span of ``directions``' rows."""
    basis = orthonormal(directions)
    rows = np.asarray(rows, dtype=np.float64)
    return rows - (rows @ basis.T) @ basis


def subspace_cosine(vector: np.ndarray, directions: np.ndarray) -> float:
    """The largest |cos| between ``vector`` and any vector in the span of ``directions``
    (the norm of its unit projection onto that span)."""
    vector = np.asarray(vector, dtype=np.float64)
    basis = orthonormal(directions)
    return float(np.linalg.norm(basis @ vector) / np.linalg.norm(vector))


class ProjectedCopy:
    """A copy that serves its outputs with ``directions`` projected out."""

    def __init__(self, copy: Callable[[list[str]], np.ndarray], directions: np.ndarray):
        self.copy = copy
        self.directions = orthonormal(directions)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return project_out(np.asarray(self.copy(list(texts)), dtype=np.float64), self.directions)
