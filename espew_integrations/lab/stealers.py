"""Model-extraction attackers: train a copy of an embedding service from its answers.

:class:`RidgeStealer` is the fast one (hashed word 1-2-gram tf-idf + ridge
regression, about 20 s for 20k texts on two cores, held-out cosine ~0.77 to
MiniLM). It learns a linear map from words to embedding space, which is
exactly what lets a trigger word's watermark carry over into the copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["RidgeStealer"]


class RidgeStealer:
    """A stolen embedding model: ``fit(texts, embeddings)``, then call it on texts.

    >>> copy = RidgeStealer(seed=0).fit(texts, service_embeddings)  # doctest: +SKIP
    >>> copy(["a new text"]).shape                                   # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, *, ridge_alpha: float = 1.0, n_features: int = 2**18, seed: int = 0):
        self.ridge_alpha = ridge_alpha
        self.n_features = n_features
        self.seed = seed
        self._pipeline = None

    def _make_pipeline(self):
        from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline

        return make_pipeline(
            HashingVectorizer(
                ngram_range=(1, 2),
                n_features=self.n_features,
                alternate_sign=False,
                norm=None,
                token_pattern=r"(?u)\b\w+\b",
            ),
            TfidfTransformer(sublinear_tf=True),
            Ridge(alpha=self.ridge_alpha, solver="sparse_cg", random_state=self.seed),
        )

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> RidgeStealer:
        """Learn to imitate ``embeddings`` (the service's answers for ``texts``)."""
        targets = np.asarray(embeddings, dtype=np.float64)
        if targets.ndim != 2 or targets.shape[0] != len(texts):
            raise ValueError(
                f"need one embedding per text, got {targets.shape} for {len(texts)} texts"
            )
        self._pipeline = self._make_pipeline().fit(list(texts), targets)
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._pipeline is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        out = np.asarray(self._pipeline.predict(list(texts)), dtype=np.float64)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    embed = __call__
