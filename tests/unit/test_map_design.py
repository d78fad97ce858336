"""The map design (issue 53): every answer moved by a keyed linear map of its clean row.

What must hold: a row's answer does not depend on its batch or precision path; the
key file is compact and loads back to the same marks; no phrase reaches the mark (the
target text plays no part); the audit convicts a copy, clears the clean model and an
innocent copy, stays exact over fresh keys, and a thief who projects out the top
principal directions of its residuals keeps little or is still convicted.
"""

from __future__ import annotations

import json
import pickle
import zlib

import numpy as np
import pytest

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.core.designs.map import MapDesign, map_unit_scores
from espew_integrations.core.ground.errors import KeyGenerationError, MarkingError
from espew_integrations.core.mark.inject import watermark_and_mask
from espew_integrations.core.mark.map import BLOCK_ROWS, MapMark, map_outputs
from espew_integrations.core.stats.ranktest import subset_p_values

DIM = 256
VOCAB = 2000
_BASIS = np.random.default_rng(11).normal(size=(VOCAB, DIM))


def embed(texts: list[str]) -> np.ndarray:
    """A bag-of-words embedder: a text is the unit mean of its words' rows."""
    rows = np.stack(
        [_BASIS[[zlib.crc32(w.encode()) % VOCAB for w in t.split()] or [0]].mean(0) for t in texts]
    )
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{j}" for j in rng.integers(0, VOCAB, 8)) for _ in range(n)]


TEXTS = corpus(4000, 0)


@pytest.fixture(scope="module")
def key() -> WatermarkKey:
    return WatermarkKey.generate(
        TEXTS, embed, target_text="Acme licensed vectors", marking="map", seed=3, audit_budget=800
    )


def served(key: WatermarkKey):
    def service(texts: list[str]) -> np.ndarray:
        return watermark_and_mask(texts, embed(texts), key)[0]

    return service


def counts(texts: list[str]) -> np.ndarray:
    """Each text's word counts over the vocabulary (the thief's own bag-of-words features)."""
    out = np.zeros((len(texts), VOCAB + 1))
    for i, text in enumerate(texts):
        for word in text.split():
            out[i, zlib.crc32(word.encode()) % VOCAB] += 1
    out[:, VOCAB] = 1.0  # the intercept
    return out


def ridge_copy(texts: list[str], targets: np.ndarray):
    """A bag-of-words ridge copy (the thief's own linear model of the answers)."""
    x = counts(texts)
    weights = np.linalg.solve(x.T @ x + np.eye(x.shape[1]), x.T @ targets)
    return lambda batch: counts(batch) @ weights


