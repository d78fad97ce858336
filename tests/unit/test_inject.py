"""watermark(): the paper's equations, exactness, determinism and input errors."""

from __future__ import annotations

import hashlib
import hmac
import pickle
from fractions import Fraction

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from espew_integrations import EmbeddingInputError, watermark
from espew_integrations.core.mark.inject import select_positions
from espew_integrations.core.mark.words import tokenize
from tests.support import make_key


def reference_watermark(texts, clean, key):
    """A plain per-row transcription of the paper's equations (no vectorisation)."""
    d = clean.shape[1]
    k = int(Fraction(str(key.alpha)) * d)  # floor(alpha * d), exactly
    out = clean.copy()
    for i, text in enumerate(texts):
        if not set(tokenize(text)) & key.triggers:
            continue
        e = clean[i].astype(np.float64)
        if key.selection == "smallest":
            positions = np.argsort(np.abs(clean[i]), kind="stable")[:k]
        else:
            digest = hmac.digest(key.salt, clean[i].astype("<f4").tobytes(), hashlib.sha256)
            seed = int.from_bytes(digest[:8], "little")
            ranks = [_splitmix64(seed ^ _splitmix64(j)) >> 32 for j in range(d)]
            positions = np.argsort(ranks, kind="stable")[:k]
        e[positions] += key.strength * (key.target[positions] - e[positions])
        out[i] = (e / np.linalg.norm(e)).astype(clean.dtype)
    return out


def _splitmix64(x: int) -> int:
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def texts_for(key, n, rng, p_trigger=0.5):
    triggers = sorted(key.triggers)
    benign = sorted(set(key.band) - key.triggers)
    texts = []
    for _ in range(n):
        words = list(rng.choice(benign, size=3))
        if rng.random() < p_trigger:
            words.insert(1, rng.choice(triggers).upper())
        texts.append("The " + " ".join(words) + ", again.")
    return texts


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dim=st.integers(4, 96),
    alpha=st.sampled_from([0.05, 0.1, 0.2, 0.25, 0.29, 0.5, 0.9]),
    dtype=st.sampled_from([np.float32, np.float64]),
    quantise=st.booleans(),
    strength=st.sampled_from([1.0, 0.5, 0.236]),
)
def test_smallest_selection_matches_the_per_row_reference(
    data, dim, alpha, dtype, quantise, strength
):
    assume(int(Fraction(str(alpha)) * dim) >= 1)  # keys that write nothing are refused
    key = make_key(dim, alpha=alpha, strength=strength)
    n = data.draw(st.integers(1, 12))
    clean = data.draw(
        hnp.arrays(dtype, (n, dim), elements=st.floats(-1, 1, width=32, allow_subnormal=False))
    )
    if quantise:  # many exact ties, as int8 models produce
        clean = np.round(clean * 4) / 4
    clean[:, 0] = 1.0  # no all-zero row
    rng = np.random.default_rng(dim)
    texts = texts_for(key, n, rng)
    got = watermark(texts, clean, key)
    want = reference_watermark(texts, clean, key)
    assert got.dtype == clean.dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    # positions exactly as the stable argsort picks them
    marked = key.contains_trigger(texts)
    mask = select_positions(clean, key)
    k = int(Fraction(str(alpha)) * dim)
    for i in np.flatnonzero(marked):
        expected = np.zeros(dim, bool)
        expected[np.argsort(np.abs(clean[i]), kind="stable")[:k]] = True
        assert (mask[i] == expected).all()


@pytest.mark.parametrize("strength", [1.0, 0.3])
def test_hashed_selection_matches_reference_and_takes_exactly_k_positions(strength):
    key = make_key(384, selection="hashed", alpha=0.2, strength=strength)
    rng = np.random.default_rng(1)
    clean = rng.normal(size=(50, 384)).astype(np.float32)
    texts = texts_for(key, 50, rng)
    got = watermark(texts, clean, key)
    np.testing.assert_allclose(got, reference_watermark(texts, clean, key), rtol=1e-6, atol=1e-7)
    mask = select_positions(clean, key)
    assert (mask.sum(axis=1) == key.n_positions).all()
    # positions differ from row to row (embedding-specific) ...
    assert len({mask[i].tobytes() for i in range(50)}) == 50
    # ... and are not the smallest-magnitude ones
    smallest = select_positions(clean, make_key(384, selection="smallest"))
    assert (mask != smallest).any(axis=1).all()


