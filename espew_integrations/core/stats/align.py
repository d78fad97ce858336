"""Undo a thief's isometry: map the suspect's answers back into the key's coordinates.

A thief can serve ``Q @ copy(text)`` for a secret orthogonal ``Q`` (a rotation,
a permutation or sign flips of the dimensions), or embed its answers in more
dimensions with orthonormal columns. Every cosine between its answers is
unchanged, so its customers' search, clustering and classification lose
nothing, but the mark no longer lies along the key's target and mark
directions: unmapped, even the rotated service itself is not convicted
(``benchmarks/bench_isometry.py``; docs/limitations.md, "A thief that serves
its answers in other coordinates").

The audit already holds what undoes it: the provider's clean embeddings of the
audit's texts (stored in the key). Over every answered audit text the answers
are regressed on the clean rows (a ridge fit, as the directed score's); the
mark is a small part of the answers that carry it and not linear in the clean row, so it
barely moves the fit. A copy reproduces a shrunken version of the clean
embedding (``A``, near symmetric), so the coefficients are about ``Q A`` and
their polar factor (one SVD) is about ``Q``. Orthogonal Procrustes, the
textbook fit, is not used: its polar factor is of ``Q A C^T C``, which blurs
the mark directions more on a copy that shrinks the clean embedding.

When the map is close to a permutation of the dimensions with sign flips (the
permutation fits the clean rows at least :data:`ALIGN_RATIO` as well as the map),
that permutation is applied instead: it undoes such a thief exactly, where the
estimated map would blur each mark direction.

The map is applied only when the suspect's dimension differs from the key's or
when the answers fit the clean rows far better through it than as they are
(:data:`ALIGN_RATIO`): an unrotated copy keeps all its evidence (the map would
add its estimation noise to every mark direction), and a rotated one is scored
in the key's coordinates. A thief that rotates only part of the way, to stay under the
rule, keeps most of the mark where the key looks for it.

Why the rank test stays exact: the map and the choice to apply it depend on the
suspect's answers and the clean rows, never on which band words are
triggers. Under the null the word scores are still numbers computed
without the labels, and the triggers a uniformly random subset of them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ground.errors import InputError
from ..ground.rows import unit_rows

__all__ = ["ALIGN_RATIO", "ALIGN_RIDGE", "Alignment", "fit_alignment"]

#: Apply the map to answers of the key's own dimension only when their mean
#: cosine to the clean rows, as they are, is below this share of what it is
#: through the map: an unrotated copy, even a weak one, fits well above it, and a
#: rotation leaves about cos(angle) of the fit. Any fixed rule that never looks at
#: the triggers keeps the test exact; this one is about power only
#: (``benchmarks/bench_isometry.py``).
ALIGN_RATIO = 0.7

#: The ridge of the answers' regression on the clean rows, as a multiple of the
#: clean rows' mean variance per coordinate (as ``directed.CLEAN_FIT_RIDGE``):
#: any fixed value keeps the test exact; this one is about power only.
ALIGN_RIDGE = 1.0


@dataclasses.dataclass(frozen=True)
class Alignment:
    """The fitted map and the evidence for it.

    ``matrix`` (d' x d) carries answers of dimension d' into the key's d
    coordinates; ``identity_fit`` and ``fitted_fit`` are the mean cosines of the
    answers to the clean rows over the ``n_rows`` fitting texts without and with
    it (``identity_fit`` is NaN when d' differs from d); ``applied`` says whether
    verify used it.
    """

    matrix: np.ndarray
    identity_fit: float
    fitted_fit: float
    n_rows: int
    applied: bool
    kind: str = "orthonormal map"

    def apply(self, answers: np.ndarray) -> np.ndarray:
        """``answers`` in the key's coordinates (unchanged when not applied)."""
        if not self.applied:
            return answers
        return np.asarray(answers, dtype=np.float64) @ self.matrix

    def describe(self) -> str:
        """One line for the report: what was fitted, on how many texts, and whether used."""
        fit = f"mean cosine to the clean rows {self.fitted_fit:.3f} through a {self.kind}"
        if np.isnan(self.identity_fit):
            return (
                f"applied: the answers' dimension differs from the key's; {fit} (fitted on "
                f"{self.n_rows} answered audit texts)"
            )
        verb = "applied" if self.applied else "not applied"
        return (
            f"{verb}: {fit}, {self.identity_fit:.3f} as answered (fitted on {self.n_rows} "
            "answered audit texts)"
        )


def fit_alignment(answers: np.ndarray, clean_rows: np.ndarray, key_dim: int) -> Alignment | None:
    """The orthonormal map from ``answers`` (n x d') towards ``clean_rows`` (n x d).

    Rows that are not finite are left out. Returns None when no more rows than
    the key's dimension remain, too few to pin the regression down. The map
    is applied when d' differs from ``key_dim`` (nothing else can compare the
    answers with the key) or when the answers' mean cosine to the clean rows
    is below :data:`ALIGN_RATIO` of what it is through the map.
    """
    answers = np.asarray(answers, dtype=np.float64)
    clean = np.asarray(clean_rows, dtype=np.float64)
    if answers.ndim != 2 or clean.ndim != 2 or len(answers) != len(clean):
        raise InputError(
            f"answers {answers.shape} and clean rows {clean.shape} must be matching 2-d arrays"
        )
    finite = np.isfinite(answers).all(axis=1) & np.isfinite(clean).all(axis=1)
    if finite.sum() <= clean.shape[1]:
        return None
    import scipy.linalg  # here, not at the top: a process that never aligns never pays its import

    a, c = unit_rows(answers[finite]), unit_rows(clean[finite])
    a_centred, c_centred = a - a.mean(axis=0), c - c.mean(axis=0)
    gram = c_centred.T @ c_centred
    ridge = ALIGN_RIDGE * float(np.trace(gram)) / gram.shape[0]
    gram[np.diag_indices_from(gram)] += ridge
    coefficients = scipy.linalg.solve(gram, c_centred.T @ a_centred, assume_a="pos")  # d x d'
    u, _, vt = np.linalg.svd(coefficients.T, full_matrices=False)
    matrix = u @ vt  # d' x d, orthonormal columns (rows when d' < d)
    fitted = _mean_cosine(a @ matrix, c)
    same_dim = answers.shape[1] == key_dim
    identity = _mean_cosine(a, c) if same_dim else float("nan")
    applied = (not same_dim) or identity < ALIGN_RATIO * fitted
    kind = "orthonormal map"
    if applied:
        # The simplest map that fits well enough wins, as the identity does: a thief
        # that permutes (and flips) dimensions is undone exactly, with no estimation
        # noise in the mark directions.
        snapped = _signed_permutation(matrix)
        snapped_fit = _mean_cosine(a @ snapped, c)
        if snapped_fit >= ALIGN_RATIO * fitted:
            matrix, fitted, kind = snapped, snapped_fit, "signed permutation"
    return Alignment(matrix, identity, fitted, int(finite.sum()), applied, kind)


def _signed_permutation(matrix: np.ndarray) -> np.ndarray:
    """The signed (partial) permutation closest to ``matrix``: each key dimension is
    matched to one answer dimension by the largest total magnitude, with its sign."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-np.abs(matrix))
    snapped = np.zeros_like(matrix)
    snapped[rows, cols] = np.sign(matrix[rows, cols])
    return snapped


def _mean_cosine(rows: np.ndarray, clean: np.ndarray) -> float:
    return float(np.mean(np.einsum("ij,ij->i", unit_rows(rows), clean)))
