"""The exact one-sided rank test behind every verdict.

Null hypothesis: the suspect never learned the watermark. Then its score for
each band word cannot depend on which band words the key drew as triggers, and
since the draw was uniform, the triggers' ranks among all scored words are a
uniformly random n-subset of the ranks. The p-value is the exact fraction of
all C(N, n) subsets whose rank sum is at least the triggers' rank sum
(Mann-Whitney / Wilcoxon rank-sum, exact null, ties handled by mid-ranks and
conditioning on them). It is computed by counting subsets, never from a normal
approximation, so tiny p-values are exact, and P(p <= a) <= a for every a
under the null: the false-positive rate holds by construction.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.stats import rankdata

__all__ = ["min_p_value", "rank_sum_p_value"]


def min_p_value(n_words: int, n_triggers: int) -> float:
    """The smallest p-value the test can reach: 1 / C(n_words, n_triggers)."""
    return 1.0 / math.comb(n_words, n_triggers)


def rank_sum_p_value(scores: np.ndarray, is_trigger: np.ndarray) -> float:
    """Exact P(rank sum of a uniform random n-subset >= observed), n = #triggers.

    >>> rank_sum_p_value(np.array([0.9, 0.8, 0.1, 0.2, 0.3]), np.array([1, 1, 0, 0, 0], bool))
    0.1
    """
    scores = np.asarray(scores, dtype=np.float64)
    is_trigger = np.asarray(is_trigger, dtype=bool)
    if scores.ndim != 1 or scores.shape != is_trigger.shape:
        raise ValueError("scores and is_trigger must be 1-D arrays of the same length")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    n = int(is_trigger.sum())
    total = scores.size
    if n == 0 or n == total:
        return 1.0
    doubled = np.rint(2 * rankdata(scores)).astype(np.int64)  # mid-ranks, times 2
    observed = int(doubled[is_trigger].sum())
    if np.unique(doubled).size == total:  # no ties: ranks are 1..N, cache by (N, n)
        return _tail(_untied_counts(total, n), observed // 2)
    values = tuple(sorted(int(v) for v in doubled))
    return _tail(_subset_sum_counts(values, n), observed)


def _tail(counts: np.ndarray, observed: int) -> float:
    if observed >= counts.size:
        return 0.0
    # Sum the tail itself (small numbers), never 1 - head: exact for tiny p.
    tail = float(counts[observed:].sum())
    return min(1.0, tail / float(counts.sum()))


@lru_cache(maxsize=64)
def _untied_counts(total: int, n: int) -> np.ndarray:
    counts = _subset_sum_counts(tuple(range(1, total + 1)), n)
    counts.setflags(write=False)
    return counts


def _subset_sum_counts(values: tuple[int, ...], n: int) -> np.ndarray:
    """counts[s] = number of n-subsets of ``values`` whose sum is s (float64).

    0/1-knapsack dynamic programme over the items; ``table[j, s]`` counts
    j-subsets of the items seen so far with sum s. Every update adds
    non-negative numbers, so the relative error stays at machine precision even
    for counts near C(N, n) ~ 1e27 and tails of 1.
    """
    top = sum(sorted(values)[-n:])
    table = np.zeros((n + 1, top + 1), dtype=np.float64)
    table[0, 0] = 1.0
    for seen, v in enumerate(values, start=1):
        j_max = min(seen, n)
        # numpy evaluates an overlapping in-place update as if the right-hand
        # side were copied first, which is the 0/1 (use each item once) rule.
        table[1 : j_max + 1, v:] += table[0:j_max, : top + 1 - v]
    return table[n]
