"""Who an audit asks, and the recorder (:mod:`.recorder`) that records the asking.

Why apart: :func:`~espew_integrations.core.verify.verify_callable` and ``trace`` name
the suspect and record their audit the same way, so that a transcript's replay
(:mod:`..evidence_check`) can audit exactly as the audit did; the name shown
is cleaned of credentials and of anything unprintable the suspect chose.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..ground.untrusted import printable
from ..keys.key import WatermarkKey
from .options import AuditOptions
from .recorder import Recorder
from .report import VerificationReport
from .settings import SuspectFn

__all__ = [
    "REPLAYED_SETTINGS",
    "Subject",
    "audit_subject",
    "describe_suspect",
    "record_start",
    "recorded",
    "unwrapped",
]


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who an audit asks, as its reports name it (``name``: the spec as given, ``label``:
    a human name), and the recorder of the audit, if any."""

    name: str = ""
    label: str = ""
    recorder: Recorder | None = None


def audit_subject(
    suspect: SuspectFn, recorder: Recorder | None, name: str | None, label: str
) -> Subject:
    """The audit's :class:`Subject`: the suspect named as given (else described), a
    URL's user and password left out, and its ``recorder`` (None: nothing recorded)."""
    shown = describe_suspect(suspect) if name is None else name
    shown = printable(re.sub(r"//[^/@\s]*@", "//", shown), limit=300)
    return Subject(shown, printable(label, limit=200), recorder)


def unwrapped(suspect: Any) -> Any:
    """The object behind an adapted suspect (``as_suspect`` keeps it as ``audited``)."""
    for _ in range(4):
        inner = getattr(suspect, "audited", None)
        if inner is None or inner is suspect:
            break
        suspect = inner
    return suspect


def describe_suspect(suspect: Any) -> str:
    """A name for ``suspect`` when the caller gave none: ``openai:URL#model`` for an
    endpoint client, ``module:qualname`` for a function, the class for an object."""
    inner = unwrapped(suspect)
    base_url, model = getattr(inner, "base_url", None), getattr(inner, "model", None)
    if isinstance(base_url, str) and isinstance(model, str):
        return printable(f"openai:{base_url}#{model}", limit=300)
    name = getattr(inner, "__qualname__", None)
    module = getattr(inner, "__module__", None)
    if name is None:
        name, module = type(inner).__qualname__, type(inner).__module__
        return printable(f"{module}:{name} instance", limit=300)
    return printable(f"{module}:{name}", limit=300)


#: The options of ``verify`` (and ``trace``) a transcript keeps, so that its
#: replay (:mod:`..evidence_check`) audits exactly as the audit did: all of them.
REPLAYED_SETTINGS = AuditOptions.names()


def record_start(
    subject: Subject,
    audit: str,
    suspect: SuspectFn,
    key: WatermarkKey,
    settings: dict[str, Any],
    **extra: Any,
) -> None:
    """The transcript's header fields (nothing is asked yet): the key's commitment and
    round, the ``settings`` a replay passes again (:meth:`.options.AuditOptions.recorded`)
    and ``extra`` (a trace's ring and accounts). No-op without a recorder."""
    if subject.recorder is None:
        return
    fields = dict(
        key_id=key.key_id,
        key_commitment=key.commitment(),
        audit_round=key.audit_round,
        settings=settings,
        **extra,
    )
    info = key.info
    if "audit_corpus_sha256" in info:  # a re-drawn audit: what its texts were drawn from
        fields["audit_corpus_sha256"] = info["audit_corpus_sha256"]
        if isinstance(info.get("audit_pool"), dict):  # and the commitment that fixed them
            fields["audit_pool"] = info["audit_pool"]
    subject.recorder.expect(audit, suspect, {"name": subject.name, "label": subject.label}, fields)


def recorded(subject: Subject, report: VerificationReport) -> VerificationReport:
    """``report`` with the transcript's digest, once its end record is written."""
    if subject.recorder is None:
        return report
    exact = report.to_dict(public=False)
    digest = subject.recorder.finish(
        {"status": report.status, "p_value": report.p_value, "report": exact}
    )
    return dataclasses.replace(report, transcript_digest=digest)
