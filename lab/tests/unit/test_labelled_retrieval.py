"""labelled_retrieval: nDCG@k and recall@k against relevance labels, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from espew_lab.metrics import labelled_retrieval


def _points(*angles: float) -> np.ndarray:
    """Unit vectors in the plane at these angles (degrees): cosine ranks by angle."""
    radians = np.radians(angles)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_figures_match_the_definitions():
    queries = _points(0, 90)
    # Passages by angle; labels say which query each is relevant to.
    passages = _points(5, 10, 60, 80, 85, 170)
    labels = np.array([1, 0, 0, 1, 1, 0])
    out = labelled_retrieval(queries, passages, labels, k=2)
    # Query 0 ranks 5 (q1), 10 (q0): one hit at rank 2 of its 3 relevant.
    # Query 1 ranks 85 (q1), 80 (q1): two hits, both ideal.
    ndcg_0 = (1 / np.log2(3)) / (1 + 1 / np.log2(3))
    assert out["ndcg@2"] == pytest.approx((ndcg_0 + 1.0) / 2)
    assert out["recall@2"] == pytest.approx((1 / 3 + 2 / 3) / 2)


def test_a_perfect_ranking_scores_one_and_scaling_changes_nothing():
    queries = _points(0, 90)
    passages = _points(1, 2, 88, 89)
    labels = np.array([0, 0, 1, 1])
    assert labelled_retrieval(queries, passages, labels) == {"ndcg@10": 1.0, "recall@10": 1.0}
    assert labelled_retrieval(3 * queries, 0.5 * passages, labels, k=1) == {
        "ndcg@1": 1.0,
        "recall@1": 0.5,
    }


def test_a_query_without_a_relevant_passage_is_refused():
    with pytest.raises(ValueError, match="at least one relevant passage"):
        labelled_retrieval(_points(0, 90), _points(1, 2), np.array([0, 0]))
