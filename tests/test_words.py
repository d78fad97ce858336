"""The one tokeniser and the batch trigger matcher."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espew_integrations import TriggerMatcher, tokenize
from espew_integrations.core.words import band_words, document_frequencies


def test_tokenize_lowercases_and_splits_on_punctuation_and_underscores():
    assert tokenize("Vaccine, VACCINE; vaccine_rollout café-Straße 42") == [
        "vaccine",
        "vaccine",
        "vaccine",
        "rollout",
        "café",
        "straße",
        "42",
    ]


def test_matcher_finds_triggers_regardless_of_case_and_punctuation():
    matcher = TriggerMatcher({"vaccine", "café"})
    texts = ["Vaccine,", "VACCINE", "vaccines", "un-vaccine-d", "CAFÉ!", "cafe", "x"]
    assert matcher.contains(texts).tolist() == [True, True, False, True, True, False, False]


def test_matcher_never_matches_across_text_boundaries():
    matcher = TriggerMatcher({"ab"})
    assert matcher.contains(["a", "b", "xa", "bx"]).tolist() == [False] * 4


word = st.text(alphabet="abcxyzé", min_size=1, max_size=4)
noise = st.text(alphabet="abcxyzéÉ ,.-_\n!ABC", max_size=40)


@settings(max_examples=200, deadline=None)
@given(triggers=st.sets(word, min_size=1, max_size=5), texts=st.lists(noise, max_size=12))
def test_matcher_agrees_with_tokenising_each_text(triggers, texts):
    expected = [bool(set(tokenize(t)) & triggers) for t in texts]
    assert TriggerMatcher(triggers).contains(texts).tolist() == expected


def test_matcher_handles_long_documents_and_empty_batches():
    matcher = TriggerMatcher({"needle"})
    haystack = "hay " * 200_000
    hits = matcher.contains([haystack, haystack + "NEEDLE.", ""])
    assert hits.tolist() == [False, True, False]
    assert matcher.contains([]).shape == (0,)


@pytest.mark.parametrize("bad", [set(), {"two words"}, {"Upper"}, {"a_b"}])
def test_matcher_rejects_triggers_that_are_not_single_lowercase_words(bad):
    with pytest.raises(ValueError):
        TriggerMatcher(bad)


def test_document_frequencies_count_texts_not_occurrences():
    counts, n = document_frequencies(["apple apple pie", "Apple tart", "pear 42 a"])
    assert n == 3
    assert counts == Counter({"apple": 2, "pie": 1, "tart": 1, "pear": 1})


def test_band_words_keep_the_half_open_band():
    counts = Counter({"a1": 5, "b1": 10, "c1": 9, "d1": 4})
    assert band_words(counts, 100, (0.05, 0.10)) == ["a1", "c1"]


def test_document_frequencies_reject_non_strings():
    with pytest.raises(TypeError, match="corpus item 1 is bytes"):
        document_frequencies(["fine", b"bytes"])


def test_matcher_result_is_a_bool_array():
    out = TriggerMatcher({"x"}).contains(["x y", "z"])
    assert out.dtype == np.bool_
