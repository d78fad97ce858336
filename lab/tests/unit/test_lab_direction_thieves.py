"""The regime-slope estimator finds a planted ESpeW target, and finds nothing in clean rows."""

from __future__ import annotations

import numpy as np
import pytest

from espew_lab.direction_thieves import (
    ProjectedCopy,
    project_out,
    regime_masks,
    regime_slope_directions,
    regime_slopes,
    residual_directions,
    subspace_cosine,
)

DIM, ROWS, ALPHA, STRENGTH = 48, 6000, 0.75, 0.3


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def _world(seed: int = 0):
    """Clean unit rows with correlated coordinates, a target like an embedding, a field."""
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((DIM, DIM)) / np.sqrt(DIM) + np.eye(DIM)
    mean = rng.standard_normal(DIM) * 0.5
    clean = _unit(rng.standard_normal((ROWS, DIM)) @ mixing + mean)
    target = _unit(rng.standard_normal(DIM) @ mixing + mean)
    field = rng.standard_normal(DIM)
    return rng, clean, target, field


def _marked(clean: np.ndarray, target: np.ndarray, field: np.ndarray) -> np.ndarray:
    """The field mark by the public ESpeW rule: ``unit(e + g(e) * D(e))``, ``D`` moving the
    row's smallest ``ALPHA * d`` coordinates toward the target."""
    centred = clean - clean.mean(axis=0)
    projection = centred @ field
    gain = np.clip(projection / projection.std() * 0.5, -3, 3)
    written = clean.copy()
    mask = regime_masks(clean, ALPHA)
    written[mask] += STRENGTH * (np.broadcast_to(target, clean.shape)[mask] - clean[mask])
    displacement = _unit(written) - clean
    return _unit(clean + gain[:, None] * displacement)


def _predictions(rng, clean: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """A thief's linear copy: least squares from noisy features of the clean rows."""
    features = clean + 0.05 * rng.standard_normal(clean.shape)
    design = np.hstack([features, np.ones((len(features), 1))])
    coef, *_ = np.linalg.lstsq(design, answers, rcond=None)
    return _unit(design @ coef)


def test_slopes_match_one_regression_per_pair():
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 6))
    masks = regime_masks(rows, 0.5)
    difference, variance = regime_slopes(rows, masks)
    for j in range(6):
        for k in range(6):
            if j == k:
                continue
            inside, outside = masks[:, j], ~masks[:, j]
            slope_in = np.polyfit(rows[inside, j], rows[inside, k], 1)[0]
            slope_out = np.polyfit(rows[outside, j], rows[outside, k], 1)[0]
            assert difference[j, k] == pytest.approx(slope_in - slope_out, rel=1e-9, abs=1e-12)
            assert 0 < variance[j, k] < np.inf
    assert np.all(np.diag(difference) == 0)


def test_regime_masks_follow_the_public_rule():
    rows = np.array([[0.1, -5.0, 0.3, 2.0], [-3.0, 0.2, 0.0, 1.0]])
    expected = [[True, False, True, False], [False, True, True, False]]
    assert regime_masks(rows, 0.5).tolist() == expected


def test_the_estimate_finds_a_planted_target():
    rng, clean, target, field = _world()
    answers = _marked(clean, target, field)
    estimate = regime_slope_directions(answers, _predictions(rng, clean, answers), alpha=ALPHA)
    assert abs(estimate[0] @ target) > 0.8


def test_clean_rows_give_no_target():
    rng, clean, target, _ = _world()
    estimate = regime_slope_directions(clean, _predictions(rng, clean, clean), alpha=ALPHA)
    # a random direction of 48 has |cos| about 0.12 to any fixed one
    assert abs(estimate[0] @ target) < 0.35


def test_projecting_out_removes_the_span():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((50, 8))
    directions = rng.standard_normal((3, 8))
    left = project_out(rows, directions)
    assert np.allclose(left @ directions.T, 0, atol=1e-10)
    assert subspace_cosine(directions[0] + directions[2], directions) == pytest.approx(1.0)
    copy = ProjectedCopy(lambda texts: rows[: len(texts)], directions)
    assert np.allclose(copy(["a", "b"]), left[:2])


def test_residual_axes_find_what_the_copy_missed():
    rng = np.random.default_rng(2)
    predictions = rng.standard_normal((2000, 16))
    hidden = _unit(rng.standard_normal(16))
    answers = predictions + np.outer(rng.standard_normal(2000), hidden)
    axes = residual_directions(answers, predictions, n_directions=2)
    assert abs(axes[0] @ hidden) > 0.99
    assert abs(axes[0] @ axes[1]) < 1e-10


def test_the_moving_target_prototype_meets_its_budget_and_spreads_its_mark():
    from espew_lab.moving_target import MovingTarget, fit_strength

    _, clean, _, _ = _world(4)
    energy_in_top_axis = {}
    for design in ("fixed", "map", "regions"):
        mark = MovingTarget(design, clean[:2000], seed=1)
        mark.strength = fit_strength(mark, clean[:2000], 0.995)
        answers = mark(clean)
        assert np.mean(np.sum(answers * clean, axis=1)) == pytest.approx(0.995, abs=2e-3)
        moved = answers - clean
        spectrum = np.linalg.svd(moved - moved.mean(axis=0), compute_uv=False) ** 2
        energy_in_top_axis[design] = spectrum[0] / spectrum.sum()
    # one target puts most of the mark on one axis; a row-dependent target does not
    assert energy_in_top_axis["fixed"] > 0.5
    assert energy_in_top_axis["map"] < energy_in_top_axis["fixed"] / 2
    assert energy_in_top_axis["regions"] < energy_in_top_axis["fixed"] / 2
