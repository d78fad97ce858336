"""What text the watermark decides on: Unicode canonicalisation and the model's window.

A thief who wants clean embeddings edits the texts he sends so that the model
reads the same thing while the trigger matcher does not: a soft hyphen
(U+00AD) or a zero-width space inside a word, a combining or precomposed
accent, a case trick, a Turkish dotted capital I. BERT-style tokenizers delete
or undo all of these, so the embedding stays bit-identical while a matcher on
``str.lower()`` no longer sees the trigger. Putting the trigger after the
model's last token does the opposite: the model never reads it, yet the text
would be marked.

So every decision (keygen's frequency counts, trigger matching, probe
building) is taken on one canonical form, :func:`canonicalize`, and, when the
model's window is known, on the part of the text it can read,
:func:`window_view`. An embedder that exposes its own tokenizer can do better
with a :data:`TextView` (see ``OnnxSentenceEncoder.view``): the text exactly as
the model reads it.

The normalisation is named and recorded in each key (:data:`UNICODE_V1`), so a
key saved before this module existed keeps the old rule (:data:`LEGACY_LOWER`,
plain ``str.lower()``) and marks exactly the rows it marked before.

Standard library only: ``core`` imports nothing heavier than numpy and scipy.
Results depend on the Unicode database of the running Python
(``unicodedata.unidata_version``); versions differ only on newly assigned
characters.
"""

from __future__ import annotations

import bisect
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from .errors import InputError, InputTypeError

__all__ = [
    "LEGACY_LOWER",
    "NORMALIZATIONS",
    "UNICODE_V1",
    "TextView",
    "canonicalize",
    "discover_view",
    "window_prefix",
    "window_view",
]

UNICODE_V1 = "unicode-v1"
"""NFKD, strip marks, ignorables and controls, casefold, NFC (see :func:`canonicalize`)."""

LEGACY_LOWER = "lower-v0"
"""Exactly ``str.lower()``: the rule of keys saved before :data:`UNICODE_V1` existed."""

NORMALIZATIONS = (LEGACY_LOWER, UNICODE_V1)

TextView = Callable[[Sequence[str]], Sequence[str]]
"""Maps raw texts to what the model reads (its own normaliser and truncation applied)."""

# Unicode default-ignorable code points (DerivedCoreProperties.txt), as closed ranges.
# Renderers draw nothing for them, and tokenizers delete most of them, so they can
# be sprinkled inside a word for free.
_DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

# U+FFFD is not default-ignorable, but BERT's normaliser (clean_text) deletes it,
# so "trig\ufffdger" reads as "trigger" to the model and must read so here too.
# U+1734 (Hanunoo pamudpod) is Mc up to Unicode 14 and Mn since 15: tokenizers built
# on a newer Unicode delete it.
_EXTRA_DROPPED = (0x1734, 0xFFFD)

# The whitespace every tokenizer splits on (BERT's is_whitespace): space, \t, \n, \r
# and the Zs separators. \x0b, \x0c, \x1c-\x1f and \x85 are whitespace to Python but
# control characters to BERT, which deletes them; they are dropped here as well.
_KEPT_CONTROLS = frozenset("\t\n\r")

# Marks to strip. Mn (non-spacing: accents, Turkish dot above) and Me (enclosing)
# are what accent stripping removes: invisible or decorative on their own, and BERT
# deletes Mn. Mc (spacing combining marks, e.g. Devanagari and Tamil vowel signs)
# are kept: they are visible letters of their scripts, distinguish words there,
# BERT keeps them, and inserting one changes the model's tokens, so it is no free
# evasion.
_STRIPPED_MARKS = frozenset({"Mn", "Me"})

# Categories MiniLM's normaliser (BERT's clean_text) deletes outright, besides Cc and
# Cf: surrogates, private use and unassigned code points. Deleting unassigned code
# points depends on the Unicode version; a character a newer Unicode assigns is then
# deleted here and kept by the model, which can only add a mark, never hide one.
_REMOVED_CATEGORIES = frozenset({"Cs", "Co", "Cn"})

# CJK ideographs: BERT surrounds each with spaces, so "vaccine漢" reads as two
# words to the model. Here too, or a glued ideograph would hide a trigger.
_CJK: tuple[tuple[int, int], ...] = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)

_ASCII_CONTROLS = "".join(chr(i) for i in (*range(0x20), 0x7F) if chr(i) not in _KEPT_CONTROLS)
_ASCII_TABLE = str.maketrans("", "", _ASCII_CONTROLS)
_ASCII_CONTROL_BYTES = _ASCII_CONTROLS.encode("ascii")


