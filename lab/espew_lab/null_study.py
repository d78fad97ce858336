"""Null studies: how often would the verdict accuse a service that never saw the watermark?

Under the null the trigger draw is independent of the suspect, so a suspect's
per-word scores for one target can be computed once and reused across many
trigger draws: each draw is one fresh key (same band and target, new
triggers), and its p-value is the rank test on the same scores
(:func:`~espew_integrations.core.stats.ranktest.subset_p_values`). This makes
10,000+ null trials a matter of seconds, and it is exactly the computation
:func:`~espew_integrations.core.verify.verify_callable` performs for each of those keys.
A measuring tool, not part of a verdict, hence the lab.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from espew_integrations.core.audit.alignment import align_answers
from espew_integrations.core.audit.plan import plan_audit
from espew_integrations.core.audit.scores import adjusted_scores, reference_slope, word_scores
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.stats.ranktest import subset_p_values

__all__ = [
    "NullStudy",
    "audit_scores",
    "combined_p_values",
    "false_positive_summary",
    "fresh_draws",
    "null_p_values",
    "verdict_null_p_values",
]

#: The statistics verify() combines for a key with probe embeddings, in its order.
PARTS = ("raw", "adjusted", "directed")


def null_p_values(
    scores: np.ndarray, n_triggers: int, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """p-values of ``n_draws`` uniformly drawn trigger sets over fixed word scores.

    ``scores`` are one suspect's per-word scores for one target (all band
    words). Each draw picks ``n_triggers`` words uniformly without replacement,
    as :meth:`WatermarkKey.generate` does, and gets the exact rank-test p-value.

    >>> p = null_p_values(np.random.default_rng(0).normal(size=200), 20, 1000,
    ...                   np.random.default_rng(1))
    >>> bool((p < 1e-6).sum() == 0)
    True
    """
    scores = np.asarray(scores, dtype=np.float64)
    total = scores.size
    if not 0 < n_triggers < total:
        raise ValueError(f"need 0 < n_triggers < {total} words, got {n_triggers}")
    # A random n-subset per draw: the n smallest of N uniform keys.
    draws = np.argpartition(rng.random((n_draws, total)), n_triggers - 1, axis=1)[:, :n_triggers]
    return subset_p_values(scores, draws)


def fresh_draws(
    key: WatermarkKey, n_draws: int, rng: np.random.Generator
) -> tuple[list[bytes], np.ndarray]:
    """``n_draws`` fresh salts and the sorted band indices of the triggers each one draws.

    Each salt is one fresh key (``key.replace(salt=..., triggers=draw_triggers(...))``),
    drawn exactly as keygen draws its triggers.
    """
    position = {word: i for i, word in enumerate(key.band)}
    n_triggers = len(key.triggers)
    salts, indices = [], np.empty((n_draws, n_triggers), dtype=np.int64)
    for d in range(n_draws):
        salt = rng.bytes(32)
        salts.append(salt)
        indices[d] = sorted(position[w] for w in draw_triggers(salt, key.band, n_triggers))
    return salts, indices


def audit_scores(
    answers: np.ndarray, key: WatermarkKey, cover_answers: np.ndarray | None = None
) -> dict[str, np.ndarray | float]:
    """One suspect's raw, adjusted and directed word scores for a sentence-probe key,
    made by verify()'s own plan, alignment and scoring
    (:mod:`~espew_integrations.core.audit`; ``directed`` only for a key that stores
    its probe embeddings), and the fitted reference ``slope``.

    ``answers`` are the suspect's embeddings of ``key.probe_texts``;
    ``cover_answers`` its embeddings of ``key.cover_texts``, required when the
    key stores their clean rows (verify fits the directed score on them too).
    None of this looks at the triggers, so it is computed once per suspect and
    reused for every fresh trigger draw.
    """
    n_words = len(key.band)
    plan = plan_audit(key, "sentences", None)
    if plan.cover_rows is not None and cover_answers is None:
        raise ValueError(
            "this key stores its cover texts' clean rows: pass the suspect's answers to "
            "key.cover_texts as cover_answers, as verify() uses them"
        )
    if cover_answers is not None and np.shape(cover_answers) != (len(key.cover_texts), key.dim):
        raise ValueError(
            f"cover_answers must have shape ({len(key.cover_texts)}, {key.dim}), "
            f"got {np.shape(cover_answers)}"
        )
    answers = np.asarray(answers, dtype=np.float64)
    if cover_answers is not None and plan.cover_rows is not None:  # as verify maps them
        cover_answers = np.asarray(cover_answers, dtype=np.float64)
        _, answers, cover_answers = align_answers(plan, answers, cover_answers, key.dim)
    scores = word_scores(plan, answers, key.target, n_words, cover_answers)
    raw, reference = scores.raw, scores.reference
    if not np.isfinite(raw).all():
        raise ValueError("the suspect left band words unscored; a null study assumes none")
    slope = reference_slope(raw, reference)
    out: dict[str, np.ndarray | float] = {
        "raw": raw,
        "adjusted": adjusted_scores(raw, reference, slope),
        "slope": slope,
    }
    if scores.directed is not None:
        out["directed"] = scores.directed
    return out


def combined_p_values(*parts: np.ndarray) -> np.ndarray:
    """verify's rule, ``min(1, m * min(p_1, ..., p_m))``, elementwise (the same floats)."""
    return np.minimum(1.0, len(parts) * np.min(np.stack(parts), axis=0))


def verdict_null_p_values(scores: dict, draws: np.ndarray) -> dict[str, np.ndarray]:
    """Each statistic's p-value for every trigger draw (rows of band indices), and the
    verdict's (``"combined"``), from :func:`audit_scores`' output."""
    found = {name: subset_p_values(scores[name], draws) for name in PARTS if name in scores}
    found["combined"] = combined_p_values(*found.values())
    return found


@dataclass(frozen=True)
class NullStudy:
    """Observed false positives of many null trials at several levels."""

    n_trials: int
    p_values: np.ndarray

    def false_positives(self, level: float) -> int:
        """How many null trials would have been convicted at ``level``."""
        return int(np.count_nonzero(self.p_values < level))

    def rate(self, level: float) -> float:
        """Observed false-positive rate at ``level`` (should be <= level)."""
        return self.false_positives(level) / max(self.n_trials, 1)


def false_positive_summary(
    study: NullStudy, levels: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-6)
) -> str:
    """A small table: level, false positives, observed rate, and the bound."""
    lines = [f"{'level':>8} {'false positives':>16} {'observed rate':>14}  (bound = level)"]
    for level in levels:
        lines.append(
            f"{level:>8.0e} {study.false_positives(level):>10d}/{study.n_trials:<5d} "
            f"{study.rate(level):>14.2e}"
        )
    return "\n".join(lines)
