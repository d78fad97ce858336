"""Who an audit asks, and the transcript that records the asking.

Why apart: :func:`~espew_integrations.core.verify.verify` and ``trace`` name
the suspect and record their audit the same way, so that a transcript's replay
(:mod:`..evidence_check`) can audit exactly as the audit did; the name shown
is cleaned of credentials and of anything unprintable the suspect chose.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from ..key import WatermarkKey
from ..report import VerificationReport
from ..transcript import TranscriptRecorder, describe_suspect
from ..untrusted import printable
from .options import AuditOptions
from .settings import SuspectFn

__all__ = [
    "REPLAYED_SETTINGS",
    "Subject",
    "audit_subject",
    "record_start",
    "recorded",
]


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who an audit asks, as its reports name it (``name``: the spec as given, ``label``:
    a human name), and the transcript recording the audit, if any."""

    name: str = ""
    label: str = ""
    recorder: TranscriptRecorder | None = None


def audit_subject(
    suspect: SuspectFn,
    transcript: str | os.PathLike[str] | TranscriptRecorder | None,
    name: str | None,
    label: str,
) -> Subject:
    """The audit's :class:`Subject`: the suspect named as given (else described), a
    URL's user and password left out, and a recorder when a transcript is asked for."""
    shown = describe_suspect(suspect) if name is None else name
    shown = printable(re.sub(r"//[^/@\s]*@", "//", shown), limit=300)
    recorder = transcript
    if transcript is not None and not isinstance(transcript, TranscriptRecorder):
        recorder = TranscriptRecorder(transcript)
    return Subject(shown, printable(label, limit=200), recorder)  # type: ignore[arg-type]


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
