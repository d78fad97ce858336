"""The paraphrasing thief (WET, ACL 2025): query paraphrases, average the answers, train on those.

A watermark keyed on trigger words marks an answer only when the queried text
contains a trigger. A thief who never sends its training texts verbatim, but
K paraphrases of each, gets marked answers only for the paraphrases that kept
the trigger; averaging the K answers then dilutes the mark (and averages out
any per-query noise), and the copy is trained on (original text, averaged
answer). WET used a paraphrase model; none is available offline, so this
module builds a documented, reproducible LEXICAL paraphraser instead:

- ``substitute``: each eligible word is, with probability ``rate``, replaced
  by its nearest neighbour in the thief's own model's vocabulary (every
  vocabulary word embedded once, alone, by the thief's model; cosine nearest
  neighbour excluding the word itself);
- ``dropout``: each eligible word is, with probability ``rate``, deleted.

Eligible words are vocabulary words (seen ``min_count`` times in the thief's
texts) no more common than ``max_df`` of its texts: function words stay, so a
paraphrase keeps its grammar skeleton. Trigger words (the default band lies below
``max_df``'s default) are eligible, which is the whole point of the attack. Every draw is
seeded by ``(seed, variant)``, so the same call gives the same paraphrases.

Nearest neighbours in an embedding space are not always synonyms (antonyms
such as "good"/"bad" sit close); the copy's quality at each rate, measured by
the lab next to the verdict, says what the crude paraphrase cost the thief.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.words import tokenize

__all__ = ["MODES", "NeighbourParaphraser", "ParaphraseThief", "nearest_neighbours"]

MODES = ("substitute", "dropout")
_WORD_RE = re.compile(r"[^\W_]+")  # the core tokeniser's word (before lowering)
_SPACES = re.compile(r"[ \t]{2,}")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?])")

Embedder = Callable[[list[str]], Any]


def nearest_neighbours(vectors: np.ndarray, *, block: int = 2048) -> np.ndarray:
    """Index of each row's cosine nearest neighbour among the other rows (blockwise, O(n*block)).

    >>> nearest_neighbours(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])).tolist()
    [1, 0, 1]
    """
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need at least two vectors to find neighbours, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    out = np.empty(x.shape[0], dtype=np.int64)
    for start in range(0, x.shape[0], block):
        sims = x[start : start + block] @ x.T
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf
        out[start : start + block] = sims.argmax(axis=1)
    return out


class NeighbourParaphraser:
    """Lexical paraphrases: nearest-neighbour substitution or word dropout at a given rate.

    ``model`` is the thief's own embedder; ``texts`` its training texts (the
    vocabulary and the document frequencies come from them). ``embed_words``
    may replace ``model`` for embedding the vocabulary (for instance a
    disk-cached call); it gets the sorted vocabulary once.

    >>> para = NeighbourParaphraser(own_model, texts)           # doctest: +SKIP
    >>> para.paraphrase(["A gripping thriller."], rate=0.5)      # doctest: +SKIP
    ['A riveting thriller.']
    """

    def __init__(
        self,
        model: Embedder,
        texts: Sequence[str],
        *,
        min_count: int = 1,
        max_df: float = 0.05,
        embed_words: Embedder | None = None,
    ):
        counts: Counter[str] = Counter()
        docs: Counter[str] = Counter()
        for text in texts:
            words = tokenize(text)
            counts.update(words)
            docs.update(set(words))
        n = max(len(texts), 1)
        vocabulary = sorted(w for w, c in counts.items() if c >= min_count and w.isalpha())
        if len(vocabulary) < 2:
            raise ValueError(
                f"the thief's texts have {len(vocabulary)} words seen {min_count}+ times; "
                "need a larger sample to build a vocabulary"
            )
        vectors = np.asarray((embed_words or model)(vocabulary), dtype=np.float32)
        if vectors.shape[0] != len(vocabulary):
            raise ValueError(
                f"the model returned {vectors.shape[0]} embeddings for {len(vocabulary)} words"
            )
        nearest = nearest_neighbours(vectors)
        self.vocabulary = tuple(vocabulary)
        self.neighbour = {w: vocabulary[j] for w, j in zip(vocabulary, nearest, strict=True)}
        self.eligible = frozenset(w for w in vocabulary if docs[w] / n <= max_df)
        self.max_df = max_df

    def __repr__(self) -> str:
        return (
            f"NeighbourParaphraser(vocabulary={len(self.vocabulary)}, "
            f"eligible={len(self.eligible)}, max_df={self.max_df:g})"
        )

    def paraphrase(
        self,
        texts: Sequence[str],
        *,
        rate: float,
        mode: str = "substitute",
        seed: int = 0,
        variant: int = 0,
    ) -> list[str]:
        """One paraphrase of each text: every eligible word changed with probability ``rate``.

        One random draw per word occurrence, all drawn at once from the
        generator seeded by ``(seed, variant)``; different variants of the
        same text are independent.
        """
        if mode not in MODES:
            raise ValueError(f"unknown paraphrase mode {mode!r}; choose from {MODES}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate!r}")
        spans = [list(_WORD_RE.finditer(t)) for t in texts]
        total = sum(len(s) for s in spans)
        draws = np.random.default_rng([int(seed), int(variant), MODES.index(mode)]).random(total)
        out: list[str] = []
        at = 0
        for text, matches in zip(texts, spans, strict=True):
            pieces: list[str] = []
            last = 0
            for match in matches:
                word = match.group()
                lower = word.lower()
                hit = draws[at] < rate and lower in self.eligible
                at += 1
                if not hit:
                    continue
                pieces.append(text[last : match.start()])
                if mode == "substitute":
                    pieces.append(_same_case(word, self.neighbour[lower]))
                last = match.end()
            pieces.append(text[last:])
            changed = "".join(pieces)
            if mode == "dropout":
                changed = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", changed)).strip()
            out.append(changed or text)
        return out


def _same_case(original: str, replacement: str) -> str:
    if original.isupper() and len(original) > 1:
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


class ParaphraseThief:
    """WET's thief: K paraphrases per training text, answers averaged, copy trained on the mean.

    ``service`` is the victim (texts -> answers); ``stealer`` any object with
    ``fit(texts, embeddings)`` and ``__call__(texts)`` (the lab's stealers).
    After :meth:`fit`, ``averaged`` holds the training targets and
    ``n_queries`` the number of texts sent to the service (K per text).

    >>> thief = ParaphraseThief(service, para, RidgeStealer(), rate=0.3)  # doctest: +SKIP
    >>> verify(thief.fit(texts), key).p_value                              # doctest: +SKIP
    """

    name = "paraphrase_thief"

    def __init__(
        self,
        service: Embedder,
        paraphraser: NeighbourParaphraser,
        stealer: Any,
        *,
        rate: float,
        mode: str = "substitute",
        k: int = 3,
        seed: int = 0,
    ):
        if k < 1:
            raise ValueError(f"k (paraphrases per text) must be >= 1, got {k!r}")
        self.service = service
        self.paraphraser = paraphraser
        self.stealer = stealer
        self.rate = float(rate)
        self.mode = mode
        self.k = int(k)
        self.seed = int(seed)
        self.averaged: np.ndarray | None = None
        self.n_queries = 0

    def queries(self, texts: Sequence[str]) -> list[str]:
        """The K paraphrases of every text, variant by variant (what the service receives)."""
        out: list[str] = []
        for variant in range(self.k):
            out += self.paraphraser.paraphrase(
                texts, rate=self.rate, mode=self.mode, seed=self.seed, variant=variant
            )
        return out

    def fit(self, texts: Sequence[str]) -> ParaphraseThief:
        """Query the paraphrases, average each text's K answers (renormalised), train the copy."""
        texts = list(texts)
        asked = self.queries(texts)
        answers = np.asarray(self.service(asked), dtype=np.float64)
        if answers.shape[0] != len(asked):
            raise ValueError(f"the service returned {answers.shape[0]} rows for {len(asked)} texts")
        mean = answers.reshape(self.k, len(texts), -1).mean(axis=0)
        self.averaged = unit_rows(mean)
        self.n_queries = len(asked)
        self.stealer.fit(texts, self.averaged)
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self.averaged is None:
            raise RuntimeError("this thief has not stolen anything yet; call fit(texts)")
        return np.asarray(self.stealer(list(texts)))

    embed = __call__
