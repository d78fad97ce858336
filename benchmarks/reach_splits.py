"""The reach benchmark's article splits of the news passages (``bench_reach.py``).

A provider's corpus (it makes the key on it and indexes it; the article titles of
its passages are the labelled queries) and a thief's traffic, drawn as whole
articles from one seeded order, so no thief passage shares an article with any
audit text. Each split takes articles in that order until it holds the passages
asked for; a smaller thief is a prefix of a larger one.
"""

from __future__ import annotations

import numpy as np

from espew_integrations.offline.corpora import PassageCorpus


def article_splits(
    corpus: PassageCorpus, provider: int, thief: int, *, seed: int = 0
) -> tuple[PassageCorpus, PassageCorpus]:
    """(provider, thief): disjoint article sets holding at least ``provider`` and
    ``thief`` passages, in the order of the seeded article permutation."""
    order = np.random.default_rng(seed).permutation(len(corpus.queries))
    sizes = np.bincount(corpus.labels, minlength=len(corpus.queries))[order]
    ends = np.cumsum(sizes)
    first = int(np.searchsorted(ends, provider)) + 1
    second = int(np.searchsorted(ends, ends[first - 1] + thief)) + 1
    if second > len(order):
        raise SystemExit(
            f"the corpus has {int(ends[-1])} passages; {provider} + {thief} were asked for"
        )
    return corpus.select_articles(order[:first]), corpus.select_articles(order[first:second])
