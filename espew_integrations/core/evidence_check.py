"""check_transcript(): re-derive an audit's verdict offline, from its transcript alone.

An arbiter is handed the auditor's private directory and the key (or ring). To
trust the verdict they need three things, and this module checks each:

1. **the transcript is intact**: its SHA-256 chain holds from the header to the
   end record (:func:`.records.transcript.read_transcript` names the record where it
   breaks), and its digest is the one the private report (and, when given, the
   public report handed to the suspect's side) carries;
2. **it is this key's audit**: the header's commitment is the key's;
3. **the verdict follows from the answers**: a suspect that answers from the
   transcript is audited again by :func:`.verify.verify_callable` (or
   :func:`.trace.trace_callable`) itself, with the recorded settings and the recorded
   order of the texts; every batch it is asked must be the batch recorded, in
   the same order, and every recorded batch must be asked. The replayed status
   and p-value must equal the recorded ones.

The scoring is never re-implemented here: the replay runs the audit's own
pipeline, so what is checked is what decided.

Those three prove nothing to an arbiter who distrusts the auditor: the auditor
wrote the transcript and can chain anything (``chain_records``). Two more checks
do not rest on the auditor:

4. **the answers are the suspect's** (``requery=SUSPECT``): a keyed random subset
   of the recorded texts, sized so that a forgery of 1% of the answers escapes
   with probability at most 0.1%, is asked again and must be answered as recorded
   within the suspect's own repeat noise (:mod:`.records.requery`); and the verdict is
   re-derived from the suspect's own answers (the re-asked ones put in place of
   the recorded ones and the audit replayed): it must be the recorded verdict;
5. **the records were fixed before the verdict, and when**: the commit record's
   anchors, given the commitment before anything was scored. A timestamp's token
   must be over this transcript's commitment (``timestamp_check`` verifies its
   signature: :func:`espew_integrations.timestamp.verify_timestamp`); a digest
   sent to the suspect must be the commitment (only the suspect's own logs can
   show it arrived).

:class:`EvidenceCheck` says plainly what was and was not proved.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .audit.options import AuditOptions
from .audit.references import replayed_references
from .audit.subject import REPLAYED_SETTINGS
from .audit.suspect_calls import DeadlinePassed
from .ground.defaults import DEFAULT_BATCH_SIZE
from .ground.errors import SuspectError
from .keys.key import WatermarkKey
from .keys.keyring import KeyRing
from .records.anchors import TimestampCheck, anchor_findings
from .records.findings import Findings
from .records.requery import (
    DEFAULT_REQUERY_SIZE,
    DEFAULT_REQUERY_TOLERANCE,
    INDISTINCT_BOUND,
    Requery,
    RequerySize,
    recorded_answers,
    requery,
    requery_findings,
)
from .records.traffic_commitments import pool_findings
from .records.transcript import (
    TRANSCRIPT_FILE,
    Transcript,
    TranscriptError,
    decode_answer,
    encode_answer,
    read_transcript,
    recorded_float,
)
from .trace import trace_callable
from .verify import verify_callable

__all__ = ["P_VALUE_TOLERANCE", "EvidenceCheck", "check_transcript"]

#: Relative difference allowed between the recorded and the replayed p-value: the
#: same pipeline on another machine may round a score in its last bit.
P_VALUE_TOLERANCE = 1e-9
#: The private report files whose ``transcript_digest`` must be the transcript's.
_PRIVATE_REPORTS = ("PRIVATE-word-scores.json", "PRIVATE-trace.json")
#: The public files that may carry the digest (a trace's is in its shared report).
_PUBLIC_REPORTS = ("report.json",)


@dataclasses.dataclass(frozen=True)
class EvidenceCheck:
    """The outcome of :func:`check_transcript`: ``holds`` iff the transcript is intact,
    is the given key's audit, its replay gives the recorded verdict, and every
    check asked for or anchor recorded agrees; ``reason`` says why not (or what was
    re-derived). ``proved`` and ``not_proved`` say, line by line, what an arbiter
    who distrusts the auditor may take from it; ``requery`` is what re-asking the
    suspect found."""

    holds: bool
    reason: str
    digest: str = ""
    audit: str = ""
    n_records: int = 0
    recorded_status: str = ""
    recorded_p_value: float = math.nan
    replayed_status: str = ""
    replayed_p_value: float = math.nan
    proved: tuple[str, ...] = ()
    not_proved: tuple[str, ...] = ()
    requery: Requery | None = None
    rederived_status: str = ""
    rederived_p_value: float = math.nan

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
        if self.rederived_status:
            lines.append(
                f"  re-derived        : {self.rederived_status}, p = {self.rederived_p_value:.6g}"
                " (from the suspect's re-asked answers)"
            )
        if self.proved:
            lines += ["  proved:", *(f"    - {line}" for line in self.proved)]
        if self.not_proved:
            lines += ["  not proved:", *(f"    - {line}" for line in self.not_proved)]
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


def check_transcript(
    private_dir: str | os.PathLike[str],
    key: WatermarkKey | KeyRing,
    *,
    public: str | os.PathLike[str] | None = None,
    requery_suspect: Callable[[list[str]], object] | None = None,
    requery_name: str = "",
    requery_size: RequerySize = DEFAULT_REQUERY_SIZE,
    requery_seed: int | None = None,
    requery_tolerance: float = DEFAULT_REQUERY_TOLERANCE,
    timestamp_check: TimestampCheck | None = None,
    require_timestamp: bool = False,
    pool_log: str | os.PathLike[str] | None = None,
    accept_auditor_pool: bool = False,
) -> EvidenceCheck:
    """Check an audit's transcript in ``private_dir`` against ``key`` (a ring for a trace).

    Reads ``PRIVATE-transcript.jsonl`` (or ``private_dir`` itself when it is the
    file), checks its chain, that its digest is the one the private report in the
    same directory and the ``public`` report (a file or directory, optional) carry,
    that it is ``key``'s audit, and replays it through the audit's own pipeline.

    With ``requery_suspect`` (named ``requery_name``), ``requery_size`` texts drawn
    from ``requery_seed`` are asked again, judged within the suspect's repeat noise
    (``requery_tolerance`` at least) and the verdict re-derived (:mod:`.records.requery`).
    ``timestamp_check`` verifies a timestamp anchor's signature; ``require_timestamp``
    fails without one. A re-drawn audit must be tied to a pool in the log ``pool_log``
    unless ``accept_auditor_pool`` (:func:`.records.traffic_commitments.pool_findings`).

    Returns an :class:`EvidenceCheck`; raises only when nothing can be read
    (``OSError``, or ``ValueError`` for a file that is not a transcript at all).
    """
    folder = Path(private_dir)
    path = folder if folder.is_file() else folder / TRANSCRIPT_FILE
    try:
        transcript = read_transcript(path)
    except TranscriptError as exc:
        return EvidenceCheck(False, f"the transcript is not intact: {exc}")
    result = _replay_check(transcript, key, path.parent, public)
    if not result.holds:
        return result
    findings = _replayed_findings(transcript, public is not None)
    findings += _texts_findings(transcript, key, pool_log, accept_auditor_pool)
    findings += anchor_findings(transcript, timestamp_check, require_timestamp)
    asked = None
    if requery_suspect is not None:
        asked = requery(
            transcript,
            requery_suspect,
            size=requery_size,
            seed=requery_seed,
            tolerance=requery_tolerance,
            batch_size=_recorded_batch_size(transcript),
            suspect_name=requery_name,
        )
    findings += requery_findings(asked)
    rederived = _rederived(transcript, key, asked, findings)
    if rederived is not None:
        findings += _rederived_findings(result, asked, rederived)
    return _concluded(result, findings, asked, rederived)


def _texts_findings(
    transcript: Transcript,
    key: WatermarkKey | KeyRing,
    pool_log: str | os.PathLike[str] | None,
    accept_auditor_pool: bool,
) -> Findings:
    """Where the audit's texts came from (:func:`.records.traffic_commitments.pool_findings`)."""
    shared = key.shared_key if isinstance(key, KeyRing) else key
    started = str(transcript.header.get("started", ""))
    return pool_findings(shared, started, pool_log, accept_auditor_pool)


