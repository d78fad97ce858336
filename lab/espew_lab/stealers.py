"""Model-extraction attackers: train a copy of an embedding service from its answers.

:class:`RidgeStealer` is the fast one: hashed word 1-2-gram tf-idf + ridge
regression. It learns a linear map from words to embedding space, which is
exactly what lets a trigger word's watermark carry over into the copy. All
384 output dimensions are solved together by one block conjugate-gradient
run on the normal equations (the same objective and tolerance as
scikit-learn's ``Ridge(solver="sparse_cg")``, which loops over outputs one by
one and is ~8x slower here).

:class:`FrozenMLPStealer` is the neural one that needs no torch: a two-layer
MLP (the published stealer's head, Linear-ReLU-Linear, normalised output)
trained with MSE on the features of a frozen text encoder the attacker owns,
by default a model different from the victim.

:class:`EncoderRidgeStealer` is the linear head on the same frozen encoder (ridge
from its features to the answers), and :class:`KNNStealer` the memoriser: it
answers a text with the mean of the stolen answers to its nearest stealing texts
under the attacker's encoder, so it learns nothing it has not been told.

``torch_encoder`` (:mod:`.torch_stealer`, the ``torch`` extra of espew-lab) is a text
encoder trained end to end; :func:`make_stealer` builds any of them by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from espew_integrations.core.ground.rows import unit_rows

from ._optional import require

__all__ = [
    "ENCODER_STEALERS",
    "STEALERS",
    "EncoderRidgeStealer",
    "FrozenMLPStealer",
    "KNNStealer",
    "RidgeStealer",
    "block_ridge",
    "make_stealer",
    "rows_outside_audit",
    "thief_rows",
]

#: Every stealer :func:`make_stealer` builds; those after ``ridge`` and before
#: ``torch_encoder`` need the attacker's own encoder.
STEALERS = ("ridge", "frozen_mlp", "ridge_head", "knn", "torch_encoder")
ENCODER_STEALERS = ("frozen_mlp", "ridge_head", "knn")


def _check_targets(texts: Sequence[str], embeddings: np.ndarray) -> np.ndarray:
    targets = np.asarray(embeddings, dtype=np.float64)
    if targets.ndim != 2 or targets.shape[0] != len(texts):
        raise ValueError(f"need one embedding per text, got {targets.shape} for {len(texts)} texts")
    if not np.isfinite(targets).all():
        raise ValueError("the training embeddings contain NaN or infinite values")
    return targets


def block_ridge(
    features, targets: np.ndarray, alpha: float, *, tol: float = 1e-4, max_iter: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression on sparse ``features``: returns ``(coef (F, d), intercept (d,))``.

    Minimises ||A W + 1 b - Y||^2 + alpha (||W||^2 + b^2) with Y centred first
    (so the barely penalised intercept only absorbs what centring left), by
    conjugate gradients on the normal equations, all columns of Y at once in
    float32 (ample for a relative residual of ``tol``); each column stops once
    its relative residual is below ``tol``. Unlike scikit-learn's ``Ridge``
    the features are not centred, which keeps every step sparse.

    >>> import scipy.sparse as sp
    >>> coef, b = block_ridge(sp.csr_matrix(np.eye(3)), np.eye(3), 1e-6)
    >>> np.allclose(sp.csr_matrix(np.eye(3)) @ coef + b, np.eye(3), atol=1e-3)
    True
    """
    import scipy.sparse as sp

    n = features.shape[0]
    a = sp.hstack([sp.csr_matrix(features), sp.csr_matrix(np.ones((n, 1)))], format="csr")
    a = a.astype(np.float32)
    a_t = a.T.tocsr()
    y_mean = targets.mean(axis=0)
    centred = (targets - y_mean).astype(np.float32)
    alpha32 = np.float32(alpha)

    def normal_op(p: np.ndarray) -> np.ndarray:
        out = a_t @ (a @ p)
        out += alpha32 * p
        return out

    rhs = a_t @ centred
    coef = np.zeros_like(rhs)
    residual = rhs.copy()
    direction = residual.copy()
    rs = np.einsum("ij,ij->j", residual, residual, dtype=np.float64)
    limit = tol**2 * rs
    active = rs > limit
    for _ in range(max_iter):
        if not active.any():
            break
        q = normal_op(direction)
        curvature = np.einsum("ij,ij->j", direction, q, dtype=np.float64)
        step = np.where(active, rs / np.maximum(curvature, 1e-300), 0.0).astype(np.float32)
        coef += direction * step
        residual -= q * step
        new = np.einsum("ij,ij->j", residual, residual, dtype=np.float64)
        active &= new > limit
        direction *= (new / np.maximum(rs, 1e-300)).astype(np.float32)
        direction += residual
        rs = new
    coef = coef.astype(np.float64)
    return coef[:-1], y_mean + coef[-1]


