"""Make text that a suspect supplied safe to print, log or store.

A suspect endpoint is someone else's server, and whatever it answers (an error
message, a malformed body, an echoed header) ends up in exceptions, in
``report.errors``, on the provider's terminal and in evidence files handed to a
lawyer or to the other side. A hostile server can therefore try to

- drive the reader's terminal with ANSI / OSC escape sequences (rewrite earlier
  lines, set the window title, plant clickable links),
- make a file read differently from what it contains with bidi overrides and
  invisible format characters,
- flood logs and reports with megabytes of text,
- echo a credential it was sent (the API key) so that it lands in the report.

:func:`printable` neutralises the first three, :func:`redact` the last; pass
the secrets to ``printable(..., secrets=...)`` to do both in the safe order
(sanitise, then redact, then truncate, so that neither invisible characters
spliced into a secret nor a truncation through it can leave part of it
readable).

Standard library only, like the rest of the core.

>>> printable("\\x1b[31mred\\x1b[0m\\u202eevil\\n\\tline")
'redevil line'
>>> redact("key=sk-123 echoed", ["sk-123"])
'key=[REDACTED] echoed'
>>> tally(["down", "down", "slow"])
['down (x2)', 'slow']
"""

from __future__ import annotations

import base64
import re
import unicodedata
import urllib.parse
from collections.abc import Iterable

from .errors import InputError

__all__ = ["ELLIPSIS", "REDACTED", "counted", "printable", "redact", "tally"]

#: What replaces each occurrence of a secret.
REDACTED = "[REDACTED]"
#: Appended when :func:`printable` shortens a text.
ELLIPSIS = "…"

# ECMA-48 escape sequences, 7-bit and 8-bit forms:
# - string controls (OSC, DCS, SOS, PM, APC) up to their terminator (BEL or ST),
#   or to the end of the text when a hostile sender leaves them open;
# - CSI sequences: parameters, intermediates, final byte;
# - any other two- or three-character ESC sequence (charset selection, RIS, ...).
_ESCAPES = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
)
_SPACES = re.compile(r" {2,}")
# A bound on the raw text examined, so a 100 MB answer costs no more than a short one.
_RAW_FACTOR = 16
_RAW_MINIMUM = 4096
# Encoded forms of a secret shorter than this are not redacted (too likely to
# match innocent text); the secret itself always is.
_MIN_DERIVED = 6


def _as_text(text: object) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8", errors="replace")
    try:
        return str(text)
    except Exception:  # a hostile object's __str__ must not break error reporting
        return f"<unprintable {type(text).__name__}>"


def _char_filter(char: str) -> str:
    if char.isspace():
        return " "  # newlines, tabs, NBSP, line/paragraph separators: one plain space
    if unicodedata.category(char)[0] == "C":
        return ""  # control, format (bidi overrides, zero-width), surrogate, private, unassigned
    return char


def _sanitise(text: str) -> str:
    text = _ESCAPES.sub("", text)
    if not text.isprintable() or "  " in text:
        text = "".join(map(_char_filter, text))
    return _SPACES.sub(" ", text).strip()


def _forms(secret: str) -> set[str]:
    """The secret and the encoded forms it may be echoed in (cheap ones only)."""
    forms = {secret}
    raw = secret.encode("utf-8")
    derived = {
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret, safe=""),
        secret.encode("unicode_escape").decode("ascii"),
    }
    # Base64 at each of the three byte alignments: the characters that depend on
    # the secret alone, so that it is found inside a longer base64 blob too.
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode("ascii")
        total_bits = 8 * (offset + len(raw))
        core = encoded[-(-8 * offset // 6) : total_bits // 6]
        derived.update({core, core.replace("+", "-").replace("/", "_")})
    derived.add(base64.b64encode(raw).decode("ascii"))
    derived.add(base64.urlsafe_b64encode(raw).decode("ascii"))
    forms.update(form for form in derived if len(form) >= _MIN_DERIVED)
    return forms


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each non-empty secret in ``text`` with ``[REDACTED]``.

    Also replaced: the secret's URL-quoted, backslash-escaped and base64 (standard
    and URL-safe, at any byte alignment) forms, when they are at least 6
    characters long. Longer forms are replaced first, so a secret that contains
    another is hidden whole. ``secrets`` may contain ``None`` or empty strings
    (skipped), so callers can pass optional credentials as they are.
    """
    text = _as_text(text)
    forms: set[str] = set()
    for secret in secrets:
        if isinstance(secret, str) and secret:
            forms |= _forms(secret)
    for form in sorted(forms, key=len, reverse=True):
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def printable(text: object, limit: int = 300, *, secrets: Iterable[str] = ()) -> str:
    """``text`` made safe to print or store: one line of visible characters, at most ``limit``.

    Removes ANSI/ECMA-48 escape sequences (CSI, OSC, DCS, ... in their 7- and
    8-bit forms) and every control, format (bidi overrides, zero-width
    characters, soft hyphen), surrogate, private-use and unassigned code point;
    turns every kind of whitespace into a plain space and collapses runs of
    them; cuts the result to ``limit`` characters, the last being ``…``.

    ``secrets`` are redacted (see :func:`redact`) after the text is cleaned and
    before it is cut: invisible characters spliced into a secret cannot hide it
    from redaction, and a cut cannot leave a readable prefix of it. Any object
    is accepted (its ``str``; bytes are decoded as UTF-8), since what a
    hostile server sends need not be a string.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"limit must be a positive int, got {limit!r}")
    secret_list = [s for s in secrets if isinstance(s, str) and s]
    raw = _as_text(text)
    bound = max(_RAW_FACTOR * limit, _RAW_MINIMUM)
    cut = len(raw) > bound
    clean = _sanitise(raw[:bound] if cut else raw)
    if secret_list:
        clean = redact(clean, secret_list)
        if cut:
            # The raw cut may have split a secret: drop the tail that could hold part of it.
            longest = max(len(form) for s in secret_list for form in _forms(s))
            clean = clean[: max(len(clean) - longest, 0)].rstrip()
    if cut or len(clean) > limit:
        clean = clean[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return clean


def counted(messages: Iterable[str]) -> list[tuple[str, int]]:
    """Each distinct message once, in first-seen order, with how many times it came.

    An unreachable endpoint fails every batch the same way; shown once with its
    count it reads as one cause, where five copies read as five problems. The
    count is the suspect's own (how many batches it failed alike), so it moves
    with nothing the auditor chose to score.
    """
    counts: dict[str, int] = {}
    for message in messages:
        counts[message] = counts.get(message, 0) + 1
    return list(counts.items())


def tally(messages: Iterable[str]) -> list[str]:
    """:func:`counted` as text: a message that came N > 1 times ends with ``(xN)``."""
    return [f"{message} (x{n})" if n > 1 else message for message, n in counted(messages)]
