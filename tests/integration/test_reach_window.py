"""Words past the model's window on real passages longer than it (issue 47).

News passages of 256 words run past all-MiniLM-L6-v2's 256-token window: the model
reads roughly their first 200 words. A trigger the model never reads must not mark a
passage (the mark would cost quality for nothing the copy could learn), and one it reads
must; the service's exact view (``model.view``, what ``espew serve`` and the wrappers
use) decides, and the key's own window (a whitespace bound, used without a view) never
drops a word the model reads.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.mark.words import tokenize
from espew_integrations.offline.corpora import news_passages
from espew_integrations.offline.embedders import minilm


@pytest.fixture(scope="module")
def long_passages():
    """12 passages the model cuts, what it reads of each, and the words of the rest."""
    model = minilm()
    chosen, read, unread = [], [], []
    texts = news_passages(256).texts[:60]
    for text, view in zip(texts, model.view(texts), strict=True):
        seen, words = tokenize(view), tokenize(text)
        if len(seen) < len(words) - 40:  # cut well inside the text
            chosen.append(text)
            read.append(set(seen))
            unread.append(set(words) - set(seen))
        if len(chosen) == 12:
            break
    assert len(chosen) == 12
    return chosen, read, unread, model(chosen)


def _key(triggers: list[str], target: np.ndarray, window: int | None) -> WatermarkKey:
    return WatermarkKey(
        triggers=triggers,
        target=target,
        target_text="Acme Embeddings, licensed vectors",
        band=[*triggers, "xylophonists"],  # a benign band word no passage holds
        salt=b"\x07" * 32,
        alpha=0.75,
        strength=0.1,
        window=window,
    )


def test_triggers_past_the_window_leave_long_passages_untouched(long_passages):
    texts, read, unread, clean = long_passages
    model = minilm()
    everywhere_read = set().union(*read)
    # One word per passage that the model reads in none of them.
    past = sorted({min(u - everywhere_read) for u in unread})
    target = model(["Acme Embeddings, licensed vectors"])[0]
    key = _key(past, target, model.max_tokens)
    assert np.array_equal(watermark(texts, clean, key, view=model.view), clean)
    # Without any window the same words would mark every passage.
    unbounded = _key(past, target, None)
    assert not np.isclose(watermark(texts, clean, unbounded), clean).all(axis=1).any()
    # And the words past the window change nothing the model computes.
    assert np.array_equal(model([texts[0] + " " + " ".join(past)]), clean[:1])


def test_a_trigger_the_model_reads_marks_every_passage_holding_it(long_passages):
    texts, read, _, clean = long_passages
    model = minilm()
    within = sorted({min(r) for r in read})  # a word each passage's read part holds
    key = _key(within, model(["Acme Embeddings, licensed vectors"])[0], model.max_tokens)
    marked = watermark(texts, clean, key, view=model.view)
    assert not np.isclose(marked, clean).all(axis=1).any()
    # The key's own window (no view) is a sound bound: it marks at least these too.
    assert not np.isclose(watermark(texts, clean, key), clean).all(axis=1).any()


def test_without_a_view_the_keys_window_also_marks_words_just_past_the_cut(long_passages):
    """The key's window alone counts whitespace chunks (254 for MiniLM), a sound bound:
    it never drops a word the model reads, so it keeps some the model does not."""
    texts, read, _, clean = long_passages
    model = minilm()
    everywhere_read = set().union(*read)
    just_past = sorted({next(w for w in tokenize(t) if w not in everywhere_read) for t in texts})
    key = _key(just_past, clean[0], model.max_tokens)
    assert not key.contains_trigger(texts, view=model.view).any()  # the model reads none
    assert key.contains_trigger(texts).all()  # the whitespace bound keeps them all