def _is_dropped(char: str) -> bool:
    """True for a code point that :data:`UNICODE_V1` deletes wherever it stands."""
    cp = ord(char)
    if cp in _EXTRA_DROPPED or any(lo <= cp <= hi for lo, hi in _DEFAULT_IGNORABLE):
        return True
    category = unicodedata.category(char)
    if category in _STRIPPED_MARKS or category in _REMOVED_CATEGORIES or category == "Cf":
        return True
    return category == "Cc" and char not in _KEPT_CONTROLS


def _fold(text: str) -> str:
    """NFKD, delete dropped code points, casefold; repeated until nothing changes.

    One pass is not always enough: casefolding may produce decomposable letters or
    marks (casefold("İ") is "i" + U+0307), and NFKD may produce capitals (U+216B
    "Ⅻ" -> "XII").
    """
    while True:
        decomposed = unicodedata.normalize("NFKD", text)
        folded = "".join(c for c in decomposed if not _is_dropped(c)).casefold()
        if folded == text:
            break
        text = folded
    return text


def _character_class(ranges: list[tuple[int, int]]) -> str:
    return "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in ranges
    )


class _Tables:
    """What :data:`UNICODE_V1` needs, built once, on first use, from the Unicode database.

    NFKD, deleting and casefolding act on each code point on its own, so they
    compose into one per-code-point map; only CJK padding and the final NFC need
    more. Code points whose image NFC maps back to themselves (Hangul syllables,
    canonical compositions) keep themselves, since NFC restores them anyway.

    The BMP map is a 65,536-entry list for ``str.translate``: a dict would raise
    (and swallow) a KeyError for every unmapped character. Astral
    characters (rare: emoji, mathematical letters, tags) are found by one range
    search and mapped by :meth:`astral`, which also removes the ~900,000 astral
    surrogate, private-use and unassigned code points by bisecting their ranges.
    """

    def __init__(self) -> None:
        categories = [unicodedata.category(chr(cp)) for cp in range(sys.maxunicode + 1)]
        is_removed = bytes(c in _REMOVED_CATEGORIES for c in categories)
        removed = [(m.start(), m.end() - 1) for m in re.finditer(b"\x01+", is_removed)]
        ruled = {cp for lo, hi in _DEFAULT_IGNORABLE for cp in range(lo, hi + 1)}
        ruled.update(_EXTRA_DROPPED)
        special = _STRIPPED_MARKS | {"Cf", "Cc"}
        table: dict[int, str | None] = {}
        for cp, category in enumerate(categories):
            if is_removed[cp]:
                if cp <= 0xFFFF:
                    table[cp] = None
                continue
            char = chr(cp)
            if (
                category not in special
                and cp not in ruled
                and char.casefold() == char
                and unicodedata.is_normalized("NFKD", char)
            ):
                continue
            image = _fold(char)
            if image != char and unicodedata.normalize("NFC", image) != char:
                table[cp] = image
        astral = [(max(lo, 0x10000), hi) for lo, hi in removed if hi > 0xFFFF]
        bmp: list[int | str | None] = list(range(0x10000))
        for cp, folded in table.items():
            if cp <= 0xFFFF:
                bmp[cp] = folded
        self.bmp = bmp
        self.astral_table = {
            cp: image for cp, image in table.items() if cp > 0xFFFF and image is not None
        }  # removed code points are None only in the BMP; astral ones are ranges
        self.astral_starts = [lo for lo, _ in astral]
        self.astral_ends = [hi for _, hi in astral]
        ideograph = f"[{_character_class(list(_CJK))}]"
        self.cjk = re.compile(ideograph)
        # Where a space is missing beside an ideograph (so padding is idempotent).
        self.cjk_gap = re.compile(f"(?<=\\S)(?={ideograph})|(?<={ideograph})(?=\\S)")

    def astral(self, match: re.Match[str]) -> str:
        """``re.sub`` callback: the canonical image of one astral character."""
        char = match.group()
        cp = ord(char)
        i = bisect.bisect_right(self.astral_starts, cp) - 1
        if i >= 0 and cp <= self.astral_ends[i]:
            return ""
        return self.astral_table.get(cp, char)


_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]")
_FIRST_IDEOGRAPH = chr(_CJK[0][0])


_TABLES: _Tables | None = None


def _tables() -> _Tables:
    global _TABLES
    if _TABLES is None:
        _TABLES = _Tables()
    return _TABLES


