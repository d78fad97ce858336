"""Audit transcript: what an audit sent, what came back, chained so no record can move.

A verdict is worth what it is worth in front of a third party. The private
per-word scores cannot be recomputed by anyone, nor can they show that the
suspect's answers were not edited afterwards; a transcript of the audit can.
:class:`TranscriptRecorder` records, into the auditor's *private* directory,
every batch the audit sent (the texts, which reveal the key's band: never hand
the file to the other side) and every answer exactly as received (float32
bytes when the answer is float32 data, as an OpenAI endpoint sends it, else the
float64 values), with the endpoint's identity as the client saw it (the suspect
spec, the model name, the HTTP response's ``model`` field and headers),
timestamps, the package version, the key's commitment, the audit round and the
level.

Each record is one line of canonical JSON and carries the SHA-256 of the line
before it (``prev``); the first is a header, then the batches, then a
``commit`` record, written once every answer is in and *before* the verdict is
computed: it names the chain's head at that point (the *commitment*) and what
the anchors outside the auditor's control were told of it (an RFC 3161
timestamp, the digest sent to the suspect). The last is an ``end`` record with
the recorded verdict. Removing, reordering or editing any record breaks the
chain at the record after it; the hash of the end record, the *chain head*, is
the transcript's digest, which the public report carries
(``transcript_digest``). A re-chained forgery has another head, so it no
longer matches what was published, nor the commitment an anchor holds. The
header holds a random nonce, so the digest hides the transcript: the suspect,
who knows its own answers, cannot test guesses about the exact p-value against
it.

:func:`read_transcript` checks the chain and gives the records back;
:mod:`..evidence_check` replays them through :func:`..verify.verify_callable` itself.
Standard library and numpy only, like the rest of the core.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..audit.recorder import Recorder, utc_now
from ..audit.subject import unwrapped
from ..ground.errors import ESpeWError, StateError
from ..ground.untrusted import printable
from .safe_dir import SafeDirectory

__all__ = [
    "TRANSCRIPT_DIGEST_HEADER",
    "TRANSCRIPT_FILE",
    "TRANSCRIPT_FORMAT",
    "Anchor",
    "Transcript",
    "TranscriptError",
    "TranscriptRecorder",
    "as_recorder",
    "chain_records",
    "decode_answer",
    "encode_answer",
    "package_version",
    "read_transcript",
    "recorded_float",
]

#: The transcript's file name in the private directory (PRIVATE-: never share it).
TRANSCRIPT_FILE = "PRIVATE-transcript.jsonl"
TRANSCRIPT_FORMAT = "espew-transcript-v1"
#: What the header's ``prev`` holds: no record comes before it.
GENESIS = "0" * 64
#: The most bytes :func:`read_transcript` reads (2,000 texts x 4,096 float64 are 90 MB).
MAX_TRANSCRIPT_BYTES = 1 << 30
_PRIVATE_MODE = 0o600
#: Response headers never recorded: they may carry a credential of the auditor's.
_SKIPPED_HEADERS = ("cookie", "auth", "token", "key", "secret", "session")
_MAX_HEADERS = 40
#: The HTTP header that carries the commitment to the suspect (``send_digest=True``).
TRANSCRIPT_DIGEST_HEADER = "X-ESpeW-Transcript-Digest"


class Anchor(Protocol):
    """Something outside the auditor's control that is told the commitment before the
    verdict is computed (an RFC 3161 timestamp authority, :mod:`espew_integrations.timestamp`).

    ``anchor(commitment)`` returns what the commit record keeps of it (JSON-able);
    ``name`` is its key there. A failure is raised and recorded as an error: the
    audit goes on, the evidence check says the anchor is missing."""

    name: str

    def __call__(self, commitment: str) -> dict[str, Any]: ...


class TranscriptError(ESpeWError, ValueError):
    """A transcript that is not intact: ``record`` is where the chain or format broke."""

    def __init__(self, message: str, record: int | None = None):
        super().__init__(message)
        self.record = record


def package_version() -> str:
    """The installed package's version (the core cannot import the package root above it)."""
    from importlib import metadata

    try:
        return metadata.version("espew-integrations")
    except metadata.PackageNotFoundError:
        return "unknown"


