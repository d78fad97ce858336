"""The glue between an audit and :mod:`..stats.align`: answers mapped into the key's coordinates.

Why apart: the interrogation maps a suspect's answers before they are scored,
and the null study must map fixed answers exactly as the interrogation does, so
both call this one function; :mod:`..stats.align` itself knows nothing of plans.
"""

from __future__ import annotations

import numpy as np

from ..stats.align import Alignment, fit_alignment
from .plan import AuditPlan

__all__ = ["align_answers"]


def align_answers(
    plan: AuditPlan, answers: np.ndarray, cover: np.ndarray, key_dim: int
) -> tuple[Alignment | None, np.ndarray, np.ndarray]:
    """The map of the probe ``answers`` and ``cover`` answers onto the key's coordinates
    (:mod:`..stats.align`), fitted on every answered audit text against its clean row, and the
    two as verify scores them (mapped when the map is applied, else unchanged).
    ``lab.null_study.audit_scores`` calls it exactly as verify does."""
    assert plan.clean_rows is not None and plan.cover_rows is not None  # a plan that maps answers
    alignment = fit_alignment(
        np.vstack([answers, cover]), np.vstack([plan.clean_rows, plan.cover_rows]), key_dim
    )
    if alignment is None:
        return None, answers, cover
    return alignment, alignment.apply(answers), alignment.apply(cover)
