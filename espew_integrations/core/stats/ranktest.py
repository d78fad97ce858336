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

Tied scores (a suspect that rounds its answers) change the null distribution
with every score vector, so it cannot be cached by (N, n) as the untied one is,
and rebuilding the whole subset-sum table per call takes seconds at thousands
of words (``benchmarks/bench_ranktest.py``). Two cheaper routes give the same
numbers:

- The tail is counted directly from the top (:func:`_count_within`): only
  subsets whose *shortfall* from the n largest values fits the observed one
  are counted, items come grouped by tie (binomial weights) and states that
  can no longer fit are never updated. Exact, and fast whenever the p-value is
  small, which is where exactness matters.
- When that tail is wide (p-values that are not small), the whole conditional
  distribution comes from its generating function, prod_g (1 + x y^v_g)^m_g,
  evaluated on the unit circle with FFTs (:func:`_spectral_tails`). Its
  absolute error is ~1e-15 (rounding of the transforms, measured against the
  exact count), so any result below :data:`_SPECTRAL_FLOOR` is recomputed
  exactly: a reported p-value below 1e-5 is always an exact count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..ground.errors import InputError

__all__ = [
    "bonferroni_p_value",
    "doubled_mid_ranks",
    "min_p_value",
    "rank_sum_p_value",
    "rank_sum_tails",
    "subset_p_values",
]

#: Below this, a p-value is always recomputed by the exact count (the spectral
#: route's absolute error of ~1e-15 is then at most ~1e-10 of the value).
_SPECTRAL_FLOOR = 1e-5
#: Table cells the exact tail count may update before the spectral route is
#: cheaper: a bound on the exact route's time, so a wide tail is never counted cell by cell.
_EXACT_CELL_BUDGET = 30_000_000


def bonferroni_p_value(p_values: Sequence[float]) -> float:
    """One p-value for a family of exact tests of one suspect: ``min(1, m * min(p))``.

    Exact under any dependence between the tests: an innocent reaches ``level`` in
    any of the ``m`` with probability at most ``level``. For audits of one suspect
    from several accounts' traffic, one per account and the pooled one alike
    (docs/verification.md, "Accounts a thief cannot split").

    >>> bonferroni_p_value([0.2, 0.001, 0.5])
    0.003
    """
    found = np.asarray(p_values, dtype=np.float64)
    if found.ndim != 1 or not len(found) or not np.all((found >= 0) & (found <= 1)):
        raise InputError(f"p-values are a non-empty list of numbers in [0, 1], got {p_values!r}")
    return float(min(1.0, len(found) * found.min()))


def min_p_value(n_words: int, n_triggers: int) -> float:
    """The smallest p-value the test can reach: 1 / C(n_words, n_triggers)."""
    return 1.0 / math.comb(n_words, n_triggers)


def doubled_mid_ranks(scores: np.ndarray) -> np.ndarray:
    """Twice each score's rank (1 = smallest), ties sharing the mean of their ranks.

    Doubled, every mid-rank is an integer (``2 * below + size + 1`` for a tie
    group of ``size`` with ``below`` scores under it), so rank sums are counted
    exactly. Plain numpy, so importing the package (and every CLI start) does
    not pay for ``scipy.stats``.

    >>> doubled_mid_ranks(np.array([0.3, 0.1, 0.3, 0.2])).tolist()
    [7, 2, 7, 4]
    """
    _, inverse, sizes = np.unique(
        np.asarray(scores, dtype=np.float64), return_inverse=True, return_counts=True
    )
    below = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return (2 * below + sizes + 1)[inverse.reshape(-1)].astype(np.int64)