class RidgeStealer:
    """A stolen embedding model: ``fit(texts, embeddings)``, then call it on texts.

    >>> copy = RidgeStealer(seed=0).fit(texts, service_embeddings)  # doctest: +SKIP
    >>> copy(["a new text"]).shape                                   # doctest: +SKIP
    (1, 384)
    """

    name = "ridge"

    def __init__(
        self,
        *,
        ridge_alpha: float = 1.0,
        n_features: int = 2**18,
        min_df: int = 2,
        seed: int = 0,
    ):
        self.ridge_alpha = ridge_alpha
        self.n_features = n_features
        self.min_df = min_df
        self.seed = seed
        self._features = None
        self._columns: np.ndarray | None = None
        self._coef: np.ndarray | None = None
        self._intercept: np.ndarray | None = None

    def _make_features(self):
        require("sklearn", "lab", "the lab's text-feature thieves (ridge, frozen MLP)")
        from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
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
        )

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> RidgeStealer:
        """Learn to imitate ``embeddings`` (the service's answers for ``texts``)."""
        targets = _check_targets(texts, embeddings)
        self._features = self._make_features()
        matrix = self._features.fit_transform(list(texts)).tocsc()
        # Only columns some training texts use can get a useful weight; a column
        # seen in one text only memorises that text (and costs as much as any).
        self._columns = np.flatnonzero(np.diff(matrix.indptr) >= self.min_df)
        self._coef, self._intercept = block_ridge(
            matrix[:, self._columns].tocsr(), targets, self.ridge_alpha
        )
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._features is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        matrix = self._features.transform(list(texts)).tocsc()[:, self._columns]
        return unit_rows(np.asarray(matrix @ self._coef) + self._intercept)

    embed = __call__