def recorded_float(value: Any) -> float:
    """A float as a transcript records it (NaN and infinities are strings there)."""
    return float(value) if value is not None else math.nan


def _line(record: Mapping[str, Any]) -> bytes:
    """A record as one canonical line: the bytes its hash is taken of."""
    return json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _digest(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def chain_records(records: Sequence[Mapping[str, Any]]) -> tuple[bytes, str]:
    """``records`` chained as a transcript file: ``(file bytes, "sha256:<head>")``.

    Each record is numbered, given the hash of the line before it (``prev``), a
    ``commit`` record that hash as its commitment, and an ``end`` record the count
    of records. Public on purpose: anyone can
    compute a SHA-256 chain, so a chain its author computed alone proves nothing
    to whoever distrusts its author. What does is an anchor the author does not
    control (the commit record's timestamp, the digest the suspect received) and
    re-asking the suspect (:mod:`.requery`).
    """
    lines, head = [], GENESIS
    for number, given in enumerate(records):
        record = {**_finite(dict(given)), "record": number, "prev": head}
        if record.get("kind") == "end":
            record["n_records"] = len(records)
        if record.get("kind") == "commit":
            record["commitment"] = f"sha256:{head}"
        line = _line(record)
        lines.append(line + b"\n")
        head = _digest(line)
    return b"".join(lines), f"sha256:{head}"


def _finite(value: Any) -> Any:
    """JSON has no NaN: a NaN or infinite float is recorded as its repr, a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------------- answers
def encode_answer(answer: Any) -> dict[str, Any]:
    """An answer as recorded: its exact bytes (base64), dtype and shape.

    float32 bytes when every value is a float32 (what an endpoint sending
    float32 or base64 gives, read into float64 without loss), else float64:
    either way :func:`decode_answer` gives back the very float64 values the
    audit scored. Raises ``ValueError``/``TypeError`` for an answer that is not
    an array of numbers (the audit counts that batch as failed).
    """
    values = np.array(answer, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = values.astype("<f4")
    exact = np.array_equal(narrow.astype(np.float64), values, equal_nan=True)
    stored = narrow if exact else values.astype("<f8")
    return {
        "dtype": stored.dtype.str,
        "shape": list(stored.shape),
        "data": base64.b64encode(stored.tobytes()).decode("ascii"),
    }


def decode_answer(encoded: Mapping[str, Any]) -> np.ndarray:
    """The float64 answer :func:`encode_answer` recorded; ``TranscriptError`` if malformed."""
    dtype, shape = encoded.get("dtype"), encoded.get("shape")
    if dtype not in ("<f4", "<f8") or not isinstance(shape, list):
        raise TranscriptError(f"an answer of unknown dtype {dtype!r} or shape")
    try:
        raw = base64.b64decode(encoded.get("data", ""), validate=True)
        return np.frombuffer(raw, dtype=dtype).astype(np.float64).reshape(shape)
    except (ValueError, TypeError) as exc:
        raise TranscriptError(f"an answer whose data does not decode: {exc}") from None


# ---------------------------------------------------------------------- who was asked
def _endpoint_identity(suspect: Any) -> dict[str, Any]:
    """What the client knows of an HTTP suspect before asking: URL, model, encoding."""
    inner = unwrapped(suspect)
    out = {}
    for name in ("url", "model", "encoding_format", "dimensions"):
        value = getattr(inner, name, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            out[name] = printable(value, limit=300) if isinstance(value, str) else value
    return out


def _kept_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """The response's headers as recorded: printable, none that may hold a credential."""
    kept = {}
    for name, value in list(headers.items())[:_MAX_HEADERS]:
        lowered = str(name).lower()
        if any(part in lowered for part in _SKIPPED_HEADERS):
            continue
        kept[printable(lowered, limit=80)] = printable(value, limit=300)
    return kept


# ---------------------------------------------------------------------- recording
def as_recorder(
    transcript: str | os.PathLike[str] | Recorder | None,
) -> Recorder | None:
    """The recorder of ``verify(..., transcript=...)``: a :class:`TranscriptRecorder`
    writing into the directory given, the recorder given, or None (nothing recorded)."""
    if transcript is None or isinstance(transcript, Recorder):
        return transcript
    return TranscriptRecorder(transcript)


class TranscriptRecorder:
    """Records one audit into ``directory/PRIVATE-transcript.jsonl`` (mode 0600).

    The :class:`~..audit.recorder.Recorder` that keeps the evidence.

    :func:`~..verify.verify_callable` and :func:`~..trace.trace_callable` drive it: :meth:`expect`
    with what the audit is (before anything is asked; an existing transcript is
    refused unless ``force``), :meth:`begin` once the order of the texts is
    drawn, :meth:`batch` after each batch, :meth:`commit` once every answer is in
    and *before* the verdict is computed, and :meth:`finish` with the verdict,
    which writes the file at once (a reader never sees half a transcript) and
    returns its digest. Pass the directory as ``verify(..., transcript=DIR)``,
    or a recorder made with ``force=True`` to replace an earlier transcript.

    The commit record fixes the chain's head over every text and answer (the
    *commitment*) before anything is scored. ``anchors`` hand it to parties the
    auditor does not control (an RFC 3161 timestamp authority:
    :class:`espew_integrations.timestamp.TimestampAnchor`); with ``send_digest``
    an HTTP suspect receives it too, in the :data:`TRANSCRIPT_DIGEST_HEADER` of
    one last request that asks the audit's last text again.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        force: bool = False,
        anchors: Sequence[Anchor] = (),
        send_digest: bool = False,
    ):
        self.directory = Path(directory)
        self.force = force
        self.anchors = tuple(anchors)
        self.send_digest = send_digest
        self.digest = ""
        #: ``"sha256:<head>"`` of the chain once every answer is in, before the verdict.
        self.commitment = ""
        #: What the commit record holds of each anchor (and of the digest sent).
        self.anchored: dict[str, dict[str, Any]] = {}
        self._lines: list[bytes] = []
        self._head = GENESIS
        self._header: dict[str, Any] = {}
        self._responses: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._observed: Any = None
        self._suspect: Any = None
        self._closed = False

    @property
    def path(self) -> Path:
        """Where the transcript is written."""
        return self.directory / TRANSCRIPT_FILE

    def expect(
        self, audit: str, suspect: Any, subject: Mapping[str, str], fields: Mapping[str, Any]
    ) -> None:
        """What the audit is: ``audit`` ("verify" or "trace"), the suspect and its names
        (``subject``: name, label), and ``fields`` (key commitment, round, level, the
        settings a replay passes again). Refuses an existing transcript unless ``force``."""
        if self._header or self._closed:
            raise StateError("a TranscriptRecorder records one audit; make a new one")
        with SafeDirectory(self.directory) as target:
            target.refuse_existing([TRANSCRIPT_FILE], force=self.force)
        self._header = {
            "kind": "header",
            "format": TRANSCRIPT_FORMAT,
            "audit": audit,
            "package_version": package_version(),
            "nonce": secrets.token_hex(32),
            "suspect": dict(subject),
            "endpoint": _endpoint_identity(suspect),
            **_finite(dict(fields)),
        }
        inner = unwrapped(suspect)
        self._suspect = inner
        if hasattr(inner, "response_observer"):  # an HTTP client: record what each answer says
            self._observed = inner
            inner.response_observer = self._observe

    def begin(self, shuffle_seed: int, n_texts: int) -> None:
        """The header record: with the seed of the texts' order, so a replay asks alike."""
        header = {**self._header, "shuffle_seed": str(shuffle_seed), "n_texts": n_texts}
        self._append({**header, "started": utc_now()})

    def batch(
        self,
        texts: Sequence[str],
        sent: str,
        *,
        answer: Any = None,
        error: str = "",
        expired: bool = False,
    ) -> None:
        """One batch: the texts, when it was sent, and its answer, its fault, or that the
        audit's deadline passed before it came (``expired``: the answer was never used)."""
        record: dict[str, Any] = {
            "kind": "deadline" if expired else "batch",
            "texts": list(texts),
            "sent": sent,
            "received": utc_now(),
        }
        if not expired:
            if error:
                record["error"] = error
            else:
                try:
                    record["answer"] = encode_answer(answer)
                except (TypeError, ValueError) as exc:
                    record["error"] = printable(f"unreadable answer: {exc}")
        with self._lock:
            record["responses"], self._responses = self._responses, []
        self._append(record)

    def commit(self, last_text: str | None = None) -> str:
        """The commit record: the chain's head over every answer, fixed before the verdict.

        Each anchor is told the commitment and the commit record keeps what it
        returned (or its error: the audit goes on without it). With
        ``send_digest`` an HTTP suspect receives it in the
        :data:`TRANSCRIPT_DIGEST_HEADER` of a request that asks ``last_text``
        (the audit's last text) again. Returns ``"sha256:<head>"``.
        """
        if self._closed or not self._lines or self.commitment:
            raise StateError("commit() comes once, after the batches and before finish()")
        self.commitment = f"sha256:{self._head}"
        for anchor in self.anchors:
            try:
                self.anchored[anchor.name] = _finite(dict(anchor(self.commitment)))
            except Exception as exc:  # an anchor that failed is missing, never fatal
                self.anchored[anchor.name] = {"error": printable(f"{type(exc).__name__}: {exc}")}
        if self.send_digest:
            self.anchored["suspect"] = self._send_digest(last_text)
        self._append({"kind": "commit", "commitment": self.commitment, "anchors": self.anchored})
        return self.commitment

    def _send_digest(self, text: str | None) -> dict[str, Any]:
        """The commitment sent to the suspect with one more request, as recorded."""
        sent: dict[str, Any] = {
            "header": TRANSCRIPT_DIGEST_HEADER,
            "digest": self.commitment,
            "sent": utc_now(),
        }
        sender = getattr(self._suspect, "send_transcript_digest", None)
        if not callable(sender) or not text:
            reason = "no text was asked" if callable(sender) else "the suspect is not an HTTP"
            return {**sent, "error": f"{reason} endpoint: the digest could not be sent"}
        sent["text"] = text
        try:
            sent["answer"] = encode_answer(sender(self.commitment, text))
        except Exception as exc:  # the suspect's fault: recorded, never fatal
            sent["error"] = printable(f"{type(exc).__name__}: {exc}")
        with self._lock:
            sent["responses"], self._responses = self._responses, []
        return {**sent, "received": utc_now()}

    def finish(self, outcome: Mapping[str, Any]) -> str:
        """Write the end record (``outcome``: the verdict as recorded) and the file;
        returns the digest, ``"sha256:<chain head>"``, which the public report carries."""
        if self._closed:
            raise StateError("this transcript is already written")
        if self._observed is not None:
            self._observed.response_observer = None
        self._append(
            {"kind": "end", "finished": utc_now(), "n_records": len(self._lines) + 1, **outcome}
        )
        self._closed = True
        with SafeDirectory(self.directory) as target:
            target.write(
                TRANSCRIPT_FILE, b"".join(self._lines), mode=_PRIVATE_MODE, force=self.force
            )
        self.digest = f"sha256:{self._head}"
        return self.digest

    def _append(self, record: dict[str, Any]) -> None:
        record = {**_finite(record), "record": len(self._lines), "prev": self._head}
        line = _line(record)
        self._lines.append(line + b"\n")
        self._head = _digest(line)

    def _observe(self, status: int, headers: Mapping[str, Any], model: Any) -> None:
        """Called by an HTTP client for each answer it accepted (any thread)."""
        seen = {"status": int(status), "headers": _kept_headers(headers)}
        if isinstance(model, str):
            seen["model"] = printable(model, limit=300)
        with self._lock:
            self._responses.append(seen)


# ---------------------------------------------------------------------- reading
@dataclasses.dataclass(frozen=True)
class Transcript:
    """An intact transcript: its header, its batch records in order, its end record
    and its digest (``"sha256:<chain head>"``); ``commit`` is the commit record
    written before the verdict (None in a transcript from before it existed)."""

    header: dict[str, Any]
    batches: tuple[dict[str, Any], ...]
    end: dict[str, Any]
    digest: str
    commit: dict[str, Any] | None = None

    @property
    def n_records(self) -> int:
        """Records in the chain, header, commit and end included."""
        return len(self.batches) + 2 + (self.commit is not None)

    @property
    def commitment(self) -> str:
        """``"sha256:<head>"`` of the chain over the header and every batch, the head the
        commit record follows (what its anchors were given); '' without a commit record."""
        return "" if self.commit is None else f"sha256:{self.commit['prev']}"


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read a transcript and check its chain; :class:`TranscriptError` says where it broke.

    Every line must parse, number itself in order and carry the hash of the
    line before it; the first must be a header of a known format, the last the
    end record, with nothing after it. The digest is the hash of the end line.
    """
    from ..ground.secret_files import read_bounded_file

    data, _ = read_bounded_file(Path(path), what="transcript", limit=MAX_TRANSCRIPT_BYTES)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    records, head = [], GENESIS
    for number, line in enumerate(lines):
        record = _parse_line(line, number)
        if record.get("record") != number:
            raise TranscriptError(
                f"chain broken at record {number}: it says it is record "
                f"{record.get('record')!r} (a record was removed, added or moved)",
                number,
            )
        if record.get("prev") != head:
            raise TranscriptError(
                f"chain broken at record {number}: the record before it was altered, "
                "removed or moved (its hash is not the one this record carries)",
                number,
            )
        head = _digest(line)
        records.append(record)
    return _checked_shape(records, head)


def _parse_line(line: bytes, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        raise TranscriptError(f"record {number} is not valid JSON", number) from None
    if not isinstance(record, dict):
        raise TranscriptError(f"record {number} is not a JSON object", number)
    return record


def _checked_shape(records: list[dict[str, Any]], head: str) -> Transcript:
    """Header first, end last, batches between: else where the shape breaks."""
    if not records or records[0].get("kind") != "header":
        raise TranscriptError("the transcript does not start with its header record", 0)
    if records[0].get("format") != TRANSCRIPT_FORMAT:
        raise TranscriptError(f"unknown transcript format {records[0].get('format')!r}", 0)
    last = len(records) - 1
    if last == 0 or records[last].get("kind") != "end":
        raise TranscriptError(
            "the transcript has no end record (the audit did not finish, or its end was cut)",
            last,
        )
    if records[last].get("n_records") != len(records):
        raise TranscriptError(
            f"the end record counts {records[last].get('n_records')!r} "
            f"records, the transcript holds {len(records)}",
            last,
        )
    commit = records[last - 1] if records[last - 1].get("kind") == "commit" else None
    stop = last - 1 if commit is not None else last
    for number, record in enumerate(records[1:stop], start=1):
        if record.get("kind") not in ("batch", "deadline"):
            where = " (a commit record comes last before the end)" * (
                record.get("kind") == "commit"
            )
            raise TranscriptError(
                f"record {number} is a {record.get('kind')!r} record{where}", number
            )
    if commit is not None and commit.get("commitment") != f"sha256:{commit['prev']}":
        raise TranscriptError(
            f"the commit record (record {stop}) names {commit.get('commitment')!r}, not the "
            "chain's head before it: records before it were edited and the chain rebuilt",
            stop,
        )
    batches = tuple(records[1:stop])
    return Transcript(records[0], batches, records[last], f"sha256:{head}", commit)
