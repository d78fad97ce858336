"""Audit probes a thief cannot tell from ordinary traffic, and their clean reference.

Two rules keep the audit strong against the copy a thief actually wants, one
that reproduces the service faithfully:

* Probes are natural texts, not the band words alone: a burst of one-word
  queries is a shape a thief recognises and answers from an honest model.
* Scores are not raw cosines to the target. Most of a raw cosine's spread is
  each word's *natural* position relative to the target, which a faithful copy
  reproduces exactly, and which drowns the small shift a quality-preserving
  watermark adds.

So the key carries, from keygen:

* **sentence probes**: for each band word, up to ``per_word`` natural texts of
  the keygen corpus that contain it (with ``mix="single"``, it and no other
  band word, so a benign word's probes carry no trigger). Which texts are taken
  is a keyed (:func:`..ground.draw.keyed_order`) choice that never looks at which band
  words are triggers. Stored in the key, so every audit of one key asks the same
  questions and an arbiter can re-run it;
* **reference cosines**: the provider's *clean* model's cosine to the target
  for each probe. The verifier subtracts it, cancelling each probe's natural
  position. The clean model does not depend on the trigger draw, so the
  corrected scores keep the test exact under the null.

* **cover texts**: with them, the audit is a keyed uniform sample of the keygen
  corpus (:meth:`BandScan.sample`): the probes are the sampled texts that hold a
  band word (exactly one with ``mix="single"``), the cover is everything else
  sampled, sent with the probes (only the directed score looks at it: its clean
  fit, and the cover texts that hold band words, :mod:`..stats.word_evidence`). A thief
  watching one client's traffic, text by text or as a whole, sees a random
  sample of ordinary texts. A later audit of a thief that may have logged this
  one is drawn as another *round* (``WatermarkKey.with_audit(...,
  audit_round=k)``, a salt of its own, :func:`..ground.draw.audit_salt`): an independent
  uniform sample, which tells a thief comparing rounds nothing about the
  triggers.

A band word with no usable corpus text falls back to the word alone as its
probe; which words fall back depends on the corpus only, so exactness holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ground.draw import keyed_digests, keyed_order
from ..ground.errors import InputError
from ..ground.rows import unit_rows
from ..ground.text import UNICODE_V1
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
    "select_sentence_probes",
]

_PROBE_DOMAIN = b"espew-draw-v1/probes"
_CORPUS_MIX_DOMAIN = b"espew-draw-v1/probes-corpus-mix"
#: How the probes are drawn: ``"single"`` texts that hold exactly one band word,
#: ``"corpus"`` texts as ordinary traffic holds band words (:meth:`BandScan.probes`).
PROBE_MIXES = ("single", "corpus")
_SAMPLE_DOMAIN = b"espew-draw-v1/audit-sample"
_REPEAT_DOMAIN = b"espew-draw-v1/audit-sample-repeat"
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
    :data:`MAX_PROBE_CHARS` characters: a probe that short is mostly its band
    word, one that long may run past a suspect's input window), in corpus
    order, with the band indices of the words it holds. ``ineligible`` holds the
    other distinct texts: never probes, but ordinary traffic sends them, and so
    does the audit (:meth:`sample`).
    """

    band: tuple[str, ...]
    rate: float
    eligible: tuple[tuple[str, frozenset[int]], ...]
    #: Of the texts that hold a band word, the share that hold two or more (every
    #: text counted, like :attr:`rate`).
    multi_share: float = 0.0
    ineligible: tuple[str, ...] = ()
    #: Each text the corpus holds more than once, with how many times: ordinary
    #: traffic repeats texts, so the audit's sample repeats them too (:meth:`sample`).
    repeats: tuple[tuple[str, int], ...] = ()

    @property
    def single(self) -> list[list[str]]:
        """For each band word, the eligible texts that hold it and no other band word."""
        candidates: list[list[str]] = [[] for _ in self.band]
        for text, hits in self.eligible:
            if len(hits) == 1:
                candidates[next(iter(hits))].append(text)
        return candidates

    def probes(self, salt: bytes, per_word: int, mix: str = "single") -> ProbeSet:
        """Up to ``per_word`` eligible texts per band word, each standing for one band word.

        ``mix="single"``: texts that hold the word and no other band word. Every
        probe then holds exactly one band word, where ordinary traffic's texts
        often hold several, and a router
        that knows the band can spot that (``lab.router``, ``lone_z``).

        ``mix="corpus"``: texts as ordinary traffic holds band words, see
        :meth:`_corpus_mix`. A word without candidates is probed by the word
        alone, in both mixes.
        """
        if per_word < 1:
            raise InputError(f"per_word must be >= 1, got {per_word!r}")
        if mix not in PROBE_MIXES:
            raise InputError(f"mix must be one of {PROBE_MIXES}, got {mix!r}")
        if mix == "corpus":
            return self._corpus_mix(salt, per_word)
        texts: list[str] = []
        owner: list[int] = []
        for i, candidates in enumerate(self.single):
            chosen = self._word_order(salt, i, candidates)[:per_word] or [self.band[i]]
            texts += chosen
            owner += [i] * len(chosen)
        return ProbeSet(tuple(texts), tuple(owner))

    def probe_share(self, mix: str = "single") -> float:
        """Distinct texts that can be probes over corpus rows (repeats counted): a uniform
        sample of ``n`` rows holds about ``n`` times this many probes (:meth:`sample`).
        Over distinct texts when the corpus repeats none."""
        in_pool = _in_pool(mix)
        pool = sum(1 for _, hits in self.eligible if in_pool(hits))
        rows = len(self.eligible) + len(self.ineligible) + sum(n - 1 for _, n in self.repeats)
        return pool / rows if rows else 0.0

    def _word_order(self, salt: bytes, i: int, candidates: list[str]) -> list[str]:
        return keyed_order(salt, _PROBE_DOMAIN + b"/" + self.band[i].encode(), candidates)

    def sample(
        self, salt: bytes, per_word: float, mix: str = "single"
    ) -> tuple[ProbeSet, tuple[str, ...]]:
        """The audit as a uniform sample of the corpus: its probes and its cover texts.

        The first rows of one keyed order over every corpus row, as many as hold
        about ``per_word`` probes per band word. A text the corpus repeats is sent
        again when a further row of it is drawn (as cover; the verifier scores every
        copy with the first answer to it), so the audit repeats texts as often as an
        ordinary client of the corpus does. Of the sampled texts, the eligible ones
        with exactly one band word (``mix="single"``; any band word with
        ``"corpus"``, each standing for its least-probed word) are the probes, and
        the rest are the cover: texts with no band word, with several, and those too
        short or too long to be probes, each as often as in the corpus.

        So the audit is, text for text, what an ordinary client sending a random
        sample of the corpus sends: a thief gets nothing from its shares, lengths
        or band-word counts, text by text or over the whole audit
        (``bench_audit_shape.py``, ``bench_audit_window.py``). An audit of equal
        parts per word, or of chosen kinds in chosen proportions, is not: the
        first over-represents the band's rarer words, the second is too even to be
        random, and a thief that counts over the whole audit sees either.

        A band word with no probe in the sample gets the first text of its own
        keyed order (the word alone if it has none), so every word is scored. The
        cover's answers count only toward the directed score (:mod:`..stats.word_evidence`).
        Nothing here looks at which words are triggers, so the test stays exact.
        """
        if per_word < 1:
            raise InputError(f"per_word must be >= 1, got {per_word!r}")
        in_pool = _in_pool(mix)
        hits_of = dict(self.eligible)
        rows = self._keyed_rows(salt)
        share = self.probe_share(mix)
        size = min(len(rows), round(per_word * len(self.band) / share)) if share else 0
        counts = [0] * len(self.band)
        texts: list[str] = []
        owner: list[int] = []
        cover: list[str] = []
        sampled: set[str] = set()
        for text in rows[:size]:
            if text in sampled:  # a repeat, sent again as ordinary traffic repeats it
                cover.append(text)
                continue
            sampled.add(text)
            hits = hits_of.get(text, frozenset())
            if hits and in_pool(hits):
                word = min(hits, key=lambda i: (counts[i], i))
                counts[word] += 1
                texts.append(text)
                owner.append(word)
            else:
                cover.append(text)
        for i, candidates in enumerate(self.single):
            if not counts[i]:
                texts += self._word_order(salt, i, candidates)[:1] or [self.band[i]]
                owner.append(i)
        return ProbeSet(tuple(texts), tuple(owner)), tuple(cover)

    def _keyed_rows(self, salt: bytes) -> list[str]:
        """Every corpus row's text, repeats included, in one keyed order.

        A text's first row is ranked as :func:`..ground.draw.keyed_order` ranks the distinct
        texts (so a corpus without repeats gives the order it always gave), its
        further rows in a domain of their own; the first ``n`` rows are then a
        uniform sample of the corpus's rows, as an ordinary client's are.
        """
        everything = [*(text for text, _ in self.eligible), *self.ineligible]
        ranked = [
            (digest, text)
            for text, digest in keyed_digests(salt, _SAMPLE_DOMAIN, everything).items()
        ]
        for text, count in self.repeats:
            copies = [f"{j}\x00{text}" for j in range(1, count)]
            ranked += [(d, text) for d in keyed_digests(salt, _REPEAT_DOMAIN, copies).values()]
        ranked.sort()
        return [text for _, text in ranked]

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
                chosen = max(hungry, key=lambda i: (needs[i], -i))
                needs[chosen] -= 1
                texts.append(text)
                owner.append(chosen)
        for i, word in enumerate(self.band):
            if needs[i] == per_word:  # no candidate at all: the word alone
                texts.append(word)
                owner.append(i)
        return ProbeSet(tuple(texts), tuple(owner))


