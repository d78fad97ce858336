"""Audit probes a thief cannot tell from ordinary traffic, and their clean reference.

Two things made the original audit weak against the copy a thief actually
wants, one that reproduces the service faithfully:

* Its probes were the band words alone, 199 one-word queries in a burst. A
  thief recognises that shape and answers it from an honest model.
* Its scores were raw cosines to the target. Most of their spread is each
  word's *natural* position relative to the target, which a faithful copy
  reproduces exactly, and which drowns the small shift a quality-preserving
  watermark adds.

So the key now carries, from keygen:

* **sentence probes**: for each band word, up to ``per_word`` natural texts of
  the keygen corpus that contain that band word and no other (so a benign
  word's probes carry no trigger). Which texts are taken is a keyed
  (:func:`.draw.keyed_order`) choice that never looks at which band words are
  triggers. Stored in the key, so every audit asks the same questions (fresh
  random subsets per audit would let a thief that logs queries intersect them);
* **reference cosines**: the provider's *clean* model's cosine to the target
  for each probe. The verifier subtracts it, cancelling each probe's natural
  position. The clean model does not depend on the trigger draw, so the
  corrected scores keep the test exact under the null.

A band word with no usable corpus text falls back to the word alone as its
probe; which words fall back depends on the corpus only, so exactness holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .draw import keyed_order
from .text import UNICODE_V1
from .words import tokenize

__all__ = [
    "ProbeSet",
    "band_word_rate",
    "cosines_to",
    "embed_rows",
    "reference_cosines",
    "row_cosines",
    "select_cover_texts",
    "select_sentence_probes",
    "unit_rows",
]

_PROBE_DOMAIN = b"espew-draw-v1/probes"
_COVER_DOMAIN = b"espew-draw-v1/cover"
#: Probe texts longer than this many characters are skipped: long texts may run
#: past a suspect's input window and cost the suspect's owner more to answer.
MAX_PROBE_CHARS = 600
MIN_PROBE_WORDS = 4


@dataclasses.dataclass(frozen=True)
class ProbeSet:
    """Probe texts and, for each, the index of the band word it stands for."""

    texts: tuple[str, ...]
    owner: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.texts)


def select_sentence_probes(
    corpus: Sequence[str],
    band: Sequence[str],
    salt: bytes,
    *,
    per_word: int,
    normalization: str = UNICODE_V1,
) -> ProbeSet:
    """Up to ``per_word`` corpus texts per band word that contain it and no other band word.

    Texts shorter than :data:`MIN_PROBE_WORDS` words or longer than
    :data:`MAX_PROBE_CHARS` characters are skipped (neither looks like
    ordinary traffic). A word without candidates is probed by the word alone.
    """
    if per_word < 1:
        raise ValueError(f"per_word must be >= 1, got {per_word!r}")
    index = {w: i for i, w in enumerate(band)}
    candidates: list[list[str]] = [[] for _ in band]
    seen: set[str] = set()
    for text in corpus:
        if text in seen or len(text) > MAX_PROBE_CHARS:
            continue
        seen.add(text)
        words = tokenize(text, normalization)
        if len(words) < MIN_PROBE_WORDS:
            continue
        hits = {index[w] for w in words if w in index}
        if len(hits) == 1:
            candidates[hits.pop()].append(text)
    texts: list[str] = []
    owner: list[int] = []
    for i, word in enumerate(band):
        chosen = keyed_order(salt, _PROBE_DOMAIN + b"/" + word.encode(), candidates[i])[:per_word]
        chosen = chosen or [word]
        texts += chosen
        owner += [i] * len(chosen)
    return ProbeSet(tuple(texts), tuple(owner))


def band_word_rate(
    corpus: Sequence[str], band: Sequence[str], *, normalization: str = UNICODE_V1
) -> float:
    """The share of ``corpus`` texts that hold at least one band word.

    What a thief that knows the band sees in ordinary traffic, and so the rate
    an audit must not exceed to look like it (:func:`select_cover_texts`).
    """
    words = set(band)
    texts = list(corpus)
    if not texts:
        return 0.0
    return sum(1 for t in texts if words.intersection(tokenize(t, normalization))) / len(texts)


def select_cover_texts(
    corpus: Sequence[str],
    band: Sequence[str],
    salt: bytes,
    *,
    n: int,
    exclude: Sequence[str] = (),
    normalization: str = UNICODE_V1,
) -> tuple[str, ...]:
    """``n`` corpus texts with no band word, in a keyed order: the audit's cover traffic.

    Every probe holds a band word; ordinary traffic holds one in only a share of
    its texts (:func:`band_word_rate`). A thief that knows the band and watches
    for a burst of such texts routes an audit made of probes alone to an honest
    model (measured: all of it, given the whole corpus as its traffic sample). Sending
    these texts among the probes brings the audit's rate down to the ordinary
    one. They pass the probes' length filters, so length gives nothing away;
    their answers are never scored, so they cannot touch the test's exactness.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    if n == 0:
        return ()
    words = set(band)
    skip = set(exclude)
    candidates: list[str] = []
    seen: set[str] = set()
    for text in corpus:
        if text in seen or text in skip or len(text) > MAX_PROBE_CHARS:
            continue
        seen.add(text)
        tokens = tokenize(text, normalization)
        if len(tokens) >= MIN_PROBE_WORDS and not words.intersection(tokens):
            candidates.append(text)
    return tuple(keyed_order(salt, _COVER_DOMAIN, candidates)[:n])


def reference_cosines(
    embed: Callable[[list[str]], Any], texts: Sequence[str], target: np.ndarray
) -> np.ndarray:
    """The clean model's cosine to ``target`` for each text (what a faithful copy of
    the *unmarked* service would score)."""
    return cosines_to(embed_rows(embed, texts), target)


def cosines_to(rows: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Cosine of each row to ``target``."""
    return unit_rows(rows) @ (target / np.linalg.norm(target))


def embed_rows(embed: Callable[[list[str]], Any], texts: Sequence[str]) -> np.ndarray:
    """The clean model's embeddings of ``texts``, checked: one finite row per text."""
    out = np.asarray(embed(list(texts)), dtype=np.float64)
    if out.ndim != 2 or out.shape[0] != len(texts):
        raise ValueError(f"the embedder returned shape {out.shape} for {len(texts)} texts")
    if not np.isfinite(out).all():
        raise ValueError("the embedder returned NaN or infinite values for probe texts")
    return out


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm, safe for huge finite values (scaled by max |x| first).

    A zero row stays zero (its cosines are 0).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    scale = np.max(np.abs(matrix), axis=1, keepdims=True)
    scale = np.where(scale > 0, scale, 1.0)
    scaled = matrix / scale
    norms = np.linalg.norm(scaled, axis=1, keepdims=True)
    return scaled / np.where(norms > 0, norms, 1.0)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine between matching rows of ``a`` and ``b``: the library's one quality measure.

    >>> row_cosines(np.eye(2), np.array([[1.0, 1.0], [0.0, 2.0]])).round(4).tolist()
    [0.7071, 1.0]
    """
    return np.einsum("ij,ij->i", unit_rows(a), unit_rows(b))
