"""One audit, start to verdict: plan -> record_start -> interrogate -> score -> decide.

Why a module: :func:`~espew_integrations.core.verify.verify_callable` and
:func:`~espew_integrations.core.trace.trace_callable` run the same audit of one key (trace
then tests its tenant layers on the scores). Each step is a public seam of its
own module; this one runs them in order, for any key design, and returns what
every step made (:class:`AuditRun`), so a front end only adds what is its own.
It writes no file: what is asked and heard goes to the :class:`.recorder.Recorder`
it is given (the records room's transcript is one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..ground.progress import Progress
from ..keys.key import WatermarkKey
from .asking import Answers, interrogate
from .fields import inconclusive
from .options import AuditOptions
from .plan import AuditPlan, plan_audit
from .recorder import Recorder
from .references import ReferenceAnswers, recorded_references
from .report import VerificationReport
from .scores import WordScores, word_scores
from .settings import SuspectFn
from .subject import Subject, audit_subject, record_start

__all__ = ["AuditRun", "plan_run", "run_audit", "score"]


@dataclasses.dataclass(frozen=True)
class AuditRun:
    """What one audit made: its plan, the references' answers (None: none asked), whom it
    asked (and its recorder), the answers, their scores (None when the asking failed)
    and the key design's report on them (not yet recorded: the front end finishes the
    record, with what it adds)."""

    plan: AuditPlan
    references: ReferenceAnswers | None
    subject: Subject
    asked: Answers
    scores: WordScores | None
    report: VerificationReport


def plan_run(key: WatermarkKey, options: AuditOptions) -> tuple[AuditPlan, ReferenceAnswers | None]:
    """The plan (its statistic checked by the key's design) and the references' answers,
    asked before the suspect is."""
    plan = plan_audit(key, options.probes, options.templates, options.target_mode)
    key.design.check_statistic(plan, options.statistic)
    references = key.design.references(options.references, key, plan)
    return plan, references


def score(
    key: WatermarkKey, plan: AuditPlan, asked: Answers, references: ReferenceAnswers | None
) -> WordScores:
    """The answers scored for the plan, adjusted for the references' leans when asked."""
    leans = None if references is None else references.leans
    return word_scores(
        plan, asked.embeddings, asked.target_vector, len(key.band), asked.cover, leans
    )


def run_audit(
    audit: str,
    suspect: SuspectFn,
    key: WatermarkKey,
    options: AuditOptions,
    *,
    recorder: Recorder | None,
    settings: dict[str, Any],
    encode: Callable[[Any], dict[str, Any]],
    progress: Progress | None = None,
    suspect_name: str | None = None,
    suspect_label: str = "",
    header: Mapping[str, Any] | None = None,
) -> AuditRun:
    """Plan, record the start, interrogate, score and let the key's design decide.

    ``audit`` (``"verify"``, ``"trace"``), ``settings`` (what a replay passes again) and
    ``header`` (a trace's ring and accounts) go to the recorder's start record,
    with the references' exact rows (``encode``: the recorder's answer codec).

    >>> run = run_audit("verify", suspect, key, AuditOptions(), recorder=None,
    ...                 settings={}, encode=encode_answer)  # doctest: +SKIP
    >>> run.report.copied                                   # doctest: +SKIP
    True
    """
    plan, references = plan_run(key, options)
    subject = audit_subject(suspect, recorder, suspect_name, suspect_label)
    extra = {**(header or {}), **recorded_references(references, encode)}
    record_start(subject, audit, suspect, key, settings, **extra)
    asked = interrogate(suspect, key, plan, options, progress, subject)
    if references is not None:
        asked.common.update(reference_names=references.names, references_sha256=references.digest)
    if asked.reason:
        report = inconclusive(asked.common, asked.reason)
        return AuditRun(plan, references, subject, asked, None, report)
    scores = score(key, plan, asked, references)
    report = key.design.decide(key, scores, options.min_coverage, asked.common)
    return AuditRun(plan, references, subject, asked, scores, report)
