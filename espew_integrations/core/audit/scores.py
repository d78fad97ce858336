"""The word scores: each band word's raw, reference-adjusted and directed score.

Why apart from the asking and the decision: scores are a function of the
plan and the answers alone, never of which words are triggers, so they are
computed once per interrogation and serve the shared verdict, every tenant
layer of a trace, and a null study's thousands of trigger draws over fixed
answers. See the :mod:`..verify` docstring for what each score catches.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..ground.rows import unit_rows
from ..ground.stable import least_squares_slope, snap_residual
from ..stats.word_evidence import word_scores_from_texts
from .directed import directed_scores
from .plan import AuditPlan

__all__ = [
    "WordScores",
    "adjusted_scores",
    "mean_per_word",
    "probe_cosines",
    "reference_slope",
    "score_words",
    "word_scores",
]


@dataclasses.dataclass(frozen=True)
class WordScores:
    """What one interrogation yields, computed once for the verdict and trace's tenants.

    ``cosines``: each probe's cosine to the target (NaN where it failed);
    ``raw``: each band word's mean of them; :attr:`reference` and
    :attr:`directed` are computed on first use only: the directed score costs
    a whitening solve that an audit found unusable never needs.
    """

    plan: AuditPlan
    embeddings: np.ndarray
    cosines: np.ndarray
    raw: np.ndarray
    cover: np.ndarray | None = None  # the answers to the cover texts (for the clean fit)
    #: a field audit's reference leans, n_texts x n_references (.references), if any
    extra_leans: np.ndarray | None = None

    @functools.cached_property
    def reference(self) -> np.ndarray | None:
        """Each band word's mean clean-model cosine over its answered probes; None without one."""
        if self.plan.reference is None:
            return None
        answered = np.where(np.isfinite(self.cosines), self.plan.reference, np.nan)
        return mean_per_word(answered, self.plan.owner, len(self.raw))

    @functools.cached_property
    def directed(self) -> np.ndarray | None:
        """Each band word's directed score (:mod:`.directed`) from every answered text
        that holds it (:mod:`..stats.word_evidence`); None without mark directions."""
        plan = self.plan
        if plan.directions is None:
            return None
        answers, directions, clean = self.embeddings, plan.directions, plan.clean_rows
        if self.cover is not None and plan.cover_rows is not None:
            # the cover texts are scored too: those holding band words are evidence
            assert plan.cover_directions is not None and clean is not None  # made with cover_rows
            answers = np.vstack([answers, self.cover])
            directions = np.vstack([directions, plan.cover_directions])
            clean = np.vstack([clean, plan.cover_rows])
        per_text = directed_scores(answers, directions, clean)
        return word_scores_from_texts(
            per_text, plan.band_sets[: len(answers)], len(self.raw), plan.trigger_share
        )


def word_scores(
    plan: AuditPlan,
    embeddings: np.ndarray,
    target: np.ndarray,
    n_words: int,
    cover: np.ndarray | None = None,
    extra_leans: np.ndarray | None = None,
) -> WordScores:
    """The word scores of answers in the plan's order (``embeddings`` to its probes,
    ``cover`` to its cover texts, both in the key's coordinates) against ``target``;
    ``extra_leans``: a field audit's reference leans (:mod:`.references`)."""
    cosines = probe_cosines(embeddings, target)
    raw = mean_per_word(cosines, plan.owner, n_words)
    return WordScores(plan, embeddings, cosines, raw, cover, extra_leans)


def score_words(
    embeddings: np.ndarray, owner: np.ndarray, target: np.ndarray, n_words: int
) -> np.ndarray:
    """Mean cosine to ``target`` of each word's probe embeddings (NaN if none).

    ``embeddings`` rows whose probe failed are NaN rows and are left out.
    """
    return mean_per_word(probe_cosines(embeddings, target), owner, n_words)


def probe_cosines(embeddings: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Cosine of each probe embedding to ``target`` (NaN for failed probes).

    Rows are scaled by their largest magnitude before the norm, so answers of
    1e200 give their true cosines instead of overflowing to 0.
    """
    embeddings = np.asarray(embeddings, dtype=np.float64)
    failed = ~np.isfinite(embeddings).all(axis=1)
    unit = unit_rows(np.where(failed[:, None], 0.0, embeddings))
    # a row-wise product and sum, not ``unit @ target``: BLAS orders a product's sums by
    # the CPU, and a verdict must not (:mod:`..ground.stable`)
    cosines = np.add.reduce(unit * unit_rows(np.asarray(target, np.float64)[None, :]), axis=1)
    cosines[failed] = np.nan
    return cosines


def mean_per_word(cosines: np.ndarray, owner: np.ndarray, n_words: int) -> np.ndarray:
    """Each word's mean over the finite values of its probes (NaN for a word with none)."""
    valid = np.isfinite(cosines)
    sums = np.bincount(owner[valid], weights=cosines[valid], minlength=n_words)
    counts = np.bincount(owner[valid], minlength=n_words)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def adjusted_scores(raw: np.ndarray, reference: np.ndarray, slope: float) -> np.ndarray:
    """The reference-adjusted word scores ``raw - slope * reference``, snapped to the
    residual grid (:func:`..ground.stable.snap_residual`).

    Why snapped: for the clean model itself the difference is rounding noise, which
    each BLAS kernel rounds its own way; snapped, it is an exact tie on every CPU
    instead of a ranking of noise, and every real residual keeps its order.

    >>> adjusted_scores(np.array([0.3, 0.5]), np.array([0.3, 0.5]), 1.0).tolist()
    [0.0, 0.0]
    """
    return snap_residual(raw - slope * reference)


def reference_slope(scores: np.ndarray, reference: np.ndarray) -> float:
    """Least-squares slope of the suspect's word scores on the clean model's.

    A faithful copy reproduces the clean model's positions (slope ~1); a
    rougher copy reproduces part of them (a ridge copy: ~0.5); an independent
    model hardly any (~0.3). Subtracting ``slope * reference`` removes as much
    of each word's natural position as the suspect shares with the clean model,
    leaving the watermark's shift. The slope is fitted over every scored word
    without looking at which are triggers, a symmetric function of the scores,
    so the adjusted scores keep the rank test exact under the null. Summed in a fixed
    order (:func:`..ground.stable.least_squares_slope`), so the same on every CPU.
    """
    return least_squares_slope(scores, reference)
