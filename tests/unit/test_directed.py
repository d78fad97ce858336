"""The directed score (core.directed) and the stored probe embeddings it needs (core.row_codec).

Synthetic sentence-probe keys: a clean "model" gives each probe text a fixed
random direction; a copy answers a trigger probe with the clean row moved a
small fraction of the way along that probe's mark, plus noise, as a copy that
learned a faint watermark does.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.audit.directed import directed_scores, mark_directions
from espew_integrations.core.ground.errors import KeyFileError, KeyGenerationError
from espew_integrations.core.ground.row_codec import QuantizedRows
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from tests.support import assert_exact_over_every_draw, make_key


def clean_model(texts, dim=64):
    """A deterministic stand-in for the provider's model: one random unit row per text."""
    rows = []
    for text in texts:
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        rows.append(rng.normal(size=dim))
    rows = np.array(rows)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def sentence_key(*, n_band=120, n_triggers=15, per_word=4, strength=0.3, seed=0, dim=64):
    base = make_key(dim, n_band=n_band, n_triggers=n_triggers, seed=seed, strength=strength)
    texts = [f"we liked the {w} a lot, take {k}" for w in base.band for k in range(per_word)]
    owner = np.repeat(np.arange(n_band), per_word)
    clean = clean_model(texts, dim)
    return base.replace(
        probe_texts=texts,
        probe_owner=owner.tolist(),
        probe_reference=(clean @ base.target).tolist(),
        probe_embeddings=clean,
    )


class FaintCopy:
    """Answers trigger probes a fraction ``carry`` of the way along the true mark, plus noise."""

    def __init__(self, key, carry, noise=0.05, seed=0):
        self.key, self.carry, self.noise = key, carry, noise
        self.rng = np.random.default_rng(seed)
        self.memo = {}

    def __call__(self, texts):
        out = []
        for text in texts:
            if text not in self.memo:
                clean = clean_model([text], self.key.dim)
                marked = watermark([text], clean, self.key)  # moves only trigger texts
                row = clean + self.carry * (marked - clean)
                self.memo[text] = row[0] + self.noise * self.rng.normal(size=self.key.dim)
            out.append(self.memo[text])
        return np.array(out)


# ---------------------------------------------------------------------- row codec
def test_quantized_rows_round_trip_and_keep_small_coordinates_distinct():
    rows = np.random.default_rng(0).normal(size=(20, 384))
    rows[3] = 0.0
    stored = QuantizedRows.encode(rows)
    back = QuantizedRows.from_payload(json.loads(json.dumps(stored.to_payload())))
    assert back == stored and back.rows().shape == (20, 384)
    assert not back.rows()[3].any()
    error = np.abs(back.rows() - rows).max(axis=1) / np.abs(rows).max(axis=1).clip(1e-12)
    assert error.max() < 0.01  # a companded step is at most 2/127 of the peak, near it
    # The 20% smallest magnitudes (where a mark lands) keep their order far better
    # than a linear int8 code, which rounds most of them to 0.
    small = np.argsort(np.abs(rows[0]))[:77]
    assert len(np.unique(np.abs(back.rows()[0][small]))) > 25


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"encoding": "float32"}, "known encoding"),
        ({"dim": 0}, "dimension"),
        ({"scale": [1.0, float("nan")]}, "scales"),
        ({"scale": [1.0, -2.0]}, "scales"),
        ({"codes": "not base64!"}, "corrupt"),
        ({"codes": "AAAA"}, "corrupt"),
    ],
)
def test_a_corrupt_stored_embedding_record_is_refused_with_its_cause(change, message):
    payload = QuantizedRows.encode(np.ones((2, 8))).to_payload()
    payload.update(change)
    with pytest.raises(KeyGenerationError, match=message):
        QuantizedRows.from_payload(payload)


def test_a_code_outside_the_companded_range_is_refused():
    payload = QuantizedRows.encode(np.ones((1, 4))).to_payload()
    payload["codes"] = "gICAgA=="  # four bytes of 0x80 = -128
    with pytest.raises(KeyGenerationError, match="-128"):
        QuantizedRows.from_payload(payload)