def rank_sum_p_value(scores: np.ndarray, is_trigger: np.ndarray) -> float:
    """Exact P(rank sum of a uniform random n-subset >= observed), n = #triggers.

    >>> rank_sum_p_value(np.array([0.9, 0.8, 0.1, 0.2, 0.3]), np.array([1, 1, 0, 0, 0], bool))
    0.1
    """
    scores = np.asarray(scores, dtype=np.float64)
    is_trigger = np.asarray(is_trigger, dtype=bool)
    if scores.ndim != 1 or scores.shape != is_trigger.shape:
        raise InputError("scores and is_trigger must be 1-D arrays of the same length")
    if not np.isfinite(scores).all():
        raise InputError("scores must be finite")
    n = int(is_trigger.sum())
    total = scores.size
    if n == 0 or n == total:
        return 1.0
    doubled = doubled_mid_ranks(scores)
    observed = int(doubled[is_trigger].sum())
    values, sizes = np.unique(doubled, return_counts=True)
    if values.size == total:  # no ties: ranks are 1..N, cache by (N, n)
        return _tail(_untied_counts(total, n), observed // 2)
    return _tied_p_value(values, sizes, n, observed)


def subset_p_values(scores: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """:func:`rank_sum_p_value` for many trigger sets over the same scores, vectorised.

    ``subsets`` is an ``(n_sets, n)`` array of word indices, one candidate
    trigger set per row. The null distribution depends only on the scores' tie
    structure, so it is computed once and every set is a lookup; a set whose
    p-value falls below :data:`_SPECTRAL_FLOOR` on the tied route gets the
    exact count, exactly as a single verification would report it. This is
    what makes null studies of 10,000+ trigger draws take seconds.

    >>> scores = np.array([0.9, 0.8, 0.1, 0.2, 0.3])
    >>> subset_p_values(scores, np.array([[0, 1], [2, 3]])).tolist()
    [0.1, 1.0]
    """
    scores = np.asarray(scores, dtype=np.float64)
    subsets = np.asarray(subsets, dtype=np.int64)
    total, n = scores.size, subsets.shape[1]
    doubled = doubled_mid_ranks(scores)
    _, sizes = np.unique(doubled, return_counts=True)
    if sizes.size == total:  # no ties: the cached (N, n) distribution
        counts = _untied_counts(total, n)
        tails = np.cumsum(counts[::-1])[::-1]  # tails[s] = #subsets with sum >= s
        ranks = doubled[subsets].sum(axis=1) // 2  # untied: doubled ranks are even
        return np.minimum(1.0, tails[ranks] / counts.sum())
    tails = _spectral_tails(tuple(int(m) for m in sizes), n)
    observed = doubled[subsets].sum(axis=1)
    p_values = np.where(observed < tails.size, tails[np.minimum(observed, tails.size - 1)], 0.0)
    for index in np.flatnonzero(p_values < _SPECTRAL_FLOOR):
        mask = np.zeros(total, dtype=bool)
        mask[subsets[index]] = True
        p_values[index] = rank_sum_p_value(scores, mask)
    return p_values


def rank_sum_tails(values: tuple[int, ...] | int, size: int) -> np.ndarray:
    """tails[s] = P(doubled rank sum of a uniform ``size``-subset >= s).

    ``values`` is the number of untied words (ranks 1..N, the cached table of
    :func:`rank_sum_p_value`) or the doubled mid-ranks with ties
    (:func:`doubled_mid_ranks`). One table serves every subset of that size over
    the same scores, which is what lets a trace test thousands of tenant layers
    with one count. The tail is summed from the top, never as 1 - head, so tiny
    p-values stay exact.
    """
    if isinstance(values, int):
        by_sum = _untied_counts(values, size)  # indexed by the plain rank sum
        counts = np.zeros(2 * by_sum.size - 1)
        counts[::2] = by_sum  # doubled sums of untied ranks are even
    else:
        counts = _subset_sum_counts(values, size)
    tails = np.cumsum(counts[::-1])[::-1] / counts.sum()
    return np.minimum(tails, 1.0)


def _tied_p_value(values: np.ndarray, sizes: np.ndarray, n: int, observed: int) -> float:
    """P(sum of n of the doubled mid-ranks ``values`` (with multiplicities) >= observed)."""
    weights = int(values[-1]) - values[::-1]  # shortfall from the largest value, ascending
    group_sizes = sizes[::-1]
    budget = n * int(values[-1]) - observed  # a subset reaches ``observed`` iff shortfall <= this
    total = math.comb(int(sizes.sum()), n)
    if _exact_cost(weights, group_sizes, n, budget) > _EXACT_CELL_BUDGET:
        tails = _spectral_tails(tuple(int(m) for m in sizes), n)
        p = float(tails[observed]) if observed < tails.size else 0.0
        if p >= _SPECTRAL_FLOOR:
            return p
    return min(1.0, _count_within(weights, group_sizes, n, budget) / total)


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


# ---------------------------------------------------------------------- exact tail, from the top
def _exact_cost(weights: np.ndarray, sizes: np.ndarray, n: int, budget: int) -> float:
    """Upper estimate of the table cells :func:`_count_within` updates."""
    if budget < 0:
        return 0.0
    w = weights[weights <= budget].astype(np.float64)
    w_next = np.append(weights[1:], budget + 1)[: w.size].astype(np.float64)
    rows = np.minimum(n - 1, budget // np.maximum(w_next, 1.0))
    cols = np.clip(budget - w_next, 0.0, None)
    steps = np.minimum(sizes[: w.size], n)
    return float((rows * cols * steps).sum())


def _count_within(weights: np.ndarray, sizes: np.ndarray, n: int, budget: int) -> float:
    """Number of n-subsets whose total weight is <= ``budget`` (exact, float64).

    Items come in groups: ``sizes[g]`` items of weight ``weights[g]``
    (ascending, non-negative); taking c of a group's m items can be done in
    C(m, c) ways. ``table[j, s]`` counts j-subsets of the groups seen so far
    with weight s. Only the states that can still fit are updated: after a
    group, the n - j items still to take weigh at least ``w_next`` each, so
    row j needs s <= budget - (n - j) * w_next, and a row whose remaining items
    cannot fit at all is skipped. Cells beyond those limits are left stale;
    they can never reach weight <= budget, so they are never counted. A subset
    is counted (``found``) the moment its n-th item is taken. Every operation
    adds non-negative numbers: the count is exact to rounding, however small.
    """
    if budget < 0:
        return 0.0
    table = np.zeros((n, budget + 1), dtype=np.float64)
    table[0, 0] = 1.0
    reach = np.full(n, -1, dtype=np.int64)  # largest weight with a count, per row
    reach[0] = 0
    found = 0.0
    n_groups = len(weights)
    for g in range(n_groups):
        w, m = int(weights[g]), int(sizes[g])
        if w > budget:
            break
        w_next = int(weights[g + 1]) if g + 1 < n_groups else budget + 1
        before = reach.copy()
        source = table.copy() if m > 1 else table
        first_row = n - budget // w_next if w_next > 0 else 0  # rows that can still fit
        for c in range(1, min(m, n) + 1):
            shift = c * w
            if shift > budget:
                break
            coef = float(math.comb(m, c))
            last = min(int(before[n - c]), budget - shift)
            if before[n - c] >= 0 and last >= 0:  # completes a subset
                found += coef * float(source[n - c, : last + 1].sum())
            lo = max(c, first_row)
            if lo > n - 1:
                continue
            alive = before[lo - c : n - c]
            top = min(int(alive.max()), budget - w_next - shift)
            if top < 0:
                continue
            update = source[lo - c : n - c, : top + 1]
            if m > 1:
                update = coef * update
            # numpy evaluates an overlapping in-place update as if the right-hand
            # side were copied first: the 0/1 rule when ``source`` is ``table``.
            table[lo:, shift : shift + top + 1] += update
            grown = np.where(alive >= 0, np.minimum(alive + shift, budget), -1)
            np.maximum(reach[lo:], grown, out=reach[lo:])
    return found


# ---------------------------------------------------------------------- whole distribution, FFT
@lru_cache(maxsize=8)
def _spectral_tails(sizes: tuple[int, ...], n: int) -> np.ndarray:
    """tails[s] = P(sum of a uniform n-subset of the doubled mid-ranks >= s).

    The tie groups (in rank order) fix the doubled mid-ranks v_g = 2 R_g + m_g + 1
    (R_g items below the group). The count of n-subsets with sum s is the
    coefficient of x^n y^s in prod_g (1 + x y^v_g)^m_g. On the unit circle
    y = w^l its logarithm is sum_k (-1)^(k-1) x^k P_k(l) / k with
    P_k(l) = sum_g m_g w^(l k v_g), one FFT of a histogram per k; the x^n
    coefficient of the exponential follows from the power-series recurrence
    e_j = (1/j) sum_k k a_k e_(j-k), and one inverse FFT gives the counts.
    O(n^2 L) for a transform length L ~ 2nN instead of the O(N n L) table.
    Cached by the tie structure: a null study reuses it across trigger draws.
    """
    from scipy.fft import irfft, next_fast_len, rfft  # only tied scores need it

    group = np.asarray(sizes, dtype=np.int64)
    below = np.concatenate(([0], np.cumsum(group)[:-1]))
    values = 2 * below + group + 1
    top = int(np.sort(np.repeat(values, group))[-n:].sum())
    length = next_fast_len(top + 1, real=True)  # >= top + 1: no wrap-around
    spectra = np.empty((n, length // 2 + 1), dtype=np.complex128)
    for k in range(1, n + 1):  # k a_k = (-1)^(k-1) P_k
        histogram = np.bincount((k * values) % length, weights=group, minlength=length)
        spectra[k - 1] = rfft(histogram)
        if k % 2 == 0:
            spectra[k - 1] *= -1
    # reverse[n - j] = e_j, so e_(j-1), ..., e_0 are one forward slice.
    reverse = np.empty((n + 1, length // 2 + 1), dtype=np.complex128)
    reverse[n] = 1.0
    for j in range(1, n + 1):
        reverse[n - j] = np.einsum("kl,kl->l", spectra[:j], reverse[n - j + 1 :])
        reverse[n - j] /= j
    counts = irfft(reverse[0], length)[: top + 1]
    tails = np.cumsum(counts[::-1])[::-1] / math.comb(int(group.sum()), n)
    np.clip(tails, 0.0, 1.0, out=tails)
    tails.setflags(write=False)
    return tails