def _in_pool(mix: str) -> Callable[[frozenset[int]], bool]:
    """Which band-word hits make an eligible text a probe in ``mix``."""
    if mix not in PROBE_MIXES:
        raise InputError(f"mix must be one of {PROBE_MIXES}, got {mix!r}")
    return (lambda hits: len(hits) == 1) if mix == "single" else bool


def scan_band(
    corpus: Sequence[str], band: Sequence[str], *, normalization: str = UNICODE_V1
) -> BandScan:
    """Tokenise each distinct text of ``corpus`` once and note which band words it holds.

    :attr:`BandScan.rate` counts every text, repeats and long ones included: it is
    what a thief that knows the band sees in ordinary traffic. :attr:`BandScan.repeats`
    keeps how often each repeated text occurs, for the audit's sample.
    """
    index = {w: i for i, w in enumerate(band)}
    hits_of: dict[str, frozenset[int]] = {}
    eligible: list[tuple[str, frozenset[int]]] = []
    ineligible: list[str] = []
    n_texts = n_with_band = n_with_several = 0
    rows_of: dict[str, int] = {}
    for text in corpus:
        rows_of[text] = rows_of.get(text, 0) + 1
        hits = hits_of.get(text)
        if hits is None:
            words = tokenize(text, normalization)
            hits = hits_of[text] = frozenset(index[w] for w in words if w in index)
            if len(text) <= MAX_PROBE_CHARS and len(words) >= MIN_PROBE_WORDS:
                eligible.append((text, hits))
            else:
                ineligible.append(text)
        n_texts += 1
        n_with_band += bool(hits)
        n_with_several += len(hits) >= 2
    rate = n_with_band / n_texts if n_texts else 0.0
    multi_share = n_with_several / n_with_band if n_with_band else 0.0
    repeats = tuple((text, n) for text, n in rows_of.items() if n > 1)
    return BandScan(tuple(band), rate, tuple(eligible), multi_share, tuple(ineligible), repeats)


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

    What a thief that knows the band sees in ordinary traffic; the audit, a
    uniform sample of the corpus (:meth:`BandScan.sample`), holds band words at
    the same rate.
    """
    return scan_band(corpus, band, normalization=normalization).rate


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
        raise InputError(f"the embedder returned shape {out.shape} for {len(texts)} texts")
    if not np.isfinite(out).all():
        raise InputError("the embedder returned NaN or infinite values for probe texts")
    return out


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine between matching rows of ``a`` and ``b``: the library's one quality measure.

    >>> row_cosines(np.eye(2), np.array([[1.0, 1.0], [0.0, 2.0]])).round(4).tolist()
    [0.7071, 1.0]
    """
    return np.einsum("ij,ij->i", unit_rows(a), unit_rows(b))