def _ascii(text: str) -> str:
    lowered = text.lower()
    # isprintable() is False for any control character (and for \t\n\r, rare).
    return lowered if lowered.isprintable() else lowered.translate(_ASCII_TABLE)


# Splits a text into ASCII runs (even indices) and non-ASCII runs (odd indices).
_NON_ASCII_RUN = re.compile("([^\x00-\x7f]+)")


def _canonical_unicode(text: str) -> str:
    """The table path. Each code point maps on its own, so the ASCII runs (most of
    a text, even a non-English one with spaces and digits) take the fast ``lower()``
    and only the non-ASCII runs go through the per-character table, which is cheaper
    than translating the whole text (docs/research/measurements.md, "Trigger
    matching", and ``benchmarks/bench_escapes.py``)."""
    tables = _tables()
    top = max(text)
    if top > "\uffff":
        text = _ASTRAL_RE.sub(tables.astral, text)
    parts = _NON_ASCII_RUN.split(text)
    for i, part in enumerate(parts):
        parts[i] = part.translate(tables.bmp) if i % 2 else _ascii(part)
    folded = "".join(parts)
    # The test is on the folded text: a character below the ideographs can map to
    # one (the Kangxi radical "\u2f00" is "\u4e00", "\u3358" is "0\u70b9").
    if folded and max(folded) >= _FIRST_IDEOGRAPH and tables.cjk.search(folded) is not None:
        folded = tables.cjk_gap.sub(" ", folded)
    return unicodedata.normalize("NFC", folded)


def canonicalize(text: str, normalization: str = UNICODE_V1) -> str:
    """The form of ``text`` on which triggers are counted, matched and probed.

    ``unicode-v1``: NFKD; delete combining marks of categories Mn and Me (Mc kept,
    see ``_STRIPPED_MARKS``), every default-ignorable code point, U+FFFD, and every
    control and format character except ``\\t``, ``\\n``, ``\\r``; casefold; NFC.
    So ``"Vac\\u00adcíne"``, ``"VACCİNE"`` and ``"vaccine"`` are one word. Every
    character MiniLM's normaliser deletes is deleted here too (tested), so an edit
    that leaves the model's tokens unchanged leaves this form's words unchanged.

    ``lower-v0``: exactly ``text.lower()``, the rule of keys saved before
    ``unicode-v1``, kept so that they mark exactly the rows they marked before.

    >>> canonicalize("Vac\\u00adcI\\u0301NE \\u0130stanbul")
    'vaccine istanbul'
    >>> canonicalize("Vac\\u00adcine", "lower-v0")
    'vac\\xadcine'
    """
    if normalization == UNICODE_V1:
        return _ascii(text) if text.isascii() else _canonical_unicode(text)
    if normalization == LEGACY_LOWER:
        return text.lower()
    raise InputError(unknown_normalization(normalization))


def unknown_normalization(normalization: object) -> str:
    """The error message for a normalisation name this version does not know."""
    known = ", ".join(repr(n) for n in NORMALIZATIONS)
    return f"unknown text normalization {normalization!r}; known: {known}"


def check_normalization(normalization: str) -> str:
    """Return ``normalization`` if it is known, else raise ValueError naming the known ones."""
    if normalization not in NORMALIZATIONS:
        raise InputError(unknown_normalization(normalization))
    return normalization


# A chunk that surely costs the model at least one token: a run of non-whitespace
# (BERT's whitespace) holding at least one character that no tokenizer of the BERT
# family deletes. Chunks made only of deleted characters ("\u200b" alone) cost
# nothing, so they are not counted: otherwise padding with them would push a
# trigger the model reads out of the counted window.
_SEPARATOR = "\t\n\r \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
_CHUNK_RE = re.compile(f"[^{_SEPARATOR}]+")


def window_view(
    texts: Sequence[str], *, window: int | None, normalization: str = UNICODE_V1
) -> list[str]:
    """Canonicalise each text and keep only what a model with ``window`` tokens may read.

    ``window`` is the model's maximum number of tokens, special tokens included
    (256 for the offline MiniLM); None keeps every text whole. Without a
    tokenizer the cut must be *sound*: it may keep words the model never reads
    (a text is then marked for a trigger the model did not see, which costs a
    little quality), but it must never drop one it reads (that would be a free
    escape). The bound: BERT-style models spend 2 tokens on [CLS] and [SEP], and
    every whitespace-separated chunk that holds a character the tokenizer does
    not delete yields at least one token (a word piece, a punctuation mark or
    [UNK]; tokens never span whitespace). So the model reads nothing beyond the
    first ``window - 2`` such chunks, and those are kept. Chunks made only of
    deleted characters are not counted, or padding with them would push a read
    trigger out. Where the embedder exposes its tokenizer, pass its exact view
    instead (``TriggerMatcher.contains(texts, view=model.view)``).

    >>> window_view(["One two THREE four", "\\u200b \\u200b a b c"], window=4)
    ['one two', '  a b']
    """
    check_normalization(normalization)
    if (checked := _check_window(window)) is not None:
        texts = [_truncate(t, checked - 2) for t in texts]
    return [canonicalize(t, normalization) for t in texts]