# ---------------------------------------------------------------------- key storage
def test_a_key_stores_its_probe_embeddings_through_save_and_load(tmp_path):
    key = sentence_key()
    assert key.probe_embeddings.shape == (len(key.probe_texts), key.dim)
    loaded = WatermarkKey.load(key.save(tmp_path / "k.key"))
    assert loaded == key and loaded.key_id == key.key_id
    np.testing.assert_array_equal(loaded.probe_embeddings, key.probe_embeddings)
    # replace() passes the stored codes through untouched: same id, no re-rounding.
    assert key.replace(info={"note": "x"}).probe_embeddings.tobytes() == (
        key.probe_embeddings.tobytes()
    )
    assert "probe_embeddings" not in repr(key) and "codes" not in repr(key)


def test_tampered_or_mismatched_probe_embeddings_are_refused(tmp_path):
    key = sentence_key()
    document = json.loads(key.to_json())
    document["audit"]["audit"]["embeddings"]["codes"] = "!!"  # the audit inside the whole key
    path = tmp_path / "bad.key"
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="fails its checksum"):  # before any parsing
        WatermarkKey.load(path)
    with pytest.raises(KeyGenerationError, match="2 probe embeddings for 480 probes"):
        key.replace(probe_embeddings=np.ones((2, key.dim)))
    with pytest.raises(KeyGenerationError, match="dimension 8, the target 64"):
        key.replace(probe_embeddings=np.ones((len(key.probe_texts), 8)))


def test_a_key_without_probe_embeddings_keeps_its_id_and_the_two_statistic_rule():
    key = sentence_key()
    older = key.replace(probe_embeddings=None)
    assert "embeddings" not in json.loads(older.audit_json())["audit"]
    report = verify(FaintCopy(older, carry=0.5), older, seed=0)
    assert np.isnan(report.p_value_directed) and report.decided_by in ("raw", "adjusted")
    with pytest.raises(ValueError, match="statistic='directed' needs"):
        verify(FaintCopy(older, carry=0.5), older, statistic="directed")


# ---------------------------------------------------------------------- the score
def test_mark_directions_are_what_the_watermark_adds_to_a_trigger_text():
    key = make_key(64, strength=0.3)
    clean = clean_model(["a", "b", "c"])
    trigger = sorted(key.triggers)[0]
    marked = watermark([trigger] * 3, clean, key)
    expected = marked - clean
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(mark_directions(clean, key), expected, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        mark_directions(np.ones((2, 8)), key)


def test_failed_answers_get_no_score_and_do_not_change_the_others():
    rng = np.random.default_rng(1)
    answers, directions = rng.normal(size=(50, 16)), rng.normal(size=(50, 16))
    with_gap = answers.copy()
    with_gap[7] = np.nan
    scores = directed_scores(with_gap, directions)
    assert np.isnan(scores[7]) and np.isfinite(np.delete(scores, 7)).all()
    np.testing.assert_allclose(
        np.delete(scores, 7), directed_scores(np.delete(answers, 7, 0), np.delete(directions, 7, 0))
    )
    assert np.isnan(directed_scores(np.ones((5, 16)), directions[:5])).all()  # all alike
    with pytest.raises(ValueError, match="differ in shape"):
        directed_scores(answers, directions[:10])


def test_a_faint_copy_is_caught_by_the_directed_score_where_the_cosines_miss_it():
    key = sentence_key()
    report = verify(FaintCopy(key, carry=0.35), key, seed=0)
    assert report.copied and report.decided_by == "directed"
    assert report.p_value_directed < 1e-7 < 1e-3 < min(report.p_value_raw, report.p_value_adjusted)
    assert report.p_value == pytest.approx(3 * report.p_value_directed)
    assert "decided by the directed score" in str(report)  # its p-value: private forms
    # The directions live in the key's coordinates: a query-mode audit cannot use them.
    query = verify(FaintCopy(key, carry=0.35), key, seed=0, target_mode="query")
    assert np.isnan(query.p_value_directed)


def test_the_directed_statistic_is_exact_over_every_trigger_draw():
    """Exhaustively on a small band: P(p <= a) <= a for an innocent suspect."""
    key = sentence_key(n_band=12, n_triggers=3, per_word=3)
    innocent = FaintCopy(key, carry=0.0, noise=0.2)(list(key.probe_texts))
    directions = mark_directions(key.probe_embeddings, key)
    per_probe = directed_scores(innocent, directions)
    assert_exact_over_every_draw(np.bincount(key.probe_owner, weights=per_probe) / 3, 3)


# ---------------------------------------------------------------------- the clean fit
def reference_directed(answers, directions, clean, shrinkage=1.0, clean_ridge=1.0):
    """The directed score with the clean fit, written out in its primal form."""
    unit = answers / np.linalg.norm(answers, axis=1, keepdims=True)
    y = unit - unit.mean(axis=0)
    x = clean / np.linalg.norm(clean, axis=1, keepdims=True)
    x = x - x.mean(axis=0)
    ridge = clean_ridge * np.trace(x.T @ x) / x.shape[1]
    fit = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ y)
    residual = y - x @ fit
    covariance = np.cov(residual, rowvar=False)
    covariance += shrinkage * np.trace(covariance) / len(covariance) * np.eye(len(covariance))
    weighted = np.linalg.solve(covariance, directions.T).T
    return np.einsum("ij,ij->i", residual, weighted) / np.sqrt(
        np.einsum("ij,ij->i", weighted, directions)
    )


