"""The decision: one interrogation's word scores to a verdict, or to why there is none.

The triggers' ranks among the scored band words are tested exactly
(:mod:`..stats.ranktest`) for each score the plan supports; the verdict's p-value is
``min(1, k * m * min(p))`` over the m scores (Bonferroni, k the key's audit
round). A verdict is withheld, never guessed, when too few words were scored,
the answers are all alike, the band cannot reach the level, a fault would
clear the suspect, or the key's triggers are not its salt's draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ground.rows import unit_rows
from ..keys.key import WatermarkKey
from ..stats.ranktest import min_p_value, rank_sum_p_value
from .fields import inconclusive
from .paper_metrics import paper_metrics
from .report import Status, VerificationReport
from .scores import WordScores, adjusted_scores, reference_slope

__all__ = ["decide", "p_values", "uninformative", "unusable", "withheld"]


def decide(
    key: WatermarkKey, scores: WordScores, min_coverage: float, common: dict[str, Any]
) -> VerificationReport:
    """The verdict on one interrogation's answers, from their word scores.

    ``common`` holds the fields every outcome shares (:func:`.fields.common_fields`),
    its ``level`` and ``statistic`` among them.
    """
    n_words = len(key.band)
    cosines, raw = scores.cosines, scores.raw
    is_trigger = np.fromiter((w in key.triggers for w in key.band), dtype=bool, count=n_words)
    scored = np.isfinite(raw)
    partial: dict[str, Any] = dict(
        n_words_scored=int(scored.sum()),
        n_triggers_scored=int((scored & is_trigger).sum()),
        trigger_scores=tuple(float(s) for s in raw[scored & is_trigger]),
        benign_scores=tuple(float(s) for s in raw[scored & ~is_trigger]),
    )
    failed = unusable(partial, n_words, min_coverage) or uninformative(scores.embeddings, raw)
    if failed:
        return inconclusive(common, failed[0], next_step=failed[1], **partial)
    found = p_values(scores, is_trigger, scored, common["statistic"])
    # A round-k audit is the k-th try with this key: Bonferroni over the rounds.
    rounds = key.audit_round
    found["p_value"] = min(1.0, rounds * found["p_value"])
    smallest = min(
        1.0, rounds * min_p_value(partial["n_words_scored"], partial["n_triggers_scored"])
    )
    status: Status = "copied" if found["p_value"] < common["level"] else "not_copied"
    answered = float(np.isfinite(cosines).mean())
    held = withheld(
        status, partial["n_words_scored"], smallest, answered, min_coverage, key.verifiable, common
    )
    return VerificationReport(
        status="inconclusive" if held else status,
        reason=held[0] if held else "",
        next_step=held[1] if held else "",
        min_possible_p_value=smallest,
        **found,
        # the report's float fields; mypy matches a **dict[str, float] against every parameter
        **paper_metrics(cosines, scores.plan.owner, is_trigger),  # type: ignore[arg-type]
        **partial,
        **common,
    )


def unusable(
    partial: dict[str, Any], n_words: int, min_coverage: float, units: str = "band words"
) -> tuple[str, str] | None:
    """Why too few ``units`` (a word key's band words, a field key's field units) were
    scored for any test (None if enough were), and what to do."""
    n_scored, n_triggers = partial["n_words_scored"], partial["n_triggers_scored"]
    if n_scored / n_words >= min_coverage and 0 < n_triggers < n_scored:
        return None
    return (
        f"only {n_scored} of {n_words} {units} could be scored "
        f"({n_scored / n_words:.0%} < {min_coverage:.0%} required); the suspect failed too "
        "many queries for a reliable verdict",
        "the suspect failed part of the queries (see the cause above): slow down "
        "(OpenAIEndpoint's requests_per_second, a smaller batch_size / --batch-size), allow "
        "more retries (max_retries / --retries) and run the audit again; re-running is "
        "sound, since a fault is never evidence",
    )


def uninformative(answers: np.ndarray, raw_scores: np.ndarray) -> tuple[str, str] | None:
    """Why the answers carry no evidence either way, and what to do (None if they do)."""
    valid = answers[np.isfinite(answers).all(axis=1)]
    why = ""
    if len(valid) and np.unique(unit_rows(valid).round(12), axis=0).shape[0] < 2:
        why = "the suspect gave the same embedding for every probe"
    elif (finite := raw_scores[np.isfinite(raw_scores)]).size and np.ptp(finite) <= 1e-12:
        why = "every scored word got the same score"
    if not why:
        return None
    return (
        f"{why}: such answers are no evidence either way",
        "check that the suspect really is an embedding service for these texts (a stub or "
        "a cache error page answers everything alike); re-running will not change this",
    )


def withheld(
    status: str,
    n_scored: int,
    smallest: float,
    answered: float,
    min_coverage: float,
    verifiable: bool,
    common: dict[str, Any],
) -> tuple[str, str] | None:
    """Why a computed verdict must not be given (None if it may), and what to do next."""
    level = common["level"]
    if smallest >= level:
        return (
            f"with {n_scored} scored words the smallest reachable p-value is {smallest:.2g}, "
            f"not below the level {level:g}; use a key with a larger band",
            "generate a key with a larger band (a bigger corpus or a wider freq_band)",
        )
    if status == "not_copied" and answered < min_coverage:
        # A conviction on the probes that arrived is valid (the test is exact on any
        # subset chosen without the trigger labels); an acquittal on a fraction of
        # the evidence is not: faults must never clear a suspect.
        return (
            f"only {answered:.0%} of the probes were answered ({min_coverage:.0%} required "
            "to clear a suspect); the answered ones show no watermark at this level",
            "run the audit again once the suspect answers reliably (slow down, allow more "
            "retries: --retries); a fault never clears a suspect",
        )
    if not verifiable:
        return (
            "the key's triggers are not the draw its salt dictates (a hand-made key or one "
            "saved in format version 1), so no third party can check that they were drawn at "
            "random; generate a new key for verdicts",
            "generate a new key (WatermarkKey.generate or espew keygen) and watermark with it",
        )
    return None


def p_values(
    scores: WordScores,
    is_trigger: np.ndarray,
    scored: np.ndarray,
    statistic: str,
) -> dict[str, Any]:
    """Each statistic's exact p-value, and the verdict's: one of them, or their Bonferroni min."""
    raw, reference = scores.raw, scores.reference
    p_raw = rank_sum_p_value(raw[scored], is_trigger[scored])
    found: dict[str, float] = {"raw": p_raw}
    out: dict[str, Any] = {"p_value_raw": p_raw}
    if reference is not None:
        fitted = statistic != "corrected"
        slope = reference_slope(raw[scored], reference[scored]) if fitted else 1.0
        adjusted = adjusted_scores(raw, reference, slope)
        p_adjusted = rank_sum_p_value(adjusted[scored], is_trigger[scored])
        found["corrected" if statistic == "corrected" else "adjusted"] = p_adjusted
        out.update(p_value_adjusted=p_adjusted, reference_slope=slope)
    if scores.directed is not None:
        directed = scores.directed
        found["directed"] = rank_sum_p_value(directed[scored], is_trigger[scored])
        out["p_value_directed"] = found["directed"]
    if statistic != "combined":
        return {**out, "p_value": found[statistic], "decided_by": statistic}
    decided_by = min(found, key=found.__getitem__)
    p_value = min(1.0, len(found) * found[decided_by])
    return {**out, "p_value": p_value, "decided_by": decided_by}
