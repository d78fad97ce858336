"""Word scores from every audit text that holds a band word (core.word_evidence).

Synthetic audits follow how ESpeW marks: a text's score is ``delta`` higher when it
holds *any* trigger, plus noise; texts hold one band word, several, or none.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import verify
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_integrations.core.stats.word_evidence import word_scores_from_texts
from tests.support import assert_exact_over_every_draw
from tests.unit.test_directed import FaintCopy, clean_model, sentence_key


def synthetic_audit(seed, *, n_words=70, n_triggers=35, singles=6, shared=600, none=800, delta=0.5):
    """Texts with one band word (``singles`` a word), two or three, or none; OR marking."""
    rng = np.random.default_rng(seed)
    is_trigger = np.zeros(n_words, bool)
    is_trigger[rng.choice(n_words, n_triggers, replace=False)] = True
    sets = [(w,) for w in range(n_words) for _ in range(singles)]
    sets += [
        tuple(rng.choice(n_words, rng.choice([2, 3], p=[0.75, 0.25]), replace=False))
        for _ in range(shared)
    ]
    sets += [()] * none
    marked = np.array([bool(s) and is_trigger[list(s)].any() for s in sets])
    scores = delta * marked + rng.normal(size=len(sets))
    return scores, sets, is_trigger


def probes_only(scores, sets, n_words):
    """Each word's mean over its one-band-word texts: the score before shared texts counted."""
    owner = np.array([s[0] if len(s) == 1 else -1 for s in sets])
    use = owner >= 0
    return np.bincount(owner[use], weights=scores[use], minlength=n_words) / np.bincount(
        owner[use], minlength=n_words
    )


def naive_mean(scores, sets, n_words):
    """Each word's mean over every text holding it, shared ones counted in full."""
    rows = np.array([i for i, s in enumerate(sets) for _ in s])
    words = np.array([w for s in sets for w in s])
    return np.bincount(words, weights=scores[rows], minlength=n_words) / np.bincount(
        words, minlength=n_words
    )


def test_shared_texts_add_evidence_and_explaining_away_beats_counting_them_in_full():
    """Over 8 synthetic audits the explained-away scores convict with a median of
    more than two orders of magnitude below the one-band-word texts alone, and
    below the naive mean that lets a trigger's mark spill onto its neighbours."""
    gains_over_probes, gains_over_naive = [], []
    for seed in range(8):
        scores, sets, is_trigger = synthetic_audit(seed)
        n = len(is_trigger)
        p_new = rank_sum_p_value(word_scores_from_texts(scores, sets, n, 0.5), is_trigger)
        p_probes = rank_sum_p_value(probes_only(scores, sets, n), is_trigger)
        p_naive = rank_sum_p_value(naive_mean(scores, sets, n), is_trigger)
        gains_over_probes.append(np.log10(p_probes / p_new))
        gains_over_naive.append(np.log10(p_naive / p_new))
    assert np.median(gains_over_probes) > 2.0, gains_over_probes
    assert np.median(gains_over_naive) > 0.5, gains_over_naive


def test_with_no_shared_texts_the_words_rank_as_their_mean_scores():
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 9, size=30)
    sets = [(w,) for w in range(30) for _ in range(counts[w])] + [()] * 50
    scores = rng.normal(size=len(sets))
    got = word_scores_from_texts(scores, sets, 30, 0.3)
    np.testing.assert_array_equal(np.argsort(got), np.argsort(probes_only(scores, sets, 30)))
    # one constant less: the median of the texts that hold no band word
    np.testing.assert_allclose(
        got, probes_only(scores, sets, 30) - np.median(scores[-50:]), rtol=1e-12
    )


