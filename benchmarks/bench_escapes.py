"""Escapes: edits the model cannot see must not change the mark decision (issue 10).

On 4,000 Rotten Tomatoes texts, each edit is applied to every word: one invisible
character inside the word (six kinds), a case change, accents added (combining,
NFD, or precomposed, NFC), accents removed, Turkish dotted capital I. An edited
text counts only if the offline MiniLM gives it exactly the token ids of the
original (so its embedding is bit-identical); it *escapes* if the matcher's
decision differs between the two. The triggers are every word of the default
frequency band (0.5%-1% of texts), so every text holding a band word is at stake.

Matchers: the old one (``lower-v0``: ``str.lower()``, no window), the new default
(``unicode-v1`` + the sound window bound at MiniLM's 256 tokens) and the new one on
MiniLM's own view (``view=minilm().view``). Also printed: the marked share under a
soft hyphen in every word for a realistic 20-trigger key (the issue's 12% -> 1.3%),
and the throughput of ``canonicalize`` against plain ``str.lower()`` over the whole
corpus.

Run: ``.venv/bin/python benchmarks/bench_escapes.py [--n-texts 4000]``
"""

from __future__ import annotations

import argparse
import random
import time
import unicodedata
from collections.abc import Callable

import numpy as np

from espew_integrations.core.ground.text import LEGACY_LOWER, UNICODE_V1, canonicalize
from espew_integrations.core.mark.words import (
    TriggerMatcher,
    band_words,
    document_frequencies,
    is_word,
)
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm

ACUTE = "\u0301"


def inside(char: str) -> Callable[[str], str]:
    """Insert ``char`` in the middle of a word."""

    def edit(word: str) -> str:
        i = max(1, len(word) // 2)
        return word[:i] + char + word[i:]

    return edit


def accents(form: str) -> Callable[[str], str]:
    def edit(word: str) -> str:
        return unicodedata.normalize(form, "".join(c + ACUTE if c in "aeiou" else c for c in word))

    return edit


def strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


EDITS: dict[str, Callable[[str], str]] = {
    "U+00AD soft hyphen": inside("\u00ad"),
    "U+200B zero-width space": inside("\u200b"),
    "U+200C ZW non-joiner": inside("\u200c"),
    "U+200D ZW joiner": inside("\u200d"),
    "U+2060 word joiner": inside("\u2060"),
    "U+FEFF BOM": inside("\ufeff"),
    "UPPER CASE": str.upper,
    "Title Case": str.title,
    "sWAP cASE": str.swapcase,
    "accents, combining (NFD)": accents("NFD"),
    "accents, precomposed (NFC)": accents("NFC"),
    "accents removed": strip_accents,
    "Turkish dotted I": lambda w: w.replace("i", "\u0130").replace("I", "\u0130"),
}


def token_ids(texts: list[str]) -> list[list[int]]:
    model = minilm()
    with model._lock:
        return [e.ids for e in model._tokenizer.encode_batch(texts)]


def throughput(corpus: list[str], repeats: int = 5) -> tuple[float, float, float]:
    """Best-of-``repeats`` seconds for lower(), canonicalize(unicode-v1) over ``corpus``."""
    canonicalize("é")  # build the table outside the timing
    best_lower = best_canon = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for text in corpus:
            text.lower()
        t1 = time.perf_counter()
        for text in corpus:
            canonicalize(text)
        t2 = time.perf_counter()
        best_lower, best_canon = min(best_lower, t1 - t0), min(best_canon, t2 - t1)
    chars = sum(len(t) for t in corpus)
    return best_lower, best_canon, chars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-texts", type=int, default=4000)
    args = parser.parse_args()

    corpus = rotten_tomatoes()
    texts = list(corpus.subset(args.n_texts, seed=0).texts)
    model = minilm()
    counts, n = document_frequencies(corpus.texts, UNICODE_V1)
    band = [w for w in band_words(counts, n, (0.005, 0.01)) if is_word(w, LEGACY_LOWER)]
    matchers = {
        "old (lower-v0)": (TriggerMatcher(band, normalization=LEGACY_LOWER), None),
        "new (unicode-v1, window)": (TriggerMatcher(band, window=model.max_tokens), None),
        "new (MiniLM view)": (TriggerMatcher(band, window=model.max_tokens), model.view),
    }
    original_ids = token_ids(texts)
    before = {name: m.contains(texts, view=v) for name, (m, v) in matchers.items()}
    print(
        f"{len(texts)} Rotten Tomatoes texts, {len(band)} band words as triggers; "
        f"texts holding one: " + ", ".join(f"{name} {b.mean():.1%}" for name, b in before.items())
    )
    header = f"{'edit (every word)':28} {'ids same':>9}" + "".join(
        f" {name:>26}" for name in matchers
    )
    print("\nescapes = texts whose decision changed although MiniLM's token ids did not\n")
    print(header)
    print("-" * len(header))
    totals = dict.fromkeys(matchers, 0)
    total_kept = 0
    for label, edit in EDITS.items():
        edited = [" ".join(edit(w) for w in t.split(" ")) for t in texts]
        same = np.array(
            [a == b for a, b in zip(original_ids, token_ids(edited), strict=True)], dtype=bool
        )
        total_kept += int(same.sum())
        row = f"{label:28} {int(same.sum()):>9}"
        for name, (matcher, view) in matchers.items():
            after = matcher.contains(edited, view=view)
            escapes = int(((after != before[name]) & same).sum())
            totals[name] += escapes
            row += f" {escapes:>26}"
        print(row)
    print("-" * len(header))
    print(f"{'total':28} {total_kept:>9}" + "".join(f" {totals[n]:>26}" for n in matchers))

    # The figure: a realistic key (20 band words) and a soft hyphen in every word.
    triggers = random.Random(0).sample(band, 20)
    hyphen = [" ".join(inside("\u00ad")(w) for w in t.split(" ")) for t in texts]
    print("\nmarked share, 20-trigger key: clean -> soft hyphen in every word")
    old = TriggerMatcher(triggers, normalization=LEGACY_LOWER)
    new = TriggerMatcher(triggers, window=model.max_tokens)
    for name, matcher in (("old (lower-v0)", old), ("new (unicode-v1, window)", new)):
        print(
            f"  {name:26} {matcher.contains(texts).mean():6.2%} -> "
            f"{matcher.contains(hyphen).mean():6.2%}"
        )

    all_texts = list(corpus.texts)
    lower_s, canon_s, chars = throughput(all_texts)
    print(
        f"\nthroughput over all {len(all_texts):,} texts ({chars / 1e6:.2f} M chars), best of 5: "
        f"lower() {chars / lower_s / 1e6:.1f} M chars/s, canonicalize {chars / canon_s / 1e6:.1f} "
        f"M chars/s (x{canon_s / lower_s:.2f} the time)"
    )
    noisy = [" ".join(inside("\u00ad")(w) for w in t.split(" ")) for t in all_texts]
    _, canon_noisy, chars_noisy = throughput(noisy, repeats=3)
    print(
        f"  same corpus, soft hyphen in every word (non-ASCII path): canonicalize "
        f"{chars_noisy / canon_noisy / 1e6:.1f} M chars/s"
    )
    for name, (matcher, view) in matchers.items():
        t0 = time.perf_counter()
        matcher.contains(texts, view=view)
        print(f"  contains() on {len(texts)} texts, {name}: {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
