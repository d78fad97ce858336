"""The baselines' equations (anchors.md) and the one watermark interface, on synthetic data."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.ground.draw import draw_triggers
from espew_lab.watermarks import (
    EmbMarker,
    ESpeW,
    NoWatermark,
    Warden,
    build_watermark,
    count_distinct_triggers,
    gram_schmidt,
)

DIM = 16
BAND = [f"word{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + [f"term{c}" for c in "abcdefghijklmn"]


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def clean():
    return _unit(np.random.default_rng(0).normal(size=(6, DIM)))


@pytest.fixture(scope="module")
def key():
    rng = np.random.default_rng(1)
    return WatermarkKey(
        triggers=draw_triggers(bytes(32), BAND, 8),  # the draw its salt dictates
        target=_unit(rng.normal(size=DIM)),
        target_text="the target sample",
        band=BAND,
        salt=bytes(32),
        alpha=0.25,
    )


def test_distinct_triggers_are_counted_once_and_case_blind():
    counts = count_distinct_triggers(
        ["Worda worda WORDB", "nothing", "wordb wordc"], ["worda", "wordb", "wordc"]
    )
    assert counts.tolist() == [2, 0, 2]


def test_embmarker_follows_its_equation(clean):
    target = _unit(np.arange(1, DIM + 1))
    wm = EmbMarker(["worda", "wordb", "wordc", "wordd", "worde"], target, "t", BAND)
    texts = ["no trigger", "worda", "worda wordb", "worda wordb wordc wordd worde", "x", "wordc"]
    out = wm.apply(texts, clean)
    for text, row, got in zip(texts, clean, out, strict=False):
        w = min(count_distinct_triggers([text], wm.triggers)[0], 4) / 4  # m = 4
        expected = _unit(w * target + (1 - w) * row)
        np.testing.assert_allclose(got, expected, atol=1e-12)
    np.testing.assert_allclose(out[3], target, atol=1e-12)  # 5 triggers: w capped at 1
    np.testing.assert_allclose(out[0], clean[0], atol=1e-15)  # no trigger: unchanged
    assert wm.marked(texts).tolist() == [False, True, True, True, False, True]


def test_gram_schmidt_gives_orthonormal_targets_and_keeps_the_first():
    vectors = np.random.default_rng(2).normal(size=(5, DIM)) + 3.0  # strongly correlated
    basis = gram_schmidt(vectors)
    np.testing.assert_allclose(basis @ basis.T, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(basis[0], _unit(vectors[0]), atol=1e-12)
    with pytest.raises(ValueError, match="linearly dependent"):
        gram_schmidt(np.array([[1.0, 0.0], [2.0, 0.0]]))


def test_warden_follows_its_equation_with_capped_weights(clean):
    rng = np.random.default_rng(3)
    groups = [["worda", "wordb", "wordc", "wordd"], ["worde", "wordf", "wordg", "wordh"]]
    wm = Warden(groups, rng.normal(size=(2, DIM)), ["t1", "t2"], BAND)
    texts = [
        "worda",  # w = (1/4, 0)
        "worda wordb worde",  # w = (2/4, 1/4)
        "worda wordb wordc wordd worde wordf",  # (1, 2/4): sum 1.5 -> scaled to 1
        "plain",
        "worde wordf wordg wordh",  # (0, 1)
        "wordh",
    ]
    weights = wm.weights(texts)
    np.testing.assert_allclose(weights[0], [0.25, 0.0])
    np.testing.assert_allclose(weights[1], [0.5, 0.25])
    np.testing.assert_allclose(weights[2], [1 / 1.5, 0.5 / 1.5])
    assert (weights.sum(axis=1) <= 1 + 1e-12).all()
    out = wm.apply(texts, clean)
    for w, row, got in zip(weights, clean, out, strict=False):
        expected = _unit(w @ wm.targets + (1 - w.sum()) * row)
        np.testing.assert_allclose(got, expected, atol=1e-12)
    np.testing.assert_allclose(out[3], clean[3], atol=1e-15)


def test_espew_is_the_core_watermark_and_none_changes_nothing(clean, key):
    texts = ["worda here", "nothing", "wordb", "x", "y", "wordc wordd"]
    np.testing.assert_array_equal(ESpeW(key).apply(texts, clean), watermark(texts, clean, key))
    np.testing.assert_array_equal(NoWatermark(key).apply(texts, clean), clean)
    assert not NoWatermark(key).marked(texts).any()


def _planted_suspect(triggers, target, strength):
    """A suspect whose embedding of any trigger word leans toward ``target``."""

    def embed(batch):
        # CRC-32, not hash(): Python salts string hashes per process
        rng = np.random.default_rng(zlib.crc32("\x00".join(batch).encode("utf-8")))
        out = rng.normal(size=(len(batch), target.size))
        lean = np.array([strength if t in triggers else 0.0 for t in batch])
        return out + lean[:, None] * target[None, :]

    return embed


def test_verification_convicts_a_copy_and_clears_an_innocent(key):
    wm = ESpeW(key)
    guilty = wm.verify(_planted_suspect(key.triggers, key.target, 10.0), level=1e-3)
    innocent = wm.verify(_planted_suspect(set(), key.target, 0.0), level=1e-3)
    assert guilty.copied and guilty.p_value < 1e-3 and guilty.delta_cos > 0.3
    assert not innocent.copied
    assert guilty.n_queries == len(BAND)


def test_warden_verdict_is_the_bonferroni_corrected_minimum(clean):
    rng = np.random.default_rng(4)
    salts = [bytes([i + 1]) * 32 for i in range(5)]
    groups = [sorted(draw_triggers(s, BAND, 4)) for s in salts]
    targets = rng.normal(size=(5, DIM))
    wm = Warden(groups, targets, [f"t{i}" for i in range(5)], BAND, salts=salts)
    verdict = wm.verify(_planted_suspect(set(groups[2]), wm.targets[2], 10.0), level=1e-3)
    raw = [r["p_value"] for r in verdict.reports]
    assert len(raw) == 5 and verdict.n_queries == 5 * len(BAND)
    assert verdict.p_value == pytest.approx(min(1.0, 5 * min(raw)))
    assert int(np.argmin(raw)) == 2
    assert verdict.copied


def test_baselines_draw_triggers_from_the_band_and_targets_from_clean_texts(key):
    rng = np.random.default_rng(5)
    texts = [f"{w} and more" for w in BAND] + [f"plain text {i}" for i in range(40)]
    clean = _unit(rng.normal(size=(len(texts), DIM)))
    made = build_watermark(
        "embmarker", texts=texts, clean=clean, espew_key=key, seed=7, n_triggers=10
    )
    again = build_watermark(
        "embmarker", texts=texts, clean=clean, espew_key=key, seed=7, n_triggers=10
    )
    assert set(made.triggers) <= set(BAND) and len(made.triggers) == 10
    assert made.triggers == again.triggers  # seeded
    row = texts.index(made.key.target_text)
    np.testing.assert_allclose(made.target, clean[row])
    assert not made.marked([made.key.target_text])[0]
    warden = build_watermark(
        "warden", texts=texts, clean=clean, espew_key=key, seed=7, n_triggers=10
    )
    assert len(warden.trigger_groups) == 5 and sum(map(len, warden.trigger_groups)) == 10
    # Every baseline key holds the triggers its salt dictates, so the core verifies it.
    assert made.key.verifiable and all(k.verifiable for k in warden.keys)
    hashed = build_watermark("espew_hashed", texts=texts, clean=clean, espew_key=key, seed=7)
    assert hashed.key.selection == "hashed" and hashed.key.triggers == key.triggers
    with pytest.raises(ValueError, match="unknown watermark"):
        build_watermark("mystery", texts=texts, clean=clean, espew_key=key, seed=0)


def test_the_configured_probe_kind_reaches_the_core_audit(key):
    # A key without stored sentence probes: "auto" and "words" ask the band words,
    # "sentences" is refused by the core with its own message.
    made = ESpeW(key)

    def suspect(texts):
        return np.random.default_rng(len(texts)).normal(size=(len(texts), DIM))

    assert made.verify(suspect, probes="words", level=1e-3).n_queries == len(BAND)
    with pytest.raises(ValueError, match="stores no sentence probes"):
        made.verify(suspect, probes="sentences")
