"""verify(): ask whether a suspect embedding service learned a key's watermark.

The paper's probe-level KS test treats its probes as independent samples,
but every probe of one key is built from the same few trigger words, so
"these words happen to sit near the target" looks like a watermark; it
convicts innocent models far more often than its level allows
(docs/research/method.md, "The paper's recipe, and why it convicts
innocents"). We test at the word level instead:

1. every word of the key's band (the triggers and all equally frequent words
   they were drawn from) is probed the same way: by default with the natural
   corpus texts stored in the key at keygen (:mod:`.probes`), which a thief
   cannot tell from ordinary traffic; optionally by the word alone;
2. all probes go to the suspect shuffled together, so it cannot tell trigger
   probes from the others by content, order or batch;
3. each word gets up to three scores: a *raw* score, the mean cosine of its
   probes' embeddings to the target; a *reference-adjusted* score, the raw
   score minus ``slope *`` the provider's clean model's score for the same
   probes (stored in the key), with the slope fitted over all words
   (:func:`reference_slope`), which cancels each word's natural position; and
   a *directed* score (:mod:`.directed`): each audit text's answer (less what
   a ridge fit on the clean rows explains) projected on that text's own mark
   direction, computed from the clean embeddings the key stores, and summed
   into a score for each band word over every text that holds it, the texts
   shared with other band words weighed by how likely those are to mark
   (:mod:`.word_evidence`). The directed score ignores
   the coordinates a mark never touches, so it is the one that catches the
   copies that carry only a trace of a quality-preserving watermark;
4. the exact rank test of :mod:`.ranktest` asks, for each score, whether the
   triggers rank unusually high among all equally likely trigger draws; the
   verdict's p-value is ``min(1, m * min(p))`` over the m scores the key
   supports (Bonferroni; m = 3 for keys with probe embeddings, 2 for older
   keys or ``target_mode="query"``), and the report says which score decided.

Every score is exact under the null: neither the suspect, nor the clean model,
nor the mark directions depend on which band words were drawn, so the
triggers stay a uniformly random subset of the scored words. The paper's own
metrics (KS p-value, delta cos, delta l2) are reported on the same probes as
comparability figures; they never decide the verdict.
"""

from __future__ import annotations

import os
from typing import Any

from .audit import (
    Answers,
    AuditPlan,
    Recorder,
    SuspectFn,
    audit_subject,
    check_statistic,
    check_suspect,
    decide,
    decide_field,
    inconclusive,
    interrogate,
    plan_audit,
    record_start,
    recorded,
    word_scores,
)
from .audit.options import AuditOptions
from .audit.references import ReferenceAnswers, ask_references, recorded_references
from .audit.report import VerificationReport
from .ground.progress import Progress, check_progress
from .keys.key import WatermarkKey
from .records.transcript import as_recorder, encode_answer

#: :func:`verify` alone: the audit pipeline's names are :mod:`.audit`'s.
__all__ = ["verify"]


def verify(
    suspect: SuspectFn,
    key: WatermarkKey,
    options: AuditOptions | None = None,
    *,
    progress: Progress | None = None,
    transcript: str | os.PathLike[str] | Recorder | None = None,
    suspect_name: str | None = None,
    suspect_label: str = "",
    **settings: Any,
) -> VerificationReport:
    """Test whether ``suspect`` was trained on embeddings watermarked with ``key``.

    How to audit is ``options`` (:class:`.audit.options.AuditOptions`, each option
    documented there with its default and why), or its fields passed as keyword
    arguments (``level=``, ``batch_size=``, ``seed=``...), or both: the keywords then
    replace those fields of ``options``. A bad option is an
    :class:`~.errors.OptionsError` (a ``ValueError``), before anything is asked.
    ``suspect`` is a callable ``list[str] -> array (n, d')`` (the package-root
    :func:`espew_integrations.verify` also takes LangChain, LlamaIndex, Chroma and
    :class:`OpenAIEndpoint` suspects). ``probes="auto"`` sends the natural-text probes
    stored in the key (or, for keys that store none, the band words, as ``"words"``
    does with ``templates``), shuffled (``seed`` fixes it), in batches of ``batch_size``.
    ``statistic="combined"`` decides on the raw, reference-adjusted and directed scores
    together (module docstring); ``"raw"``, ``"adjusted"``, ``"corrected"`` or
    ``"directed"`` use one. ``target_mode="key"`` compares with the stored target,
    mapping answers of another dimension or rotated coordinates back when the key
    stores its audit's clean rows (:mod:`.align`); ``"query"`` uses the suspect's own
    embedding of ``key.target_text``, which it therefore sees.

    Faults of the suspect never count as evidence: they leave words unscored, and
    below ``min_coverage`` of the band's words scored the report is inconclusive (so
    it is for uninformative answers, an unverifiable key, a suspect that sends no
    answer for ``stall_timeout`` seconds, and asking beyond ``deadline`` seconds when
    one is set, :class:`.audit.Deadline`), saying why and what to do next.
    ``progress(done, total)`` is called after each batch with the texts asked so far
    and the audit's total (:mod:`.progress`).
    ``transcript`` (a private directory) records what was sent and what came back
    (:mod:`.transcript`; ``report.transcript_digest`` commits to it); the reports
    name the suspect ``suspect_name`` (default: described) and ``suspect_label``.
    ``references`` (a field key only): the auditor's reference copies, asked for the
    audit's texts before the suspect; the field statistic adjusts for their leans
    (:mod:`.audit.references`; the report names them in ``reference_names``).

    >>> verify(suspect_model, key).copied          # doctest: +SKIP
    True
    """
    check_suspect(suspect)
    options = AuditOptions.of(options, settings)
    check_progress(progress)
    plan = plan_audit(key, options.probes, options.templates, options.target_mode)
    check_statistic(plan, options.statistic)
    references = ask_references(options.references, key, plan)  # before the suspect is asked
    subject = audit_subject(suspect, as_recorder(transcript), suspect_name, suspect_label)
    header = recorded_references(references, encode_answer)
    record_start(subject, "verify", suspect, key, options.recorded(), **header)
    asked = interrogate(suspect, key, plan, options, progress, subject)
    return recorded(subject, _verdict(key, plan, asked, references, options.min_coverage))


def _verdict(
    key: WatermarkKey,
    plan: AuditPlan,
    asked: Answers,
    references: ReferenceAnswers | None,
    min_coverage: float,
) -> VerificationReport:
    """The report on the answers: scored (with the references' leans) and decided."""
    if references is not None:
        asked.common.update(reference_names=references.names, references_sha256=references.digest)
    if asked.reason:
        return inconclusive(asked.common, asked.reason)
    leans = None if references is None else references.leans
    scores = word_scores(
        plan, asked.embeddings, asked.target_vector, len(key.band), asked.cover, leans
    )
    verdict = decide_field if key.field is not None else decide
    return verdict(key, scores, min_coverage, asked.common)