@pytest.mark.parametrize(("n_probes", "dim"), [(80, 16), (12, 40)])
def test_the_clean_fit_is_a_ridge_residual_with_fewer_probes_or_fewer_dimensions(n_probes, dim):
    rng = np.random.default_rng(n_probes)
    answers, directions, clean = (rng.normal(size=(n_probes, dim)) for _ in range(3))
    np.testing.assert_allclose(
        directed_scores(answers, directions, clean),
        reference_directed(answers, directions, clean),
        rtol=1e-9,
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="clean rows"):
        directed_scores(answers, directions, clean[:, :-1])


def test_a_failed_answer_takes_no_part_in_the_clean_fit():
    rng = np.random.default_rng(2)
    answers, directions, clean = (rng.normal(size=(60, 16)) for _ in range(3))
    with_gap = answers.copy()
    with_gap[4] = np.nan
    scores = directed_scores(with_gap, directions, clean)
    assert np.isnan(scores[4])
    np.testing.assert_allclose(
        np.delete(scores, 4),
        directed_scores(*(np.delete(m, 4, 0) for m in (answers, directions, clean))),
    )


@pytest.mark.parametrize("seed", range(5))
def test_the_clean_fit_catches_a_copy_that_reproduces_the_clean_rows_through_a_linear_map(seed):
    """A copy whose answers are a linear image of the clean rows plus a faint mark: the
    image projected on each probe's mark direction is noise to the plain score, and the
    fit on the clean rows takes it out (by 3 to 5 orders of magnitude here)."""
    key = sentence_key()
    texts = list(key.probe_texts)
    clean = clean_model(texts, key.dim)
    rng = np.random.default_rng(seed)
    mixing = np.eye(key.dim) + rng.normal(size=(key.dim, key.dim)) / np.sqrt(key.dim)
    marked = watermark(texts, clean, key)
    answers = clean @ mixing + 0.5 * (marked - clean) + 0.02 * rng.normal(size=clean.shape)
    directions = mark_directions(key.probe_embeddings, key)
    owner = np.asarray(key.probe_owner)
    is_trigger = np.array([w in key.triggers for w in key.band])

    def p_value(per_probe):
        return rank_sum_p_value(np.bincount(owner, weights=per_probe) / 4, is_trigger)

    plain = p_value(directed_scores(answers, directions))
    fitted = p_value(directed_scores(answers, directions, key.probe_embeddings))
    assert fitted < 1e-9 and fitted < 1e-3 * plain
    report = verify(lambda batch: answers[[texts.index(t) for t in batch]], key, seed=0)
    assert report.p_value_directed == pytest.approx(fitted) and report.decided_by == "directed"


def test_the_directed_statistic_with_the_clean_fit_is_exact_over_every_trigger_draw():
    key = sentence_key(n_band=12, n_triggers=3, per_word=3)
    innocent = FaintCopy(key, carry=0.0, noise=0.2)(list(key.probe_texts))
    directions = mark_directions(key.probe_embeddings, key)
    per_probe = directed_scores(innocent, directions, key.probe_embeddings)
    assert_exact_over_every_draw(np.bincount(key.probe_owner, weights=per_probe) / 3, 3)


