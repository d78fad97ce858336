"""VerificationReport: what :func:`~..verify.verify_callable` concluded, and why, in every
form it is read.

The report is read by the provider (``str(report)``), by programs
(:meth:`~VerificationReport.to_dict`, :meth:`~VerificationReport.to_json`)
and by the other side (:meth:`~VerificationReport.save`, the public evidence
bundle of :mod:`.evidence_files`, which the records room writes). ``str``, ``repr``, ``to_dict()``,
``to_json()`` and ``save()`` give the *public* form, safe to hand over: no
per-word score (a suspect that logged its answers would find the triggers)
and no figure that moves with which band words were scored (a suspect that
withheld one word's answers would learn whether it is a trigger; see
:func:`.evidence_files.public_fields`). The auditor's own object keeps every
attribute exactly; ``to_dict(public=False)`` gives every figure exactly
(the lab's records) and :meth:`~VerificationReport.to_private_dict` adds the
per-word scores. An inconclusive report says why (the suspect's own errors,
made printable) and what to do next, so nobody has to dig into
``report.errors``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Literal, Protocol

from ..ground.errors import StateError
from ..ground.untrusted import printable, tally
from ..mark.design import units_of_statistic
from .evidence_files import (
    PRIVATE_REPORT_KEYS,
    PUBLIC_P_DIGITS,
    PUBLIC_P_FLOOR,
    WITHHELD_REPORT_KEYS,
    format_public_p,
    public_fields,
)

__all__ = ["EvidenceWriter", "Status", "VerificationReport", "install_evidence_writer"]

Status = Literal["copied", "not_copied", "inconclusive"]

_TUPLE_FIELDS = ("trigger_scores", "benign_scores", "templates", "errors", "reference_names")
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


@dataclasses.dataclass(frozen=True, repr=False)
class VerificationReport:
    """The outcome of :func:`~..verify.verify_callable`, with what a reader needs to trust it.

    ``copied`` is True only when ``status == "copied"``. What :meth:`to_dict`,
    :meth:`to_json`, ``str(report)``, ``repr(report)`` and :meth:`save`
    produce is safe to hand to the suspect's owner: no word, no per-word
    score, no figure that moves with which band words were scored, p-values
    no lower than :data:`~.evidence_files.PUBLIC_P_FLOOR`
    (:func:`~.evidence_files.public_fields`). Every attribute stays exact on
    the object. ``trigger_scores`` and ``benign_scores`` (the words' raw
    scores; a suspect that logged its own answers could match them to its
    queries and recover the triggers) go only to :meth:`to_private_dict` and
    :func:`espew_integrations.evidence.save_private_evidence`.
    ``ks_p_value``, ``delta_cos`` and ``delta_l2`` are the paper's metrics for
    comparison only. ``n_queries`` counts the texts the audit asked the
    suspect to embed, ``n_failed_queries`` those it got no usable answer for
    (:attr:`n_answered` the rest). An inconclusive report gives its ``reason``
    and, where the cause suggests one, a ``next_step``. ``reference_names`` names
    the auditor's reference copies a field audit's statistic was adjusted for
    (empty: none) and ``references_sha256`` commits to their exact rows
    (:mod:`.references`).
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
    suspect: str = ""
    suspect_label: str = ""
    key_commitment: str = ""
    transcript_digest: str = ""
    n_statistics: int = 0
    reference_names: tuple[str, ...] = ()
    references_sha256: str = ""

    @property
    def copied(self) -> bool:
        """True iff the suspect is judged a copy at ``level``."""
        return self.status == "copied"

    @property
    def n_answered(self) -> int:
        """Texts the suspect answered with a usable embedding."""
        return self.n_queries - self.n_failed_queries

    def to_dict(self, *, public: bool = True) -> dict[str, Any]:
        """Plain JSON-ready dict; by default the public form, safe to share.

        ``public=True``: :func:`~.evidence_files.public_fields`, what
        ``report.json`` holds (no key material, no per-word score, no figure
        that moves with which band words were scored, p-values floored at
        :data:`~.evidence_files.PUBLIC_P_FLOOR`). ``public=False``: every
        figure exactly, per-word scores left out: the auditor's own records
        (the lab's); never hand it to the other side.
        """
        out = dataclasses.asdict(self)
        out["copied"] = self.copied
        for name in _TUPLE_FIELDS:
            out[name] = list(out[name])
        for name in PRIVATE_REPORT_KEYS:
            del out[name]
        return public_fields(out) if public else out

    def to_private_dict(self) -> dict[str, Any]:
        """Everything, exactly, per-word scores included: for the provider or an arbiter."""
        out = self.to_dict(public=False)
        for name in PRIVATE_REPORT_KEYS:
            out[name] = list(getattr(self, name))
        return out

    def to_json(self, **kwargs: Any) -> str:
        """The shareable report as JSON text (:meth:`to_dict`, the public form)."""
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerificationReport:
        """Rebuild a report from any of :meth:`to_dict`'s forms or :meth:`to_private_dict`.

        Fields a form leaves out come back empty: per-word scores as ``()``,
        and from the public form the withheld figures as NaN (counts as -1,
        "not disclosed"), its p-values as published (the floor, not the tail).
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name in WITHHELD_REPORT_KEYS:
            if name not in values and name not in _TUPLE_FIELDS:
                values[name] = -1 if fields[name].type == "int" else math.nan
        for name in _TUPLE_FIELDS:
            values[name] = tuple(values.get(name, ()))
        return cls(**values)

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the shareable evidence into ``directory``; returns the JSON path.

        Writes ``report.json`` and a plain-language ``summary.md`` through the
        records room (:func:`espew_integrations.core.records.evidence.save_evidence`,
        :func:`install_evidence_writer`); existing files are kept unless
        ``force=True``. Per-word detail goes only to
        :func:`espew_integrations.evidence.save_private_evidence`.

        >>> report.save("evidence/")  # doctest: +SKIP
        PosixPath('evidence/report.json')
        """
        if not _EVIDENCE_WRITER:
            raise StateError("no evidence writer installed: import espew_integrations.core")
        return _EVIDENCE_WRITER[0](self, directory, force=force)["json"]

    def __str__(self) -> str:
        """The public form as text (:meth:`to_dict`): what ``espew verify`` prints."""
        data = self.to_dict()
        lines = [
            f"ESpeW verification report (key {self.key_id}, {self.timestamp})",
            f"  verdict        : {_VERDICTS[self.status]}",
        ]
        if self.reason:
            lines.append(f"  reason         : {printable(self.reason, limit=500)}")
        if self.status == "inconclusive":
            lines += _cause_lines(self)
        lines += _test_lines(data)
        lines.append(f"  queries        : {_query_count(self)}; target from {self.target_mode}")
        if data.get("alignment", "").startswith("applied"):  # the thief's isometry, undone
            lines.append(f"  answers mapped : {data['alignment']}")
        if not math.isnan(data["p_value"]):  # no test ran: no metrics to point to
            lines.append(_PAPER_LINE)
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The public verdict only: a repr lands in logs and tracebacks, which travel."""
        data = self.to_dict()
        p = format_public_p(data["p_value"], data["p_value_below_floor"])
        return (
            f"VerificationReport(status={self.status!r}, {p}, level={self.level:g}, "
            f"key_id={self.key_id!r}, n_queries={self.n_queries}, "
            f"n_failed_queries={self.n_failed_queries})"
        )


class EvidenceWriter(Protocol):
    """What writes a report's public files: the records room's ``save_evidence``."""

    def __call__(
        self, report: VerificationReport, directory: str | os.PathLike[str], *, force: bool = False
    ) -> dict[str, Path]: ...


# The one writer report.save() calls; the audit writes no file itself.
_EVIDENCE_WRITER: list[EvidenceWriter] = []


def install_evidence_writer(writer: EvidenceWriter) -> None:
    """Make ``writer`` the one :meth:`VerificationReport.save` calls.

    The audit room writes no file and imports no room above it, so the records room's
    :func:`espew_integrations.core.records.evidence.save_evidence` installs itself here
    when it loads, and ``espew_integrations.core`` loads it: a report made anywhere
    saves through it. A later call replaces the writer.

    >>> install_evidence_writer(save_evidence)  # doctest: +SKIP
    """
    _EVIDENCE_WRITER[:] = [writer]


def _cause_lines(report: VerificationReport) -> list[str]:
    """The suspect's first distinct errors (made printable, repeats counted) and what to do next."""
    distinct = tally(printable(error) for error in report.errors)
    lines = []
    for i, error in enumerate(distinct[:_CAUSES_SHOWN]):
        label = "cause" if i == 0 else ""
        lines.append(f"  {label:<15}: {error}")
    if len(distinct) > _CAUSES_SHOWN:
        lines.append(f"  {'':<15}: ... {len(distinct) - _CAUSES_SHOWN} more in report.errors")
    lines.append(f"  next step      : {report.next_step or _GENERIC_NEXT_STEP}")
    return lines


