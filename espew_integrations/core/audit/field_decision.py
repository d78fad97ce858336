"""A field key's decision: the suspect's answers to its audit, scored per field unit, to a verdict.

Why apart from :mod:`.decision`: a field key (:mod:`..designs.field`) has no band words,
so none of the word scores apply; its one statistic ranks the drawn units among
all the field's units (:func:`..mark.field.field_scores`, then :mod:`..stats.ranktest`).
The rules that withhold a verdict are the word keys' (:func:`.decision.withheld`),
plus one: a keygen audit must be the one the field's ``mu`` and ``sigma`` were
computed from, so that nobody chose them after seeing a suspect.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ground.rows import unit_rows
from ..keys.key import WatermarkKey
from ..mark.field import drawn_mask, field_scores
from ..stats.ranktest import min_p_value, rank_sum_p_value
from .decision import uninformative, unusable, withheld
from .fields import inconclusive
from .report import Status, VerificationReport
from .scores import WordScores

__all__ = ["decide_field", "unit_scores"]

#: The fewest answered audit texts a field score is computed from.
_MIN_ANSWERED = 3


def decide_field(
    key: WatermarkKey,
    field: Any,
    scores: WordScores,
    min_coverage: float,
    common: dict[str, Any],
    per_unit: np.ndarray | None = None,
    decided_by: str = "field",
) -> VerificationReport:
    """The verdict on a unit key's audit answers (``field``: the key's, its design's
    parameters, with ``units`` and ``derived_from``; ``common`` as for
    :func:`.decision.decide`). ``per_unit``: every unit's score when the design scores
    otherwise than the field (a map key's), else :func:`unit_scores`; ``decided_by``
    names that statistic in the report."""
    answers = scores.embeddings
    answered = np.isfinite(answers).all(axis=1)
    is_drawn = drawn_mask(field.units, key.triggers)
    if per_unit is None:
        per_unit = unit_scores(scores)
    scored = np.isfinite(per_unit)
    partial: dict[str, Any] = dict(
        n_words_scored=int(scored.sum()),
        n_triggers_scored=int((scored & is_drawn).sum()),
        trigger_scores=tuple(float(s) for s in per_unit[scored & is_drawn]),
        benign_scores=tuple(float(s) for s in per_unit[scored & ~is_drawn]),
    )
    # only identical answers are no evidence: the clean model itself scores all units
    # alike (its lean is its reference), and an innocent must be cleared, not doubted
    no_scores = np.array([np.nan])
    failed = unusable(partial, field.units, min_coverage, f"{decided_by} units") or uninformative(
        answers, no_scores
    )
    if failed:
        return inconclusive(common, failed[0], next_step=failed[1], **partial)
    rounds = key.audit_round
    p_value = min(1.0, rounds * rank_sum_p_value(per_unit, is_drawn))
    smallest = min(1.0, rounds * min_p_value(field.units, int(is_drawn.sum())))
    status: Status = "copied" if p_value < common["level"] else "not_copied"
    held = withheld(
        status,
        partial["n_words_scored"],
        smallest,
        float(answered.mean()),
        min_coverage,
        key.verifiable,
        common,
    ) or _not_derived(key, field)
    return VerificationReport(
        status="inconclusive" if held else status,
        reason=held[0] if held else "",
        next_step=held[1] if held else "",
        min_possible_p_value=smallest,
        p_value=p_value,
        decided_by=decided_by,
        ks_p_value=math.nan,
        delta_cos=math.nan,
        delta_l2=math.nan,
        **partial,
        **common,
    )


def unit_scores(scores: WordScores) -> np.ndarray:
    """Every field unit's score from a field plan's answers (all NaN if too few answered).

    What the key's verdict ranks its drawn units by, and what ``trace`` ranks each
    tenant's units by (:mod:`..trace`): one score vector per interrogation. With
    reference leans (``scores.extra_leans``, :mod:`.references`) each text's lean is
    adjusted for them too.
    """
    plan, answers = scores.plan, scores.embeddings
    assert plan.field_z is not None and plan.directions is not None
    assert plan.clean_rows is not None
    if np.isfinite(answers).all(axis=1).sum() < _MIN_ANSWERED:
        return np.full(plan.field_z.shape[1], np.nan)
    clean = unit_rows(plan.clean_rows)
    return field_scores(answers, plan.directions, clean, plan.field_z, scores.extra_leans)


def _not_derived(key: WatermarkKey, field: Any) -> tuple[str, str] | None:
    """Why a keygen audit's verdict must not be given when the field was not computed from it.

    Only the keygen audit is checked: an audit drawn later (``with_audit``, which
    records ``audit_corpus_sha256``, for a later round or another domain) cannot have
    produced the field's centre and scales, which the serving key fixed before it.
    """
    redrawn = "audit_corpus_sha256" in key.info
    if key.audit_round != 1 or redrawn or field.derived_from(key.probe_embeddings, key.salt):
        return None
    return (
        "the field's centre and scales are not those of the key's own audit, so nobody can "
        "check that they were fixed before any suspect was seen",
        "verify with the key and the audit file espew keygen wrote together",
    )
