"""A thief that searches its own answers for the watermark: ICA, then its bimodal components.

ESpeW's promise against removal is that no single direction separates the
marked answers from the rest (each marked row moves differently, on its own
smallest coordinates). That holds for a target that looks like an embedding:
its mark sits in the directions where the data already varies, and no
component of the answers splits the marked rows off. It fails for a target in
the service's *low-variance* directions (a random vector, or one built from
the last principal components): there the marked rows stand many standard
deviations away from the rest, and textbook independent component analysis
on the stolen answers finds that component, with no key and no clean model.
The thief then drops the rows it flags and trains on the rest.

:func:`find_displaced_rows` is that search: FastICA over every dimension
(whitening keeps the small-variance directions, where such a mark lives),
Sarle's bimodality coefficient per component, and on every component more
bimodal than a uniform distribution, the rows displaced from its majority. It
is why keys take their target from a text's embedding
(``docs/limitations.md``); ``benchmarks/bench_spectral.py`` measures it on
the real model.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ._optional import require

__all__ = ["BIMODAL_THRESHOLD", "SpectralFinding", "bimodality", "find_displaced_rows"]

#: Sarle's coefficient of a uniform distribution; a normal one has 1/3.
BIMODAL_THRESHOLD = 5 / 9


@dataclasses.dataclass(frozen=True)
class SpectralFinding:
    """What the search found: the flagged rows and the components that flagged them.

    ``components`` are the ICA components more bimodal than a uniform
    distribution (:data:`BIMODAL_THRESHOLD`), most bimodal first, with their
    coefficients in ``bimodality``; ``found`` says there was at least one. A
    thief who finds nothing has no component worth acting on, and ``flagged``
    is then empty. ``best_bimodality`` is the largest coefficient of all.
    """

    flagged: np.ndarray
    components: tuple[int, ...]
    bimodality: tuple[float, ...]
    best_bimodality: float

    @property
    def found(self) -> bool:
        return bool(self.components)


def bimodality(values: np.ndarray) -> np.ndarray:
    """Sarle's sample bimodality coefficient of each column.

    (g^2 + 1) / (k + 3 (n-1)^2 / ((n-2)(n-3))), where g is the bias-corrected
    skewness and k the bias-corrected excess kurtosis.
    About 1/3 for a normal column, 5/9 for a uniform one, towards 1 for two
    well-separated groups.

    >>> rng = np.random.default_rng(0)
    >>> two_groups = np.r_[rng.normal(0, 1, 850), rng.normal(12, 1, 150)][:, None]
    >>> one_group = rng.normal(size=(1000, 1))
    >>> bool(bimodality(two_groups)[0] > 5 / 9), bool(bimodality(one_group)[0] < 0.4)
    (True, True)
    """
    from scipy.stats import kurtosis, skew

    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    if n < 4:
        raise ValueError(f"the bimodality coefficient needs at least 4 rows, got {n}")
    g = skew(values, axis=0, bias=False)
    k = kurtosis(values, axis=0, bias=False)
    return (g**2 + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def _minority_split(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the smaller group of the best 1-d two-means split of ``values``."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    n = ordered.size
    sums = np.cumsum(ordered)
    squares = np.cumsum(ordered**2)
    left = np.arange(1, n)  # rows in the left group for each cut
    left_ss = squares[:-1] - sums[:-1] ** 2 / left
    right_sum = sums[-1] - sums[:-1]
    right_ss = (squares[-1] - squares[:-1]) - right_sum**2 / (n - left)
    cut = int(np.argmin(left_ss + right_ss)) + 1
    low = np.zeros(n, dtype=bool)
    low[order[:cut]] = True
    return low if cut <= n - cut else ~low


def _displaced_side(values: np.ndarray, margin: float) -> np.ndarray:
    """Rows beyond ``margin`` robust sds of the majority, on the minority's side.

    The two-means split says which side the displaced minority is on; the
    majority's median and MAD then set the cut, so the rows of the minority
    closest to the majority (which a midpoint cut would miss) are flagged too.
    """
    minority = _minority_split(values)
    majority = values[~minority]
    centre = float(np.median(majority))
    scale = 1.4826 * float(np.median(np.abs(majority - centre)))
    side = 1.0 if values[minority].mean() > centre else -1.0
    return side * (values - centre) > margin * max(scale, np.finfo(float).tiny)


def find_displaced_rows(
    answers: np.ndarray,
    *,
    seed: int = 0,
    max_iter: int = 400,
    threshold: float = BIMODAL_THRESHOLD,
    margin: float = 4.0,
    skip_top: int = 0,
) -> SpectralFinding:
    """Search the answers for components on which a minority of rows is displaced.

    Runs FastICA with as many components as dimensions (unit-variance
    whitening, so low-variance directions count as much as the rest) and keeps
    every component whose bimodality coefficient exceeds ``threshold``. On
    each, the rows more than ``margin`` robust standard deviations from the
    majority, on the displaced minority's side, are flagged; ``flagged`` is
    their union. Natural heavy-tailed components flag a few outliers, which
    costs the thief little; a mark on one component flags the marked rows.
    ``skip_top`` > 0 is the targeted thief: it searches only the directions
    past the answers' first ``skip_top`` principal axes, where a mark in the
    low-variance directions lives and where ICA over fewer dimensions finds
    it more reliably (and faster). Deterministic given ``seed``.

    >>> finding = find_displaced_rows(stolen_answers, seed=0)  # doctest: +SKIP
    >>> keep = ~finding.flagged  # train on these  # doctest: +SKIP
    """
    require("sklearn", "lab", "the spectral (ICA) search for displaced rows")
    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    matrix = np.asarray(answers, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"answers must be a 2-d array (rows, dimensions), got {matrix.shape}")
    n, dim = matrix.shape
    if n < 2 * dim:
        raise ValueError(
            f"the search needs at least twice as many answers as dimensions ({2 * dim}), got {n}"
        )
    if not np.isfinite(matrix).all():
        raise ValueError("the answers contain NaN or infinite values")
    if not 0 <= skip_top <= dim - 2:
        raise ValueError(
            f"skip_top must be between 0 and {dim - 2} at {dim} dimensions, got {skip_top}"
        )
    if skip_top:
        centred = matrix - matrix.mean(axis=0)
        axes = np.linalg.svd(centred, full_matrices=False)[2]
        matrix = centred @ axes[skip_top:].T
        dim -= skip_top
    ica = FastICA(
        n_components=dim, whiten="unit-variance", max_iter=max_iter, tol=1e-3, random_state=seed
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed iteration budget
        sources = ica.fit_transform(matrix)
    coefficients = bimodality(sources)
    order = np.argsort(-coefficients, kind="stable")
    chosen = [int(j) for j in order if coefficients[j] > threshold]
    flagged = np.zeros(n, dtype=bool)
    for component in chosen:
        flagged |= _displaced_side(sources[:, component], margin)
    return SpectralFinding(
        flagged=flagged,
        components=tuple(chosen),
        bimodality=tuple(float(coefficients[j]) for j in chosen),
        best_bimodality=float(coefficients[order[0]]),
    )
