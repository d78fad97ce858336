"""Null studies: how often would the verdict accuse a service that never saw the watermark?

Under the null the trigger draw is independent of the suspect, so a suspect's
per-word scores for one target can be computed once and reused across many
trigger draws: each draw is one fresh key (same band and target, new
triggers), and its p-value is the rank test on the same scores. This makes
10,000+ null trials a matter of seconds, and it is exactly the computation
:func:`~espew_integrations.core.verify.verify` performs for each of those keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from .ranktest import _SPECTRAL_FLOOR, _spectral_tails, _untied_counts, rank_sum_p_value

__all__ = ["NullStudy", "false_positive_summary", "null_p_values"]


def null_p_values(
    scores: np.ndarray, n_triggers: int, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """p-values of ``n_draws`` uniformly drawn trigger sets over fixed word scores.

    ``scores`` are one suspect's per-word scores for one target (all band
    words). Each draw picks ``n_triggers`` words uniformly without replacement,
    as :meth:`WatermarkKey.generate` does, and gets the exact rank-test p-value.

    >>> p = null_p_values(np.random.default_rng(0).normal(size=200), 20, 1000,
    ...                   np.random.default_rng(1))
    >>> bool((p < 1e-6).sum() == 0)
    True
    """
    scores = np.asarray(scores, dtype=np.float64)
    total = scores.size
    if not 0 < n_triggers < total:
        raise ValueError(f"need 0 < n_triggers < {total} words, got {n_triggers}")
    # A random n-subset per draw: the n smallest of N uniform keys.
    draws = np.argpartition(rng.random((n_draws, total)), n_triggers - 1, axis=1)[:, :n_triggers]
    ranks = rankdata(scores)
    doubled = np.rint(2 * ranks).astype(np.int64)
    _, sizes = np.unique(doubled, return_counts=True)
    if sizes.size != total:
        return _tied_null_p_values(scores, doubled, sizes, draws)
    rank_sums = ranks.astype(np.int64)[draws].sum(axis=1)
    counts = _untied_counts(total, n_triggers)
    tails = np.cumsum(counts[::-1])[::-1]  # tails[s] = #subsets with sum >= s
    return np.minimum(1.0, tails[rank_sums] / counts.sum())


def _tied_null_p_values(
    scores: np.ndarray, doubled: np.ndarray, sizes: np.ndarray, draws: np.ndarray
) -> np.ndarray:
    """p-values of many draws over tied scores: one conditional null distribution for all.

    The tie structure is the same for every draw, so the whole distribution of
    the doubled mid-rank sum is computed once and each draw is a lookup. Draws
    whose p-value is small get the exact count of :func:`rank_sum_p_value`
    instead, exactly as a single verification would report them.
    """
    n_triggers = draws.shape[1]
    tails = _spectral_tails(tuple(int(m) for m in sizes), n_triggers)
    observed = doubled[draws].sum(axis=1)
    p_values = np.where(observed < tails.size, tails[np.minimum(observed, tails.size - 1)], 0.0)
    for index in np.flatnonzero(p_values < _SPECTRAL_FLOOR):
        mask = np.zeros(scores.size, dtype=bool)
        mask[draws[index]] = True
        p_values[index] = rank_sum_p_value(scores, mask)
    return p_values


@dataclass(frozen=True)
class NullStudy:
    """Observed false positives of many null trials at several levels."""

    n_trials: int
    p_values: np.ndarray

    def false_positives(self, level: float) -> int:
        """How many null trials would have been convicted at ``level``."""
        return int(np.count_nonzero(self.p_values < level))

    def rate(self, level: float) -> float:
        """Observed false-positive rate at ``level`` (should be <= level)."""
        return self.false_positives(level) / max(self.n_trials, 1)


def false_positive_summary(
    study: NullStudy, levels: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-6)
) -> str:
    """A small table: level, false positives, observed rate, and the bound."""
    lines = [f"{'level':>8} {'false positives':>16} {'observed rate':>14}  (bound = level)"]
    for level in levels:
        lines.append(
            f"{level:>8.0e} {study.false_positives(level):>10d}/{study.n_trials:<5d} "
            f"{study.rate(level):>14.2e}"
        )
    return "\n".join(lines)
