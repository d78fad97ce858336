"""The keyed field mark (core/mark/field.py, marking="field"): its stream, its field, marking,
its verification and its exact null, on a small synthetic embedder (seconds)."""

from __future__ import annotations

import pickle
import zlib

import numpy as np
import pytest

from espew_integrations.core.designs.field import FieldDesign
from espew_integrations.core.ground.defaults import DEFAULT_FIELD_MIN_COSINE
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.errors import KeyFileError, MarkingError
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.mark.field import (
    FIELD_CLIP,
    FieldMark,
    drawn_mask,
    field_gain,
    field_projections,
    field_scales,
    field_scores,
    keyed_gaussian,
    unit_names,
)
from espew_integrations.core.mark.inject import (
    mark_masked,
    mark_selected,
    marks,
    watermark,
    watermark_and_mask,
)
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.core.stats.ranktest import rank_sum_p_value
from espew_integrations.core.verify import verify_callable
from tests.support import make_key, run_python

DIM = 64
_BASIS = np.random.default_rng(0).normal(size=(500, DIM))
_OTHER = np.random.default_rng(1).normal(size=(500, DIM))
_WORDS = [f"w{i}" for i in range(500)]


def _bag_embedder(basis: np.ndarray):
    """A deterministic bag-of-words encoder: a text is the sum of its words' rows."""

    def embed(texts: list[str]) -> np.ndarray:
        rows = [
            basis[[zlib.crc32(w.encode()) % len(basis) for w in t.split()]].sum(0) + 0.01
            for t in texts
        ]
        out = np.array(rows, dtype=np.float64).reshape(len(texts), basis.shape[1])
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return embed


embed = _bag_embedder(_BASIS)
innocent = _bag_embedder(_OTHER)
CORPUS = [" ".join(np.random.default_rng(i).choice(_WORDS, 8)) for i in range(2500)]


@pytest.fixture(scope="module")
def field_key() -> WatermarkKey:
    return WatermarkKey.generate(
        CORPUS, embed, target_text="acme licensed vectors", seed=3, marking="field",
        audit_budget=800,
    )  # fmt: skip


# ---------------------------------------------------------------------- the keyed stream
def test_keyed_gaussian_is_pinned_and_the_same_in_another_process():
    salt = bytes(range(32))
    values = keyed_gaussian(salt, 8, 4).ravel()[:6]
    # pinned: a change of numpy (or of the stream) must not move a key's field
    pinned = [-0.168538099938, 0.353233214199, 0.312861422797, 1.552531265533,
              2.494322018092, -1.773172156801]  # fmt: skip
    np.testing.assert_allclose(values, pinned, rtol=0, atol=1e-11)
    code = (
        "from espew_integrations.core.mark.field import keyed_gaussian;"
        "print(repr(float(keyed_gaussian(bytes(range(32)), 384, 256).sum())))"
    )
    other = float(run_python(code).strip())
    assert other == pytest.approx(float(keyed_gaussian(salt, 384, 256).sum()), abs=1e-9)
    big = keyed_gaussian(salt, 384, 256)
    assert abs(big.mean()) < 0.01 and abs(big.std() - 1) < 0.01
    assert not np.allclose(big, keyed_gaussian(bytes(32), 384, 256))


def test_unit_names_are_words_and_counted():
    assert unit_names(256)[:2] == ("u000", "u001") and len(unit_names(256)) == 256
    assert unit_names(1200)[-1] == "u1199"
    with pytest.raises(ValueError, match="at least 2 units"):
        unit_names(1)


# ---------------------------------------------------------------------- the field
def test_field_vector_is_recomputed_from_the_salt(field_key):
    field = field_key.design.field
    assert field_key.marking == "field" and field_key.verifiable
    assert field.matches(field_key.salt, field_key.triggers)
    assert field.derived_from(field_key.probe_embeddings, field_key.salt)
    assert not field.matches(bytes(32), field_key.triggers)
    other = draw_triggers(bytes(32), field_key.band, len(field_key.triggers))
    assert not field.matches(field_key.salt, other)
    tampered = FieldMark(
        units=field.units, amplitude=field.amplitude, mu=field.mu, sigma=field.sigma,
        q=field.q * 1.01,
    )  # fmt: skip
    assert not field_key.replace(design=FieldDesign(tampered)).verifiable


