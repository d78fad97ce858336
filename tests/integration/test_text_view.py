"""The matcher decides on the text as the model reads it (issue 10, "Evasion").

An edit that leaves the offline MiniLM's token ids unchanged (invisible characters,
case, accents, Turkish dotted I) must leave the mark decision unchanged, and a
trigger past the model's window must not mark the text.
"""

from __future__ import annotations

import random
import sys
import unicodedata
from functools import cache, lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from espew_integrations.core.ground.text import (
    LEGACY_LOWER,
    NORMALIZATIONS,
    UNICODE_V1,
    canonicalize,
    window_view,
)
from espew_integrations.core.mark.words import TriggerMatcher, tokenize

IGNORABLES = ("\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")
ACUTE = "\u0301"


@lru_cache(maxsize=1)
def model():
    from espew_integrations.offline.embedders import minilm

    return minilm()


@lru_cache(maxsize=1)
def texts() -> tuple[str, ...]:
    from espew_integrations.offline.corpora import rotten_tomatoes

    return rotten_tomatoes().subset(3000, seed=10).texts


def ids(text: str) -> list[int]:
    with model()._lock:
        return model()._tokenizer.encode(text).ids


# -- canonicalize -----------------------------------------------------------------


def reference(text: str) -> str:
    """The unicode-v1 rule written out naively, character class by character class."""
    ignorable = [
        (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
        (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
        (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF), (0xFFFD, 0xFFFD), (0x1734, 0x1734),
    ]  # fmt: skip

    def dropped(c: str) -> bool:
        cat = unicodedata.category(c)
        return (
            any(lo <= ord(c) <= hi for lo, hi in ignorable)
            or cat in ("Mn", "Me", "Cf", "Cs", "Co", "Cn")
            or (cat == "Cc" and c not in "\t\n\r")
        )

    while True:
        out = "".join(c for c in unicodedata.normalize("NFKD", text) if not dropped(c))
        out = out.casefold()
        if out == text:
            break
        text = out
    # BERT's _is_chinese_char ranges: each such ideograph is a word of its own.
    ideographs = [
        (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0x2F800, 0x2FA1F),
    ]  # fmt: skip

    def ideograph(c: str) -> bool:
        return any(lo <= ord(c) <= hi for lo, hi in ideographs)

    out = ""  # a space between an ideograph and any non-space neighbour
    for c in text:
        if (
            out
            and not out[-1].isspace()
            and not c.isspace()
            and (ideograph(c) or ideograph(out[-1]))
        ):
            out += " "
        out += c
    return unicodedata.normalize("NFC", out)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("Vac\u00adcine", "vaccine"),
        ("v\u200ba\u200cc\u200dc\u2060i\ufeffne", "vaccine"),
        ("VACCİNE", "vaccine"),  # Turkish dotted capital I ends as "i"
        ("Café CAFE\u0301 café", "cafe cafe cafe"),
        ("Straße", "strasse"),
        ("ﬁlm ｆｕｌｌ Ⅻ", "film full xii"),
        ("a\x00b\x1fc\x7fd\te\nf\rg", "abcd\te\nf\rg"),
        ("trig\ufffdger trig\ue000ger", "trigger trigger"),
        ("Δ\u20ddx", "δx"),  # enclosing mark (Me) dropped
        ("\U0001d415ac\U000e0041cine \U0001f600", "vaccine \U0001f600"),  # astral: math, tag
        ("VACCINE漢字", "vaccine 漢 字"),  # BERT reads each ideograph as a word
        ("\u3358", "0 \u70b9"),  # folds to an ideograph from below the ideograph ranges
        ("x\u2f00y", "x \u4e00 y"),  # a Kangxi radical is its ideograph, a word of its own
    ],
)
def test_unicode_v1_undoes_evasions(raw, canonical):
    assert canonicalize(raw) == canonical


def test_spacing_marks_are_kept():
    # Mc (here a Devanagari vowel sign) is a visible letter part; dropping it would
    # merge distinct words, and inserting one changes the model's tokens anyway.
    assert "\u093e" in canonicalize("\u0915\u093e")


def test_legacy_is_exactly_lower():
    for text in ["VACC\u00adINE", "İstanbul", "Café", "ﬁlm", "Straße"]:
        assert canonicalize(text, LEGACY_LOWER) == text.lower()
    assert NORMALIZATIONS == (LEGACY_LOWER, UNICODE_V1)


