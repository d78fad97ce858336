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
from .plan import AuditPlan
from .recorder import Recorder
from .references import ReferenceAnswers, recorded_references
from .report import VerificationReport
from .scores import WordScores, word_scores
from .settings import SuspectFn
from .subject import Subject, audit_subject, record_start

__all__ = ["AuditRun", "run_audit"]


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
    design = key.design  # plans (``options`` checked the probes), asks references, decides
    plan: AuditPlan = design.plan(key, options.probes, options.templates, options.target_mode)
    design.check_statistic(plan, options.statistic)
    references = design.references(options.references, key, plan)  # before the suspect
    subject = audit_subject(suspect, recorder, suspect_name, suspect_label)
    extra = {**(header or {}), **recorded_references(references, encode)}
    record_start(subject, audit, suspect, key, settings, **extra)
    asked = interrogate(suspect, key, plan, options, progress, subject)
    leans = None
    if references is not None:
        asked.common.update(reference_names=references.names, references_sha256=references.digest)
        leans = references.leans  # the scores are adjusted for the references' leans
    scores: WordScores | None = None
    if asked.reason:
        report = inconclusive(asked.common, asked.reason)
    else:
        scores = word_scores(
            plan, asked.embeddings, asked.target_vector, len(key.band), asked.cover, leans
        )
        report = design.decide(key, scores, options.min_coverage, asked.common)
    return AuditRun(plan, references, subject, asked, scores, report)
