"""The numbers in every lab cell: harmlessness (quality) and detection.

- :func:`downstream_accuracy`: a two-layer MLP classifier on the labels, the
  paper's ACC ("Details of Metrics"), on a fixed seeded train/test split;
- :func:`mean_cosine`: mean cos(clean, watermarked), all rows or marked rows;
- :func:`retrieval_overlap`: how many of each query's top-10 neighbours
  survive when the corpus is embedded by the watermarked (or attacked) service;
- :func:`copy_fidelity`: how close a stolen copy is to the victim on held-out texts;
- :func:`labelled_retrieval`: nDCG@k and recall@k of cosine search against relevance
  labels (each passage relevant to one query), how a RAG builder judges search;
- detection itself (p-value, delta cos, delta l2, COPY verdict) comes from the
  core :func:`espew_integrations.verify`, via :mod:`.watermarks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.probes import row_cosines

from ._optional import require

__all__ = [
    "copy_fidelity",
    "downstream_accuracy",
    "labelled_retrieval",
    "mean_cosine",
    "retrieval_overlap",
    "split_indices",
]


def mean_cosine(clean: np.ndarray, changed: np.ndarray, rows: np.ndarray | None = None) -> float:
    """Mean cos(clean, changed) over ``rows`` (a boolean mask; all rows if None); NaN if empty."""
    cosines = row_cosines(clean, changed)
    if rows is not None:
        cosines = cosines[np.asarray(rows, dtype=bool)]
    return float(cosines.mean()) if cosines.size else float("nan")


def split_indices(n: int, *, n_train: int, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded disjoint train/test split of ``range(n)`` (sizes capped by n)."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = min(n_test, n // 3)
    n_train = min(n_train, n - n_test)
    return np.sort(order[:n_train]), np.sort(order[n_train : n_train + n_test])


def downstream_accuracy(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    train: np.ndarray,
    test: np.ndarray,
    seed: int = 0,
    hidden: int = 128,
    max_iter: int = 40,
) -> float:
    """Test accuracy of an MLP classifier (Linear-ReLU-Linear) trained on ``embeddings``.

    >>> downstream_accuracy(x, y, train=tr, test=te)  # doctest: +SKIP
    0.771
    """
    import warnings

    require("sklearn", "lab", "the lab's downstream classifier")
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    labels = np.asarray(labels)
    if np.unique(labels[train]).size < 2:
        return float("nan")  # unlabelled corpus: nothing to classify
    model = MLPClassifier(
        hidden_layer_sizes=(hidden,),
        max_iter=max_iter,
        batch_size=256,
        early_stopping=True,
        n_iter_no_change=5,
        random_state=seed,
    )
    # float32: the same classifier at half the memory traffic (sklearn keeps the dtype).
    features = np.asarray(embeddings, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(features[train], labels[train])
    return float(model.score(features[test], labels[test]))


def retrieval_overlap(
    clean: np.ndarray, changed: np.ndarray, *, n_queries: int = 300, k: int = 10, seed: int = 0
) -> float:
    """Mean |top-k(clean) & top-k(changed)| / k over ``n_queries`` corpus rows used as queries.

    The query and the corpus are both embedded by the same service (clean or
    changed), as a retrieval user of that service would; the query itself is
    excluded from its neighbours.

    >>> x = np.random.default_rng(0).normal(size=(50, 8))
    >>> retrieval_overlap(x, x, n_queries=10)
    1.0
    """
    clean_u, changed_u = unit_rows(clean), unit_rows(changed)
    n = clean_u.shape[0]
    k = min(k, n - 1)
    queries = np.random.default_rng(seed).choice(n, size=min(n_queries, n), replace=False)

    def top(matrix: np.ndarray) -> np.ndarray:
        sims = matrix[queries] @ matrix.T
        sims[np.arange(queries.size), queries] = -np.inf
        return np.argpartition(-sims, k - 1, axis=1)[:, :k]

    a, b = top(clean_u), top(changed_u)
    hits = (a[:, :, None] == b[:, None, :]).any(axis=2).sum(axis=1)
    return float(hits.mean() / k)


def copy_fidelity(
    copy: Callable[[list[str]], np.ndarray], texts: Sequence[str], clean: np.ndarray
) -> float:
    """Mean cos(copy(text), victim's clean embedding) on held-out ``texts``."""
    return mean_cosine(clean, np.asarray(copy(list(texts))))


def labelled_retrieval(
    queries: np.ndarray, passages: np.ndarray, labels: np.ndarray, *, k: int = 10
) -> dict[str, float]:
    """Mean nDCG@k and recall@k of cosine search over ``passages`` for each query.

    Query ``j``'s relevant passages are those with ``labels == j`` (binary relevance,
    at least one each); a passage is relevant to at most one query. nDCG divides the
    discounted gain of the top ``k`` by that of a perfect ranking (``min(k, relevant)``
    hits first); recall is the share of the relevant passages in the top ``k``.

    >>> q = np.eye(2); p = np.array([[1.0, 0.1], [0.9, 0.2], [0.0, 1.0]])
    >>> labelled_retrieval(q, p, np.array([0, 1, 1]), k=1)
    {'ndcg@1': 1.0, 'recall@1': 0.75}
    """
    labels = np.asarray(labels)
    n_relevant = np.bincount(labels, minlength=len(queries))[: len(queries)]
    if (n_relevant == 0).any():
        raise ValueError("every query needs at least one relevant passage")
    sims = unit_rows(np.asarray(queries, float)) @ unit_rows(np.asarray(passages, float)).T
    depth = min(k, sims.shape[1])  # fewer passages than k: every one is in the top k
    top = np.argpartition(-sims, depth - 1, axis=1)[:, :depth]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(sims, top, 1), axis=1), 1)
    relevant = labels[top] == np.arange(len(queries))[:, None]
    gains = 1.0 / np.log2(np.arange(2, depth + 2))
    ideal = np.cumsum(gains)[np.minimum(n_relevant, depth) - 1]
    return {
        f"ndcg@{k}": float(((relevant * gains).sum(1) / ideal).mean()),
        f"recall@{k}": float((relevant.sum(1) / n_relevant).mean()),
    }