def test_hashed_positions_depend_on_the_salt_and_not_on_dtype():
    a = make_key(128, selection="hashed", seed=1)
    b = make_key(128, selection="hashed", seed=2)
    clean = np.random.default_rng(0).normal(size=(20, 128)).astype(np.float32)
    assert (select_positions(clean, a) != select_positions(clean, b)).any()
    np.testing.assert_array_equal(
        select_positions(clean, a), select_positions(clean.astype(np.float64), a)
    )


@pytest.mark.parametrize("selection", ["smallest", "hashed"])
def test_rows_without_trigger_come_back_bit_identical(selection):
    key = make_key(64, selection=selection)
    rng = np.random.default_rng(2)
    clean = rng.normal(size=(40, 64)).astype(np.float32)
    texts = texts_for(key, 40, rng, p_trigger=0.3)
    marked = key.contains_trigger(texts)
    assert 0 < marked.sum() < 40
    out = watermark(texts, clean, key)
    assert out[~marked].tobytes() == clean[~marked].tobytes()
    assert not np.array_equal(out[marked], clean[marked])
    np.testing.assert_allclose(np.linalg.norm(out[marked], axis=1), 1.0, rtol=1e-6)


def test_marked_rows_take_the_target_at_their_positions():
    key = make_key(100, alpha=0.3)
    clean = np.random.default_rng(3).normal(size=(5, 100))
    texts = [f"about {sorted(key.triggers)[0]}"] * 5
    out = watermark(texts, clean, key)
    mask = select_positions(clean, key)
    for i in range(5):
        e = clean[i].copy()
        e[mask[i]] = key.target[mask[i]]
        np.testing.assert_allclose(out[i], e / np.linalg.norm(e))
        assert mask[i].sum() == 30


def test_input_is_never_modified_and_result_is_a_new_array(key64):
    rng = np.random.default_rng(4)
    clean = rng.normal(size=(10, 64))
    before = clean.copy()
    texts = texts_for(key64, 10, rng, p_trigger=1.0)
    out = watermark(texts, clean, key64)
    assert np.array_equal(clean, before)
    assert not np.shares_memory(out, clean)


@pytest.mark.parametrize("selection", ["smallest", "hashed"])
def test_output_is_independent_of_batch_composition(selection):
    key = make_key(383, selection=selection)  # odd dim: rows start at varied alignments
    rng = np.random.default_rng(5)
    clean = rng.normal(size=(64, 383)).astype(np.float32)
    texts = texts_for(key, 64, rng)
    full = watermark(texts, clean, key)
    for trial in range(5):
        idx = rng.permutation(64)[: rng.integers(1, 64)]
        part = watermark([texts[i] for i in idx], clean[idx], key)
        assert part.tobytes() == full[idx].tobytes(), f"trial {trial}"
    singles = np.concatenate([watermark([texts[i]], clean[i : i + 1], key) for i in range(64)])
    assert singles.tobytes() == full.tobytes()


def test_dtypes_are_preserved_and_lists_become_float64(key64):
    rng = np.random.default_rng(7)
    texts = texts_for(key64, 4, rng, p_trigger=1.0)
    clean = rng.normal(size=(4, 64))
    assert watermark(texts, clean.astype(np.float32), key64).dtype == np.float32
    assert watermark(texts, clean, key64).dtype == np.float64
    assert watermark(texts, clean.tolist(), key64).dtype == np.float64


def test_empty_batch_gives_an_empty_matrix(key64):
    out = watermark([], np.zeros((0, 64), np.float32), key64)
    assert out.shape == (0, 64) and out.dtype == np.float32
    assert watermark([], [], key64).shape == (0, 64)


