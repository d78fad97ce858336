"""A prototype mark with no fixed target: each row is moved toward a target of its own.

The field mark moves every answer toward one secret target ``t`` (issue 53), so the
mark lies mostly along one direction, which a thief can estimate from its answers
and project out. This prototype keeps ESpeW's per-row displacement and the field's
keyed gain, and lets the target depend on the row:

- ``"map"``: the target of a clean unit row ``e`` is ``unit(R (e - mu))``, ``R`` a
  keyed Gaussian ``d x d`` matrix: a keyed linear map of the row;
- ``"regions"``: ``n_targets`` keyed targets, and a row takes the one whose keyed
  direction its centred row leans on most (a smooth, learnable partition of the space,
  not a hash a copy cannot learn).

A served answer is ``unit(e + g(e) * D(e))``, with ``D(e)`` the displacement that moves
the row's smallest ``alpha * d`` coordinates a share ``strength`` of the way to the
row's target (then unit-normalised), and ``g(e)`` the field's clipped standardised
projection on a keyed vector. Everything is drawn from ``seed`` (a stand-in for the
key's salt): nothing is the embedding of a text anyone can guess.

This is a research prototype, not a key design: it has no verifier and no exact test.
``benchmarks/bench_moving_target.py`` measures what the direction thieves of
:mod:`.direction_thieves` remove from it, by how much of the mark a copy carries.
"""

from __future__ import annotations

import numpy as np

from espew_integrations.core.ground.defaults import DEFAULT_ALPHA

from .direction_thieves import regime_masks

__all__ = ["DESIGNS", "MovingTarget", "fit_strength"]

DESIGNS = ("fixed", "map", "regions")
_CLIP = 3.0
_AMPLITUDE = 0.5


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


class MovingTarget:
    """The prototype mark of one ``design`` (``DESIGNS``), its secrets drawn from ``seed``.

    ``"fixed"`` is the field's shape with one keyed random target (no text), for
    comparison. ``reference`` (clean unit rows) fixes the centre ``mu`` and the gain's
    scale, as the field key's audit does.
    """

    def __init__(
        self,
        design: str,
        reference: np.ndarray,
        *,
        seed: int,
        strength: float = 0.1,
        n_targets: int = 16,
        alpha: float = DEFAULT_ALPHA,
    ):
        if design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
        reference = _unit(np.asarray(reference, dtype=np.float64))
        d = reference.shape[1]
        rng = np.random.default_rng([seed, DESIGNS.index(design)])
        self.design, self.strength, self.alpha = design, strength, alpha
        self.mu = reference.mean(axis=0)
        gain_vector = rng.standard_normal(d)
        self.gain_vector = gain_vector / ((reference - self.mu) @ gain_vector).std()
        spread = (reference - self.mu).std(axis=0)
        # Targets that look like embeddings: the centre plus keyed noise of the data's spread.
        self.targets = _unit(self.mu + rng.standard_normal((n_targets, d)) * spread * 3)
        self.regions = rng.standard_normal((n_targets, d))
        self.map = rng.standard_normal((d, d)) / np.sqrt(d)

    def target_of(self, clean: np.ndarray) -> np.ndarray:
        """``(n, d)``: each clean unit row's target."""
        clean = _unit(np.asarray(clean, dtype=np.float64))
        if self.design == "fixed":
            return np.broadcast_to(self.targets[0], clean.shape).copy()
        if self.design == "map":
            return _unit(self.mu + (clean - self.mu) @ self.map.T)
        return self.targets[np.argmax((clean - self.mu) @ self.regions.T, axis=1)]

    def gain(self, clean: np.ndarray) -> np.ndarray:
        """``(n,)``: the keyed gain of each clean unit row."""
        projection = (_unit(np.asarray(clean, dtype=np.float64)) - self.mu) @ self.gain_vector
        return np.clip(_AMPLITUDE * projection, -_CLIP, _CLIP)

    def __call__(self, clean: np.ndarray, *, strength: float | None = None) -> np.ndarray:
        """The served answers for clean rows ``clean``."""
        clean = _unit(np.asarray(clean, dtype=np.float64))
        strength = self.strength if strength is None else strength
        written = clean.copy()
        mask = regime_masks(clean, self.alpha)
        written[mask] += strength * (self.target_of(clean)[mask] - clean[mask])
        return _unit(clean + self.gain(clean)[:, None] * (_unit(written) - clean))


def fit_strength(mark: MovingTarget, clean: np.ndarray, min_cosine: float) -> float:
    """The strength at which ``mark``'s answers keep mean cos ``min_cosine`` to ``clean``
    (bisection; the mean cosine falls as the strength grows)."""
    clean = _unit(np.asarray(clean, dtype=np.float64))
    low, high = 0.0, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        cosine = float(np.mean(np.sum(mark(clean, strength=middle) * clean, axis=1)))
        low, high = (middle, high) if cosine > min_cosine else (low, middle)
    return low