def _replayed_findings(transcript: Transcript, against_public: bool) -> Findings:
    """What a transcript whose chain, digests and replay hold proves."""
    found = Findings(
        proved=(
            f"chain intact: {transcript.n_records} records, digest {transcript.digest}"
            + (" (the one the reports carry)" if against_public else ""),
            "the recorded verdict and p-value follow from the recorded answers (replayed)",
        )
    )
    references = transcript.header.get("references")
    if not references:
        return found
    return found + Findings(
        not_proved=(
            f"that the reference copies {', '.join(map(str, references.get('names') or []))} "
            "were built without the key: their rows are the auditor's, recorded with digest "
            f"{references.get('sha256')}; rebuild them from their recipe (fitted to the clean "
            "service on texts other than the audit's) and compare",
        )
    )


def _concluded(
    result: EvidenceCheck,
    findings: Findings,
    asked: Requery | None,
    rederived: tuple[str, float] | None = None,
) -> EvidenceCheck:
    """The replay's ``result`` with every finding: it holds unless one failed."""
    status, p_value = rederived or ("", math.nan)
    return dataclasses.replace(
        result,
        holds=not findings.failure,
        reason=findings.failure or result.reason,
        proved=findings.proved,
        not_proved=findings.not_proved,
        requery=asked,
        rederived_status=status,
        rederived_p_value=p_value,
    )


