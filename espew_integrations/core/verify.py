"""verify_callable(): ask whether a suspect embedding service learned a key's watermark.

The audit is the key's design's (:mod:`.mark.design`), run by one pipeline
(:mod:`.audit.pipeline`, which ``trace`` runs too): plan what to ask, record the
start, ask the suspect every audit text shuffled together (so it cannot tell
which texts matter by content, order or batch), score the answers, and let the
design decide with an exact rank test (:mod:`.stats.ranktest`) over draws that
are equally likely under the null.

**The map design** (the default, :mod:`.designs.map`): every audit text is a
probe; each unit scores how the suspect's answers lean along the unit's keyed output
direction in step with the unit's keyed projection of the text's clean embedding,
after a per-unit fit removes what the clean model's own lean (and the auditor's
reference copies', if given) explains, and the drawn units are ranked among all
units (:func:`.designs.map.map_unit_scores`).

**The field design** (:mod:`.designs.field`): every audit text is a probe; each
field unit scores how the suspect's answers lean along each text's own mark
direction with the unit's keyed projection of the text's clean embedding, and the
drawn units are ranked among all units (:func:`.audit.field_decision.decide_field`);
the auditor's reference copies, if given, adjust the leans (:mod:`.audit.references`).

**The word design** (the paper's, :mod:`.designs.words`). The paper's probe-level
KS test treats its probes as independent samples,
but every probe of one key is built from the same few trigger words, so
"these words happen to sit near the target" looks like a watermark; it
convicts innocent models far more often than its level allows
(docs/research/method.md, "The paper's recipe, and why it convicts
innocents"). We test at the word level instead:

1. every word of the key's band (the triggers and all equally frequent words
   they were drawn from) is probed the same way: by default with the natural
   corpus texts stored in the key at keygen (:mod:`.mark.probes`), which a thief
   cannot tell from ordinary traffic; optionally by the word alone;
2. all probes go to the suspect shuffled together, so it cannot tell trigger
   probes from the others by content, order or batch;
3. each word gets up to three scores: a *raw* score, the mean cosine of its
   probes' embeddings to the target; a *reference-adjusted* score, the raw
   score minus ``slope *`` the provider's clean model's score for the same
   probes (stored in the key), with the slope fitted over all words
   (:func:`~.audit.scores.reference_slope`), which cancels each word's natural position; and
   a *directed* score (:mod:`.audit.directed`): each audit text's answer (less what
   a ridge fit on the clean rows explains) projected on that text's own mark
   direction, computed from the clean embeddings the key stores, and summed
   into a score for each band word over every text that holds it, the texts
   shared with other band words weighed by how likely those are to mark
   (:mod:`.stats.word_evidence`). The directed score ignores
   the coordinates a mark never touches, so it is the one that catches the
   copies that carry only a trace of a quality-preserving watermark;
4. the exact rank test of :mod:`.stats.ranktest` asks, for each score, whether the
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

from .audit.options import AuditOptions
from .audit.pipeline import run_audit
from .audit.recorder import Recorder
from .audit.report import VerificationReport
from .audit.settings import SuspectFn, check_suspect
from .audit.subject import recorded
from .ground.progress import Progress, check_progress
from .keys.key import WatermarkKey
from .records.transcript import as_recorder, encode_answer

#: :func:`verify_callable` alone: the audit pipeline's names are :mod:`.audit`'s.
__all__ = ["verify_callable"]


def verify_callable(
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
    :class:`~.ground.errors.OptionsError` (a ``ValueError``), before anything is asked.
    ``suspect`` is a callable ``list[str] -> array (n, d')`` (the package-root
    :func:`espew_integrations.verify` also takes LangChain, LlamaIndex, Chroma and
    :class:`~..http.client.OpenAIEndpoint` suspects). The key's design plans, scores and decides the
    audit (:mod:`.audit.pipeline`; the module docstring): ``probes="auto"`` sends the
    texts stored in the key, shuffled (``seed`` fixes it), in batches of ``batch_size``;
    ``statistic="combined"`` decides on every score the design supports.
    ``target_mode="key"`` compares with the stored target, mapping answers back when
    the key stores its audit's clean rows (:mod:`.stats.align`); ``"query"`` uses the
    suspect's own embedding of ``key.target_text``, which it therefore sees.

    Faults of the suspect never count as evidence: they leave words unscored, and
    below ``min_coverage`` of the band's words scored the report is inconclusive (so
    it is for uninformative answers, an unverifiable key, a suspect that sends no
    answer for ``stall_timeout`` seconds, and asking beyond ``deadline`` seconds when
    one is set, :class:`.audit.suspect_calls.Deadline`), saying why and what to do next.
    ``progress(done, total)`` hears of each batch (:mod:`.ground.progress`).
    ``transcript`` (a private directory) records what was sent and what came back
    (:mod:`.records.transcript`; ``report.transcript_digest`` commits to it); the reports
    name the suspect ``suspect_name`` (default: described) and ``suspect_label``.
    ``references`` (a map or field key only): the auditor's reference copies, asked for
    the audit's texts before the suspect; the map and field statistics adjust for their leans
    (:mod:`.audit.references`; the report names them in ``reference_names``).

    >>> verify(suspect_model, key).copied          # doctest: +SKIP
    True
    """
    check_suspect(suspect)
    options = AuditOptions.of(options, settings)
    check_progress(progress)
    run = run_audit(
        "verify",
        suspect,
        key,
        options,
        recorder=as_recorder(transcript),
        settings=options.recorded(),
        encode=encode_answer,
        progress=progress,
        suspect_name=suspect_name,
        suspect_label=suspect_label,
    )
    return recorded(run.subject, run.report)
