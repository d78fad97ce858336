"""Each tenant layer's exact test, over the universe: the statistic ``trace`` decides on.

Every tenant's layer is tested with the same one-sided rank-sum test as the
shared verdict (:mod:`..stats.ranktest`), on the word scores of the one
interrogation ``trace`` made (:mod:`.scores`), restricted to the universe (the
band words that are not shared triggers). It is a pure function of scores and
layers, so a null study runs it on synthetic scores.

Why each tenant's test is exact, even when the copy was trained on another
tenant's answers: tenant D's layer is a uniform random subset of the
universe, drawn from D's own salt, independent of every other tenant's draw.
A suspect that never saw D's answers produces scores that do not depend on
D's draw (whoever else it copied), so D's words are a uniform random subset of
the ranks and P(p_D <= a) <= a. Every tenant's test uses the same score
vector, so with no ties the null distribution depends only on (words, layer
size): it is computed once and each tenant's rank sum is looked up in it,
vectorised over the tenants (ties: the tie structure is also common to all
tenants, so one exact table still serves them all).

**Overlap.** Layers of m = 20 out of ~180 words overlap by chance (about two
words per pair), so under a copy of A, an innocent B shares some of A's
shifted words. B's test stays valid (above), but its p-value is pulled down
by evidence that belongs to A. So the reported p-value of each tenant D is a
second round: D is re-tested with the layers of the *other* tenants that were
significant in a first round removed from the universe (its own words among
them too). That removal set depends on the scores and on other tenants'
draws only, never on D's, so conditionally on it D's remaining words are a
uniform subset of the remaining universe: still exact.

**Many tenants.** Each p-value is multiplied by the number of tenants tested
(Bonferroni, and by the number of scores combined, 2 or 3, as ``verify``
does), so the probability of naming any innocent account is at most ``level``.
"""

from __future__ import annotations

import numpy as np

from ..ground.defaults import DEFAULT_LEVEL
from ..ground.errors import InputError
from ..stats.ranktest import doubled_mid_ranks, rank_sum_tails
from .scores import adjusted_scores, reference_slope

__all__ = ["layer_p_values", "tenant_p_values"]


def tenant_p_values(
    raw: np.ndarray,
    reference: np.ndarray | None,
    layers: np.ndarray,
    *,
    level: float = DEFAULT_LEVEL,
    statistic: str = "combined",
    directed: np.ndarray | None = None,
) -> np.ndarray:
    """Adjusted p-value of every tenant layer, from per-word scores over the universe.

    ``raw`` holds the suspect's score for each universe word (NaN: unscored),
    ``reference`` the clean model's (or None), ``directed`` the suspect's
    directed score (or None), ``layers`` each tenant's
    universe indices ``(n_tenants, m)``. Returns ``min(1, n_tenants * p)``
    where p is the second-round (others' significant layers removed) p-value
    of the chosen statistic; see the module docstring for why it is exact.
    This is the whole statistic ``trace`` decides on, so a null study can
    run it on synthetic scores.
    """
    raw = np.asarray(raw, dtype=np.float64)
    layers = np.asarray(layers, dtype=np.int64)
    if layers.ndim != 2 or layers.shape[0] == 0 or raw.ndim != 1:
        raise InputError("layers must be (n_tenants, m) indices into a 1-D score vector")
    scores = _statistic_scores(raw, reference, statistic, directed)
    n_tenants = layers.shape[0]
    factor = n_tenants * len(scores)
    scored = np.isfinite(raw)
    first = np.minimum(1.0, factor * _best_p(scores, scored, layers))
    named = np.flatnonzero(first < level)
    if named.size == 0:
        return first
    removed = np.zeros(raw.size, dtype=bool)
    removed[layers[named].ravel()] = True
    final = np.minimum(1.0, factor * _best_p(scores, scored & ~removed, layers))
    for t in named:  # a named tenant keeps its own words: remove the *other* named layers
        others = np.zeros(raw.size, dtype=bool)
        others[layers[named[named != t]].ravel()] = True
        one = layers[t : t + 1]
        final[t] = min(1.0, factor * float(_best_p(scores, scored & ~others, one)[0]))
    return final


def _statistic_scores(
    raw: np.ndarray, reference: np.ndarray | None, statistic: str, directed: np.ndarray | None
) -> list[np.ndarray]:
    """The score vectors whose p-values are combined (one statistic's, or all the key supports)."""
    if directed is not None:
        directed = np.asarray(directed, dtype=np.float64)
        if directed.shape != raw.shape:
            raise InputError("directed must have one value per universe word")
        if statistic == "directed":
            return [directed]
    extra = [directed] if directed is not None and statistic == "combined" else []
    if reference is None or statistic == "raw":
        return [raw, *extra] if statistic == "combined" else [raw]
    reference = np.asarray(reference, dtype=np.float64)
    if reference.shape != raw.shape:
        raise InputError("reference must have one value per universe word")
    ok = np.isfinite(raw) & np.isfinite(reference)
    slope = 1.0 if statistic == "corrected" else reference_slope(raw[ok], reference[ok])
    adjusted = np.where(ok, adjusted_scores(raw, reference, slope), np.nan)
    if statistic in ("adjusted", "corrected"):
        return [adjusted]
    return [raw, adjusted, *extra]


def _best_p(scores: list[np.ndarray], keep: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """Per tenant, the smallest exact rank-sum p-value over the score vectors."""
    best = np.ones(layers.shape[0])
    for vector in scores:
        np.minimum(best, layer_p_values(vector, keep & np.isfinite(vector), layers), out=best)
    return best


def layer_p_values(scores: np.ndarray, keep: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """Exact one-sided rank-sum p-value of each layer among the kept words.

    The same as :func:`..stats.ranktest.rank_sum_p_value` on ``scores[keep]`` with
    each layer's kept words as triggers, but the null table is built once per
    layer size and shared by every tenant (the tie structure is the same for
    all of them).
    """
    n_kept = int(keep.sum())
    p = np.ones(layers.shape[0])
    if n_kept < 2:
        return p
    doubled = np.zeros(scores.size, dtype=np.int64)
    doubled[keep] = doubled_mid_ranks(scores[keep])
    sums = doubled[layers].sum(axis=1)
    sizes = keep[layers].sum(axis=1)
    tied = np.unique(doubled[keep]).size < n_kept
    for size in np.unique(sizes):
        if size == 0 or size >= n_kept:
            continue
        rows = sizes == size
        tails = rank_sum_tails(
            tuple(np.sort(doubled[keep]).tolist()) if tied else n_kept, int(size)
        )
        observed = sums[rows]
        inside = observed < tails.size
        p[rows] = np.where(inside, tails[np.minimum(observed, tails.size - 1)], 0.0)
    return p