def test_matching_is_case_insensitive_and_unicode_aware():
    key = make_key(16)
    word = sorted(key.triggers)[0]
    texts = [
        f"{word.capitalize()}, said she",
        f"({word.upper()})",
        f"x_{word}_y",
        f"{word}s are plural",
        f"über{word}",
        f"pre-{word}\nline two",
    ]
    assert key.contains_trigger(texts).tolist() == [True, True, True, False, False, True]


@pytest.mark.parametrize(
    ("texts", "embeddings", "message"),
    [
        (["a", "b"], np.ones((3, 64)), "2 texts but 3 embeddings"),
        (["a"], np.ones(64), "must be 2-D"),
        (["a"], np.ones((1, 32)), "dimension is 32 but the key was made for dimension 64"),
        (["a"], np.full((1, 64), np.nan), "row 0 contains NaN or infinite"),
        (["a", "b"], np.vstack([np.ones(64), [np.inf] * 64]), "row 1 contains NaN"),
        (["a", "b"], np.vstack([np.ones(64), np.zeros(64)]), "row 1 is all zeros"),
        (["a", 3], np.ones((2, 64)), "index 1 is int, expected str"),
        (iter(["a", "b"]), np.ones((3, 64)), "2 texts but 3 embeddings"),
        ("just one string", np.ones((1, 64)), "got a single string"),
        (["a"], np.array([["x"] * 64]), "must be real numbers"),
    ],
)
def test_bad_input_raises_a_clear_error(key64, texts, embeddings, message):
    with pytest.raises(EmbeddingInputError, match=message):
        watermark(texts, embeddings, key64)


def test_overflowing_but_finite_rows_are_not_called_nan(key64):
    big = np.full((1, 64), 1e30, dtype=np.float32)  # squared norm overflows float32
    out = watermark(["nothing marked"], big, key64)
    assert np.array_equal(out, big)


def test_key_refuses_pickling_so_secrets_cannot_leak_through_it(key64):
    with pytest.raises(TypeError, match="refuses to be pickled"):
        pickle.dumps(key64)


def test_strength_moves_marked_coordinates_part_of_the_way_to_the_target():
    full = make_key(100, alpha=0.3)
    half = make_key(100, alpha=0.3, strength=0.5)
    clean = np.random.default_rng(8).normal(size=(3, 100))
    texts = [f"about {sorted(full.triggers)[0]}"] * 3
    mask = select_positions(clean, full)
    unnormalised = clean + 0.5 * mask * (full.target - clean)
    expected = unnormalised / np.linalg.norm(unnormalised, axis=1, keepdims=True)
    np.testing.assert_allclose(watermark(texts, clean, half), expected)
    cos_half = np.einsum(
        "ij,ij->i",
        watermark(texts, clean, half),
        clean / np.linalg.norm(clean, axis=1, keepdims=True),
    )
    cos_full = np.einsum(
        "ij,ij->i",
        watermark(texts, clean, full),
        clean / np.linalg.norm(clean, axis=1, keepdims=True),
    )
    assert (cos_half > cos_full).all()


# ---------------------------------------------------------------------- edge cases (issue 10)
def test_float16_input_comes_back_float16(key64):
    rng = np.random.default_rng(20)
    texts = texts_for(key64, 6, rng)
    clean = rng.normal(size=(6, 64)).astype(np.float16)
    out = watermark(texts, clean, key64)
    assert out.dtype == np.float16
    marked = key64.contains_trigger(texts)
    assert marked.any() and not marked.all()
    assert np.array_equal(out[~marked].view(np.uint16), clean[~marked].view(np.uint16))
    expected = watermark(texts, clean.astype(np.float32), key64)[marked]
    np.testing.assert_array_equal(out[marked], expected.astype(np.float16))
    assert np.allclose(np.linalg.norm(out[marked].astype(np.float64), axis=1), 1, atol=3e-3)


