"""Verdicts that last-bit rounding cannot move (issue 57).

A BLAS kernel changes the last bits of a product, never more; these tests play
that part by nudging every input by a few units in the last place, and check that
what a verdict ranks does not move: the clean model's residuals are exactly zero
(ties, p = 1) whatever the nudge, and a real residual keeps its order.
"""

from __future__ import annotations

import doctest

import numpy as np

from espew_integrations.core.audit.decision import p_values
from espew_integrations.core.audit.scores import reference_slope
from espew_integrations.core.ground import stable
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.ground.stable import RESIDUAL_GRID, snap_residual
from espew_integrations.core.mark.field import field_scores
from espew_integrations.core.stats.ranktest import rank_sum_p_value


def nudged(values: np.ndarray, seed: int, ulps: int = 4) -> np.ndarray:
    """``values`` with each element moved by up to ``ulps`` units in its last place."""
    steps = np.random.default_rng(seed).integers(-ulps, ulps + 1, size=values.shape)
    return values + steps * np.spacing(values)


def test_the_stable_module_examples_hold():
    assert doctest.testmod(stable).failed == 0


def test_rounding_noise_snaps_to_an_exact_zero():
    noise = np.random.default_rng(0).standard_normal(1000) * 1e-15
    assert (snap_residual(noise) == 0.0).all()


def test_a_real_residual_keeps_its_order_after_the_snap():
    residual = np.random.default_rng(1).standard_normal(3000) * 1e-3
    assert (np.argsort(snap_residual(residual)) == np.argsort(residual)).all()
    assert np.abs(snap_residual(residual) - residual).max() <= RESIDUAL_GRID / 2


def test_the_reference_slope_is_the_least_squares_slope():
    rng = np.random.default_rng(2)
    reference = rng.standard_normal(500)
    scores = 0.4 * reference + 0.1 * rng.standard_normal(500)
    assert np.isclose(reference_slope(scores, reference), np.polyfit(reference, scores, 1)[0])
    assert reference_slope(scores, np.ones(500)) == 0.0


class _Scores:
    """The two fields :func:`p_values` reads of a word audit's scores."""

    def __init__(self, raw: np.ndarray, reference: np.ndarray) -> None:
        self.raw, self.reference, self.directed = raw, reference, None


def test_the_clean_models_adjusted_p_value_is_one_whatever_the_last_bits():
    """The issue's case: the suspect is the clean model, so raw == reference but for rounding."""
    rng = np.random.default_rng(3)
    reference = 0.2 + 0.05 * rng.standard_normal(400)
    is_trigger = np.zeros(400, dtype=bool)
    is_trigger[rng.choice(400, 20, replace=False)] = True
    scored = np.ones(400, dtype=bool)
    found = {
        p_values(_Scores(nudged(reference, seed), reference), is_trigger, scored, "adjusted")[
            "p_value_adjusted"
        ]
        for seed in range(20)
    }
    assert found == {1.0}


def test_a_copys_adjusted_p_value_does_not_move_with_the_last_bits():
    rng = np.random.default_rng(4)
    reference = 0.2 + 0.05 * rng.standard_normal(400)
    is_trigger = np.zeros(400, dtype=bool)
    is_trigger[rng.choice(400, 20, replace=False)] = True
    raw = 0.6 * reference + 0.01 * rng.standard_normal(400) + 0.01 * is_trigger
    scored = np.ones(400, dtype=bool)
    found = {
        p_values(
            _Scores(nudged(raw, seed), nudged(reference, seed + 99)), is_trigger, scored, "adjusted"
        )["p_value_adjusted"]
        for seed in range(20)
    }
    assert len(found) == 1 and found.pop() < 1e-3


def _field_inputs(seed: int, n: int = 300, dim: int = 24, units: int = 40):
    rng = np.random.default_rng(seed)
    clean = unit_rows(rng.standard_normal((n, dim)))
    directions = unit_rows(rng.standard_normal((n, dim)))
    z = rng.standard_normal((n, units))
    return clean, directions, z


def test_the_clean_models_field_scores_are_exactly_zero_whatever_the_last_bits():
    clean, directions, z = _field_inputs(5)
    for seed in range(10):
        scores = field_scores(nudged(clean, seed), directions, clean, z)
        assert (scores == 0.0).all()


def test_a_copys_field_ranks_do_not_move_with_the_last_bits():
    clean, directions, z = _field_inputs(6)
    drawn = np.zeros(z.shape[1], dtype=bool)
    drawn[:8] = True
    lean = 0.02 * z[:, drawn].sum(axis=1)  # a copy leans along each text's mark direction
    copy = unit_rows(clean + lean[:, None] * directions)
    found = {
        rank_sum_p_value(field_scores(nudged(copy, seed), directions, clean, z), drawn)
        for seed in range(10)
    }
    assert len(found) == 1 and found.pop() < 1e-4