def _test_lines(data: dict[str, Any]) -> list[str]:
    """The test's lines from the public dict: published p-values, no count of scored words."""
    units = units_of_statistic(data.get("statistic"))  # what the design's test ranked
    if math.isnan(data["p_value"]):  # no test was run: a NaN p-value would only confuse
        return [f"  test           : not run ({data['n_words']} {units} probed)"]

    shown = format_public_p(data["p_value"], data["p_value_below_floor"])
    decided = f"; decided by the {data['decided_by']} score" if data["decided_by"] else ""
    rounds = data["audit_round"]
    level = data["level"]
    round_line = (
        f"  audit round    : {rounds}: p is {rounds} times the round's own (every earlier "
        "round counts as a try)"
    )
    return ([round_line] if rounds > 1 else []) + [
        f"  p-value        : {shown}  (copied iff p < {level:g}; "
        f"an innocent service is convicted with probability <= {level:g}){decided}",
        f"  test           : exact one-sided rank test over the {data['n_words']} {units} "
        f"(p shown to {PUBLIC_P_DIGITS} digits, none below {PUBLIC_P_FLOOR:g}; every "
        "statistic's own p-value: to_private_dict)",
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


_PAPER_LINE = (
    "  paper metrics  : (comparability only, not the decision) KS p, delta cos and delta l2 "
    "compare the triggers' texts with the others': private forms only (to_private_dict)"
)
