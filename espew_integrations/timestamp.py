"""RFC 3161 timestamps over an audit's commitment: proof the records existed by a time.

An auditor can rewrite a transcript and re-chain it at will: a hash chain its
author computed alone proves nothing to whoever distrusts the author. A
timestamp authority (TSA) the auditor does not control can. During the audit,
once every answer is in and before the verdict is computed, the transcript's
commitment (the SHA-256 chain head over every text and answer) is sent to the
TSA, which signs "this digest existed at time T"; the signed token goes into
the transcript's commit record. Editing any record afterwards changes the
commitment, and no token for the new one can carry the old time.

- :class:`TimestampAnchor` asks the TSA (``espew verify --timestamp-url URL``):
  it builds the RFC 3161 request itself (a few bytes of DER, no dependency) and
  posts it with the standard library;
- :func:`verify_timestamp` checks a recorded token (``espew evidence check
  --tsa-ca CA.pem``): that its message imprint is the transcript's commitment
  (needs nothing), and that a TSA certified by ``CA.pem`` signed it, with the
  ``openssl ts -verify`` command (OpenSSL 1.1 or later; without it
  :class:`OpenSSLMissingError` says what to install).

What a timestamp does *not* prove: that the answers are the suspect's (an
auditor could timestamp a forgery made during the audit; re-asking the suspect,
:mod:`espew_integrations.core.records.requery`, checks that), nor that T is the
audit's date rather than a later one (compare T with what the suspect's side
knows of the audit).

>>> anchor = TimestampAnchor("https://freetsa.org/tsr")       # doctest: +SKIP
>>> recorder = TranscriptRecorder("private/", anchors=[anchor])  # doctest: +SKIP
>>> verify(suspect, key, transcript=recorder)                  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .core.evidence_check import Findings
from .core.ground.errors import ESpeWError, InputError, PathMissingError
from .core.ground.untrusted import printable

__all__ = [
    "OpenSSLMissingError",
    "TimestampAnchor",
    "TimestampError",
    "parse_token",
    "timestamp_request",
    "verify_timestamp",
]

#: The most bytes read of a TSA's answer (a token with its certificates is a few KB).
MAX_REPLY_BYTES = 1 << 20
_SHA256_ALGORITHM = bytes.fromhex("300d06096086480165030402010500")  # AlgorithmIdentifier
_SHA256_OID = bytes.fromhex("608648016503040201")
_GRANTED = (0, 1)  # PKIStatus granted, grantedWithMods


class TimestampError(ESpeWError, ValueError):
    """A TSA's answer or a recorded token that is not a usable RFC 3161 timestamp."""


class OpenSSLMissingError(ESpeWError, RuntimeError):
    """Verifying a timestamp's signature needs the ``openssl`` command, which is not here."""


# ---------------------------------------------------------------------- DER, minimal
def _der(tag: int, content: bytes) -> bytes:
    """One DER element: ``tag``, its definite length, ``content``."""
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _elements(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, bytes]]:
    """The DER elements between ``start`` and ``end``: ``(tag, content)`` each."""
    end = len(data) if end is None else end
    out = []
    at = start
    while at < end:
        if at + 2 > end:
            raise TimestampError("truncated DER element")
        tag, first = data[at], data[at + 1]
        at += 2
        if first < 0x80:
            size = first
        else:
            count = first & 0x7F
            if count == 0 or count > 4 or at + count > end:
                raise TimestampError("a DER length that is not definite or too long")
            size = int.from_bytes(data[at : at + count], "big")
            at += count
        if at + size > end:
            raise TimestampError("a DER element longer than what holds it")
        out.append((tag, data[at : at + size]))
        at += size
    return out


def _one(data: bytes, tag: int, what: str) -> bytes:
    """The content of ``data``, a single DER element that must have ``tag``."""
    found = _elements(data)
    if len(found) != 1 or found[0][0] != tag:
        raise TimestampError(f"{what} is not the DER element it should be")
    return found[0][1]


def _integer(content: bytes) -> int:
    return int.from_bytes(content, "big", signed=True)


