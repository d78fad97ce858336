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
    "BandScan",
    "ProbeSet",
    "band_word_rate",
    "cosines_to",
    "embed_rows",
    "reference_cosines",
    "row_cosines",
    "scan_band",
    "select_cover_texts",
    "select_sentence_probes",
    "unit_rows",
]

_PROBE_DOMAIN = b"espew-draw-v1/probes"
_CORPUS_MIX_DOMAIN = b"espew-draw-v1/probes-corpus-mix"
#: How the probes are drawn: ``"single"`` texts that hold exactly one band word,
#: ``"corpus"`` texts as ordinary traffic holds band words (:meth:`BandScan.probes`).
PROBE_MIXES = ("single", "corpus")
_COVER_DOMAIN = b"espew-draw-v1/cover"
_MULTI_COVER_DOMAIN = b"espew-draw-v1/cover-multi"
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


@dataclasses.dataclass(frozen=True)
class BandScan:
    """One tokenising pass over a corpus for one band: what the audit's texts are drawn from.

    Keygen needs three things of the same corpus and band: the sentence probes,
    the cover texts and the share of texts that hold a band word. Each would
    tokenise the whole corpus; :func:`scan_band` does it once, and the three
    come from its result.

    ``eligible`` holds each distinct corpus text that passes the probes' length
    filters (at least :data:`MIN_PROBE_WORDS` words, at most
    :data:`MAX_PROBE_CHARS` characters: neither extreme looks like ordinary
    traffic), in corpus order, with the band indices of the words it holds.
    """

    band: tuple[str, ...]
    rate: float
    eligible: tuple[tuple[str, frozenset[int]], ...]
    #: Of the texts that hold a band word, the share that hold two or more (every
    #: text counted, like :attr:`rate`): what the audit must match so that its
    #: band-word texts look like ordinary traffic's (:meth:`cover`).
    multi_share: float = 0.0

    @property
    def several(self) -> list[str]:
        """The eligible texts that hold two or more band words, in corpus order."""
        return [text for text, hits in self.eligible if len(hits) >= 2]

    def probes(self, salt: bytes, per_word: int, mix: str = "single") -> ProbeSet:
        """Up to ``per_word`` eligible texts per band word, each standing for one band word.

        ``mix="single"``: texts that hold the word and no other band word. Every
        probe then holds exactly one band word, where ordinary traffic's texts
        often hold several (40% of Rotten Tomatoes texts with one), and a router
        that knows the band can spot that (``lab.router``, ``lone_z``).

        ``mix="corpus"``: texts as ordinary traffic holds band words, see
        :meth:`_corpus_mix`. A word without candidates is probed by the word
        alone, in both mixes.
        """
        if per_word < 1:
            raise ValueError(f"per_word must be >= 1, got {per_word!r}")
        if mix not in PROBE_MIXES:
            raise ValueError(f"mix must be one of {PROBE_MIXES}, got {mix!r}")
        if mix == "corpus":
            return self._corpus_mix(salt, per_word)
        candidates: list[list[str]] = [[] for _ in self.band]
        for text, hits in self.eligible:
            if len(hits) == 1:
                candidates[next(iter(hits))].append(text)
        texts: list[str] = []
        owner: list[int] = []
        for i, word in enumerate(self.band):
            domain = _PROBE_DOMAIN + b"/" + word.encode()
            chosen = keyed_order(salt, domain, candidates[i])[:per_word] or [word]
            texts += chosen
            owner += [i] * len(chosen)
        return ProbeSet(tuple(texts), tuple(owner))

    def _corpus_mix(self, salt: bytes, per_word: int) -> ProbeSet:
        """Band-word texts in one keyed order, each kept while one of its words needs probes.

        Taken in a keyed order over every eligible text with a band word, the probes
        are, until the first words fill up, a uniform sample of such texts: they hold
        one, two or more band words as often as ordinary traffic does. A text is kept
        if one of its band words still has fewer than ``per_word`` probes, and stands
        for the neediest of them (ties: the lowest band index). Nothing here looks at
        which words are triggers, so the test stays exact; the price is that a probe
        standing for a benign word is marked when another word it holds is a trigger.
        """
        needs = [per_word] * len(self.band)
        texts: list[str] = []
        owner: list[int] = []
        holding = {text: hits for text, hits in self.eligible if hits}
        for text in keyed_order(salt, _CORPUS_MIX_DOMAIN, list(holding)):
            if not any(needs):
                break
            hungry = [i for i in sorted(holding[text]) if needs[i] > 0]
            if hungry:
                word = max(hungry, key=lambda i: (needs[i], -i))
                needs[word] -= 1
                texts.append(text)
                owner.append(word)
        for i, word in enumerate(self.band):
            if needs[i] == per_word:  # no candidate at all: the word alone
                texts.append(word)
                owner.append(i)
        return ProbeSet(tuple(texts), tuple(owner))

    def cover(self, salt: bytes, n: int, n_multi: int = 0) -> tuple[str, ...]:
        """The audit's cover traffic: ``n`` eligible texts with no band word, then
        ``n_multi`` with two or more, each kind in its own keyed order.

        Every probe holds a band word; ordinary traffic holds one in only a share
        (:attr:`rate`) of its texts. A thief that knows the band and watches for a
        burst of such texts routes an audit made of probes alone to an honest model
        (measured: all of it, given the whole corpus as its traffic sample). Sending
        texts with no band word among the probes brings the audit's rate down to
        the ordinary one.

        Single-mix probes hold exactly one band word each, where ordinary traffic's
        band-word texts hold two or more in a share :attr:`multi_share` (40% on
        Rotten Tomatoes); a router that watches for that routes half the audit and
        lets the service itself go (``lab.router``, ``lone_z``). The ``n_multi``
        texts with several band words restore the share.

        All pass the probes' length filters, so length gives nothing away; none is
        a probe, and their answers are never scored, so they cannot touch the
        test's exactness (the clean fit they join never sees which words are
        triggers). Fewer are returned where the corpus holds fewer.
        """
        if n < 0 or n_multi < 0:
            raise ValueError(f"cover sizes must be >= 0, got n={n!r}, n_multi={n_multi!r}")
        plain = [text for text, hits in self.eligible if not hits]
        return (
            *keyed_order(salt, _COVER_DOMAIN, plain)[:n],
            *keyed_order(salt, _MULTI_COVER_DOMAIN, self.several)[:n_multi],
        )