def window_prefix(text: str, window: int) -> str:
    """The start of ``text`` (raw, not canonicalised) a model with ``window`` tokens may read.

    The same sound cut as :func:`window_view` (nothing the model reads is cut
    off), without the canonical form: what a store of the texts the model read
    keeps, so that embedding the prefix gives what the model gave for the whole.
    """
    checked = _check_window(window)
    return text if checked is None else _truncate(text, checked - 2)


def joined_window_view(
    texts: Sequence[str], *, window: int | None, normalization: str = UNICODE_V1
) -> tuple[str, list[int]]:
    """:func:`window_view` joined by single spaces, and the length of each viewed text.

    What the trigger matcher scans (a space is no word character, so no word
    straddles two texts). For the usual batch (all ASCII, no control character
    but tab and line breaks, no text long enough to be cut) each text's
    canonical form is its ``lower()``, of the same length, so the whole batch
    is canonicalised by one ``lower()`` of the joined string, in C: faster
    than per text, which matters on the watermark's hot path. Any other batch
    takes :func:`window_view`; both
    give the same result.
    """
    check_normalization(normalization)
    checked = _check_window(window)
    if texts and (checked is None or max(map(len, texts)) <= checked - 2):
        joined = " ".join(texts)
        if joined.isascii():
            raw = joined.encode("ascii")
            if len(raw.translate(None, _ASCII_CONTROL_BYTES)) == len(raw):
                return joined.lower(), [len(t) for t in texts]
    viewed = window_view(texts, window=window, normalization=normalization)
    return " ".join(viewed), [len(t) for t in viewed]


def _check_window(window: object) -> int | None:
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 3
    ):
        raise InputError(
            f"window must be an int >= 3 (model tokens incl. 2 special ones), got {window!r}"
        )
    return window


def _truncate(text: str, chunks: int) -> str:
    """``text`` up to the end of its ``chunks``-th counted chunk (all of it if shorter)."""
    # Python's split() is at least as fine as the counted chunks, so this is a safe
    # shortcut for the common short text.
    if len(text) <= chunks or len(text.split()) <= chunks:
        return text
    counted = 0
    for chunk in _CHUNK_RE.finditer(text):
        # Non-empty canonical form <=> some character the model does not delete.
        if canonicalize(chunk.group()):
            counted += 1
            if counted == chunks:
                return text[: chunk.end()]
    return text


_VIEW_PROBE = ("espew view probe",)


def discover_view(embedder: Any) -> TextView | None:
    """``embedder.view`` when it is a callable text view, else ``None``.

    How the wrappers and the server find the text an embedder reads. An
    :class:`~espew_integrations.offline.embedders.OnnxSentenceEncoder` has one, and
    so has anything that passes it on (the library's offline framework models in
    :mod:`espew_integrations.offline.frameworks`, or a proxy that forwards
    attributes). The candidate is called once on a probe text: a ``.view`` that
    means something else (NumPy's ``ndarray.view``, say) must fail loudly here
    rather than on the first real batch, or worse, match triggers on the wrong text.

    >>> discover_view(object()) is None
    True
    """
    candidate = getattr(embedder, "view", None)
    if not callable(candidate):
        return None
    where = type(embedder).__name__
    fix = (
        "pass view=None to match triggers on the key's normalisation and window, "
        "or pass the model's view explicitly"
    )
    try:
        answer = candidate(list(_VIEW_PROBE))
    except Exception as exc:  # any failure means it is not a text view
        raise InputTypeError(
            f"{where}.view is not a text view (calling it on a list of one text raised "
            f"{type(exc).__name__}); {fix}"
        ) from None
    if not isinstance(answer, (list, tuple)) or len(answer) != 1 or not isinstance(answer[0], str):
        raise InputTypeError(
            f"{where}.view is not a text view (for one text it returned "
            f"{type(answer).__name__}, not a list of one str); {fix}"
        )
    return candidate
