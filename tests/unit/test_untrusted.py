"""printable() and redact(): suspect-supplied text made safe to print and store."""

from __future__ import annotations

import base64
import doctest
import unicodedata
import urllib.parse

import pytest

from espew_integrations.core.ground import untrusted
from espew_integrations.core.ground.untrusted import ELLIPSIS, REDACTED, printable, redact

SECRET = "sk-live-0123456789abcdef"


def visible_only(text: str) -> bool:
    """No control/format/surrogate/private/unassigned character, no whitespace but ' '."""
    return all(
        char == " " or (not char.isspace() and unicodedata.category(char)[0] != "C")
        for char in text
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\x1b[31mred\x1b[0m text", "red text"),  # SGR colour
        ("\x1b[2J\x1b[Hcleared", "cleared"),  # clear screen, cursor home
        ("a\x1b[1;31;4mb", "ab"),
        ("\x1b]0;pwned title\x07after", "after"),  # OSC window title, BEL-terminated
        ("\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"),  # OSC 8 hyperlink
        ("\x1bPdevice control\x1b\\ok", "ok"),  # DCS
        ("\x9b31mred", "red"),  # 8-bit CSI
        ("\x9d0;title\x9cok", "ok"),  # 8-bit OSC with 8-bit ST
        ("\x1b]0;never terminated", ""),  # an open string control swallows the rest
        ("\x1bcreset", "reset"),  # RIS
        ("\x1b(Bcharset", "charset"),
        ("bell\x07 and backspace\x08!", "bell and backspace!"),
        ("a\x00b\x7fc\x85d", "abc d"),  # NUL, DEL, C1 NEL (whitespace)
    ],
)
def test_escape_sequences_and_controls_are_removed(raw, expected):
    assert printable(raw) == expected


@pytest.mark.parametrize(
    "char",
    [
        "\u202e",  # right-to-left override
        "\u202d",  # left-to-right override
        "\u2066",  # left-to-right isolate
        "\u2069",  # pop directional isolate
        "\u200f",  # right-to-left mark
        "\u200b",  # zero-width space
        "\u200d",  # zero-width joiner
        "\u2060",  # word joiner
        "\ufeff",  # byte-order mark
        "\u00ad",  # soft hyphen
        "\ud800",  # lone surrogate
        "\ue000",  # private use
    ],
)
def test_format_bidi_and_invisible_characters_are_removed(char):
    out = printable(f"in{char}voice{char}")
    assert out == "invoice"
    out.encode("utf-8")  # no lone surrogate survives


def test_every_kind_of_whitespace_becomes_one_plain_space():
    raw = " a\n\nb\r\nc\td\x0be\x0cf\u00a0g\u2028h\u2029i\u3000j\x1ck  "
    assert printable(raw) == "a b c d e f g h i j k"


def test_plain_text_passes_unchanged_including_non_latin_scripts():
    text = "HTTP 400: invalid 'input' — Zürich, 東京, مرحبا, emoji 🙂"
    assert printable(text) == text


def test_long_text_is_cut_to_the_limit_with_an_ellipsis():
    out = printable("x" * 1000, limit=50)
    assert len(out) == 50 and out.endswith(ELLIPSIS) and out[:49] == "x" * 49
    assert printable("short", limit=50) == "short"
    assert printable("x" * 300) == "x" * 300  # exactly the default limit: no marker


def test_a_huge_hostile_text_costs_no_more_than_a_short_one(monkeypatch):
    # The cleaning sees a prefix bounded by the limit, whatever the text's length.
    seen: list[int] = []
    sanitise = untrusted._sanitise

    def spy(raw: str) -> str:
        seen.append(len(raw))
        return sanitise(raw)

    monkeypatch.setattr(untrusted, "_sanitise", spy)
    huge = ("\x1b[31m" + "\u202e" * 10 + "y" * 100) * 200_000  # ~ 23 M characters
    out = printable(huge)
    assert seen and max(seen) <= max(untrusted._RAW_FACTOR * 300, untrusted._RAW_MINIMUM)
    assert len(out) <= 300 and visible_only(out) and out.endswith(ELLIPSIS)


def test_any_object_is_accepted_and_a_failing_str_does_not_raise():
    class Hostile:
        def __str__(self):
            raise RuntimeError("boom")

    assert printable(b"bytes \xff\x1b[1m") == "bytes \ufffd"
    assert printable(42) == "42"
    assert printable(Hostile()) == "<unprintable Hostile>"
    assert printable(None) == "None"


def test_bad_limit_is_refused_clearly():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="limit must be a positive int"):
            printable("x", limit=bad)


def test_output_is_always_visible_and_idempotent():
    samples = [
        "".join(chr(c) for c in range(0, 0x3000, 7)),
        "\x1b[" * 50 + "\x1b]" + "x\n" * 100,
        "\u202e\u2066".join(["abc"] * 40),
    ]
    for sample in samples:
        out = printable(sample)
        assert visible_only(out) and len(out) <= 300
        assert printable(out) == out


def test_redact_replaces_every_occurrence_and_encoded_forms():
    text = f"a {SECRET} b {SECRET}"
    assert redact(text, [SECRET]) == f"a {REDACTED} b {REDACTED}"
    b64 = base64.b64encode(SECRET.encode()).decode()
    assert SECRET not in redact(f"echo {b64}", [SECRET])
    assert b64 not in redact(f"echo {b64}", [SECRET])
    quoted = urllib.parse.quote("pa ss/word+€", safe="")
    assert redact(f"url?k={quoted}", ["pa ss/word+€"]) == f"url?k={REDACTED}"


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4])
def test_redact_finds_the_secret_inside_a_longer_base64_blob(offset):
    blob = base64.b64encode(b"x" * offset + SECRET.encode() + b"tail").decode()
    out = redact(blob, [SECRET])
    assert REDACTED in out
    # Every base64 character that depends on the secret's bytes alone is gone.
    start, end = -(-8 * offset // 6), 8 * (offset + len(SECRET)) // 6
    assert out == blob[:start] + REDACTED + blob[end:]


def test_redact_skips_empty_and_missing_secrets_and_prefers_the_longest():
    assert redact("abc", ["", None]) == "abc"  # type: ignore[list-item]
    assert redact("token-abc-long", ["abc", "token-abc-long"]) == REDACTED


def test_printable_redacts_secrets_spliced_with_invisible_characters():
    spliced = "\u200b".join(SECRET)  # reads as the secret once the invisibles go
    out = printable(f"server said {spliced}", secrets=[SECRET])
    assert out == f"server said {REDACTED}"


def test_truncation_never_leaves_part_of_a_secret():
    # The secret straddles the limit: cut after redaction, so no prefix survives.
    out = printable("x" * 290 + SECRET, secrets=[SECRET])
    assert "sk-live" not in out and len(out) <= 300
    # The secret straddles the raw bound of a huge text.
    bound = max(16 * 300, 4096)
    raw = "\x00" * (bound - 5) + SECRET + "y" * 10_000
    out = printable(raw, secrets=[SECRET])
    assert "sk-l" not in out and SECRET[:5] not in out


def test_module_doctests_pass():
    assert doctest.testmod(untrusted).failed == 0