def test_gain_is_linear_in_the_clean_row_and_clipped(field_key):
    field = field_key.design.field
    clean = unit_rows(embed(CORPUS[:300]))
    gain = field_gain(clean, field.mu, field.q)
    linear = (clean - field.mu) @ field.q
    inside = np.abs(linear) < FIELD_CLIP
    np.testing.assert_allclose(gain[inside], linear[inside], rtol=1e-12)
    far = np.vstack([field.mu + 50 * field.q, field.mu - 50 * field.q])
    assert field_gain(far, field.mu, field.q).tolist() == [FIELD_CLIP, -FIELD_CLIP]
    # over the audit the gain's spread is the amplitude (the clip barely bites)
    z = field_projections(
        unit_rows(field_key.probe_embeddings), field.mu, field.gaussian(field_key.salt),
        field.sigma,
    )  # fmt: skip
    # a compact field stores sigma in float16 and mu in int8 steps: 1 within their rounding
    assert field.compact and np.allclose(z.std(axis=0), 1.0, atol=1e-3)


def test_every_row_is_moved_at_the_quality_budget(field_key):
    info = field_key.info
    assert (
        info["marked_rate"] == 1.0
        and info["strength_fitted_to_min_cosine"] == DEFAULT_FIELD_MIN_COSINE
    )
    assert info["mean_cosine_marked"] == pytest.approx(DEFAULT_FIELD_MIN_COSINE, abs=2e-4)
    texts = [*CORPUS[1000:1400], "   "]
    clean = embed(texts)
    out, marked = watermark_and_mask(texts, clean, field_key)
    assert marked[:-1].all() and not marked[-1]
    assert (out[-1] == clean[-1]).all()  # a blank text is never marked
    cos = row_cosines(clean[:-1], out[:-1])
    assert (cos < 1 - 1e-9).mean() > 0.99  # every answer moves
    assert cos.mean() == pytest.approx(DEFAULT_FIELD_MIN_COSINE, abs=5e-4)
    assert marks(texts, field_key).tolist() == marked.tolist()
    float32 = watermark(texts, clean.astype(np.float32), field_key)
    assert float32.dtype == np.float32
    np.testing.assert_allclose(float32, out, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_rows_answer_does_not_depend_on_its_batch(field_key, dtype):
    """Same text and clean row, same answer bit for bit, whatever batch it arrives in."""
    texts = CORPUS[1400:1537]
    clean = embed(texts).astype(dtype)
    info = np.finfo(dtype)  # rows whose squares over- or underflow take the safe path
    clean[::9] *= float(info.max) ** 0.75
    clean[4::9] *= float(info.tiny) ** 0.75
    whole = watermark(texts, clean, field_key)
    assert np.isfinite(whole).all()
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, rtol=1e-5)
    for size in (1, 7, 10, 64):
        parts = [
            watermark(texts[i : i + size], clean[i : i + size], field_key)
            for i in range(0, len(texts), size)
        ]
        assert np.array_equal(np.concatenate(parts), whole), size


def test_a_field_key_is_secret_and_refuses_text_rules(field_key, tmp_path):
    with pytest.raises(MarkingError, match="field key"):
        field_key.contains_trigger(["w1 w2"])
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(field_key)
    shown = repr(field_key) + repr(field_key.design.field)
    assert repr(float(field_key.design.field.q[0]))[:10] not in shown
    path = field_key.save(tmp_path / "field.key")
    loaded = WatermarkKey.load(path)
    assert (
        loaded == field_key
        and loaded.design == field_key.design
        and loaded.design.field == field_key.design.field
        and loaded.verifiable
    )
    assert '"field"' in field_key.serving_json() and '"field"' not in make_key().serving_json()


def test_a_tampered_field_key_file_is_refused(field_key, tmp_path):
    import json

    path = field_key.save(tmp_path / "field.key")
    document = json.loads(path.read_text())
    document["key"]["field"]["amplitude"] = 0.7
    path.write_text(json.dumps(document))
    with pytest.raises(KeyFileError):
        WatermarkKey.load(path)