def test_the_word_scores_of_an_innocent_keep_the_rank_test_exact_over_every_draw():
    """The scores never see the triggers, so every draw of 3 of 12 words is equally likely."""
    rng = np.random.default_rng(11)
    sets = [(w,) for w in range(12) for _ in range(3)]
    sets += [tuple(rng.choice(12, 2, replace=False)) for _ in range(40)] + [()] * 20
    scores = rng.normal(size=len(sets))
    assert_exact_over_every_draw(word_scores_from_texts(scores, sets, 12, 0.25), 3)


def test_failed_texts_are_left_out_and_a_word_with_no_answer_gets_no_score():
    rng = np.random.default_rng(5)
    sets = [(0,), (0,), (1,), (1, 2), (2, 3), (), (), ()]
    scores = rng.normal(size=len(sets))
    scores[2] = np.nan  # word 1's one probe failed; it still has a shared text
    scores[4] = np.nan  # word 3's only text failed
    got = word_scores_from_texts(scores, sets, 5, 0.4)
    assert np.isfinite(got[:3]).all()
    assert np.isnan(got[3]) and np.isnan(got[4])  # word 4 is in no text at all
    assert np.isnan(word_scores_from_texts(np.full(3, np.nan), [(0,), (1,), ()], 2, 0.5)).all()


def test_words_held_only_by_shared_texts_still_get_a_score_without_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no All-NaN or divide warnings on this edge
        got = word_scores_from_texts(
            np.array([1.0, 2.0, 0.1, 0.3]), [(0, 1), (1, 2), (), ()], 3, 0.3
        )
    assert np.isfinite(got).all()
    assert got[2] > got[0]  # word 2 shares the higher text, word 0 the lower


def test_hostile_scores_leave_the_word_scores_finite():
    rng = np.random.default_rng(9)
    sets = [(w,) for w in range(10) for _ in range(2)] + [(0, 1), (2, 3, 4), (), ()]
    for value in (1e300, -1e300, 0.0):
        scores = rng.normal(size=len(sets))
        scores[::3] = value
        assert np.isfinite(word_scores_from_texts(scores, sets, 10, 0.5)).all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros(3), [(0,), (1,)], 2, 0.5), "2 band sets"),
        ((np.zeros(2), [(0,), (2,)], 2, 0.5), "outside 0..1"),
        ((np.zeros(2), [(0,), (1,)], 2, 1.0), "trigger_share"),
        ((np.zeros(2), [(0,), (1,)], 2, 0.0), "trigger_share"),
    ],
)
def test_bad_input_is_refused_with_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        word_scores_from_texts(*args)


def test_verify_scores_the_cover_texts_that_hold_band_words():
    """End to end through verify(): a key whose cover texts hold two band words each.
    A faint copy is convicted more strongly with them than with its probes alone,
    and the innocent (carry 0) is not convicted either way."""
    key = sentence_key(n_band=40, n_triggers=10, per_word=2, strength=0.3, seed=4)
    rng = np.random.default_rng(4)
    pairs = [rng.choice(len(key.band), 2, replace=False) for _ in range(240)]
    cover = [f"the {key.band[a]} and the {key.band[b]}, take {i}" for i, (a, b) in enumerate(pairs)]
    cover += [f"an ordinary text about nothing, number {i}" for i in range(160)]
    with_cover = key.replace(cover_texts=cover, cover_embeddings=clean_model(cover, key.dim))
    without = key.replace(cover_texts=[], cover_embeddings=np.zeros((0, key.dim)))

    faint = verify(FaintCopy(key, carry=0.2, noise=0.05, seed=1), with_cover, seed=0)
    alone = verify(FaintCopy(key, carry=0.2, noise=0.05, seed=1), without, seed=0)
    assert faint.p_value_directed < 1e-3 < alone.p_value_directed, (  # 3.5e-5 against 0.43
        faint.p_value_directed,
        alone.p_value_directed,
    )
    innocent = verify(FaintCopy(key, carry=0.0, noise=0.05, seed=1), with_cover, seed=0)
    assert not innocent.copied and innocent.p_value_directed > 1e-3
