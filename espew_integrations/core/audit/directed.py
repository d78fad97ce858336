"""The directed score: how far a suspect's answer to each probe leans along that probe's mark.

ESpeW does not push a marked text toward the target as a whole: it moves
only the ``alpha * d`` coordinates where that text's clean embedding is
smallest, each by ``strength * (target - clean)``. So every probe has its own
*mark direction*, ``v = unit(watermark(clean) - clean)``, which the provider
can compute from its clean embedding of the probe. A copy that learned the
mark answers a trigger probe a little further along ``v``; a cosine to the
whole target, the raw score, also sums every coordinate the mark never
touched, which carries only the copy's noise.

The score of a probe is the suspect's (centred, unit) answer projected on
``v`` in the metric ``(C + lambda I)^-1``, with ``C`` the covariance of the
suspect's own answers over all probes and ``lambda`` their mean variance:
a shrinkage whitening that discounts the few directions along which the
suspect's answers vary most (mostly meaning, which a mark is not). How each
step was chosen, against the raw score and the unwhitened projection:
docs/research/method.md, "Catching the faithful copy".

Given the clean probe rows (what verify passes), the answers are first
replaced by what a ridge fit on those rows does not explain: a copy
reproduces most of each clean embedding, and that reproduction, projected
on ``v``, is noise to the test. The mark is not linear in the clean row (it
lands on each row's own smallest coordinates), so the fit over all probes
leaves it in the residual (docs/research/method.md, "The clean fit";
``benchmarks/bench_clean_fit.py``).

The audit's cover texts join the fit and the covariance: more rows pin the
fit down (docs/research/method.md, "The cover texts join the fit";
``benchmarks/bench_cover_fit.py``). ``unscored_answers`` and
``unscored_clean`` add rows to the fit that get no score; verify scores
every audit text (passing them all as ``answers``) and leaves the weighing of
texts that hold several band words to :mod:`..stats.word_evidence`.

Why the rank test stays exact: the directions depend only on the clean
probe embeddings and on how the key writes (alpha, strength, selection,
target), and the fit and the whitening only on the clean rows and the
suspect's answers to *all* probes and cover texts.
None of it looks at which band words were drawn as triggers, so under the
null the word scores are fixed numbers and the triggers a uniformly random
subset of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ground.errors import InputError
from ..ground.rows import unit_rows
from ..keys.key import WatermarkKey
from ..mark.inject import mark_all_rows

__all__ = ["CLEAN_FIT_RIDGE", "SHRINKAGE", "directed_scores", "mark_directions"]

#: ``lambda`` as a multiple of the answers' mean variance per coordinate.
#: Any fixed value is exact; this one is chosen for power
#: (docs/research/method.md, "Catching the faithful copy").
SHRINKAGE = 1.0

#: The ridge of the fit of the answers on the clean probe rows, as a multiple of
#: the clean rows' mean variance per coordinate. Like ``SHRINKAGE``, any fixed value
#: is exact; this one is chosen for power (docs/results/frontier/README.md, section 11).
CLEAN_FIT_RIDGE = 1.0


def mark_directions(clean_rows: np.ndarray, key: WatermarkKey) -> np.ndarray:
    """Unit rows ``watermark(clean) - clean`` for each (unit-scaled) clean row.

    Uses the key's own marking equations, so a key with another alpha,
    strength or selection gets its own directions. A row the mark does not
    move (never in practice) gets a zero direction, hence a zero score.
    """
    clean = unit_rows(np.asarray(clean_rows, dtype=np.float64))
    if clean.ndim != 2 or clean.shape[1] != key.dim:
        raise InputError(f"clean rows must have shape (n, {key.dim}), got {clean.shape}")
    return unit_rows(mark_all_rows(clean, key) - clean)


def directed_scores(
    answers: np.ndarray,
    directions: np.ndarray,
    clean_rows: np.ndarray | None = None,
    shrinkage: float = SHRINKAGE,
    clean_fit_ridge: float = CLEAN_FIT_RIDGE,
    *,
    unscored_answers: np.ndarray | None = None,
    unscored_clean: np.ndarray | None = None,
) -> np.ndarray:
    """Each probe's whitened projection of the suspect's answer on its mark direction.

    With ``clean_rows`` (the provider's clean embeddings of the same probes),
    what a ridge fit on them explains is taken out of the answers first
    (module docstring). ``unscored_answers`` and ``unscored_clean`` are the
    suspect's answers to, and the clean rows of, texts that get no score (the
    audit's cover texts): they join the fit and the covariance only. Rows that
    are not finite (failed queries) get NaN and take no part in the fit or the
    covariance. Returns a float64 vector of length ``len(answers)``.
    """
    answers = np.asarray(answers, dtype=np.float64)
    if answers.shape != directions.shape:
        raise InputError(
            f"answers {answers.shape} and mark directions {directions.shape} differ in shape"
        )
    if clean_rows is not None and np.shape(clean_rows) != answers.shape:
        raise InputError(
            f"answers {answers.shape} and clean rows {np.shape(clean_rows)} differ in shape"
        )
    scores = np.full(len(answers), np.nan)
    valid = np.isfinite(answers).all(axis=1)
    if valid.sum() < 2:
        return scores
    rows = answers[valid]
    clean = None if clean_rows is None else np.asarray(clean_rows, np.float64)[valid]
    if unscored_answers is not None:
        rows, clean = _with_unscored(rows, clean, unscored_answers, unscored_clean)
    unit = unit_rows(rows)
    centred = unit - unit.mean(axis=0)
    if clean is not None:
        centred = _unexplained(centred, unit_rows(clean), clean_fit_ridge)
    covariance = centred.T @ centred / (len(centred) - 1)
    ridge = shrinkage * float(np.trace(covariance)) / covariance.shape[0]
    if ridge <= 0.0:  # every answer the same: nothing to score
        return scores
    covariance[np.diag_indices_from(covariance)] += ridge
    import scipy.linalg  # here, not at the top: a process that never scores never pays its import

    weighted = scipy.linalg.solve(covariance, directions[valid].T, assume_a="pos").T
    norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", weighted, directions[valid]), 0.0))
    projections = np.einsum("ij,ij->i", centred[: int(valid.sum())], weighted)
    scores[valid] = np.divide(projections, norms, out=np.zeros_like(projections), where=norms > 0)
    return scores


def _with_unscored(
    rows: np.ndarray, clean: np.ndarray | None, unscored: np.ndarray, unscored_clean: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The scored rows followed by the finite unscored ones, and the clean rows to match."""
    unscored = np.asarray(unscored, dtype=np.float64)
    if clean is None or unscored_clean is None:
        raise InputError("unscored answers need clean_rows and unscored_clean for the fit")
    unscored_clean = np.asarray(unscored_clean, dtype=np.float64)
    if unscored.ndim != 2 or unscored.shape[1] != rows.shape[1]:
        raise InputError(
            f"unscored answers {unscored.shape} must have {rows.shape[1]} columns like the answers"
        )
    if unscored_clean.shape != unscored.shape:
        raise InputError(
            f"unscored answers {unscored.shape} and their clean rows {unscored_clean.shape} "
            "differ in shape"
        )
    finite = np.isfinite(unscored).all(axis=1)
    return np.vstack([rows, unscored[finite]]), np.vstack([clean, unscored_clean[finite]])


def _unexplained(centred: np.ndarray, clean: np.ndarray, ridge_multiple: float) -> np.ndarray:
    """``centred`` minus its ridge fit on the (centred) ``clean`` rows.

    The residual of a ridge fit is ``lambda (X X^T + lambda I)^-1 Y``, the same
    as ``Y - X (X^T X + lambda I)^-1 X^T Y``; the smaller of the two systems is
    solved (n x n when there are fewer probes than dimensions, as at d = 4096).
    """
    import scipy.linalg

    x = clean - clean.mean(axis=0)
    n, d = x.shape
    ridge = ridge_multiple * float(np.einsum("ij,ij->", x, x)) / d
    if ridge <= 0.0:  # every clean row the same: nothing to explain
        return centred
    if n <= d:
        gram = x @ x.T
        gram[np.diag_indices_from(gram)] += ridge
        return ridge * scipy.linalg.solve(gram, centred, assume_a="pos")
    gram = x.T @ x
    gram[np.diag_indices_from(gram)] += ridge
    return centred - x @ scipy.linalg.solve(gram, x.T @ centred, assume_a="pos")
