"""VerificationReport: what :func:`~.verify.verify` concluded, and why, in every form it is read.

The report is read by the provider (``str(report)``), by programs
(:meth:`~VerificationReport.to_dict`, :meth:`~VerificationReport.to_json`)
and by the other side (:meth:`~VerificationReport.save`, the public evidence
bundle of :mod:`.evidence_files`). Every form but the private dict leaves out
the per-word scores, which would let a suspect that logged its answers find
the triggers. An inconclusive report says why (the suspect's own errors, made
printable) and what to do next, so nobody has to dig into ``report.errors``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Literal

from .evidence_files import save_evidence
from .untrusted import printable

__all__ = ["Status", "VerificationReport"]

Status = Literal["copied", "not_copied", "inconclusive"]

_PRIVATE_FIELDS = ("trigger_scores", "benign_scores")
_TUPLE_FIELDS = ("trigger_scores", "benign_scores", "templates", "errors")
_VERDICTS = {
    "copied": "COPIED: the suspect carries this key's watermark",
    "not_copied": "NOT COPIED: no evidence of this key's watermark",
    "inconclusive": "INCONCLUSIVE: no verdict could be reached",
}
#: Distinct errors ``str(report)`` shows for an inconclusive verdict.
_CAUSES_SHOWN = 3
_GENERIC_NEXT_STEP = (
    "check that the suspect is reachable and answers these texts, then run the audit again"
)


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """The outcome of :func:`verify`, with what a reader needs to trust it.

    ``copied`` is True only when ``status == "copied"``. What :meth:`to_dict`,
    :meth:`to_json`, ``str(report)`` and :meth:`save` produce is safe to hand
    to the suspect's owner: no word, no per-word score. ``trigger_scores`` and
    ``benign_scores`` (the words' raw scores; a suspect that logged its own
    answers could match them to its queries and recover the triggers) stay on
    the object and go only to :meth:`to_private_dict` and
    :func:`espew_integrations.evidence.save_private_evidence`.
    ``ks_p_value``, ``delta_cos`` and ``delta_l2`` are the paper's metrics for
    comparison only. ``n_queries`` counts the texts the audit asked the
    suspect to embed, ``n_failed_queries`` those it got no usable answer for
    (:attr:`n_answered` the rest). An inconclusive report gives its ``reason``
    and, where the cause suggests one, a ``next_step``.
    """

    status: Status
    p_value: float
    level: float
    decision_rule: str
    key_id: str
    target_mode: str
    n_queries: int
    n_failed_queries: int
    n_words: int
    n_words_scored: int
    n_triggers_scored: int
    min_possible_p_value: float
    trigger_scores: tuple[float, ...]
    benign_scores: tuple[float, ...]
    ks_p_value: float
    delta_cos: float
    delta_l2: float
    suspect_dim: int | None
    templates: tuple[str, ...]
    seed: int | None
    timestamp: str
    reason: str = ""
    errors: tuple[str, ...] = ()
    probes: str = "words"
    statistic: str = "raw"
    p_value_raw: float = math.nan
    p_value_adjusted: float = math.nan
    reference_slope: float = math.nan
    p_value_directed: float = math.nan
    decided_by: str = ""
    next_step: str = ""
    audit_round: int = 1
    alignment: str = ""

    @property
    def copied(self) -> bool:
        """True iff the suspect is judged a copy at ``level``."""
        return self.status == "copied"

    @property
    def n_answered(self) -> int:
        """Texts the suspect answered with a usable embedding."""
        return self.n_queries - self.n_failed_queries

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict, safe to share: no key material, no per-word scores."""
        out = self.to_private_dict()
        for name in _PRIVATE_FIELDS:
            del out[name]
        return out

    def to_private_dict(self) -> dict[str, Any]:
        """Everything, per-word scores included: for the provider's records or an arbiter."""
        out = dataclasses.asdict(self)
        out["copied"] = self.copied
        for name in _TUPLE_FIELDS:
            out[name] = list(out[name])
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The shareable report as JSON text (:meth:`to_dict`)."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerificationReport:
        """Rebuild a report from :meth:`to_dict` (scores empty) or :meth:`to_private_dict`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name in _TUPLE_FIELDS:
            values[name] = tuple(values.get(name, ()))
        return cls(**values)

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the shareable evidence into ``directory``; returns the JSON path.

        Writes ``report.json`` and a plain-language ``summary.md``
        (:func:`~.evidence_files.save_evidence`); existing files are kept unless
        ``force=True``. Per-word detail goes only to
        :func:`espew_integrations.evidence.save_private_evidence`.

        >>> report.save("evidence/")  # doctest: +SKIP
        PosixPath('evidence/report.json')
        """
        return save_evidence(self, directory, force=force)["json"]

    def __str__(self) -> str:
        lines = [
            f"ESpeW verification report (key {self.key_id}, {self.timestamp})",
            f"  verdict        : {_VERDICTS[self.status]}",
        ]
        if self.reason:
            lines.append(f"  reason         : {printable(self.reason, limit=500)}")
        if self.status == "inconclusive":
            lines += _cause_lines(self)
        lines += _test_lines(self)
        lines.append(f"  queries        : {_query_count(self)}; target from {self.target_mode}")
        if self.alignment.startswith("applied"):  # the thief's isometry, undone (core/align.py)
            lines.append(f"  answers mapped : {self.alignment}")
        lines.append(_paper_line(self))
        return "\n".join(lines)


