"""The exact rank test: exact against enumeration, valid by construction."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, rankdata

from espew_integrations.core.ground.errors import InputError
from espew_integrations.core.stats import ranktest
from espew_integrations.core.stats.ranktest import (
    bonferroni_p_value,
    min_p_value,
    rank_sum_p_value,
)
from tests.support import assert_exact_over_every_draw


def enumerate_p(scores, is_trigger):
    ranks = rankdata(scores)
    n = int(is_trigger.sum())
    observed = ranks[is_trigger].sum()
    sums = [sum(c) for c in itertools.combinations(ranks, n)]
    return sum(s >= observed - 1e-9 for s in sums) / len(sums)


@pytest.mark.parametrize("seed", range(8))
def test_p_value_equals_full_enumeration_with_and_without_ties(seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=12)
    if seed % 2:
        scores = np.round(scores, 0)  # heavy ties
    mask = np.zeros(12, bool)
    mask[rng.choice(12, 4, replace=False)] = True
    assert rank_sum_p_value(scores, mask) == pytest.approx(enumerate_p(scores, mask), rel=1e-12)


def test_p_value_agrees_with_scipy_exact_mann_whitney():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=80)
    mask = np.zeros(80, bool)
    mask[:12] = True
    scores[:12] += 0.8
    expected = mannwhitneyu(scores[mask], scores[~mask], alternative="greater", method="exact")
    assert rank_sum_p_value(scores, mask) == pytest.approx(expected.pvalue, rel=1e-9)


def test_extreme_triggers_reach_exactly_one_over_n_choose_k():
    scores = np.arange(200, dtype=float)
    mask = scores >= 180
    assert rank_sum_p_value(scores, mask) == pytest.approx(1 / math.comb(200, 20), rel=1e-12)
    assert min_p_value(200, 20) == pytest.approx(1 / math.comb(200, 20))


@pytest.mark.parametrize(("total", "n"), [(10, 3), (12, 5), (9, 2)])
def test_false_positive_rate_never_exceeds_the_level(total, n):
    # Exhaustively: over ALL trigger subsets of fixed scores, P(p <= a) <= a.
    assert_exact_over_every_draw(np.random.default_rng(total).normal(size=total), n)


def test_degenerate_inputs():
    assert rank_sum_p_value(np.array([1.0, 2.0]), np.array([False, False])) == 1.0
    with pytest.raises(ValueError, match="same length"):
        rank_sum_p_value(np.array([1.0, 2.0]), np.array([True]))
    with pytest.raises(ValueError, match="finite"):
        rank_sum_p_value(np.array([np.nan, 2.0]), np.array([True, False]))


# ---------------------------------------------------------------------- tied scores (issue 10)
def full_table_p(scores, is_trigger):
    """The previous implementation: the whole subset-sum table over doubled mid-ranks.

    The one reference copy: benchmarks/bench_ranktest.py times it against the
    current test, and test_full_table_reference_equals_enumeration checks it.
    """
    doubled = np.rint(2 * rankdata(scores)).astype(np.int64)
    n = int(is_trigger.sum())
    values = sorted(int(v) for v in doubled)
    top = sum(values[-n:])
    table = np.zeros((n + 1, top + 1))
    table[0, 0] = 1.0
    for seen, v in enumerate(values, start=1):
        j_max = min(seen, n)
        table[1 : j_max + 1, v:] += table[0:j_max, : top + 1 - v]
    observed = int(doubled[is_trigger].sum())
    return float(table[n, observed:].sum()) / float(table[n].sum())


@pytest.mark.parametrize("seed", range(4))
def test_full_table_reference_equals_enumeration(seed):
    rng = np.random.default_rng(200 + seed)
    scores = rng.integers(0, 4, size=12).astype(float)
    mask = np.zeros(12, bool)
    mask[rng.choice(12, 4, replace=False)] = True
    assert full_table_p(scores, mask) == pytest.approx(enumerate_p(scores, mask), rel=1e-12)


def test_subset_p_values_equal_one_test_per_subset_with_and_without_ties():
    rng = np.random.default_rng(7)
    for scores in (rng.normal(size=40), np.round(rng.normal(size=40), 1)):
        subsets = np.argsort(rng.random((25, 40)), axis=1)[:, :6]
        expected = []
        for row in subsets:
            mask = np.zeros(40, bool)
            mask[row] = True
            expected.append(rank_sum_p_value(scores, mask))
        got = ranktest.subset_p_values(scores, subsets)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-15)


def tied_case(rng, total, n, shift, tied_share=0.3):
    scores = rng.normal(size=total)
    tied = rng.choice(total, int(tied_share * total), replace=False)
    scores[tied] = np.round(scores[tied], 1)
    mask = np.zeros(total, bool)
    mask[rng.choice(total, n, replace=False)] = True
    scores[mask] += shift
    return scores, mask


@pytest.mark.parametrize("seed", range(6))
def test_tied_p_value_equals_enumeration_over_tie_groups(seed):
    rng = np.random.default_rng(100 + seed)
    scores = rng.integers(0, 5, size=14).astype(float)  # a few large groups
    mask = np.zeros(14, bool)
    mask[rng.choice(14, 5, replace=False)] = True
    assert rank_sum_p_value(scores, mask) == pytest.approx(enumerate_p(scores, mask), rel=1e-12)


@pytest.mark.parametrize(("total", "n"), [(60, 6), (200, 20), (500, 20)])
@pytest.mark.parametrize("shift", [2.5, 0.8, 0.0, -0.5])
@pytest.mark.parametrize("route", ["chosen", "exact", "spectral"])
def test_tied_p_value_equals_the_full_table(total, n, shift, route, monkeypatch):

    if route == "exact":
        monkeypatch.setattr(ranktest, "_EXACT_CELL_BUDGET", float("inf"))
    elif route == "spectral":
        monkeypatch.setattr(ranktest, "_EXACT_CELL_BUDGET", -1)
        monkeypatch.setattr(ranktest, "_SPECTRAL_FLOOR", 0.0)
    ranktest._spectral_tails.cache_clear()
    scores, mask = tied_case(np.random.default_rng(total + n), total, n, shift)
    expected = full_table_p(scores, mask)
    got = rank_sum_p_value(scores, mask)
    if route == "spectral":  # absolute error of the transforms, ~1e-15
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-13)
    else:
        assert got == pytest.approx(expected, rel=1e-12)


def test_tied_tail_of_one_subset_is_exact():
    # The 20 triggers hold the 20 distinct top scores; everything else is tied
    # in groups: exactly one subset reaches the observed sum.
    scores = np.repeat(np.arange(99, dtype=float), 20)[:1980]
    scores = np.concatenate([scores, 1000.0 + np.arange(20)])
    mask = scores >= 1000
    assert rank_sum_p_value(scores, mask) == pytest.approx(1 / math.comb(2000, 20), rel=1e-12)


@pytest.mark.parametrize("shift", [3.0, 1.0, 0.0])
def test_tied_p_value_at_2000_words_is_fast(shift, monkeypatch):
    # Fast by construction: the exact count runs only within its cell budget, or for a
    # tail below the spectral floor; the rest is the spectral tail. The timing itself is
    # benchmarks/bench_ranktest.py's.
    costs, counted = [], []
    exact_cost, count_within = ranktest._exact_cost, ranktest._count_within

    def spy_cost(*args):
        costs.append(exact_cost(*args))
        return costs[-1]

    def spy_count(*args):
        counted.append(True)
        return count_within(*args)

    monkeypatch.setattr(ranktest, "_exact_cost", spy_cost)
    monkeypatch.setattr(ranktest, "_count_within", spy_count)
    scores, mask = tied_case(np.random.default_rng(7), 2000, 20, shift)
    ranktest._spectral_tails.cache_clear()
    p = rank_sum_p_value(scores, mask)
    assert 0.0 <= p <= 1.0
    assert len(costs) == 1
    assert not counted or costs[0] <= ranktest._EXACT_CELL_BUDGET or p < ranktest._SPECTRAL_FLOOR


@pytest.mark.parametrize("seed", range(5))
def test_doubled_mid_ranks_are_twice_scipys_average_ranks(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, size=40).astype(float)  # many ties
    scores[:5] = rng.random(5)  # and some singletons
    doubled = ranktest.doubled_mid_ranks(scores)
    assert doubled.dtype == np.int64
    np.testing.assert_array_equal(doubled, 2 * rankdata(scores))
    assert ranktest.doubled_mid_ranks(np.array([])).shape == (0,)


def test_bonferroni_p_value_is_the_smallest_times_the_family_size_capped_at_one():
    assert bonferroni_p_value([0.5, 1e-8, 0.2, 1.0]) == pytest.approx(4e-8)
    assert bonferroni_p_value([0.3, 0.6]) == 0.6
    assert bonferroni_p_value([0.9]) == 0.9
    assert bonferroni_p_value([0.4, 0.5, 0.6]) == 1.0
    for bad in ([], [0.1, 1.5], [float("nan")], [[0.1]]):
        with pytest.raises(InputError, match="p-values are a non-empty list"):
            bonferroni_p_value(bad)
