"""The map that undoes a thief's isometry (core/stats/align.py), on synthetic rows."""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.stats.align import ALIGN_RATIO, fit_alignment


def rows(n: int = 800, d: int = 32, seed: int = 0) -> np.ndarray:
    """Embedding-like rows: a few strong axes and many weak ones, a shared mean."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(2.0, 0.2, d)
    return unit_rows(rng.standard_normal((n, d)) * scales + 0.5)


def orthonormal(rows_: int, cols: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((rows_, cols)))
    return q


def test_a_rotation_is_undone():
    clean = rows()
    q = orthonormal(32, 32, 1)
    noisy = clean + 0.05 * np.random.default_rng(2).standard_normal(clean.shape)
    alignment = fit_alignment(noisy @ q.T, clean, 32)
    assert alignment is not None and alignment.applied
    assert alignment.identity_fit < 0.5 and alignment.fitted_fit > 0.95
    back = alignment.apply(noisy @ q.T)
    # the map found is the thief's rotation, inverted: it carries the answers home
    assert np.abs(alignment.matrix - q).max() < 0.1
    assert np.mean(np.sum(unit_rows(back) * clean, axis=1)) > 0.95


def test_answers_in_more_dimensions_are_mapped_back():
    clean = rows()
    embed = orthonormal(64, 32, 3)  # an isometry into 64 dimensions
    alignment = fit_alignment(clean @ embed.T, clean, 32)
    assert alignment is not None and alignment.applied
    assert np.isnan(alignment.identity_fit) and alignment.matrix.shape == (64, 32)
    assert np.allclose(alignment.apply(clean @ embed.T), clean, atol=1e-6)
    assert "dimension differs" in alignment.describe()


def test_answers_already_in_the_key_coordinates_are_left_alone():
    clean = rows()
    copy = 0.8 * clean + 0.1 * np.random.default_rng(4).standard_normal(clean.shape)
    alignment = fit_alignment(copy, clean, 32)
    assert alignment is not None and not alignment.applied
    assert alignment.identity_fit >= ALIGN_RATIO * alignment.fitted_fit
    assert alignment.apply(copy) is copy  # untouched, not merely close
    assert alignment.describe().startswith("not applied")


def test_a_small_rotation_stays_below_the_rule_and_a_large_one_is_mapped():
    clean = rows()
    d = clean.shape[1]
    basis = orthonormal(d, d, 5)
    pairs = np.zeros((d, d))
    pairs[np.arange(0, d, 2), np.arange(1, d, 2)] = -1.0
    pairs[np.arange(1, d, 2), np.arange(0, d, 2)] = 1.0
    structure = basis @ pairs @ basis.T
    for angle, mapped in ((0.2, False), (1.2, True)):
        turn = np.cos(angle) * np.eye(d) + np.sin(angle) * structure
        alignment = fit_alignment(clean @ turn.T, clean, d)
        assert alignment is not None and alignment.applied is mapped


def test_failed_rows_are_left_out_and_too_few_rows_give_none():
    clean = rows()
    answers = clean.copy()
    answers[::3] = np.nan
    alignment = fit_alignment(answers, clean, 32)
    assert alignment is not None and alignment.n_rows == len(clean) - len(clean[::3])
    assert fit_alignment(clean[:32], clean[:32], 32) is None  # no more rows than dimensions
    assert fit_alignment(np.full_like(clean, np.nan), clean, 32) is None


def test_mismatched_shapes_are_refused():
    clean = rows()
    with pytest.raises(ValueError, match="matching 2-d arrays"):
        fit_alignment(clean[:-1], clean, 32)
    with pytest.raises(ValueError, match="matching 2-d arrays"):
        fit_alignment(clean[0], clean[0], 32)


def test_a_permutation_with_sign_flips_is_undone_exactly():
    """A permuting thief gets its own permutation back, not a noisy map near it."""
    clean = rows()
    rng = np.random.default_rng(6)
    permutation = np.eye(32)[rng.permutation(32)] * rng.choice([-1.0, 1.0], size=32)[:, None]
    noisy = 0.8 * clean + 0.15 * rng.standard_normal(clean.shape)
    alignment = fit_alignment(noisy @ permutation.T, clean, 32)
    assert alignment is not None and alignment.applied
    assert alignment.kind == "signed permutation" and "signed permutation" in alignment.describe()
    assert np.array_equal(alignment.matrix, permutation)  # exact: permutation.T is its inverse
    rotation = orthonormal(32, 32, 7)
    rotated = fit_alignment(noisy @ rotation.T, clean, 32)
    assert rotated is not None and rotated.kind == "orthonormal map"