# ---------------------------------------------------------------------- unscored rows (cover)
def test_unscored_rows_join_the_fit_and_the_covariance_but_get_no_score():
    """Cover rows are fit-only: the probes' scores equal those of the stacked rows."""
    rng = np.random.default_rng(11)
    answers, directions, clean = (rng.normal(size=(30, 16)) for _ in range(3))
    cover, cover_clean = rng.normal(size=(50, 16)), rng.normal(size=(50, 16))
    with_cover = directed_scores(
        answers, directions, clean, unscored_answers=cover, unscored_clean=cover_clean
    )
    stacked = reference_directed(
        np.vstack([answers, cover]),
        np.vstack([directions, rng.normal(size=(50, 16))]),  # never used for the cover
        np.vstack([clean, cover_clean]),
    )
    assert with_cover.shape == (30,)
    np.testing.assert_allclose(with_cover, stacked[:30], rtol=1e-9, atol=1e-12)
    assert not np.allclose(with_cover, directed_scores(answers, directions, clean))
    failed = cover.copy()
    failed[3] = np.nan  # a failed cover query is left out, like a failed probe
    np.testing.assert_allclose(
        directed_scores(
            answers, directions, clean, unscored_answers=failed, unscored_clean=cover_clean
        ),
        directed_scores(
            answers,
            directions,
            clean,
            unscored_answers=np.delete(cover, 3, 0),
            unscored_clean=np.delete(cover_clean, 3, 0),
        ),
    )
    with pytest.raises(ValueError, match="need clean_rows and unscored_clean"):
        directed_scores(answers, directions, unscored_answers=cover, unscored_clean=cover_clean)
    with pytest.raises(ValueError, match="differ in shape"):
        directed_scores(
            answers, directions, clean, unscored_answers=cover, unscored_clean=cover_clean[:-1]
        )
    with pytest.raises(ValueError, match="columns"):
        directed_scores(
            answers, directions, clean, unscored_answers=cover[:, :-1], unscored_clean=cover_clean
        )


@pytest.mark.parametrize("seed", range(4))
def test_unmarked_cover_rows_sharpen_the_clean_fit_of_a_copy(seed):
    """Few probes for the dimension: the fit on the probes alone also absorbs part of the
    mark and leaves a noisy map; unmarked cover rows, answered through the same map, pin
    the map down, and the test gains more than an order of magnitude."""
    key = sentence_key(n_band=40, n_triggers=10, per_word=2, strength=0.3, seed=seed)
    texts = list(key.probe_texts)
    cover_texts = [f"an ordinary text about nothing, number {i}" for i in range(400)]
    rng = np.random.default_rng(seed)
    mixing = np.eye(key.dim) + rng.normal(size=(key.dim, key.dim)) / np.sqrt(key.dim)
    clean, cover_clean = clean_model(texts, key.dim), clean_model(cover_texts, key.dim)
    marked = watermark(texts, clean, key)
    answers = clean @ mixing + 0.5 * (marked - clean) + 0.02 * rng.normal(size=clean.shape)
    cover = cover_clean @ mixing + 0.02 * rng.normal(size=cover_clean.shape)
    directions = mark_directions(key.probe_embeddings, key)
    owner = np.asarray(key.probe_owner)
    is_trigger = np.array([w in key.triggers for w in key.band])

    def p_value(per_probe):
        return rank_sum_p_value(np.bincount(owner, weights=per_probe) / 2, is_trigger)

    alone = p_value(directed_scores(answers, directions, key.probe_embeddings))
    helped = p_value(
        directed_scores(
            answers,
            directions,
            key.probe_embeddings,
            unscored_answers=cover,
            unscored_clean=cover_clean,
        )
    )
    assert helped < 1e-3 and helped < alone / 20, (helped, alone)  # 30-130x on these seeds


def test_hostile_cover_answers_leave_the_scores_finite_and_the_probes_scored():
    """A suspect may answer the cover with zeros, 1e300s or infinities: the infinite
    rows are left out like failures, the rest are scaled like any answer."""
    rng = np.random.default_rng(5)
    answers, directions, clean = (rng.normal(size=(40, 12)) for _ in range(3))
    cover, cover_clean = rng.normal(size=(30, 12)), rng.normal(size=(30, 12))
    cover[:5] = 0.0
    cover[5:10] *= 1e300
    cover[10] = np.inf
    scores = directed_scores(
        answers, directions, clean, unscored_answers=cover, unscored_clean=cover_clean
    )
    assert np.isfinite(scores).all()
    np.testing.assert_allclose(
        scores,
        directed_scores(
            answers,
            directions,
            clean,
            unscored_answers=np.delete(cover, 10, 0),
            unscored_clean=np.delete(cover_clean, 10, 0),
        ),
    )