# ---------------------------------------------------------------------- request
def timestamp_request(digest: bytes, nonce: int) -> bytes:
    """The DER TimeStampReq for a SHA-256 ``digest``, asking for the TSA's certificate."""
    if len(digest) != 32:
        raise InputError("an RFC 3161 request here is over a SHA-256 digest (32 bytes)")
    imprint = _der(0x30, _SHA256_ALGORITHM + _der(0x04, digest))
    nonce_bytes = nonce.to_bytes((nonce.bit_length() + 8) // 8, "big")
    body = _der(0x02, b"\x01") + imprint + _der(0x02, nonce_bytes) + _der(0x01, b"\xff")
    return _der(0x30, body)


def _token_of_reply(reply: bytes) -> bytes:
    """The TimeStampToken (DER) of a TimeStampResp, or why the TSA refused."""
    parts = _elements(_one(reply, 0x30, "the TSA's answer"))
    if not parts or parts[0][0] != 0x30:
        raise TimestampError("the TSA's answer has no status")
    status = _elements(parts[0][1])
    if not status or status[0][0] != 0x02:
        raise TimestampError("the TSA's answer has no status")
    code = _integer(status[0][1])
    if code not in _GRANTED or len(parts) < 2:
        raise TimestampError(f"the TSA refused the request (PKIStatus {code})")
    return _der(parts[1][0], parts[1][1])


def parse_token(token: bytes) -> dict[str, Any]:
    """What a TimeStampToken says, unverified: ``digest`` (hex), ``gen_time`` (ISO UTC),
    ``serial`` and ``nonce``. :class:`TimestampError` if it is not a token."""
    content_info = _elements(_one(token, 0x30, "the token"))
    if len(content_info) < 2 or content_info[1][0] != 0xA0:
        raise TimestampError("the token is not a CMS SignedData")
    signed = _elements(_one(content_info[1][1], 0x30, "the token's SignedData"))
    if len(signed) < 3 or signed[2][0] != 0x30:
        raise TimestampError("the token's SignedData holds no content")
    encapsulated = _elements(signed[2][1])
    if len(encapsulated) < 2 or encapsulated[1][0] != 0xA0:
        raise TimestampError("the token's SignedData holds no TSTInfo")
    tst = _elements(_one(_one(encapsulated[1][1], 0x04, "the TSTInfo"), 0x30, "the TSTInfo"))
    if len(tst) < 5:
        raise TimestampError("the TSTInfo is too short")
    algorithm, hashed = _elements(tst[2][1])[:2]
    if _elements(algorithm[1])[0][1] != _SHA256_OID:
        raise TimestampError("the token is not over a SHA-256 digest")
    nonce = next((_integer(c) for t, c in tst[5:] if t == 0x02), None)
    return {
        "digest": hashed[1].hex(),
        "gen_time": _generalized_time(tst[4][1]),
        "serial": format(_integer(tst[3][1]), "x"),
        "nonce": nonce,
    }


def _generalized_time(content: bytes) -> str:
    """A DER GeneralizedTime (``YYYYMMDDHHMMSS[.fff]Z``) as an ISO UTC string."""
    text = content.decode("ascii", "replace")
    if not text.endswith("Z") or len(text) < 15:
        raise TimestampError(f"a token time that is not UTC: {printable(text, limit=40)}")
    whole, _, fraction = text[:-1].partition(".")
    when = _dt.datetime.strptime(whole, "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    iso = when.isoformat()
    return iso.replace("+00:00", f".{fraction}+00:00") if fraction else iso


# ---------------------------------------------------------------------- the anchor
class TimestampAnchor:
    """An anchor for :class:`~espew_integrations.core.records.transcript.TranscriptRecorder`:
    the commitment timestamped by the RFC 3161 TSA at ``url``.

    Called once, before the verdict is computed; records the token (base64 DER),
    the TSA's URL, the time it signed and its serial number. Raises
    :class:`TimestampError` (recorded as the anchor's error) when the TSA cannot
    be reached, refuses, or answers a token over another digest or nonce.
    """

    name = "timestamp"

    def __init__(self, url: str, *, timeout: float = 30.0):
        if not url.lower().startswith(("http://", "https://")):
            raise InputError(f"a timestamp URL is http:// or https://, got {url!r}")
        self.url = url
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"TimestampAnchor({self.shown_url!r})"

    @property
    def shown_url(self) -> str:
        """The URL as recorded and shown: any user and password in it left out."""
        return printable(re.sub(r"//[^/@\s]*@", "//", self.url), limit=300)

    def __call__(self, commitment: str) -> dict[str, Any]:
        digest = _digest_bytes(commitment)
        nonce = secrets.randbits(63)
        request = urllib.request.Request(
            self.url,
            data=timestamp_request(digest, nonce),
            headers={"Content-Type": "application/timestamp-query"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = response.read(MAX_REPLY_BYTES + 1)
        except (urllib.error.URLError, OSError) as exc:
            raise TimestampError(f"no timestamp from {self.shown_url}: {printable(exc)}") from None
        if len(reply) > MAX_REPLY_BYTES:
            raise TimestampError(f"{self.shown_url} answered more than {MAX_REPLY_BYTES:,} bytes")
        token = _token_of_reply(reply)
        said = parse_token(token)
        if said["digest"] != digest.hex() or said["nonce"] != nonce:
            raise TimestampError(f"{self.shown_url} answered a token over another digest or nonce")
        return {
            "kind": "rfc3161",
            "url": self.shown_url,
            "token": base64.b64encode(token).decode("ascii"),
            "gen_time": said["gen_time"],
            "serial": said["serial"],
        }


def _digest_bytes(commitment: str) -> bytes:
    prefix, _, hexdigest = commitment.partition(":")
    if prefix != "sha256" or len(hexdigest) != 64:
        raise InputError(f"a commitment is 'sha256:<64 hex digits>', got {commitment!r}")
    return bytes.fromhex(hexdigest)


# ---------------------------------------------------------------------- verification
def verify_timestamp(
    anchor: dict[str, Any],
    commitment: str,
    ca_file: str | os.PathLike[str] | None = None,
    *,
    openssl: str = "openssl",
) -> Findings:
    """What the recorded ``anchor`` (a commit record's ``timestamp``) proves of
    ``commitment``: a failure when its token is over another digest (records were
    altered after it was taken) or its signature does not verify against
    ``ca_file``; without ``ca_file`` the signature is left unchecked and said so.

    Raises :class:`OpenSSLMissingError` when ``ca_file`` is given and ``openssl``
    cannot be run.
    """
    try:
        token = base64.b64decode(str(anchor.get("token", "")), validate=True)
        said = parse_token(token)
    except (ValueError, TimestampError) as exc:
        return Findings(failure=f"the recorded timestamp is not a token: {exc}")
    if said["digest"] != _digest_bytes(commitment).hex():
        return Findings(
            failure="the timestamp is over another commitment than this transcript's: records "
            f"were altered after it was taken (at {said['gen_time']}) and the chain rebuilt"
        )
    url = printable(anchor.get("url", "?"), limit=300)
    if ca_file is None:
        return Findings(
            not_proved=(
                f"when the records existed: the transcript holds a timestamp from {url} at "
                f"{said['gen_time']} over its commitment, but its signature was not checked "
                "(give the TSA's CA certificate: --tsa-ca CA.pem)",
            )
        )
    signed, tsa = _openssl_verify(token, said["digest"], Path(ca_file), openssl)
    if not signed:
        return Findings(
            failure=f"the timestamp's signature does not verify against {ca_file}: {tsa}"
        )
    return Findings(
        proved=(
            f"timestamp anchored: every record before the commit record existed, as it is, "
            f"by {said['gen_time']} (RFC 3161, TSA {tsa} at {url}, serial {said['serial']}, "
            f"signature verified against {Path(ca_file).name})",
        )
    )


def _openssl_verify(token: bytes, digest: str, ca_file: Path, openssl: str) -> tuple[bool, str]:
    """``openssl ts -verify`` of ``token`` over ``digest``: (verified, the TSA's name or
    why not)."""
    program = shutil.which(openssl)
    if program is None:
        raise OpenSSLMissingError(
            f"verifying an RFC 3161 timestamp's signature needs the {openssl!r} command "
            "(OpenSSL 1.1 or later), which is not on PATH: install it (apt-get install "
            "openssl, brew install openssl) or check the token without --tsa-ca"
        )
    if not ca_file.is_file():
        raise PathMissingError(f"no TSA CA certificate at {ca_file}")
    with tempfile.TemporaryDirectory(prefix="espew-tsa-") as folder:
        path = Path(folder) / "token.der"
        path.write_bytes(token)
        base = [program, "ts"]
        verify_argv = ["-verify", "-digest", digest, "-in", str(path), "-token_in"]
        checked = subprocess.run(
            [*base, *verify_argv, "-CAfile", str(ca_file)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if checked.returncode != 0 or "Verification: OK" not in checked.stdout:
            reason = (checked.stderr.strip().splitlines() or ["verification failed"])[-1]
            return False, printable(reason, limit=300)
        shown = subprocess.run(
            [*base, "-reply", "-in", str(path), "-token_in", "-text", "-token_out"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    names = [line[4:].strip() for line in shown.stdout.splitlines() if line.startswith("TSA:")]
    return True, printable(names[0] if names else "unnamed", limit=200)