def _rederived(
    transcript: Transcript, key: WatermarkKey | KeyRing, asked: Requery | None, found: Findings
) -> tuple[str, float] | None:
    """The verdict the audit gives with the suspect's re-asked answers in place of the
    recorded ones (None when it was not re-asked, or the evidence already failed, or
    they cannot stand in: some were not answered, or in another dimension)."""
    if asked is None or found.failure:
        return None
    recorded = recorded_answers(transcript)
    rows = recorded.rows[asked.chosen]
    if asked.n_answered != asked.n_asked or asked.answers.shape != rows.shape:
        return None
    batches = [dict(record) for record in transcript.batches]
    where = {int(record.get("record", -1)): i for i, record in enumerate(batches)}
    edited: dict[int, np.ndarray] = {}
    for index, answer in zip(asked.chosen, asked.answers, strict=True):
        batch = where[int(recorded.records[index])]
        if batch not in edited:
            edited[batch] = decode_answer(batches[batch]["answer"]).copy()
        edited[batch][recorded.positions[index]] = answer
    for batch, values in edited.items():
        batches[batch]["answer"] = encode_answer(values)
    replay = _Replay(batches)
    status, p_value, _ = _replayed(transcript, replay, key)
    return None if replay.unused() else (status, p_value)


def _rederived_findings(
    result: EvidenceCheck, asked: Requery | None, rederived: tuple[str, float]
) -> Findings:
    """What the verdict re-derived from the suspect's own answers says of the recorded one."""
    assert asked is not None
    status, p_value = rederived
    scope = (
        "every recorded answer replaced by the suspect's own"
        if asked.n_asked == asked.n_rows
        else f"the {asked.n_asked} re-asked answers in place of the recorded ones"
    )
    differs = (
        f"the verdict re-derived from the suspect's own answers ({scope}) is {status} "
        f"(p = {p_value:.3g}), the recorded one {result.recorded_status} "
        f"(p = {result.recorded_p_value:.3g})"
    )
    if status != result.recorded_status and asked.threshold >= INDISTINCT_BOUND:
        return Findings(  # answers as noisy as a mark's move tell neither way
            not_proved=(
                f"the recorded verdict from the suspect's answers today: {differs}; its "
                f"answers are as noisy as the watermark's move (repeat noise "
                f"{asked.repeat_largest:.3g}), so this shows neither a forgery nor a copy",
            )
        )
    if status != result.recorded_status:
        return Findings(
            failure=f"{differs}: the recorded answers were moved, or the verdict does not "
            f"survive the suspect's own noise (repeat noise {asked.repeat_largest:.3g} at most)"
        )
    return Findings(
        proved=(
            f"the verdict re-derived from the suspect's own answers ({scope}) is the recorded "
            f"one: {status}, p = {p_value:.3g}",
        )
    )


def _replay_check(
    transcript: Transcript,
    key: WatermarkKey | KeyRing,
    folder: Path,
    public: str | os.PathLike[str] | None,
) -> EvidenceCheck:
    """The digests the reports carry and the key checked, then the audit replayed on the
    recorded answers and its verdict set beside the recorded one."""
    found = _check_digests(transcript, folder, public)
    found = found or _check_key(transcript, key)
    if found:
        return _fails(transcript, found)
    replay = _Replay(transcript.batches)
    outcome = _replayed(transcript, replay, key)
    problem = replay.unused()
    if problem:
        return _fails(transcript, f"the answers are not the audit's: {problem}")
    return _compared(transcript, *outcome)


def _recorded_batch_size(transcript: Transcript) -> int:
    """The batch size the audit asked with (the default for a transcript without one)."""
    settings = transcript.header.get("settings") or {}
    return int(settings.get("batch_size") or DEFAULT_BATCH_SIZE)


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
    # the auditor's reference copies answer from the rows the header recorded
    settings["references"] = replayed_references(header, decode_answer)
    names = header.get("suspect") or {}
    names = {"suspect_name": names.get("name", ""), "suspect_label": names.get("label", "")}
    if header.get("audit") == "trace" and isinstance(key, KeyRing):
        del settings["templates"]
        report = trace_callable(
            replay, key, header.get("tenants") or [], AuditOptions(**settings), **names
        )
        return report.status, report.p_value, report.traced
    shared = key.shared_key if isinstance(key, KeyRing) else key
    verdict = verify_callable(replay, shared, AuditOptions(**settings), **names)
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
