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
  it builds the RFC 3161 request and reads the answer with asn1crypto's
  declared structures (``asn1crypto.tsp``, ``asn1crypto.cms``; the ``[evidence]``
  extra), and posts it with the standard library. Whatever bytes a TSA or a
  transcript holds, a token that is not well formed is a :class:`TimestampError`,
  never a parser's crash;
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

from ._optional import ensure, require
from .core.ground.errors import ESpeWError, InputError, PathMissingError
from .core.ground.untrusted import printable
from .core.records.findings import Findings

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
_GRANTED = ("granted", "granted_with_mods")  # PKIStatus 0 and 1
#: The extra that brings the ASN.1 structures (asn1crypto) and what it is needed for.
EXTRA = "evidence"
_PURPOSE = "RFC 3161 timestamps (espew verify --timestamp-url, espew evidence check --tsa-ca)"
#: What asn1crypto raises on bytes that are not the structure asked for. It parses
#: lazily, so these come from the first access to a field, not only from ``load``;
#: every one of them means "not a token" here.
_MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError)


class TimestampError(ESpeWError, ValueError):
    """A TSA's answer or a recorded token that is not a usable RFC 3161 timestamp."""


class OpenSSLMissingError(ESpeWError, RuntimeError):
    """Verifying a timestamp's signature needs the ``openssl`` command, which is not here."""


def _asn1() -> tuple[Any, Any]:
    """asn1crypto's ``tsp`` and ``cms`` modules, or a
    :class:`~.core.ground.errors.MissingExtraError` naming the ``[evidence]`` extra."""
    require("asn1crypto", EXTRA, _PURPOSE)
    from asn1crypto import cms, tsp

    return tsp, cms


# ---------------------------------------------------------------------- request
def timestamp_request(digest: bytes, nonce: int) -> bytes:
    """The DER TimeStampReq for a SHA-256 ``digest``, asking for the TSA's certificate.

    >>> timestamp_request(bytes(32), 7).hex()[:16]
    '303c020101303130'
    """
    if len(digest) != 32:
        raise InputError("an RFC 3161 request here is over a SHA-256 digest (32 bytes)")
    tsp, _ = _asn1()
    imprint = {"hash_algorithm": {"algorithm": "sha256"}}  # asn1crypto adds the NULL
    request = tsp.TimeStampReq(
        {
            "version": "v1",
            "message_imprint": {**imprint, "hashed_message": digest},
            "nonce": nonce,
            "cert_req": True,
        }
    )
    return bytes(request.dump())


def _token_of_reply(reply: bytes) -> bytes:
    """The TimeStampToken (DER) of a TimeStampResp, or why the TSA refused."""
    tsp, _ = _asn1()
    try:
        answer = tsp.TimeStampResp.load(reply, strict=True)
        status = answer["status"]["status"].native
        der = bytes(answer["time_stamp_token"].dump())
    except _MALFORMED as exc:
        # asn1crypto declares the token required; a refusal carries a status alone
        refused = _refusal(reply)
        reason = (
            f"the TSA refused the request (PKIStatus {refused})"
            if refused
            else f"the TSA's answer is not an RFC 3161 TimeStampResp: {_why(exc)}"
        )
        raise TimestampError(reason) from None
    if status not in _GRANTED:
        raise TimestampError(f"the TSA refused the request (PKIStatus {printable(status)})")
    return der


def _refusal(reply: bytes) -> str:
    """The PKIStatus of a TimeStampResp that holds a status and no token ('' if not one)."""
    tsp, _ = _asn1()
    from asn1crypto import core

    class StatusOnly(core.Sequence):  # type: ignore[misc]
        _fields = [("status", tsp.PKIStatusInfo)]  # noqa: RUF012 (asn1crypto's declaration)

    try:
        status = StatusOnly.load(reply, strict=True)["status"]["status"].native
    except _MALFORMED:
        return ""
    return "" if status in _GRANTED else printable(status)


def parse_token(token: bytes) -> dict[str, Any]:
    """What a TimeStampToken says, unverified: ``digest`` (hex), ``gen_time`` (ISO UTC),
    ``serial`` (hex) and ``nonce``. :class:`TimestampError` for anything that is not
    such a token over a SHA-256 digest, whatever its bytes.

    >>> parse_token(b"\\x30\\x00")
    Traceback (most recent call last):
    ...
    espew_integrations.timestamp.TimestampError: the token is not an RFC 3161 TimeStampToken: ...
    """
    tsp, cms = _asn1()
    try:
        content_info = cms.ContentInfo.load(bytes(token), strict=True)
        if content_info["content_type"].native != "signed_data":
            raise TimestampError("the token is not a CMS SignedData")
        encapsulated = content_info["content"]["encap_content_info"]
        if encapsulated["content_type"].native != "tst_info":
            raise TimestampError("the token's SignedData holds no TSTInfo")
        tst = tsp.TSTInfo.load(bytes(encapsulated["content"].contents), strict=True)
        imprint = tst["message_imprint"]
        if imprint["hash_algorithm"]["algorithm"].native != "sha256":
            raise TimestampError("the token is not over a SHA-256 digest")
        digest = imprint["hashed_message"].native
        if len(digest) != 32:
            raise TimestampError("the token's SHA-256 digest is not 32 bytes")
        said = {
            "digest": digest.hex(),
            "gen_time": _generalized_time(tst["gen_time"]),
            "serial": format(tst["serial_number"].native, "x"),
            "nonce": tst["nonce"].native,
        }
    except _MALFORMED as exc:
        if isinstance(exc, TimestampError):
            raise
        reason = f"the token is not an RFC 3161 TimeStampToken: {_why(exc)}"
        raise TimestampError(reason) from None
    return said


def _generalized_time(value: Any) -> str:
    """A DER GeneralizedTime (``YYYYMMDDHHMMSS[.fff]Z``) as an ISO UTC string, its
    fraction of a second as the TSA wrote it."""
    if value.native is None:  # asn1crypto's own check of the form: ValueError if malformed
        raise TimestampError("the token has no time")
    text = bytes(value.contents).decode("ascii", "replace")
    if not text.endswith("Z") or len(text) < 15:
        raise TimestampError(f"a token time that is not UTC: {printable(text, limit=40)}")
    whole, _, fraction = text[:-1].partition(".")
    when = _dt.datetime.strptime(whole, "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    iso = when.isoformat()
    return iso.replace("+00:00", f".{fraction}+00:00") if fraction else iso


def _why(exc: Exception) -> str:
    """asn1crypto's complaint, shortened and printable (it may quote the bytes)."""
    return printable(str(exc) or type(exc).__name__, limit=200)


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
        ensure("asn1crypto", EXTRA, _PURPOSE)  # before the audit, not at its commit
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
