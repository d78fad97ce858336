"""The thief that erases the small coordinates it serves (lab.erasure).

The real-model measurements are ``benchmarks/bench_erasure.py``
(``docs/results/erasure``); these tests pin the attack's arithmetic and show,
on the synthetic provider of test_directed, that it does what the threat says:
a light erasure keeps the mark, a heavy one wipes it.
"""

from __future__ import annotations

import numpy as np
import pytest

from espew_integrations import verify
from espew_lab import ErasingSuspect, erase_smallest
from tests.unit.test_directed import FaintCopy, sentence_key


def test_zero_mode_erases_exactly_the_smallest_coordinates_and_renormalises():
    rows = np.random.default_rng(0).normal(size=(30, 50))
    out = erase_smallest(rows, 0.4)
    k = 20
    for row, erased in zip(rows, out, strict=True):
        smallest = np.argsort(np.abs(row))[:k]
        assert (erased[smallest] == 0).all() and (np.delete(erased, smallest) != 0).all()
        kept = np.delete(row, smallest)
        np.testing.assert_allclose(np.delete(erased, smallest), kept / np.linalg.norm(kept))
    np.testing.assert_allclose(
        erase_smallest(rows, 0.0), rows / np.linalg.norm(rows, axis=1)[:, None]
    )


def test_noise_mode_leaves_no_zero_and_keeps_the_erased_coordinates_small():
    rows = np.random.default_rng(1).normal(size=(30, 50))
    out = erase_smallest(rows, 0.5, mode="noise", noise_seeds=list(range(30)))
    assert (out != 0).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0)
    big = np.abs(rows) >= np.sort(np.abs(rows), axis=1)[:, [25]]
    # The kept coordinates keep their direction; the erased ones are replaced.
    cos_kept = np.sum(np.where(big, out * rows, 0), axis=1)
    assert (cos_kept > 0.9 * np.linalg.norm(np.where(big, rows, 0), axis=1)).all()
    assert not np.allclose(out[~big], (rows / np.linalg.norm(rows, axis=1)[:, None])[~big])


def test_the_erasing_suspect_answers_a_text_the_same_in_any_batch():
    key = sentence_key(n_band=20, n_triggers=3, per_word=2)
    texts = list(key.probe_texts)[:12]
    thief = ErasingSuspect(FaintCopy(key, carry=1.0, noise=0.0), 0.5, mode="noise", seed=3)
    together = thief(texts)
    alone = np.vstack([thief([t]) for t in reversed(texts)])[::-1]
    np.testing.assert_array_equal(together, alone)
    assert "fraction=0.5" in repr(thief) and "salt" not in repr(thief)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction": 1.0}, "fraction must be in"),
        ({"fraction": -0.1}, "fraction must be in"),
        ({"fraction": 0.3, "mode": "blur"}, "unknown erasure mode"),
        ({"fraction": 0.3, "mode": "noise"}, "one noise seed per row"),
    ],
)
def test_bad_erasure_settings_are_refused_with_their_cause(kwargs, message):
    with pytest.raises(ValueError, match=message):
        erase_smallest(np.ones((2, 8)), **kwargs)
    with pytest.raises(ValueError, match="2-d"):
        erase_smallest(np.ones(8), 0.3)


def test_a_light_erasure_keeps_the_mark_and_a_heavy_one_wipes_it():
    """The synthetic provider (alpha 0.2): the mark lives in the smallest 20% of coordinates."""
    key = sentence_key()
    service = FaintCopy(key, carry=1.0, noise=0.0)  # the watermarked service itself
    light = verify(ErasingSuspect(service, 0.3), key, seed=0)
    heavy = verify(ErasingSuspect(service, 0.6), key, seed=0)
    assert light.copied and light.p_value < 1e-15
    assert not heavy.copied and heavy.p_value > 1e-3
