"""The removal attacks: CSE as anchors.md describes it, and the simple ones."""

from __future__ import annotations

import numpy as np
import pytest

from espew_lab.attacks import (
    _cluster_pairs,
    apply_attack,
    cse,
    cse_suspicious,
    dropout,
    eliminate,
    parse_attack,
    permute,
    quantize,
    saa,
    scaled_k,
)


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def marked_world():
    """400 'texts': the standard model sees topics; the victim adds one shared mark to 60 rows."""
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(8, 32))
    labels = rng.integers(0, 8, size=400)
    standard = _unit(topics[labels] + 0.6 * rng.normal(size=(400, 32)))
    mark = _unit(rng.normal(size=(1, 32)))[0]
    victim = standard.copy()
    marked = np.zeros(400, dtype=bool)
    marked[rng.choice(400, size=60, replace=False)] = True
    victim[marked] = _unit(victim[marked] + 1.5 * mark)
    return victim, standard, marked, mark


def test_parse_attack_reads_name_and_parameter():
    assert parse_attack("cse:50") == ("cse", 50.0)
    assert parse_attack("QUANT4") == ("quant4", None)
    with pytest.raises(ValueError, match="unknown attack"):
        parse_attack("paraphrase")
    with pytest.raises(ValueError, match="needs a parameter"):
        parse_attack("cse")


def test_k_is_scaled_only_when_it_reaches_the_dimension():
    assert scaled_k(1, 384) == 1
    assert scaled_k(100, 384) == 100
    assert scaled_k(1000, 384) == 250  # 1000 * 384 / 1536, the paper's K/d
    assert scaled_k(1000, 1536) == 1000
    assert scaled_k(1000, 2048) == 1000


def test_elimination_equals_the_paper_loop_with_renormalisation():
    rng = np.random.default_rng(1)
    x = _unit(rng.normal(size=(50, 16)))
    _, _, vt = np.linalg.svd(rng.normal(size=(30, 16)), full_matrices=False)
    components = vt[:5]
    expected = x.copy()
    for v in components:  # anchors.md step 5, one component at a time
        expected = expected - np.outer(expected @ v / (v @ v), v)
        expected = _unit(expected)
    np.testing.assert_allclose(eliminate(x, components), expected, atol=1e-12)


def test_cse_finds_the_marked_rows_and_removes_the_shared_direction(marked_world):
    victim, standard, marked, mark = marked_world
    suspicious, info = cse_suspicious(victim, standard, n_clusters=4, seed=0)
    assert not info["pairs_sampled"]
    assert info["n_kept_pairs"] == 10  # ceil(0.025 * 400)
    # Pairs whose victim similarity outruns their standard similarity are marked pairs.
    assert marked[suspicious].mean() > 0.8 > marked.mean()
    purified, info = cse(victim, standard, k=1, n_clusters=4, seed=0)
    assert info["k_used"] == 1
    before = np.abs(victim[marked] @ mark).mean()
    after = np.abs(purified[marked] @ mark).mean()
    assert after < 0.5 * before
    np.testing.assert_allclose(np.linalg.norm(purified, axis=1), 1.0)


def test_cse_samples_pairs_when_there_are_too_many(marked_world):
    victim, standard, marked, _ = marked_world
    suspicious, info = cse_suspicious(victim, standard, n_clusters=4, max_pairs=3000, seed=0)
    assert info["pairs_sampled"]
    assert 2900 <= info["n_pairs"] <= 3100
    assert marked[suspicious].mean() > 0.6


def test_sampled_pairs_are_distinct_members_in_order():
    members = np.array([3, 8, 9, 20])
    left, right = _cluster_pairs(members, 500, np.random.default_rng(0))
    assert (left < right).all()
    assert set(left) | set(right) <= set(members)
    all_left, _all_right = _cluster_pairs(members, None, np.random.default_rng(0))
    assert len(all_left) == 6


def test_dropout_zeroes_about_the_rate_and_rescales_the_rest():
    x = np.ones((200, 100))
    out = dropout(x, 0.3, np.random.default_rng(0))
    assert abs((out == 0).mean() - 0.3) < 0.02
    assert np.allclose(out[out != 0], 1 / 0.7)
    with pytest.raises(ValueError):
        dropout(x, 1.0, np.random.default_rng(0))


def test_four_bit_quantisation_keeps_at_most_sixteen_levels_per_row():
    x = np.random.default_rng(2).normal(size=(20, 64))
    q = quantize(x, bits=4)
    for row, qrow in zip(x, q, strict=False):
        assert np.unique(qrow).size <= 16
        assert np.abs(row - qrow).max() <= np.abs(row).max() / 7 / 2 + 1e-12


def test_permutation_is_one_fixed_shuffle_of_dimensions():
    x = np.random.default_rng(3).normal(size=(10, 12))
    out = permute(x, np.random.default_rng(4))
    perm = [int(np.flatnonzero(np.isclose(x[0], v))[0]) for v in out[0]]
    np.testing.assert_array_equal(out, x[:, perm])
    assert apply_attack("permutation", ["t"] * 10, x, seed=1).target_mode == "query"


def test_saa_zeroes_a_spike_and_its_neighbours():
    rng = np.random.default_rng(5)
    x = rng.normal(scale=0.05, size=(2000, 8))
    x[:300, 2] = 0.0421  # a watermark-like pile-up of one value in dimension 2
    x[300:310, 2] = 0.0421 + 5e-4  # within 10 bins of the spike
    out, zeroed = saa(x, neighbours=10)
    assert (out[:310, 2] == 0).all()
    assert (out[310:, 2] != 0).mean() > 0.95  # elsewhere only the mode bin goes
    assert 0 < zeroed < 0.05
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0)


def test_apply_attack_runs_cse_only_with_a_standard_model(marked_world):
    victim, standard, _, _ = marked_world
    texts = ["t"] * len(victim)
    with pytest.raises(ValueError, match="standard"):
        apply_attack("cse:1", texts, victim)
    out = apply_attack("cse:1", texts, victim, standard=standard, seed=0)
    assert out.target_mode == "key" and out.info["k_used"] == 1
    assert out.embeddings.shape == victim.shape
