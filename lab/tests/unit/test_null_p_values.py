"""The lab's null p-values (fresh trigger draws scored by the core's exact rank test)
agree with the core's per-key test, and are uniform enough under the null."""

from __future__ import annotations

import math

import numpy as np
import pytest

from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_lab.null_study import null_p_values
from tests.unit.test_ranktest import full_table_p, tied_case


def test_null_p_values_match_the_per_key_test():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=150)
    pvals = null_p_values(scores, 15, 50, np.random.default_rng(4))
    draw_rng = np.random.default_rng(4)
    draws = np.argpartition(draw_rng.random((50, 150)), 14, axis=1)[:, :15]
    for p, draw in zip(pvals, draws, strict=True):
        mask = np.zeros(150, bool)
        mask[draw] = True
        assert p == pytest.approx(rank_sum_p_value(scores, mask), rel=1e-9)


def test_null_p_values_are_uniform_enough():
    pvals = null_p_values(
        np.random.default_rng(5).normal(size=200), 20, 20_000, np.random.default_rng(6)
    )
    for level in (0.5, 0.1, 0.01):
        assert abs((pvals <= level).mean() - level) < 4 * math.sqrt(level / 20_000) + 1e-3


def test_tied_null_p_values_match_the_per_key_test():
    rng = np.random.default_rng(8)
    scores, _ = tied_case(rng, 300, 15, 0.0)
    pvals = null_p_values(scores, 15, 40, np.random.default_rng(9))
    draws = np.argpartition(np.random.default_rng(9).random((40, 300)), 14, axis=1)[:, :15]
    for p, draw in zip(pvals, draws, strict=True):
        mask = np.zeros(300, bool)
        mask[draw] = True
        assert p == pytest.approx(full_table_p(scores, mask), rel=1e-9, abs=1e-13)
