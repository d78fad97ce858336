"""The spectral thief: ICA finds a mark in low-variance directions, not one in the data's spread."""

from __future__ import annotations

import numpy as np
import pytest

from espew_lab.spectral import (
    BIMODAL_THRESHOLD,
    _displaced_side,
    _minority_split,
    bimodality,
    find_displaced_rows,
)

DIM, ROWS, MARKED_SHARE = 16, 2000, 0.15


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows with a decaying spectrum (sd 1 down to 0.01), the marked mask, and the axes' sds."""
    rng = np.random.default_rng(seed)
    sds = np.geomspace(1.0, 0.01, DIM)
    rows = rng.standard_normal((ROWS, DIM)) * sds
    marked = rng.random(ROWS) < MARKED_SHARE
    return rows, marked, sds


def _precision_recall(flagged: np.ndarray, marked: np.ndarray) -> tuple[float, float]:
    hits = np.sum(flagged & marked)
    return hits / max(flagged.sum(), 1), hits / marked.sum()


def test_a_mark_in_the_low_variance_directions_is_found_row_by_row():
    rows, marked, _ = _data()
    direction = np.zeros(DIM)
    direction[-4:] = 1 / 2  # the four smallest-variance axes (sd <= 0.03)
    rows[marked] += 0.1 * direction
    finding = find_displaced_rows(rows, seed=0)
    precision, recall = _precision_recall(finding.flagged, marked)
    assert finding.found and finding.bimodality[0] > BIMODAL_THRESHOLD
    assert precision > 0.95 and recall > 0.95


def test_the_targeted_search_past_the_top_axes_finds_the_low_variance_mark_too():
    rows, marked, _ = _data()
    direction = np.zeros(DIM)
    direction[-4:] = 1 / 2
    rows[marked] += 0.1 * direction
    finding = find_displaced_rows(rows, seed=0, skip_top=8)
    precision, recall = _precision_recall(finding.flagged, marked)
    assert finding.found and precision > 0.95 and recall > 0.95


def test_the_same_mark_in_the_high_variance_directions_is_not_found():
    rows, marked, _ = _data()
    direction = np.zeros(DIM)
    direction[:4] = 1 / 2  # the four largest-variance axes (sd >= 0.4)
    rows[marked] += 0.1 * direction
    finding = find_displaced_rows(rows, seed=0)
    assert not finding.found and finding.best_bimodality < BIMODAL_THRESHOLD
    assert not finding.flagged.any()


def test_gaussian_answers_flag_nothing_and_the_search_is_deterministic():
    rows, _, _ = _data(seed=1)
    first, second = (find_displaced_rows(rows, seed=3, max_iter=100) for _ in range(2))
    assert not first.found and not first.flagged.any()
    assert first.best_bimodality == second.best_bimodality
    assert first.components == second.components == ()


def test_bimodality_is_a_third_for_normal_columns_and_near_one_for_two_separate_groups():
    rng = np.random.default_rng(0)
    normal = rng.standard_normal((20_000, 1))
    groups = np.r_[rng.normal(0, 1, 17_000), rng.normal(20, 1, 3_000)][:, None]
    assert bimodality(normal)[0] == pytest.approx(1 / 3, abs=0.02)
    assert bimodality(groups)[0] > 0.8


def test_the_split_takes_the_minority_side_of_the_widest_gap():
    values = np.array([0.0, 0.1, -0.1, 0.05, 5.0, 5.1, 0.02, -0.03])
    assert _minority_split(values).tolist() == [False] * 4 + [True, True] + [False] * 2
    assert _minority_split(-values).tolist() == _minority_split(values).tolist()


def test_the_cut_is_set_by_the_majority_so_the_minority_near_it_is_flagged_too():
    rng = np.random.default_rng(0)
    majority = rng.normal(0.0, 1.0, 900)
    minority = np.r_[rng.normal(12.0, 1.0, 95), [5.0, 5.5, 6.0, 6.5, 7.0]]  # a tail toward it
    values = np.r_[majority, minority]
    flagged = _displaced_side(values, margin=4.0)
    assert flagged[900:].all()  # the midpoint cut (~6) would miss 5.0 and 5.5
    assert flagged[:900].sum() <= 2
    assert _displaced_side(-values, margin=4.0).tolist() == flagged.tolist()


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (np.ones(10), "2-d array"),
        (np.ones((20, 16)), "at least twice as many answers as dimensions"),
        (np.full((100, 4), np.nan), "NaN or infinite"),
    ],
)
def test_bad_answers_are_refused_by_name(answers, message):
    with pytest.raises(ValueError, match=message):
        find_displaced_rows(answers)


@pytest.mark.parametrize("skip_top", [-1, 15])
def test_a_skip_that_leaves_too_few_directions_is_refused(skip_top):
    rows, _, _ = _data()
    with pytest.raises(ValueError, match="skip_top must be between 0 and 14"):
        find_displaced_rows(rows, skip_top=skip_top)