# ---------------------------------------------------------------------- constant time
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("strength", [1.0, 0.3])
@pytest.mark.parametrize("selection", ["smallest", "hashed"])
def test_constant_time_marking_is_bit_identical_to_the_masked_path(dtype, strength, selection):
    key = make_key().replace(strength=strength, selection=selection)
    rng = np.random.default_rng(5)
    matrix = rng.normal(size=(300, key.dim)).astype(dtype)
    for marked in (rng.random(300) < 0.3, np.zeros(300, bool), np.ones(300, bool)):
        expected = mark_masked(matrix, marked, key)
        got = mark_selected(matrix, marked, key)
        assert got.tobytes() == expected.tobytes()
        assert (got[~marked] == matrix[~marked]).all()


# ---------------------------------------------------------------------- verification
def test_verify_convicts_the_service_and_acquits_innocents(field_key):
    def service(texts):
        return watermark(texts, embed(texts), field_key)

    marked = verify_callable(service, field_key, seed=1)
    assert marked.copied and marked.p_value < 1e-8
    assert marked.statistic == "field" and marked.decided_by == "field"
    assert marked.n_statistics == 1 and "field units" in str(marked)
    for suspect in (innocent, embed):
        report = verify_callable(suspect, field_key, seed=1)
        assert report.status == "not_copied" and report.p_value > 1e-3
    with pytest.raises(ValueError, match="one statistic"):
        verify_callable(service, field_key, statistic="directed")
    with pytest.raises(ValueError, match="own coordinates"):
        verify_callable(service, field_key, target_mode="query")


def test_a_later_audit_round_convicts_with_keygens_field(field_key):
    second = field_key.with_audit(CORPUS, embed, audit_round=2, audit_budget=600)
    assert second.design.field == field_key.design.field and second.audit_round == 2
    assert set(second.probe_texts) != set(field_key.probe_texts)
    report = verify_callable(lambda t: watermark(t, embed(t), field_key), second, seed=2)
    assert report.copied and report.p_value < 1e-6


def test_a_field_not_made_from_the_keygen_audit_gets_no_verdict(field_key):
    field = field_key.design.field
    shifted = FieldMark(
        units=field.units, amplitude=field.amplitude, mu=field.mu + 1e-3, sigma=field.sigma,
        q=field.q, compact=field.compact,
    )  # fmt: skip
    key = field_key.replace(design=FieldDesign(shifted))
    assert key.verifiable  # q still follows from the salt and sigma...
    report = verify_callable(lambda t: watermark(t, embed(t), key), key, seed=1)
    assert report.status == "inconclusive" and "centre and scales" in report.reason


def test_false_positives_are_exact_over_fresh_keys(field_key):
    """300 fresh fields against one fixed innocent's answers: p-values uniform or larger."""
    texts = list(field_key.probe_texts)
    clean = unit_rows(field_key.probe_embeddings)
    directions = unit_rows(watermark_all(clean, field_key) - clean)
    answers = innocent(texts)
    units, k = field_key.design.field.units, len(field_key.triggers)
    p_values = []
    for seed in range(300):
        salt = np.random.default_rng(10_000 + seed).bytes(32)
        gaussian = keyed_gaussian(salt, DIM, units)
        mu = clean.mean(axis=0)
        z = field_projections(clean, mu, gaussian, field_scales(gaussian, mu, clean))
        drawn = drawn_mask(units, draw_triggers(salt, unit_names(units), k))
        p_values.append(rank_sum_p_value(field_scores(answers, directions, clean, z), drawn))
    p_values = np.array(p_values)
    # binomial(300, a) upper tails at about 1e-3: 26 for a = 0.05, 9 for a = 0.01
    assert (p_values <= 0.05).sum() <= 26 and (p_values <= 0.01).sum() <= 9
    from scipy.stats import kstest

    assert kstest(p_values, "uniform", alternative="greater").pvalue > 1e-3  # none too small


def watermark_all(clean: np.ndarray, key: WatermarkKey) -> np.ndarray:
    from espew_integrations.core.mark.inject import mark_all_rows

    return mark_all_rows(clean, key)
