"""Each band word's directed score from every audit text that holds it, not only its probes.

The audit is a uniform sample of the corpus (:meth:`..mark.probes.BandScan.sample`), so
many of its texts that hold a band word hold two or more. A benign word sharing a
text with a trigger gets that text's marked answer, so averaging such texts in
naively blurs the triggers into the rest. Yet they are a large share of the
audit's band-word texts, already asked and answered.

ESpeW marks a text when it holds *any* trigger, so the evidence a shared text
gives about one of its words depends on the others. If another of its words is
surely a trigger, the text is marked whatever this word is, and says nothing
about it; if every other word is surely benign, it is as good as a probe of
this word alone. This module weighs each shared text accordingly
("explaining away"):

1. the texts with exactly one band word give each word a first score (the mean
   of their directed scores, less the baseline of the texts with no band word)
   and from it, through a two-group mixture with the key's trigger share, a
   probability ``q`` that the word marks;
2. a text holding word ``w`` and others ``O`` would be marked anyway with
   probability ``1 - a``, ``a = prod over O of (1 - q)``; its score less that
   expected part, ``y - delta (1 - a)``, estimates ``a * delta`` if ``w`` marks
   and 0 if not, so it joins ``w``'s score with weight ``a`` (and ``a**2`` in
   the denominator: inverse-variance weighting of an estimate scaled by ``a``);
3. ``q`` and ``delta`` are re-estimated from the new scores, four times.

Why the rank test stays exact: every step uses only the suspect's answers, the
texts' band words and the number of triggers, which is the same for every draw.
None of it looks at *which* words were drawn, so under the null the word scores
are fixed numbers and the triggers a uniformly random subset of them, as
before. A wrong model (a thief who does not mark by "any trigger", a mixture
that fits badly) costs power, never calibration.

What it gains over the probes alone, and that the innocents stay where they were:
``benchmarks/bench_word_evidence.py`` and ``docs/results/frontier/README.md``,
section 20.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ground.errors import InputError

__all__ = ["ROUNDS", "word_scores_from_texts"]

#: How many times ``q`` and ``delta`` are re-estimated: any fixed number keeps the
#: test exact; this one is about power only.
ROUNDS = 4

_TINY = 1e-12


def word_scores_from_texts(
    scores: np.ndarray,
    band_sets: Sequence[Sequence[int]],
    n_words: int,
    trigger_share: float,
    rounds: int = ROUNDS,
) -> np.ndarray:
    """Each band word's score from every scored text that holds it (module docstring).

    ``scores``: one directed score per audit text (NaN where the suspect failed);
    ``band_sets``: the band-word indices each text holds; ``trigger_share``: the
    key's number of triggers over its number of band words. A word no answered
    text holds gets NaN. With no shared texts this is each word's mean score
    less one constant, which ranks the words as the plain mean does.
    """
    y = np.asarray(scores, dtype=np.float64)
    sizes, words, texts = _pairs(y, band_sets, n_words, trigger_share)
    answered = np.isfinite(y)
    largest = float(np.max(np.abs(y[answered]))) if answered.any() else 0.0
    if largest > 0:  # every step is scale-free; this keeps a hostile 1e300 from overflowing
        y = y / largest
    unmarked = answered & (sizes == 0)
    baseline_rows = y[unmarked] if unmarked.sum() >= 2 else y[answered]
    if baseline_rows.size == 0:
        return np.full(n_words, np.nan)
    centred = y - float(np.median(baseline_rows))
    noise = float(np.var(baseline_rows, ddof=1)) if baseline_rows.size >= 2 else 1.0
    noise = noise if noise > 0 else 1.0

    single = answered[texts] & (sizes[texts] == 1)
    single_sum = np.bincount(words[single], weights=centred[texts[single]], minlength=n_words)
    single_n = np.bincount(words[single], minlength=n_words).astype(np.float64)
    shared = answered[texts] & (sizes[texts] >= 2)
    shared_texts, shared_words = texts[shared], words[shared]

    with np.errstate(invalid="ignore", divide="ignore"):
        word_score = single_sum / single_n
    weight = single_n.copy()
    delta = _TINY
    if np.isfinite(word_score).any():  # the spread of the first scores starts the mixture
        low, high = np.nanquantile(word_score, [trigger_share / 2, 1 - trigger_share / 2])
        delta = max(float(high - low), _TINY)
    for _ in range(max(rounds, 1)):
        marks = _mark_probability(word_score, weight, noise, delta, trigger_share)
        delta = _mark_size(word_score, marks, delta)
        log_benign = np.log(np.clip(1.0 - marks, _TINY, 1.0))
        text_log_benign = np.bincount(
            shared_texts, weights=log_benign[shared_words], minlength=len(y)
        )
        others_benign = np.exp(text_log_benign[shared_texts] - log_benign[shared_words])
        evidence = others_benign * (centred[shared_texts] - delta * (1.0 - others_benign))
        total = single_sum + np.bincount(shared_words, weights=evidence, minlength=n_words)
        weight = single_n + np.bincount(shared_words, weights=others_benign**2, minlength=n_words)
        with np.errstate(invalid="ignore", divide="ignore"):
            word_score = np.where(weight > 0, total / weight, np.nan)
    return word_score * largest  # back in the scores' own units


def _pairs(
    y: np.ndarray, band_sets: Sequence[Sequence[int]], n_words: int, trigger_share: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arguments checked, and each (text, band word) pair flattened: every text's
    count of band words, then the word and the text of each pair."""
    if y.ndim != 1 or len(y) != len(band_sets):
        raise InputError(f"{len(band_sets)} band sets for scores of shape {y.shape}")
    if not 0.0 < trigger_share < 1.0:
        raise InputError(f"trigger_share must be in (0, 1), got {trigger_share!r}")
    sizes = np.fromiter((len(s) for s in band_sets), dtype=np.int64, count=len(band_sets))
    words = np.fromiter((w for s in band_sets for w in s), dtype=np.int64, count=int(sizes.sum()))
    if words.size and (words.min() < 0 or words.max() >= n_words):
        raise InputError(f"band sets name words outside 0..{n_words - 1}")
    return sizes, words, np.repeat(np.arange(len(y)), sizes)


def _mark_probability(
    word_score: np.ndarray, weight: np.ndarray, noise: float, delta: float, share: float
) -> np.ndarray:
    """P(word marks) under a two-group mixture at 0 and ``delta``, prior ``share``;
    a word with no score keeps the prior."""
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = noise / weight
        log_ratio = delta * (delta - 2.0 * word_score) / (2.0 * variance)
    prior = np.log((1.0 - share) / share)
    marks = 1.0 / (1.0 + np.exp(np.clip(log_ratio + prior, -50.0, 50.0)))
    return np.where(np.isfinite(word_score) & (weight > 0), marks, share)


def _mark_size(word_score: np.ndarray, marks: np.ndarray, previous: float) -> float:
    """The mixture's gap: the ``marks``-weighted mean score less the rest's mean."""
    known = np.isfinite(word_score)
    if not known.any():
        return previous
    s, m = word_score[known], marks[known]
    if m.sum() <= 0 or (1 - m).sum() <= 0:
        return previous
    gap = float(np.sum(m * s) / m.sum() - np.sum((1 - m) * s) / (1 - m).sum())
    return max(gap, _TINY)
