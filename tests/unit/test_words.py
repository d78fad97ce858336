"""The one tokeniser and the batch trigger matcher."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espew_integrations.core.ground.text import joined_window_view, window_view
from espew_integrations.core.mark.words import (
    TriggerMatcher,
    band_words,
    document_frequencies,
    is_word,
    tokenize,
)


def test_tokenize_canonicalises_and_splits_on_punctuation_and_underscores():
    # unicode-v1 strips accents and casefolds (the model reads "café" as "cafe").
    assert tokenize("Vaccine, VACCINE; vaccine_rollout café-Straße 42") == [
        "vaccine",
        "vaccine",
        "vaccine",
        "rollout",
        "cafe",
        "strasse",
        "42",
    ]


def test_tokenize_legacy_normalization_is_plain_lower():
    text = "Vaccine, VACCINE; vaccine_rollout café-Straße 42 vac\u00adcine"
    assert tokenize(text, "lower-v0") == [
        "vaccine",
        "vaccine",
        "vaccine",
        "rollout",
        "café",
        "straße",
        "42",
        "vac",
        "cine",
    ]


def test_matcher_finds_triggers_regardless_of_case_accents_and_punctuation():
    matcher = TriggerMatcher({"vaccine", "cafe"})
    texts = ["Vaccine,", "VACCINE", "vaccines", "un-vaccine-d", "CAFÉ!", "cafe", "x"]
    assert matcher.contains(texts).tolist() == [True, True, False, True, True, True, False]


def test_matcher_ignores_invisible_characters_inside_words():
    matcher = TriggerMatcher({"vaccine"})
    texts = [
        "vac\u00adcine",
        "v\u200bac\u200dcine",
        "VACC\u0130NE",
        "vac cine",
    ]
    assert matcher.contains(texts).tolist() == [True, True, True, False]


def test_legacy_matcher_marks_exactly_what_it_marked_before():
    matcher = TriggerMatcher({"vaccine", "café"}, normalization="lower-v0")
    texts = ["VACCINE", "vac\u00adcine", "CAFÉ!", "cafe", "cafe\u0301"]
    assert matcher.contains(texts).tolist() == [True, False, True, False, False]


def test_matcher_never_matches_across_text_boundaries():
    matcher = TriggerMatcher({"ab"})
    assert matcher.contains(["a", "b", "xa", "bx"]).tolist() == [False] * 4


word = st.text(alphabet="abcxyzéßı", min_size=1, max_size=4)
noise = st.text(alphabet="abcxyzéÉßı ,.-_\n!ABCİ\u00ad\u200b\u0301", max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    triggers=st.sets(word, min_size=1, max_size=5),
    texts=st.lists(noise, max_size=12),
    normalization=st.sampled_from(["unicode-v1", "lower-v0"]),
)
def test_matcher_agrees_with_tokenising_each_text(triggers, texts, normalization):
    triggers = {w for t in triggers for w in tokenize(t, normalization)}
    if not triggers:
        return
    expected = [bool(set(tokenize(t, normalization)) & triggers) for t in texts]
    matcher = TriggerMatcher(triggers, normalization=normalization)
    assert matcher.contains(texts).tolist() == expected
    # which(): exactly the trigger words each text holds, by the same reading
    held = [frozenset(set(tokenize(t, normalization)) & triggers) for t in texts]
    assert matcher.which(texts) == held


def test_which_names_the_words_each_text_holds_within_the_window():
    matcher = TriggerMatcher({"apple", "pear", "plum"}, window=6)  # 4 words past [CLS], [SEP]
    texts = ["APPLE and a pear", "pineapple, plums", "", "a b c d e plum"]
    assert matcher.which(texts) == [
        frozenset({"apple", "pear"}),
        frozenset(),  # inside longer words only
        frozenset(),
        frozenset(),  # past the window: the model never reads it, the service never marks it
    ]
    assert matcher.which([]) == []


ascii_noise = st.text(alphabet="abcXYZ 19 ,.-_\t\n\r\x00\x07\x1f\x7f", max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.one_of(ascii_noise, noise), min_size=1, max_size=6),
    normalization=st.sampled_from(["unicode-v1", "lower-v0"]),
    window=st.sampled_from([None, 3, 6, 40]),
)
def test_joined_view_equals_the_per_text_view(texts, normalization, window):
    """The batch fast path (one lower() of the joined ASCII batch) changes nothing."""
    joined, lengths = joined_window_view(texts, window=window, normalization=normalization)
    viewed = window_view(texts, window=window, normalization=normalization)
    assert joined == " ".join(viewed)
    assert lengths == [len(t) for t in viewed]


def test_matcher_handles_long_documents_and_empty_batches():
    matcher = TriggerMatcher({"needle"})
    haystack = "hay " * 200_000
    hits = matcher.contains([haystack, haystack + "NEEDLE.", ""])
    assert hits.tolist() == [False, True, False]
    assert matcher.contains([]).shape == (0,)


@pytest.mark.parametrize("bad", [set(), {"two words"}, {"Upper"}, {"a_b"}, {"café"}, {"straße"}])
def test_matcher_rejects_triggers_that_are_not_single_canonical_words(bad):
    with pytest.raises(ValueError):
        TriggerMatcher(bad)


def test_matcher_error_names_no_trigger():
    with pytest.raises(ValueError) as info:
        TriggerMatcher({"secretword", "Sécret"})
    assert "cret" not in str(info.value) and "1 trigger(s)" in str(info.value)


def test_matcher_rejects_unknown_normalization_and_bad_window():
    with pytest.raises(ValueError, match="unicode-v1"):
        TriggerMatcher({"x"}, normalization="nfc")
    with pytest.raises(ValueError, match="window"):
        TriggerMatcher({"x"}, window=2)


def test_is_word_follows_the_normalization():
    assert is_word("cafe") and not is_word("café") and not is_word("Cafe")
    assert is_word("café", "lower-v0") and not is_word("Café", "lower-v0")


def test_document_frequencies_count_texts_not_occurrences():
    counts, n = document_frequencies(["apple apple pie", "Apple tart", "pear 42 a"])
    assert n == 3
    assert counts == Counter({"apple": 2, "pie": 1, "tart": 1, "pear": 1})


def test_document_frequencies_count_in_the_matched_form():
    corpus = ["Café au lait", "cafe noir", "ca\u00adfe"]
    assert document_frequencies(corpus)[0]["cafe"] == 3
    legacy = document_frequencies(corpus, "lower-v0")[0]
    assert legacy["café"] == 1 and legacy["cafe"] == 1


def test_band_words_keep_the_half_open_band():
    counts = Counter({"a1": 5, "b1": 10, "c1": 9, "d1": 4})
    assert band_words(counts, 100, (0.05, 0.10)) == ["a1", "c1"]


def test_document_frequencies_reject_non_strings():
    with pytest.raises(TypeError, match="corpus item 1 is bytes"):
        document_frequencies(["fine", b"bytes"])


def test_matcher_result_is_a_bool_array():
    out = TriggerMatcher({"x"}).contains(["x y", "z"])
    assert out.dtype == np.bool_