def test_unknown_normalization_names_the_known_ones():
    with pytest.raises(ValueError, match=r"lower-v0.*unicode-v1"):
        canonicalize("x", "nfkc")
    with pytest.raises(ValueError, match="lower-v0"):
        window_view(["x"], window=None, normalization="nfkc")


any_text = st.text(
    alphabet=st.characters(exclude_categories=("Cs",), max_codepoint=0x10FFFF), max_size=30
)


@settings(max_examples=300, deadline=None)
@given(text=any_text)
def test_fast_table_agrees_with_the_naive_rule_and_is_idempotent(text):
    out = canonicalize(text)
    assert out == reference(text)
    assert canonicalize(out) == out


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40))
def test_ascii_fast_path_agrees_with_the_naive_rule(text):
    assert canonicalize(text) == reference(text)


def test_every_character_minilm_deletes_is_deleted():
    """Exhaustive over Unicode: what the model's normaliser deletes cannot hide a word."""
    normalizer = model()._tokenizer.normalizer
    chars = [
        chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF and c != ord("|")
    ]
    # "|" survives BERT's normaliser unchanged and nothing normalises to it, so the
    # output splits back into one part per character.
    parts = normalizer.normalize_str("|".join(chars)).split("|")
    assert len(parts) == len(chars)
    deleted = "".join(c for c, part in zip(chars, parts, strict=True) if part == "")
    assert len(deleted) > 100_000
    assert canonicalize(f"vac{deleted}cine") == "vaccine"


# -- the model's view ---------------------------------------------------------------


def test_view_joins_word_pieces_drops_specials_and_blanks_unknown_words():
    view = model().view(["Vac\u00adcíne TRIALS [SEP] don't", "ok \u3164x", ""])
    assert view[0] == "vaccine trials don ' t"
    assert view[1].split()[0] == "ok" and tokenize(view[1]) == ["ok"]  # [UNK] is no word
    assert view[2] == ""
    assert model().max_tokens == 256


def test_view_is_a_function_of_the_token_ids():
    a, b = "Vac\u00adcine TRIALS", "vaccine trials"
    assert ids(a) == ids(b)
    assert model().view([a]) == model().view([b])


def test_trigger_inside_an_unknown_word_does_not_match_with_the_model_view():
    text = "vaccine\u3164"  # the model reads one [UNK] token, never "vaccine"
    assert model().view([text]) == ["\ufffd"]
    assert not TriggerMatcher({"vaccine"}).contains([text], view=model().view)[0]


# -- the window ---------------------------------------------------------------------


@pytest.mark.parametrize("use_model_view", [False, True])
def test_trigger_past_the_window_does_not_match_and_one_within_does(use_model_view):
    window = model().max_tokens  # 256 tokens: [CLS] + 254 + [SEP]
    matcher = TriggerMatcher({"vaccine"}, window=window)
    view = model().view if use_model_view else None
    read = "word " * (window - 3) + "vaccine"  # content token 254: the last one read
    unread = "word " * (window - 2) + "vaccine"  # content token 255: cut
    assert len(ids(read)) == window and ids(read)[-2] == ids("vaccine")[1]
    assert ids("vaccine")[1] not in ids(unread)
    assert matcher.contains([read, unread], view=view).tolist() == [True, False]
    # Without a window every word counts (keys saved without one).
    assert TriggerMatcher({"vaccine"}).contains([unread]).tolist() == [True]


def test_padding_with_deleted_characters_cannot_push_a_trigger_out_of_the_window():
    padded = "\u200b " * 400 + "\u00ad\u200d " * 400 + "vaccine"
    assert ids("vaccine")[1] in ids(padded)  # the model reads it
    assert TriggerMatcher({"vaccine"}, window=256).contains([padded]).tolist() == [True]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.integers(0, 2900), count=st.integers(5, 60), window=st.integers(3, 256))
