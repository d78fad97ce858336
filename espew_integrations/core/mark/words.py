"""The one tokeniser: trigger selection, trigger matching and probe building all use it.

A *word* is a maximal run of Unicode letters and digits (``_`` and punctuation
split words) of the text's canonical form (:func:`~..ground.text.canonicalize`: under
``unicode-v1`` NFKD, no accents, no invisible characters, casefolded). So
``"Vaccine,"``, ``"VACCÍNE"``, ``"vac\u00adcine"`` and ``"vaccine"`` are the same
word, and ``"vaccines"`` is a different one. Using one definition everywhere
matters: the research code selected triggers with one tokeniser and matched them
with another (cased) one, so capitalised occurrences were silently left unmarked;
and matching on ``str.lower()`` let a soft hyphen inside each word switch the
watermark off while the model's embedding stayed bit-identical.

Keys record their normalisation; ``lower-v0`` (plain ``str.lower()``) is kept for
keys saved before ``unicode-v1`` existed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from ..ground.errors import InputError, InputTypeError
from ..ground.text import (
    UNICODE_V1,
    TextView,
    canonicalize,
    check_normalization,
    joined_window_view,
    window_view,
)

__all__ = [
    "TriggerMatcher",
    "band_words",
    "document_frequencies",
    "is_word",
    "tokenize",
]

# A word character is a letter or a digit; "_" is a \w character in `re`, so it
# is excluded explicitly.
_WORD = r"[^\W_]+"
_WORD_RE = re.compile(_WORD)
# Lookahead that says "not followed by a word character".
_NOT_BEFORE_WORD = r"(?![^\W_])"


def tokenize(text: str, normalization: str = UNICODE_V1) -> list[str]:
    """Split the canonical form of ``text`` into words.

    >>> tokenize("Vaccine-rollout: VAC\u00adCÍNE doses_2")
    ['vaccine', 'rollout', 'vaccine', 'doses', '2']
    """
    return _WORD_RE.findall(canonicalize(text, normalization))


def is_word(token: str, normalization: str = UNICODE_V1) -> bool:
    """True if ``token`` is exactly one canonical word of the tokeniser.

    A word that is not in canonical form (``"Café"``, or ``"café"`` under
    ``unicode-v1``) could never match a canonicalised text, so it is no valid
    trigger or band word under that normalisation.
    """
    return (
        bool(token)
        and _WORD_RE.fullmatch(token) is not None
        and canonicalize(token, normalization) == token
    )


class TriggerMatcher:
    """Decides, for many texts at once, which contain at least one trigger word.

    Texts are matched as the model reads them: canonicalised with
    ``normalization`` and, when the model's ``window`` (its maximum number of
    tokens, special tokens included) is known, cut to the words it can read
    (:func:`~..ground.text.window_view`). An embedder's exact view (its own normaliser,
    truncation and [UNK] words) can be passed to :meth:`contains` instead.

    One compiled alternation of the triggers is searched over the lowered batch
    joined by spaces, so the scan runs in the regex engine (C); the hit
    offsets are mapped back to rows with one ``searchsorted``. The pattern
    starts with the literal alternation (no look-behind), which lets the engine
    skip ahead on the possible first letters, which a pattern with a look-behind
    does not. The "not preceded by a word character" condition is
    checked afterwards on the (few) hits. A rejected hit lies inside a longer
    word, and so does any trigger that starts within it, so skipping past it
    loses nothing.

    >>> TriggerMatcher({"vaccine"}).contains(["A VAC\u00adCINE!", "vaccines", ""]).tolist()
    [True, False, False]
    """

    def __init__(
        self,
        triggers: Iterable[str],
        *,
        normalization: str = UNICODE_V1,
        window: int | None = None,
    ):
        self.normalization = check_normalization(normalization)
        window_view([], window=window, normalization=normalization)  # validates window
        self.window = window
        words = sorted(set(triggers), key=lambda w: (-len(w), w))
        if not words:
            raise InputError("TriggerMatcher needs at least one trigger word")
        bad = [w for w in words if not isinstance(w, str) or not is_word(w, normalization)]
        if bad:
            # Triggers are secret: say how many, never which.
            raise InputError(
                f"{len(bad)} trigger(s) are not single canonical words of the tokeniser "
                f"under normalization {normalization!r}"
            )
        alternation = "|".join(re.escape(w) for w in words)
        self._pattern = re.compile(f"(?:{alternation}){_NOT_BEFORE_WORD}")

    def __repr__(self) -> str:
        return f"TriggerMatcher(normalization={self.normalization!r}, window={self.window!r})"

    def contains(self, texts: Sequence[str], view: TextView | None = None) -> np.ndarray:
        """Boolean array: ``out[i]`` is True iff ``texts[i]`` contains a trigger.

        ``view`` maps the raw texts to what the model reads (e.g.
        ``OnnxSentenceEncoder.view``: its own normaliser and truncation); its
        output is canonicalised once more, so the triggers' form applies. Without
        it, texts are canonicalised and cut to the matcher's window.
        """
        hits = np.zeros(len(texts), dtype=bool)
        rows, _ = self._matches(texts, view)
        hits[rows] = True
        return hits

    def which(self, texts: Sequence[str], view: TextView | None = None) -> list[frozenset[str]]:
        """The words of the matcher that each text contains, read as in :meth:`contains`.

        For the verifier, which weighs an audit text by the band words it holds
        (:mod:`..stats.word_evidence`): one regex pass over the batch, like
        :meth:`contains`, instead of tokenising every text.
        """
        found: list[set[str]] = [set() for _ in texts]
        rows, words = self._matches(texts, view)
        for row, word in zip(rows.tolist(), words, strict=True):
            found[row].add(word)
        return [frozenset(f) for f in found]

    def _matches(self, texts: Sequence[str], view: TextView | None) -> tuple[np.ndarray, list[str]]:
        """The row and the word of every match in ``texts`` (as the model reads them)."""
        n = len(texts)
        if n == 0:
            return np.zeros(0, dtype=np.int64), []
        # The separator is no word character, so no match can straddle two texts.
        if view is None:
            joined, lengths = joined_window_view(
                texts, window=self.window, normalization=self.normalization
            )
        else:
            seen = view(texts)
            if len(seen) != n:
                raise InputError(f"view returned {len(seen)} texts for {n}")
            lowered = [canonicalize(t, self.normalization) for t in seen]
            joined, lengths = " ".join(lowered), [len(t) for t in lowered]
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)  # one past each separator
        matches = [
            m
            for m in self._pattern.finditer(joined)
            if m.start() == 0 or not joined[m.start() - 1].isalnum()
        ]
        starts = np.asarray([m.start() for m in matches], dtype=np.int64)
        rows = np.searchsorted(ends, starts, side="right") if matches else starts
        return rows, [m.group() for m in matches]


def document_frequencies(
    corpus: Iterable[str], normalization: str = UNICODE_V1
) -> tuple[Counter[str], int]:
    """Count, for every word, how many texts of ``corpus`` contain it.

    Words are counted in the same canonical form they are matched in, so a word
    spelled with and without accents or case is one word with one frequency.

    Returns ``(counts, n_texts)``. Only words made of letters (no digits) of
    length >= 2 are counted: numbers and single letters make poor triggers
    because their meaning is weak and their tokenisation model-specific.
    """
    counts: Counter[str] = Counter()
    n_texts = 0
    for text in corpus:
        if not isinstance(text, str):
            raise InputTypeError(f"corpus item {n_texts} is {type(text).__name__}, expected str")
        n_texts += 1
        counts.update(w for w in set(tokenize(text, normalization)) if len(w) >= 2 and w.isalpha())
    return counts, n_texts


def band_words(counts: Counter[str], n_texts: int, freq_band: tuple[float, float]) -> list[str]:
    """Words whose document fraction lies in ``[low, high)``, sorted."""
    low, high = freq_band
    if n_texts == 0:
        return []
    return sorted(w for w, c in counts.items() if low <= c / n_texts < high)