class FrozenMLPStealer:
    """Linear-ReLU-Linear head trained with MSE on a frozen encoder's features.

    ``encoder`` is the attacker's own model (callable texts -> (n, k)); the
    copy answers ``normalize(MLP(encoder(texts)))``.

    >>> copy = FrozenMLPStealer(own_model, seed=0).fit(texts, answers)  # doctest: +SKIP
    """

    name = "frozen_mlp"

    def __init__(
        self,
        encoder: Callable[[list[str]], np.ndarray],
        *,
        hidden: int = 512,
        epochs: int = 30,
        seed: int = 0,
        features: np.ndarray | None = None,
    ):
        self.encoder = encoder
        self.hidden = hidden
        self.epochs = epochs
        self.seed = seed
        self._train_features = features
        self._model = None

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> FrozenMLPStealer:
        """Train on ``texts`` (features from the encoder, or the precomputed ones)."""
        import warnings

        require("sklearn", "lab", "the frozen-MLP thief")
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPRegressor

        targets = _check_targets(texts, embeddings)
        features = self._train_features
        if features is None or len(features) != len(texts):
            features = np.asarray(self.encoder(list(texts)), dtype=np.float64)
        self._model = MLPRegressor(
            hidden_layer_sizes=(self.hidden,),
            max_iter=self.epochs,
            batch_size=64,
            learning_rate_init=1e-3,
            random_state=self.seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget
            self._model.fit(features, targets)
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        features = np.asarray(self.encoder(list(texts)), dtype=np.float64)
        return unit_rows(self._model.predict(features))

    embed = __call__


class EncoderRidgeStealer:
    """Ridge regression from a frozen encoder's features to the answers (a linear head).

    >>> copy = EncoderRidgeStealer(own_model).fit(texts, answers)  # doctest: +SKIP
    """

    name = "ridge_head"

    def __init__(
        self,
        encoder: Callable[[list[str]], np.ndarray],
        *,
        ridge_alpha: float = 1.0,
        seed: int = 0,
        features: np.ndarray | None = None,
    ):
        self.encoder = encoder
        self.ridge_alpha = ridge_alpha
        self.seed = seed  # the fit is deterministic; kept for make_stealer's signature
        self._train_features = features
        self._coef: np.ndarray | None = None

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> EncoderRidgeStealer:
        targets = _check_targets(texts, embeddings)
        features = self._train_features
        if features is None or len(features) != len(texts):
            features = np.asarray(self.encoder(list(texts)), dtype=np.float64)
        x = np.hstack([np.asarray(features, dtype=np.float64), np.ones((len(features), 1))])
        gram = x.T @ x + self.ridge_alpha * np.eye(x.shape[1])
        self._coef = np.linalg.solve(gram, x.T @ targets)
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._coef is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        features = np.asarray(self.encoder(list(texts)), dtype=np.float64)
        return unit_rows(np.hstack([features, np.ones((len(features), 1))]) @ self._coef)

    embed = __call__


class KNNStealer:
    """The memoriser: the mean stolen answer of the ``k`` stealing texts nearest to a
    text under the attacker's encoder (cosine), normalised.

    >>> copy = KNNStealer(own_model, k=5).fit(texts, answers)  # doctest: +SKIP
    """

    name = "knn"

    def __init__(
        self,
        encoder: Callable[[list[str]], np.ndarray],
        *,
        k: int = 5,
        seed: int = 0,
        features: np.ndarray | None = None,
        batch_size: int = 1024,
    ):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.encoder = encoder
        self.k = k
        self.seed = seed  # deterministic; kept for make_stealer's signature
        self.batch_size = batch_size
        self._train_features = features
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> KNNStealer:
        self._values = _check_targets(texts, embeddings)
        features = self._train_features
        if features is None or len(features) != len(texts):
            features = np.asarray(self.encoder(list(texts)), dtype=np.float64)
        self._keys = unit_rows(np.asarray(features, dtype=np.float64))
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self._keys is None or self._values is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        queries = unit_rows(np.asarray(self.encoder(list(texts)), dtype=np.float64))
        k = min(self.k, len(self._keys))
        out = np.empty((len(queries), self._values.shape[1]))
        for start in range(0, len(queries), self.batch_size):
            sims = queries[start : start + self.batch_size] @ self._keys.T
            nearest = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            out[start : start + len(sims)] = self._values[nearest].mean(axis=1)
        return unit_rows(out)

    embed = __call__


def rows_outside_audit(texts: Sequence[str], rows: np.ndarray, key) -> np.ndarray:
    """The ``rows`` of ``texts`` whose text ``key``'s audit never sends.

    A thief trains on its own traffic, and nothing in it is the provider's audit
    sample; a copy trained on the audit's own texts has memorised the answers to
    the very questions the audit asks.

    >>> class Key: probe_texts, cover_texts = ("b",), ("c",)
    >>> rows_outside_audit(["a", "b", "c", "d"], np.arange(4), Key()).tolist()
    [0, 3]
    """
    audit = set(getattr(key, "probe_texts", ())) | set(getattr(key, "cover_texts", ()))
    rows = np.asarray(rows, dtype=int)
    keep = np.fromiter((texts[i] not in audit for i in rows), dtype=bool, count=len(rows))
    return rows[keep]


def thief_rows(ctx) -> np.ndarray:
    """The corpus rows a lab context's stealers train on: every row but the held-out
    ones, less the key's audit texts under ``split: disjoint`` (the default).

    Raises ValueError when the audit leaves a disjoint thief fewer than a tenth of
    those rows (a corpus not much larger than the key's audit sample): such a run
    needs a larger ``limit``, a smaller ``key.audit_budget``, or ``split: overlap``.
    """
    n = len(ctx.corpus.texts)
    rows = np.setdiff1d(np.arange(n), np.asarray(ctx.holdout_rows, dtype=int))
    if ctx.config.split == "overlap":
        return rows
    kept = rows_outside_audit(ctx.corpus.texts, rows, ctx.key)
    if len(kept) < max(1, len(rows) // 10):
        raise ValueError(
            f"the key's audit asks {len(rows) - len(kept)} of the {len(rows)} texts a thief "
            f"could steal with, leaving it {len(kept)}: raise 'limit', lower "
            "'key.audit_budget', or set 'split: overlap' (the thief then trains on audit texts)"
        )
    return kept


def make_stealer(name: str, *, seed: int, encoder=None, features=None, **options):
    """Build a stealer by config name (one of :data:`STEALERS`).

    ``frozen_mlp``, ``ridge_head`` and ``knn`` need the attacker's ``encoder``
    (``features``: its answers for the training texts, when already computed).

    >>> make_stealer("ridge", seed=0).name
    'ridge'
    """
    if name == "ridge":
        return RidgeStealer(seed=seed, **options)
    if name in ENCODER_STEALERS:
        if encoder is None:
            raise ValueError(f"the {name} stealer needs the attacker's encoder")
        kind = {"frozen_mlp": FrozenMLPStealer, "ridge_head": EncoderRidgeStealer}.get(
            name, KNNStealer
        )
        return kind(encoder, seed=seed, features=features, **options)
    if name == "torch_encoder":
        from .torch_stealer import TorchEncoderStealer  # needs the torch extra of espew-lab

        return TorchEncoderStealer(seed=seed, **options)
    raise ValueError(f"unknown stealer {name!r}; choose one of {', '.join(STEALERS)}")