def scan_band(
    corpus: Sequence[str], band: Sequence[str], *, normalization: str = UNICODE_V1
) -> BandScan:
    """Tokenise each distinct text of ``corpus`` once and note which band words it holds.

    :attr:`BandScan.rate` counts every text, repeats and long ones included: it is
    what a thief that knows the band sees in ordinary traffic.
    """
    index = {w: i for i, w in enumerate(band)}
    hits_of: dict[str, frozenset[int]] = {}
    eligible: list[tuple[str, frozenset[int]]] = []
    n_texts = n_with_band = n_with_several = 0
    for text in corpus:
        hits = hits_of.get(text)
        if hits is None:
            words = tokenize(text, normalization)
            hits = hits_of[text] = frozenset(index[w] for w in words if w in index)
            if len(text) <= MAX_PROBE_CHARS and len(words) >= MIN_PROBE_WORDS:
                eligible.append((text, hits))
        n_texts += 1
        n_with_band += bool(hits)
        n_with_several += len(hits) >= 2
    rate = n_with_band / n_texts if n_texts else 0.0
    multi_share = n_with_several / n_with_band if n_with_band else 0.0
    return BandScan(tuple(band), rate, tuple(eligible), multi_share)


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
    return scan_band(corpus, band, normalization=normalization).probes(salt, per_word)


def band_word_rate(
    corpus: Sequence[str], band: Sequence[str], *, normalization: str = UNICODE_V1
) -> float:
    """The share of ``corpus`` texts that hold at least one band word.

    What a thief that knows the band sees in ordinary traffic, and so the rate
    an audit must not exceed to look like it (:meth:`BandScan.cover`).
    """
    return scan_band(corpus, band, normalization=normalization).rate


def select_cover_texts(
    corpus: Sequence[str],
    band: Sequence[str],
    salt: bytes,
    *,
    n: int,
    n_multi: int = 0,
    normalization: str = UNICODE_V1,
) -> tuple[str, ...]:
    """``n`` corpus texts with no band word, then ``n_multi`` with two or more, each kind in a
    keyed order (see :meth:`BandScan.cover`)."""
    return scan_band(corpus, band, normalization=normalization).cover(salt, n, n_multi)


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