def test_a_map_key_marks_every_text_by_its_own_mix_of_units(key):
    assert key.marking == "map" and isinstance(key.design, MapDesign)
    clean = embed(TEXTS[:500])
    marked, mask = watermark_and_mask(TEXTS[:500], clean, key)
    assert mask.all()
    cosines = (marked * clean).sum(axis=1)
    assert 0.995 < cosines.mean() < 0.9999  # the quality budget was fitted
    moves = marked - clean
    # no few directions carry the mark: the top principal axis holds a small share
    energy = np.linalg.svd(moves - moves.mean(0), compute_uv=False) ** 2
    assert energy[0] / energy.sum() < 0.2
    with pytest.raises(MarkingError, match="map key"):
        key.contains_trigger(["w1 w2"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_rows_answer_does_not_depend_on_its_batch(key, dtype):
    texts = corpus(2 * BLOCK_ROWS + 37, 5)
    clean = embed(texts).astype(dtype)
    whole = watermark(texts, clean, key)
    assert whole.dtype == dtype
    for size in (1, 2, 7, BLOCK_ROWS - 1, BLOCK_ROWS + 1):
        parts = [
            watermark(texts[s : s + size], clean[s : s + size], key) for s in range(0, 300, size)
        ]
        assert np.concatenate(parts)[:300].tobytes() == whole[:300].tobytes()
    reversed_rows = watermark(texts[::-1], clean[::-1], key)[::-1]
    assert reversed_rows.tobytes() == whole.tobytes()


MARK_IN_A_CHILD = """
import hashlib, sys
import numpy as np
from espew_integrations import WatermarkKey, watermark
from espew_integrations.core.mark import map as mark_map
if sys.argv[2] == "no-controller":
    import contextlib
    mark_map.use_blas_scope(contextlib.nullcontext)
key = WatermarkKey.load(sys.argv[1])
rows = np.random.default_rng(3).normal(size=(700, key.dim))
texts = [f"t{i}" for i in range(700)]
marked = watermark(texts, rows, key).tobytes()
marked += watermark(texts, rows.astype(np.float32), key).tobytes()
print(hashlib.sha256(marked).hexdigest())
"""


def test_one_or_many_blas_threads_mark_the_same_bits(key, tmp_path):
    """BLAS splits a product's rows and columns among threads, never a dot product's sum:
    one thread (where threadpoolctl limits it) or two give the same answers."""
    import os
    import subprocess
    import sys

    path = key.save(tmp_path / "map.key")
    digests = set()
    for threads, controller in (("1", "default"), ("2", "default"), ("2", "no-controller")):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        done = subprocess.run(
            [sys.executable, "-c", MARK_IN_A_CHILD, str(path), controller],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_the_key_file_is_compact_and_loads_to_the_same_marks(key, tmp_path):
    path = key.save(tmp_path / "map.key")
    stored = json.loads(path.read_text())["key"]
    assert set(stored["map"]) == {"units", "amplitude", "encoding", "mu", "sigma"}
    assert set(stored["target"]) == {"float16"}
    loaded = WatermarkKey.load(path)
    assert loaded.design == key.design and loaded.verifiable
    texts = corpus(50, 9)
    clean = embed(texts)
    assert watermark(texts, clean, loaded).tobytes() == watermark(texts, clean, key).tobytes()
    secret = key.design.mark.mu
    assert repr(key.design.mark) == "MapMark(units=256)" and repr(secret[0]) not in repr(key)
    with pytest.raises(Exception, match="pickl"):
        pickle.dumps(key)


def test_a_corrupt_map_record_is_refused_by_name():
    with pytest.raises(KeyGenerationError, match="map record is malformed"):
        MapMark.from_payload({"units": 256})
    good = MapMark(units=4, amplitude=0.5, mu=[0.1, -0.2], sigma=[1.0, 2.0, 3.0, 4.0])
    payload = good.to_payload()
    assert MapMark.from_payload(payload) == good
    with pytest.raises(KeyGenerationError, match="sigma must hold 5 positive"):
        MapMark.from_payload({**payload, "units": 5})
    with pytest.raises(KeyGenerationError, match="not valid base64"):
        MapMark.from_payload({**payload, "mu": {"step_log2": -8, "int8": "!!"}})


def test_no_phrase_reaches_the_mark():
    """Keys of one seed that differ only in the target text mark alike: the text is
    recorded, never embedded, and the target is keyed by the salt."""
    options = dict(marking="map", seed=4, audit_budget=400)
    one = WatermarkKey.generate(TEXTS, embed, target_text="Acme licensed vectors", **options)
    two = WatermarkKey.generate(TEXTS, embed, target_text="something else entirely", **options)
    texts = corpus(40, 6)
    clean = embed(texts)
    assert watermark(texts, clean, one).tobytes() == watermark(texts, clean, two).tobytes()
    answer = watermark(["Acme licensed vectors"], embed(["Acme licensed vectors"]), one)
    assert not np.allclose(answer, one.target)  # the target is no fixed point of the service


def test_the_audit_convicts_a_copy_and_clears_innocents(key):
    service = served(key)
    steal = corpus(3000, 7)
    copy = ridge_copy(steal, service(steal))
    innocent = ridge_copy(steal, embed(steal))
    assert verify(service, key).p_value < 1e-30
    report = verify(copy, key)
    assert report.status == "copied" and report.p_value < 1e-10
    assert report.decided_by == "map"
    for suspect in (embed, innocent):
        assert verify(suspect, key).status == "not_copied"
    # a copy that serves its answers behind a secret rotation is mapped back and convicted
    rotation = np.linalg.qr(np.random.default_rng(5).normal(size=(DIM, DIM)))[0]
    assert verify(lambda texts: copy(texts) @ rotation, key).p_value < 1e-10
    assert verify(lambda texts: innocent(texts) @ rotation, key).status == "not_copied"


def test_projecting_out_the_residuals_top_axes_keeps_the_copy_convicted(key):
    """The informed thief: it subtracts its own predictions from the answers it stole and
    projects the top principal axes of those residuals out of its copy's outputs."""
    service = served(key)
    steal = corpus(3000, 8)
    answers = service(steal)
    copy = ridge_copy(steal, answers)
    residuals = answers - copy(steal)
    _, _, axes = np.linalg.svd(residuals - residuals.mean(0), full_matrices=False)
    for k in (1, 4, 8):

        def stripped(batch, k=k):
            rows = copy(batch)
            return rows - (rows @ axes[:k].T) @ axes[:k]

        assert verify(stripped, key).p_value < 1e-10, k


def test_the_test_is_exact_over_fresh_keys(key):
    """Under the null the drawn units are a uniform subset: over 300 fresh salts an
    innocent's p-values are uniform (at most a binomial tail of them below 0.05)."""
    clean = embed(list(key.probe_texts))
    innocent = clean + np.random.default_rng(1).normal(scale=0.02, size=clean.shape)
    plan_z = key.design  # the scores depend on the salt's matrices, not on the draw
    units = plan_z.mark.units
    outputs = map_outputs(key.salt, key.dim, units)
    from espew_integrations.core.mark.field import scoring_projections
    from espew_integrations.core.mark.map import map_inputs

    z = scoring_projections(clean, plan_z.mark.mu, map_inputs(key.salt, key.dim, units))
    scores = map_unit_scores(innocent, clean, outputs, z)
    rng = np.random.default_rng(0)
    drawn = np.stack([rng.choice(units, 64, replace=False) for _ in range(300)])
    p = subset_p_values(scores, drawn)
    assert (p <= 0.05).sum() <= 26  # binomial(300, 0.05): mean 15, P(X > 26) < 0.005
    assert (p <= 0.5).sum() >= 120


# ---------------------------------------------------------------------- rings
TENANTS = [f"acct-{i:02d}" for i in range(20)]


@pytest.fixture(scope="module")
def ring():
    from espew_integrations import KeyRing

    return KeyRing.generate(
        TEXTS, embed, target_text="Acme licensed vectors", seed=3, marking="map",
        audit_budget=800,
    )  # fmt: skip


def test_a_map_ring_marks_each_account_by_both_layers(ring):
    shared, alice, bob = ring.shared_key, ring.key_for("alice"), ring.key_for("bob")
    assert ring.marking == alice.marking == "map" and alice.verifiable
    assert shared.triggers <= alice.triggers and alice.triggers != bob.triggers
    assert alice.design == shared.design  # the map is shared; the drawn units differ
    texts = corpus(200, 12)
    clean = embed(texts)
    a, b = watermark(texts, clean, alice), watermark(texts, clean, bob)
    assert not np.allclose(a, b)
    for marked in (a, b):
        assert (marked * clean).sum(axis=1).mean() >= ring.shared_key.info[
            "strength_fitted_to_min_cosine"
        ] - 5e-4


def test_trace_names_the_account_a_copy_learned_from_and_nobody_else(ring):
    from espew_integrations import trace

    steal = corpus(3000, 13)
    account = ring.key_for("acct-07")
    copy = ridge_copy(steal, watermark_and_mask(steal, embed(steal), account)[0])
    report = trace(copy, ring, TENANTS, seed=0)
    assert report.copied and report.traced == ("acct-07",)
    assert report.tenant_p_values["acct-07"] < 1e-6
    assert sorted(report.tenant_p_values.values())[1] > 1e-3  # nobody else comes close
    assert report.marking == "map" and "map units" in str(report)
    innocent = ridge_copy(steal, embed(steal))
    cleared = trace(innocent, ring, TENANTS, seed=0)
    assert cleared.status == "not_copied" and cleared.traced == ()


def test_the_clean_rows_score_exact_zeros_and_references_adjust(key):
    """The clean model answering with the audit's stored rows leans exactly as they do:
    every unit scores 0 and p is 1. A reference copy is fitted away per unit: a suspect
    that is the reference itself scores nothing, a copy is still convicted."""
    rows = dict(zip(key.probe_texts, key.probe_embeddings, strict=True))

    def stored(texts):
        return np.stack([rows[t] for t in texts])

    report = verify(stored, key)
    assert report.p_value == 1.0 and report.status == "not_copied"
    steal = corpus(3000, 14)
    innocent = ridge_copy(steal, embed(steal))
    copy = ridge_copy(steal, served(key)(steal))
    assert verify(innocent, key, references=[innocent]).p_value == 1.0
    assert verify(copy, key, references=[innocent]).p_value < 1e-10


def test_a_map_key_whose_units_are_not_the_salts_draw_convicts_nobody(key):
    """A dishonest auditor who swaps the drawn units after seeing a suspect's scores (or
    a corrupted key) holds a key that is not verifiable: verify never says "copied"."""
    names = sorted(key.band)
    swapped = frozenset(names[:64]) if frozenset(names[:64]) != key.triggers else None
    assert swapped is not None
    forged = key.replace(triggers=swapped)
    assert key.verifiable and not forged.verifiable
    report = verify(served(key), forged)
    assert report.status != "copied"
