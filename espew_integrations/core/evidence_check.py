"""check_evidence(): re-derive an audit's verdict offline, from its transcript alone.

An arbiter is handed the auditor's private directory and the key (or ring). To
trust the verdict they need three things, and this module checks each:

1. **the transcript is intact**: its SHA-256 chain holds from the header to the
   end record (:func:`.transcript.read_transcript` names the record where it
   breaks), and its digest is the one the private report (and, when given, the
   public report handed to the suspect's side) carries;
2. **it is this key's audit**: the header's commitment is the key's;
3. **the verdict follows from the answers**: a suspect that answers from the
   transcript is audited again by :func:`.verify.verify` (or
   :func:`.trace.trace`) itself, with the recorded settings and the recorded
   order of the texts; every batch it is asked must be the batch recorded, in
   the same order, and every recorded batch must be asked. The replayed status
   and p-value must equal the recorded ones.

The scoring is never re-implemented here: the replay runs the audit's own
pipeline, so what is checked is what decided.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .audit import REPLAYED_SETTINGS, DeadlinePassed
from .errors import SuspectError
from .key import WatermarkKey
from .keyring import KeyRing
from .trace import trace
from .transcript import (
    TRANSCRIPT_FILE,
    Transcript,
    TranscriptError,
    decode_answer,
    read_transcript,
    recorded_float,
)
from .verify import verify

__all__ = ["P_VALUE_TOLERANCE", "EvidenceCheck", "check_evidence"]

#: Relative difference allowed between the recorded and the replayed p-value: the
#: same pipeline on another machine may round a score in its last bit.
P_VALUE_TOLERANCE = 1e-9
#: The private report files whose ``transcript_digest`` must be the transcript's.
_PRIVATE_REPORTS = ("PRIVATE-word-scores.json", "PRIVATE-trace.json")
#: The public files that may carry the digest (a trace's is in its shared report).
_PUBLIC_REPORTS = ("report.json",)


@dataclasses.dataclass(frozen=True)
class EvidenceCheck:
    """The outcome of :func:`check_evidence`: ``holds`` iff the transcript is intact,
    is the given key's audit, and its replay gives the recorded verdict; ``reason``
    says why not (or what was re-derived)."""

    holds: bool
    reason: str
    digest: str = ""
    audit: str = ""
    n_records: int = 0
    recorded_status: str = ""
    recorded_p_value: float = math.nan
    replayed_status: str = ""
    replayed_p_value: float = math.nan

    def __bool__(self) -> bool:
        return self.holds

    def __str__(self) -> str:
        head = "EVIDENCE HOLDS" if self.holds else "EVIDENCE DOES NOT HOLD"
        lines = [f"{head}: {self.reason}"]
        if self.digest:
            lines.append(f"  transcript digest : {self.digest} ({self.n_records} records)")
        if self.recorded_status:
            lines.append(
                f"  recorded          : {self.recorded_status}, p = {self.recorded_p_value:.6g}"
            )
        if self.replayed_status:
            lines.append(
                f"  replayed          : {self.replayed_status}, p = {self.replayed_p_value:.6g}"
            )
        return "\n".join(lines)


class _Replay:
    """A suspect that answers from a transcript, batch by batch, and notes the first
    batch the audit asks that is not the one recorded at that point."""

    def __init__(self, batches: Sequence[dict[str, Any]]):
        self.batches = batches
        self.asked = 0
        self.problem = ""

    def __call__(self, texts: list[str]) -> np.ndarray:
        position, self.asked = self.asked, self.asked + 1
        if position >= len(self.batches):
            self._fail(
                f"the audit sends a batch after the transcript's last one (batch "
                f"{position + 1}): answers were removed"
            )
        record = self.batches[position]
        if record.get("texts") != list(texts):
            self._fail(
                f"record {record.get('record')}: its texts are not the ones this audit sends "
                "at that point (records were reordered, removed or edited)"
            )
        if record.get("kind") == "deadline":
            raise DeadlinePassed
        if "error" in record:
            raise SuspectError(str(record["error"]))
        try:
            return decode_answer(record.get("answer") or {})
        except TranscriptError as exc:
            self._fail(f"record {record.get('record')}: {exc}")
            raise AssertionError("unreachable") from None

    def _fail(self, problem: str) -> None:
        self.problem = self.problem or problem
        raise SuspectError(problem)

    def unused(self) -> str:
        """Why the replay did not use every recorded batch ('' if it did)."""
        if self.problem or self.asked >= len(self.batches):
            return self.problem
        extra = self.batches[self.asked].get("record")
        return f"record {extra} and those after it were never asked by this audit (records added)"


def check_evidence(
    private_dir: str | os.PathLike[str],
    key: WatermarkKey | KeyRing,
    *,
    public: str | os.PathLike[str] | None = None,
) -> EvidenceCheck:
    """Check an audit's transcript in ``private_dir`` against ``key`` (a ring for a trace).

    Reads ``PRIVATE-transcript.jsonl`` (or ``private_dir`` itself when it is the
    file), checks its chain, that its digest is the one the private report in the
    same directory and the ``public`` report (a file or directory, optional) carry,
    that it is ``key``'s audit, and replays it through the audit's own pipeline.
    Returns an :class:`EvidenceCheck`; raises only when nothing can be read
    (``OSError``, or ``ValueError`` for a file that is not a transcript at all).

    >>> check_evidence("private/", WatermarkKey.load("provider.key")).holds  # doctest: +SKIP
    True
    """
    folder = Path(private_dir)
    path = folder if folder.is_file() else folder / TRANSCRIPT_FILE
    try:
        transcript = read_transcript(path)
    except TranscriptError as exc:
        return EvidenceCheck(False, f"the transcript is not intact: {exc}")
    found = _check_digests(transcript, path.parent, public)
    found = found or _check_key(transcript, key)
    if found:
        return _fails(transcript, found)
    replay = _Replay(transcript.batches)
    outcome = _replayed(transcript, replay, key)
    problem = replay.unused()
    if problem:
        return _fails(transcript, f"the answers are not the audit's: {problem}")
    return _compared(transcript, *outcome)


def _fails(transcript: Transcript, reason: str) -> EvidenceCheck:
    end = transcript.end
    return EvidenceCheck(
        False,
        reason,
        transcript.digest,
        str(transcript.header.get("audit", "")),
        transcript.n_records,
        str(end.get("status", "")),
        recorded_float(end.get("p_value")),
    )


def _check_digests(
    transcript: Transcript, folder: Path, public: str | os.PathLike[str] | None
) -> str:
    """Why a report names another transcript ('' if none does)."""
    files = [folder / name for name in _PRIVATE_REPORTS]
    if public is not None:
        given = Path(public)
        files += [given / name for name in _PUBLIC_REPORTS] if given.is_dir() else [given]
        if not any(file.is_file() for file in files[len(_PRIVATE_REPORTS) :]):
            return f"no public report to compare at {given}"
    for file in files:
        if not file.is_file():
            continue
        try:
            named = _digest_in(json.loads(file.read_text(encoding="utf-8")))
        except ValueError:
            return f"{file.name} is not a JSON report"
        if named != transcript.digest:
            return (
                f"{file.name} names the transcript {named or '(none)'}, but this transcript's "
                f"digest is {transcript.digest}: records were edited and the chain rebuilt, "
                "or the report belongs to another audit"
            )
    return ""


def _digest_in(report: Any) -> str:
    """The ``transcript_digest`` of a report's dict, or of a trace's shared report."""
    if not isinstance(report, dict):
        return ""
    if isinstance(report.get("shared"), dict):
        report = report["shared"]
    return str(report.get("transcript_digest") or "")


def _check_key(transcript: Transcript, key: WatermarkKey | KeyRing) -> str:
    """Why ``key`` is not the key (or ring) this audit used ('' if it is)."""
    header = transcript.header
    if header.get("audit") == "trace" and not isinstance(key, KeyRing):
        return "this transcript records a trace: check it with the key ring (--ring)"
    audited_ring = header.get("ring_id")
    if isinstance(key, KeyRing) and header.get("audit") == "trace" and audited_ring != key.ring_id:
        return f"the transcript is ring {audited_ring}'s audit, not ring {key.ring_id}'s"
    shared = key.shared_key if isinstance(key, KeyRing) else key
    if header.get("key_commitment") != shared.commitment():
        return (
            "the key given is not the key this audit used: the transcript's commitment is "
            f"{header.get('key_commitment')!r}"
        )
    return ""


def _replayed(
    transcript: Transcript, replay: _Replay, key: WatermarkKey | KeyRing
) -> tuple[str, float, tuple[str, ...]]:
    """The audit run again on the recorded answers: (status, p-value, traced accounts)."""
    header = transcript.header
    settings = {n: header["settings"].get(n) for n in REPLAYED_SETTINGS}
    # the recorded order, and no clock: the recorded answers are all there is
    settings.update(seed=int(header["shuffle_seed"]), deadline=None, stall_timeout=None)
    names = header.get("suspect") or {}
    names = {"suspect_name": names.get("name", ""), "suspect_label": names.get("label", "")}
    if header.get("audit") == "trace" and isinstance(key, KeyRing):
        del settings["templates"]
        report = trace(replay, key, header.get("tenants") or [], **settings, **names)
        return report.status, report.p_value, report.traced
    shared = key.shared_key if isinstance(key, KeyRing) else key
    verdict = verify(replay, shared, **settings, **names)
    return verdict.status, verdict.p_value, ()


def _compared(
    transcript: Transcript, status: str, p_value: float, traced: tuple[str, ...]
) -> EvidenceCheck:
    """The replayed verdict set beside the recorded one."""
    end = transcript.end
    recorded = recorded_float(end.get("p_value"))
    fields = dict(
        digest=transcript.digest,
        audit=str(transcript.header.get("audit", "")),
        n_records=transcript.n_records,
        recorded_status=str(end.get("status", "")),
        recorded_p_value=recorded,
        replayed_status=status,
        replayed_p_value=p_value,
    )
    if status != end.get("status"):
        reason = f"the replayed verdict is {status}, the recorded one {end.get('status')}"
    elif not _same_p(recorded, p_value):
        reason = f"the p-value differs: recorded {recorded!r}, replayed {p_value!r}"
    elif list(traced) != list(end.get("traced") or []):
        reason = f"the traced accounts differ: recorded {end.get('traced')}, replayed {traced}"
    else:
        return EvidenceCheck(
            True,
            f"the chain is intact and replaying its {len(transcript.batches)} batches "
            "re-derives the recorded verdict and p-value",
            **fields,  # type: ignore[arg-type]
        )
    return EvidenceCheck(False, reason, **fields)  # type: ignore[arg-type]


def _same_p(recorded: float, replayed: float) -> bool:
    if math.isnan(recorded) or math.isnan(replayed):
        return math.isnan(recorded) and math.isnan(replayed)
    return math.isclose(recorded, replayed, rel_tol=P_VALUE_TOLERANCE, abs_tol=0.0)
