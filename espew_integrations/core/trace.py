"""trace_callable(): was a suspect trained on a ring's answers, and on which account's?

One audit serves every tenant. The suspect is asked the ring's probes once
(the same shuffled queries :func:`.verify.verify_callable` sends for the shared key);
the answers give a raw, a reference-adjusted and (for keys that store their
probes' clean embeddings) a directed score per band word, and

* the **shared layer** gets :func:`.verify.verify_callable`'s verdict for
  :attr:`KeyRing.shared_key` (``report.shared``);
* each **tenant layer** gets the same exact one-sided rank-sum test, over the
  universe (the band words that are not shared triggers): are the tenant's
  words ranked unusually high among them?
* *copied* is decided on both: ``p = min(1, 2 * min(p_shared, p_best_tenant))``
  (Bonferroni over the two families, so still exact). Why not the shared
  layer alone: a copy of one account carries that account's own words too,
  and in the shared test they count among the "other" band words, ranking
  next to the shared triggers and diluting them (docs/tenants.md; the
  figures: docs/research/measurements.md, "Per-customer keys: tracing").
  The shared layer is what survives collusion, the tenant layer what a
  single-account copy shows best; the report says which decided.

Why each tenant's test is exact, even for a copy of another tenant's answers,
how overlapping layers are re-tested and how many tenants are adjusted for:
:mod:`.audit.tenant_layers`, which holds the statistic.

**A map ring** (the default) **or a field ring** (:mod:`.keys.keyring`,
``marking="field"``): the layers are units, and the one interrogation scores every
unit by the design's statistic (``key.design.universe_scores``: what ``verify``
ranks the key's drawn units by); the shared verdict is ``verify``'s for the shared
key, and each
tenant's units are ranked among the units outside the shared layer by the
same exact test, adjusted the same way (one statistic, so the factor is the
number of tenants). The units' scores depend on the audit's clean rows and
the shared salt alone, never on any tenant's draw, so the argument for
exactness is the words' own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .audit.evidence_files import PUBLIC_P_FLOOR, format_public_p, public_p_value
from .audit.fields import TRACE_RULE
from .audit.options import AuditOptions
from .audit.pipeline import AuditRun, run_audit
from .audit.recorder import Recorder
from .audit.report import VerificationReport
from .audit.scores import WordScores
from .audit.settings import check_suspect
from .audit.subject import REPLAYED_SETTINGS, Subject
from .audit.tenant_layers import tenant_p_values
from .ground.errors import InputError, OptionsError
from .ground.progress import Progress, check_progress
from .keys.keyring import KeyRing
from .keys.layers import check_tenant_id
from .mark.design import design_class
from .records.evidence import save_trace_evidence
from .records.transcript import as_recorder, encode_answer

__all__ = ["TraceReport", "trace_callable"]


# ---------------------------------------------------------------------- report
@dataclasses.dataclass(frozen=True, repr=False)
class TraceReport:
    """The outcome of :func:`trace_callable`.

    ``copied``, ``status`` and ``p_value`` are the verdict on both layers
    (``decided_by`` says which; the shared layer's own verdict is ``shared``,
    a full :class:`VerificationReport`). ``traced`` lists the
    tenant ids whose own layer is detected, strongest evidence first;
    ``tenant_p_values`` maps *every* tested id to its adjusted p-value.

    What :meth:`to_dict`, :meth:`to_json`, ``str(report)`` and
    ``repr(report)`` give is safe to hand to the suspect's owner: the shared
    verdict's public form (:meth:`VerificationReport.to_dict`), only the
    traced accounts, by id, and the verdict's p-values floored as the shared
    report's are (:func:`~.audit.evidence_files.public_p_value`);
    ``n_universe_scored`` (how many words outside the shared layer were
    scored: it moves with whether a word the suspect withheld is a shared
    trigger), the traced accounts' own p-values (see :func:`_public_trace`)
    and which layer decided a verdict below the floor are left out. The list
    of all tested accounts (the provider's customer list), their p-values and
    every exact figure go only to :meth:`to_private_dict`.
    """

    shared: VerificationReport
    status: str
    p_value: float
    decided_by: str
    level: float
    ring_id: str
    n_tenants: int
    traced: tuple[str, ...]
    tenant_p_values: Mapping[str, float]
    tenant_triggers: int
    n_universe_scored: int
    decision_rule: str = TRACE_RULE
    reason: str = ""
    marking: str = "words"

    @property
    def copied(self) -> bool:
        """True iff the suspect is judged a copy of the ring's service at ``level``."""
        return self.status == "copied"

    @property
    def shared_p_value(self) -> float:
        """The shared layer's own p-value (what survives accounts voting together)."""
        return self.shared.p_value

    def to_dict(self, *, public: bool = True) -> dict[str, Any]:
        """JSON-ready; by default the public form, safe to share (see the class docstring).

        ``public=False`` gives every figure exactly (the traced accounts'
        p-values too) but still names only the traced accounts and no per-word
        score (the auditor's own records).
        """
        out: dict[str, Any] = {
            "copied": self.copied,
            "status": self.status,
            "p_value": self.p_value,
            "decided_by": self.decided_by,
            "shared_p_value": self.shared_p_value,
            "level": self.level,
            "ring_id": self.ring_id,
            "n_tenants": self.n_tenants,
            "traced": list(self.traced),
            "traced_p_values": {t: self.tenant_p_values[t] for t in self.traced},
            "tenant_triggers": self.tenant_triggers,
            "marking": self.marking,
            "n_universe_scored": self.n_universe_scored,
            "decision_rule": self.decision_rule,
            "reason": self.reason,
            "shared": self.shared.to_dict(public=public),
        }
        return _public_trace(out) if public else out

    def to_private_dict(self) -> dict[str, Any]:
        """Everything, exactly: every tested account's p-value and the per-word scores."""
        out = self.to_dict(public=False)
        out["tenant_p_values"] = dict(self.tenant_p_values)
        out["shared"] = self.shared.to_private_dict()
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The shareable report as JSON text (:meth:`to_dict`)."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the shareable evidence into ``directory``; returns the ``trace.json`` path.

        ``trace.json`` (:meth:`to_dict`) next to the shared layer's own
        ``report.json`` and ``summary.md`` (:meth:`VerificationReport.save`);
        existing files are kept unless ``force=True``, and nothing is written
        if any of them is in the way. The records room writes them
        (:func:`.records.evidence.save_trace_evidence`).
        """
        return save_trace_evidence(self.shared, self.to_json(), directory, force=force)

    def __str__(self) -> str:
        """The public form as text (:meth:`to_dict`): floored p-values, traced accounts only."""
        data = self.to_dict()
        if self.traced:
            named = ", ".join(f"{t} (p < {self.level:g})" for t in data["traced"][:10])
            more = f" and {len(self.traced) - 10} more" if len(self.traced) > 10 else ""
            accounts = f"{named}{more}"
        else:
            accounts = "none"
        verdict = {
            "copied": "COPIED: the suspect carries this ring's watermark",
            "not_copied": "NOT COPIED: no evidence of this ring's watermark",
            "inconclusive": "INCONCLUSIVE: no verdict could be reached",
        }[self.status]
        decided = f"; decided by {data['decided_by']}" if data["decided_by"] else ""
        p_text = format_public_p(data["p_value"], data["p_value_below_floor"])
        shared_p = format_public_p(data["shared_p_value"], data["shared_p_value_below_floor"])
        lines = [
            str(self.shared),
            f"ESpeW trace (ring {self.ring_id}): {self.n_tenants} accounts tested, "
            f"{self.tenant_triggers} {design_class(self.marking).units} "
            "of each account's own layer",
            f"  verdict        : {verdict}",
            f"  p-value        : {p_text} (both layers{decided}; shared layer alone {shared_p})",
            f"  traced         : {accounts}",
            f"  false accusations: any innocent account is named with probability <= "
            f"{self.level:g} (adjusted for {self.n_tenants} accounts)",
        ]
        if self.reason:
            lines.append(f"  note           : {self.reason}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The public verdict only: never the tested accounts, which a repr would list."""
        data = self.to_dict()
        p_text = format_public_p(data["p_value"], data["p_value_below_floor"])
        return (
            f"TraceReport(status={self.status!r}, {p_text}, level={self.level:g}, "
            f"ring_id={self.ring_id!r}, n_tenants={self.n_tenants}, traced={self.traced!r})"
        )


def _public_trace(out: dict[str, Any]) -> dict[str, Any]:
    """The trace's public form: the verdict's and the shared layer's p-values floored
    and rounded as the shared report's (:func:`~.audit.evidence_files.public_p_value`, each
    with its ``_below_floor`` flag); ``n_universe_scored`` and the traced accounts'
    own p-values left out, ``decided_by`` left out below the floor.

    Why no per-account p-value: a tenant layer is small (10-20 words), so its
    smallest reachable p-value can sit above the floor, where it is set by how
    many words outside the shared layer were scored, and so tells a suspect that
    withheld a word's answers whether it is a shared trigger. Each traced
    account's p-value is below the level (that is what traced means); the
    exact figures are in :meth:`TraceReport.to_private_dict`."""
    del out["n_universe_scored"]
    level = out["level"]
    out["p_value"], out["p_value_below_floor"] = public_p_value(out["p_value"], level)
    out["shared_p_value"], out["shared_p_value_below_floor"] = public_p_value(
        out["shared_p_value"], level
    )
    del out["traced_p_values"]  # a tenant layer's reachable minimum may sit above the floor
    out["public_p_floor"] = PUBLIC_P_FLOOR
    if out["p_value_below_floor"]:
        out["decided_by"] = ""
    return out


# ---------------------------------------------------------------------- trace
def trace_callable(
    suspect: Any,
    ring: KeyRing,
    tenants: Iterable[str],
    options: AuditOptions | None = None,
    *,
    progress: Progress | None = None,
    transcript: str | os.PathLike[str] | Recorder | None = None,
    suspect_name: str | None = None,
    suspect_label: str = "",
    **settings: Any,
) -> TraceReport:
    """Test ``suspect`` against a ring's shared layer and every tenant's own layer.

    ``tenants`` are the account ids to test (typically every account the
    ring's keys were served to; the adjustment grows with their number, the
    query count does not). The other options mean what they mean for
    :func:`~.verify.verify_callable` (``deadline`` too: the seconds the one interrogation may
    take; ``transcript``, ``suspect_name`` and ``suspect_label`` too: the transcript
    also keeps the ring's id and the accounts), and the shared verdict is exactly
    ``verify(suspect, ring.shared_key, ...)``'s.

    >>> report = trace(suspect, ring, ["alice", "bob"])  # doctest: +SKIP
    >>> report.copied, report.traced                     # doctest: +SKIP
    (True, ('bob',))
    """
    ids = _check_tenants(tenants)
    check_suspect(suspect)
    options = AuditOptions.of(options, settings)
    check_progress(progress)
    if options.templates is not None:
        raise OptionsError("trace asks the key's own probes; it takes no templates")
    if options.references:
        raise OptionsError(
            "trace does not use reference copies; pass references to verify with one account's key"
        )
    run = run_audit(
        "trace",
        suspect,
        ring.shared_key,
        options,
        recorder=as_recorder(transcript),
        settings=options.recorded([name for name in REPLAYED_SETTINGS if name != "templates"]),
        encode=encode_answer,
        progress=progress,
        suspect_name=suspect_name,
        suspect_label=suspect_label,
        header=dict(ring_id=ring.ring_id, tenants=ids),
    )
    return _recorded(run.subject, _trace_answers(run, ring, ids))


def _trace_answers(run: AuditRun, ring: KeyRing, ids: list[str]) -> TraceReport:
    """The trace's verdict on one interrogation's answers: the shared layer's, then each
    account's own layer over the universe (see the module docstring)."""
    key, level, shared = ring.shared_key, run.asked.common["level"], run.report
    common: dict[str, Any] = dict(level=level, ring_id=ring.ring_id, n_tenants=len(ids))
    common["tenant_triggers"] = ring.n_tenant_triggers
    common.update(key.design.trace_fields())
    if run.scores is None:
        return _no_verdict(shared, dict.fromkeys(ids, math.nan), 0, common)
    raw, reference, directed = _universe_scores(run.scores, ring, shared.statistic)
    adjusted = tenant_p_values(
        raw,
        reference,
        ring.layer_indices(ids),
        level=level,
        statistic=shared.statistic,
        directed=directed,
    )
    adjusted = np.minimum(1.0, key.audit_round * adjusted)  # as verify does (audit_round)
    n_scored = int(np.isfinite(raw).sum())
    p_values = dict(zip(ids, adjusted.tolist(), strict=True))
    if shared.status == "inconclusive":
        return _no_verdict(shared, p_values, n_scored, common)
    return _verdict(shared, ids, adjusted, p_values, n_scored, common)


def _recorded(subject: Subject, report: TraceReport) -> TraceReport:
    """``report`` whose shared layer carries the transcript's digest, once the end record
    (the trace's verdict, exactly) is written; the digest is published with it."""
    if subject.recorder is None:
        return report
    outcome = {
        "status": report.status,
        "p_value": report.p_value,
        "traced": list(report.traced),
        "report": report.to_dict(public=False),
    }
    digest = subject.recorder.finish(outcome)
    shared = dataclasses.replace(report.shared, transcript_digest=digest)
    return dataclasses.replace(report, shared=shared)


def _universe_scores(
    scores: WordScores, ring: KeyRing, statistic: str
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Per universe word: the suspect's mean cosine to the target, the clean
    reference's, and the directed score (:mod:`.audit.directed`).

    Why from the shared audit's word scores: every tenant layer is a subset of
    the universe, so the one interrogation :func:`trace_callable` already made, and
    the scores its shared verdict computed, score them all; no query is sent
    per tenant. The reference is None when the plan has none or the statistic
    does not use it; so is the directed score. A field ring's universe words are
    units, scored by the field statistic alone (no reference, no directed score).
    """
    position = {w: i for i, w in enumerate(ring.shared_key.band)}
    in_band = np.array([position[w] for w in ring.universe], dtype=np.int64)
    return ring.shared_key.design.universe_scores(scores, in_band, statistic)


def _verdict(
    shared: VerificationReport,
    ids: list[str],
    adjusted: np.ndarray,
    p_values: dict[str, float],
    n_scored: int,
    common: dict[str, Any],
) -> TraceReport:
    """Copied on both layers, and the accounts traced, strongest evidence first.

    Why both layers: ``p = min(1, 2 * min(p_shared, best tenant p))`` is
    exact (Bonferroni over the two families) and lets whichever layer a copy
    shows best decide; see the module docstring. Accounts are named only
    when the suspect is judged a copy.
    """
    level = common["level"]
    best = int(np.argmin(adjusted))
    p_value = min(1.0, 2.0 * min(shared.p_value, float(adjusted[best])))
    copied = p_value < level
    hits = np.flatnonzero(adjusted < level) if copied else np.array([], dtype=np.int64)
    hits = hits[np.argsort(adjusted[hits], kind="stable")]  # strongest evidence first
    return TraceReport(
        shared,
        status="copied" if copied else "not_copied",
        p_value=p_value,
        decided_by="shared layer" if shared.p_value <= adjusted[best] else "tenant layer",
        traced=tuple(ids[i] for i in hits),
        tenant_p_values=p_values,
        n_universe_scored=n_scored,
        **common,
    )


def _no_verdict(
    shared: VerificationReport,
    p_values: dict[str, float],
    n_scored: int,
    common: dict[str, Any],
) -> TraceReport:
    """The shared audit reached no verdict (faults, coverage, unverifiable key): name nobody."""
    return TraceReport(
        shared,
        status="inconclusive",
        p_value=math.nan,
        decided_by="",
        traced=(),
        tenant_p_values=p_values,
        n_universe_scored=n_scored,
        reason="no account is named when the audit reached no verdict: " + shared.reason,
        **common,
    )


def _check_tenants(tenants: Iterable[str]) -> list[str]:
    if isinstance(tenants, str):
        raise InputError("tenants must be an iterable of account ids, not one string")
    ids = [check_tenant_id(t) for t in tenants]
    if not ids:
        raise InputError("no tenant ids given: pass the accounts to test")
    if len(set(ids)) != len(ids):
        duplicate = next(t for t, n in Counter(ids).items() if n > 1)
        raise InputError(f"tenant id {duplicate!r} is listed twice")
    return ids