def _cause_lines(report: VerificationReport) -> list[str]:
    """The suspect's first distinct errors (made printable) and what to do next."""
    distinct = list(dict.fromkeys(printable(error) for error in report.errors))
    lines = []
    for i, error in enumerate(distinct[:_CAUSES_SHOWN]):
        label = "cause" if i == 0 else ""
        lines.append(f"  {label:<15}: {error}")
    if len(distinct) > _CAUSES_SHOWN:
        lines.append(f"  {'':<15}: ... {len(distinct) - _CAUSES_SHOWN} more in report.errors")
    lines.append(f"  next step      : {report.next_step or _GENERIC_NEXT_STEP}")
    return lines


def _test_lines(report: VerificationReport) -> list[str]:
    if math.isnan(report.p_value):  # no test was run: a NaN p-value would only confuse
        return [
            f"  test           : not run ({report.n_words_scored} of {report.n_words} band "
            f"words scored, {report.n_triggers_scored} of them triggers)"
        ]
    adjusted = (
        ""
        if math.isnan(report.p_value_adjusted)
        else f", reference-adjusted p = {report.p_value_adjusted:.3g} "
        f"(slope {report.reference_slope:.2f})"
    )
    directed = (
        ""
        if math.isnan(report.p_value_directed)
        else f", directed p = {report.p_value_directed:.3g}"
    )
    decided = f"; decided by {report.decided_by}" if report.decided_by else ""
    rounds = (
        f"  audit round    : {report.audit_round}: p is {report.audit_round} times the "
        "round's own (every earlier round counts as a try)"
    )
    return ([rounds] if report.audit_round > 1 else []) + [
        f"  p-value        : {report.p_value:.3g}  (copied iff p < {report.level:g}; "
        f"an innocent service is convicted with probability <= {report.level:g})",
        f"  statistics     : raw p = {report.p_value_raw:.3g}{adjusted}{directed}{decided}",
        f"  test           : exact one-sided rank test over {report.n_words_scored} band "
        f"words, {report.n_triggers_scored} of them triggers "
        f"(smallest reachable p {report.min_possible_p_value:.2g})",
    ]


def _query_count(report: VerificationReport) -> str:
    """Texts asked and answered; texts nobody answered are never called 'sent'."""
    kind = {"words": "word probes", "sentences": "texts (sentence probes and cover)"}.get(
        report.probes, f"{report.probes} probes"
    )
    if report.n_answered == 0:
        return (
            f"none of the {report.n_queries} {kind} was answered ({report.n_failed_queries} failed)"
        )
    return (
        f"{report.n_answered} of {report.n_queries} {kind} answered, "
        f"{report.n_failed_queries} failed"
    )


def _paper_line(report: VerificationReport) -> str:
    if math.isnan(report.ks_p_value):
        return "  paper metrics  : not computed (no trigger and benign probes both answered)"
    return (
        "  paper metrics  : (comparability only, not the decision) "
        f"KS p = {report.ks_p_value:.3g}, delta cos = {100 * report.delta_cos:.2f}%, "
        f"delta l2 = {100 * report.delta_l2:.2f}%"
    )
