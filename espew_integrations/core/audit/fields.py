"""What every report of an audit says, whatever its outcome.

Why apart from the decision: an audit that ends before any score (a fault,
the deadline, a dimension the key cannot take) still reports what was asked,
of whom and how it went, and it must say so in the same fields, with the same
rule, as one that reaches a verdict.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import numpy as np

from ..keys.key import WatermarkKey
from .plan import AuditPlan
from .report import VerificationReport

__all__ = [
    "DECISION_RULE",
    "FIELD_DECISION_RULE",
    "FIELD_TRACE_RULE",
    "TRACE_RULE",
    "common_fields",
    "inconclusive",
    "n_statistics",
    "statistic_used",
]

DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation tests at the word level: the "
    "triggers' scores against every scored word of the key's frequency band, with raw "
    "scores (mean cosine of the word's probes to the target), with scores adjusted by the "
    "provider's clean model (minus a fitted slope times its score for the same probes) and "
    "with directed scores (mean whitened projection of the word's probe answers on each "
    "probe's own mark direction); p = min(1, k * m * smallest of the m p-values the key "
    "supports), k the key's audit round (1 for keygen's own audit); copied iff p < level"
)


FIELD_DECISION_RULE = (
    "one-sided exact rank-sum (Mann-Whitney) permutation test over a field key's units: "
    "each unit scores the covariance, over the audit's texts, of the suspect's lean along "
    "each text's own mark direction (less a fitted slope times the clean model's) with the "
    "unit's keyed projection of the text's clean embedding; the drawn units' scores are "
    "ranked among all units; p = min(1, k * p_test), k the key's audit round; copied iff "
    "p < level"
)

#: The rule of a word ring's trace (:func:`..trace.trace_callable`).
TRACE_RULE = (
    "copied iff p < level, p = min(1, 2 * min(p_shared, smallest tenant p)), p_shared the "
    "shared layer's verify() p-value (see shared.decision_rule). Traced: for each tenant, exact "
    "one-sided rank-sum tests of its own layer among the band words outside the shared layer, "
    "after removing the layers of the other tenants significant in a first round; "
    "p = min(1, 2 * n_tenants * min(p_raw, p_adjusted)) (Bonferroni over tenants and "
    "statistics); traced iff copied and p < level, strongest first"
)
#: The rule of a field ring's trace: the same, over field units and one statistic.
FIELD_TRACE_RULE = (
    "copied iff p < level, p = min(1, 2 * min(p_shared, smallest tenant p)), p_shared the "
    "shared field key's verify() p-value (see shared.decision_rule). Traced: for each tenant, "
    "the exact one-sided rank-sum test of its own field units' scores among the units outside "
    "the shared layer, after removing the units of the other tenants significant in a first "
    "round; p = min(1, n_tenants * p_field) (Bonferroni over tenants); traced iff copied and "
    "p < level, strongest first"
)


def common_fields(
    key: WatermarkKey,
    plan: AuditPlan,
    target_mode: str,
    level: float,
    statistic: str,
    seed: int | None,
    answers: np.ndarray,
    errors: list[str],
    dim: int | None,
) -> dict[str, Any]:
    """The report fields every outcome shares: what was asked, of whom, and how it went."""
    return dict(
        key_id=key.key_id,
        key_commitment=key.commitment(),
        audit_round=key.audit_round,
        target_mode=target_mode,
        n_queries=len(answers),
        n_failed_queries=int((~np.isfinite(answers).all(axis=1)).sum()),
        n_words=len(key.band),
        level=level,
        decision_rule=key.design.decision_rule,
        suspect_dim=dim,
        templates=plan.templates,
        seed=seed,
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        errors=tuple(errors[:20]),
        probes=plan.kind,
        statistic=key.design.statistic_used(plan, statistic),
        n_statistics=key.design.n_statistics(plan, statistic),
    )


def n_statistics(plan: AuditPlan, statistic: str) -> int:
    """How many exact tests a word key's verdict's p-value is the Bonferroni minimum of:
    it depends on the key and the mode alone, never on which words were scored."""
    if statistic != "combined":
        return 1
    return 1 + (plan.reference is not None) + (plan.directions is not None)


def statistic_used(plan: AuditPlan, statistic: str) -> str:
    """The statistic a word key's report names: "raw" when a combined verdict has
    nothing to combine."""
    if statistic == "combined" and plan.reference is None and plan.directions is None:
        return "raw"
    return statistic


def inconclusive(common: dict[str, Any], reason: str, **extra: Any) -> VerificationReport:
    """The report of an audit that reached no verdict: every score NaN or empty,
    ``reason`` saying why (``common`` or ``extra`` carry its ``next_step``)."""
    values: dict[str, Any] = dict(
        status="inconclusive",
        p_value=math.nan,
        n_words_scored=0,
        n_triggers_scored=0,
        min_possible_p_value=math.nan,
        trigger_scores=(),
        benign_scores=(),
        ks_p_value=math.nan,
        delta_cos=math.nan,
        delta_l2=math.nan,
        reason=reason,
    )
    values.update(common)
    values.update(extra)
    return VerificationReport(**values)
