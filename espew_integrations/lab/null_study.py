"""Null studies: how often would the verdict accuse a service that never saw the watermark?

Under the null the trigger draw is independent of the suspect, so a suspect's
per-word scores for one target can be computed once and reused across many
trigger draws: each draw is one fresh key (same band and target, new
triggers), and its p-value is the rank test on the same scores
(:func:`~espew_integrations.core.ranktest.subset_p_values`). This makes
10,000+ null trials a matter of seconds, and it is exactly the computation
:func:`~espew_integrations.core.verify.verify` performs for each of those keys.
A measuring tool, not part of a verdict, hence the lab.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.ranktest import subset_p_values

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
    return subset_p_values(scores, draws)


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