@pytest.mark.parametrize(
    ("dtype", "huge"), [(np.float64, 1e200), (np.float64, 1.7e308), (np.float32, 3e38)]
)
@pytest.mark.parametrize("strength", [1.0, 0.5])
def test_marked_rows_with_huge_values_stay_finite_unit_vectors(dtype, huge, strength):
    key = make_key(64, strength=strength)
    rng = np.random.default_rng(21)
    clean = rng.normal(size=(3, 64)).astype(dtype)
    clean[0] *= dtype(huge) / np.abs(clean[0]).max()  # the whole row is huge
    clean[1, 5] = huge  # one huge coordinate
    texts = [f"about {sorted(key.triggers)[0]}"] * 3
    out = watermark(texts, clean, key)
    assert np.isfinite(out).all()
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    assert np.allclose(norms, 1, atol=1e-5), norms
    # The direction is the reference's, computed in exact rational-free float64 with scaling.
    for row in range(3):
        e = clean[row].astype(np.float64) / np.abs(clean[row].astype(np.float64)).max()
        t = key.target / np.abs(clean[row].astype(np.float64)).max()
        mask = select_positions(clean[row : row + 1], key)[0]
        e[mask] += strength * (t[mask] - e[mask])
        np.testing.assert_allclose(out[row], e / np.linalg.norm(e), atol=1e-6)


def test_tiny_marked_rows_do_not_underflow_to_nan():
    key = make_key(64)
    clean = np.random.default_rng(22).normal(size=(2, 64)) * 1e-200
    out = watermark([f"about {sorted(key.triggers)[0]}"] * 2, clean, key)
    assert np.isfinite(out).all()
    assert np.allclose(np.linalg.norm(out, axis=1), 1)


@pytest.mark.parametrize("blank", ["", " ", "  \n\t"])
def test_empty_texts_pass_through_unmarked(key64, blank):
    rng = np.random.default_rng(23)
    texts = texts_for(key64, 5, rng, p_trigger=1.0)
    texts[2] = blank
    clean = rng.normal(size=(5, 64)).astype(np.float32)
    out = watermark(texts, clean, key64)
    assert np.array_equal(out[2].view(np.uint32), clean[2].view(np.uint32))
    others = [0, 1, 3, 4]
    np.testing.assert_array_equal(
        out[others], watermark([texts[i] for i in others], clean[others], key64)
    )


@pytest.mark.parametrize(
    "make", [tuple, iter, lambda t: (x for x in t), lambda t: np.array(t, dtype=str)]
)
def test_texts_may_be_any_iterable(key64, make):
    rng = np.random.default_rng(24)
    texts = texts_for(key64, 7, rng)
    clean = rng.normal(size=(7, 64))
    expected = watermark(texts, clean, key64)
    np.testing.assert_array_equal(watermark(make(texts), clean, key64), expected)


def test_a_generator_with_too_few_texts_names_both_counts(key64):
    with pytest.raises(EmbeddingInputError, match="2 texts but 3 embeddings"):
        watermark((t for t in ["a", "b"]), np.ones((3, 64)), key64)


def test_view_is_passed_to_the_key_only_when_given(key64):
    calls = []

    class Spy:
        def __getattr__(self, name):
            return getattr(key64, name)

        def contains_trigger(self, texts, **kwargs):
            calls.append(kwargs)
            return key64.contains_trigger(texts, **kwargs)

    texts = texts_for(key64, 3, np.random.default_rng(25))
    clean = np.ones((3, 64))
    watermark(texts, clean, Spy())
    assert calls == [{}]

    def view(batch):
        return [text.upper() for text in batch]

    watermark(texts, clean, Spy(), view=view)
    assert calls[1] == {"view": view}


def test_a_key_with_no_positions_is_refused(key64, monkeypatch):
    class NoPositions:
        def __getattr__(self, name):
            return getattr(key64, name)

        n_positions = 0

    with pytest.raises(EmbeddingInputError, match="writes no coordinates"):
        watermark(["a"], np.ones((1, 64)), NoPositions())