def test_window_bound_keeps_every_word_the_model_reads(start, count, window):
    text = " ".join(texts()[start : start + count])
    with model()._lock:
        model()._tokenizer.enable_truncation(max_length=window)
        try:
            encoding = model()._tokenizer.encode(text)
        finally:
            model()._tokenizer.enable_truncation(max_length=model().max_tokens)
    read_words = model()._words(encoding.ids, encoding.tokens).split(" ")
    if len(encoding.ids) == window:  # truncated: the last word may be cut inside
        read_words = read_words[:-1]
    read = set(tokenize(" ".join(read_words)))
    kept = set(tokenize(window_view([text], window=window)[0]))
    assert read <= kept


@pytest.mark.parametrize("window", [0, 2, 2.5, True, "256"])
def test_window_must_leave_room_for_a_token(window):
    with pytest.raises(ValueError, match="window"):
        window_view(["x"], window=window)


# -- the property: edits the model cannot see do not change the decision -------------


def add_ignorables(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word)) if len(word) > 1 else 1
    return word[:i] + rng.choice(IGNORABLES) + word[i:]


def change_case(word: str, rng: random.Random) -> str:
    return rng.choice([word.upper(), word.title(), word.swapcase(), word.lower()])


def add_accents(word: str, rng: random.Random) -> str:
    accented = "".join(c + ACUTE if c in "aeiouAEIOU" and rng.random() < 0.5 else c for c in word)
    return unicodedata.normalize(rng.choice(["NFC", "NFD"]), accented)


def remove_accents(word: str, rng: random.Random) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def dotted_i(word: str, rng: random.Random) -> str:
    return word.replace("i", "\u0130").replace("I", "\u0130")


EDITS = [add_ignorables, change_case, add_accents, remove_accents, dotted_i]


@cache
def words_of(i: int) -> tuple[str, ...]:
    return tuple(w for w in tokenize(texts()[i]) if len(w) >= 2 and w.isalpha())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    i=st.integers(0, 2999),
    j=st.integers(0, 2999),
    edits=st.lists(st.sampled_from(EDITS), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    share=st.floats(0.2, 1.0),
)
def test_edits_the_model_cannot_see_do_not_change_the_decision(i, j, edits, seed, share):
    rng = random.Random(seed)
    original = texts()[i]
    pool = words_of(i) if rng.random() < 0.7 else words_of(j)  # own word: a hit
    if not pool:
        return
    trigger = rng.choice(pool)
    edited = " ".join(
        rng.choice(edits)(w, rng) if rng.random() < share else w for w in original.split(" ")
    )
    if ids(edited) != ids(original):
        return  # the model sees the edit: the decision may change
    window = model().max_tokens
    matcher = TriggerMatcher({trigger}, window=window)
    pair = [original, edited]
    default = matcher.contains(pair).tolist()
    exact = matcher.contains(pair, view=model().view).tolist()
    assert default[0] == default[1], "default view: escape"
    assert exact[0] == exact[1], "model view: escape"


def test_soft_hyphen_in_every_word_no_longer_switches_the_mark_off():
    sample = list(texts()[:300])
    hyphenated = [" ".join(add_ignorables(w, random.Random(0)) for w in t.split()) for t in sample]
    assert all(ids(a) == ids(b) for a, b in zip(sample, hyphenated, strict=True))
    triggers = {w for i in range(0, 300, 10) for w in words_of(i)[:1]}
    new = TriggerMatcher(triggers, window=256)
    assert new.contains(sample).tolist() == new.contains(hyphenated).tolist()
    old = TriggerMatcher(triggers, normalization=LEGACY_LOWER)
    assert old.contains(hyphenated).sum() < old.contains(sample).sum()  # the defect


def test_the_window_prefix_is_all_the_model_reads():
    """What a traffic sample stores of a long text embeds exactly as the whole text did:
    the cut keeps every token the model reads, whatever the padding (invisible chunks,
    punctuation, long words) in front of the cut."""
    from espew_integrations.core.ground.text import window_prefix

    encoder = model()
    rng = random.Random(7)
    words = ["vaccine", "trial", "résumé", "\u200b", "a,b;c", "x" * 120, "#", "ok."]
    longs = [" ".join(rng.choice(words) for _ in range(600)) for _ in range(3)]
    prefixes = [window_prefix(text, encoder.max_tokens) for text in longs]
    assert all(len(p) < len(t) for p, t in zip(prefixes, longs, strict=True))
    assert (encoder(prefixes) == encoder(longs)).all()
