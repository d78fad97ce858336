"""Removal attacks a stealer applies to the service's answers before training a copy.

Each attack maps the embeddings the stealer collected to the targets it
trains on. Named by a short spec string (``"cse:50"``, ``"dropout:0.5"``,
``"quant4"``, ``"permutation"``, ``"saa:10"``, ``"none"``), see :func:`parse_attack`.

CSE (Clustering, Selection, Elimination; Shetty et al. 2024) follows
anchors.md step by step; it samples pairs inside clusters when enumerating
all of them would be too many, so it runs on 100k texts in bounded memory.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from espew_integrations.core.ground.rows import unit_rows

from ._optional import require

__all__ = [
    "ATTACKS",
    "PAPER_DIM",
    "AttackResult",
    "apply_attack",
    "cse",
    "cse_suspicious",
    "dropout",
    "eliminate",
    "parse_attack",
    "permute",
    "quantize",
    "saa",
    "scaled_k",
]

ATTACKS = ("none", "cse", "dropout", "quant4", "permutation", "saa")
#: The paper's victim (text-embedding-ada-002) has 1536 dimensions; CSE's K
#: values were chosen for it, so K >= d is scaled by d / 1536 (K = 1000 -> 250 at d = 384).
PAPER_DIM = 1536


@dataclasses.dataclass(frozen=True)
class AttackResult:
    """What the stealer trains on, and how the defender must then verify."""

    embeddings: np.ndarray
    #: "query" when the attack scrambles coordinates (verify against the
    #: suspect's own embedding of the target text), else "key".
    target_mode: str
    info: dict[str, Any]


def parse_attack(spec: str) -> tuple[str, float | None]:
    """``"cse:50"`` -> ``("cse", 50.0)``; ``"quant4"`` -> ``("quant4", None)``.

    >>> parse_attack("dropout:0.3")
    ('dropout', 0.3)
    """
    name, _, value = str(spec).partition(":")
    name = name.strip().lower()
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {spec!r}; choose from {ATTACKS} (e.g. 'cse:50')")
    if not value:
        if name in ("cse", "dropout"):
            raise ValueError(f"attack {name!r} needs a parameter, e.g. 'cse:50' or 'dropout:0.5'")
        return name, None
    try:
        return name, float(value)
    except ValueError:
        raise ValueError(f"attack parameter in {spec!r} is not a number") from None


def apply_attack(
    spec: str,
    texts: Sequence[str],
    embeddings: np.ndarray,
    *,
    standard: np.ndarray | None = None,
    seed: int = 0,
    suspicious: np.ndarray | None = None,
) -> AttackResult:
    """Run the attack named by ``spec`` on the service's answers ``embeddings``.

    ``standard`` (the attacker's own model's embeddings of ``texts``) is needed by CSE;
    ``suspicious`` reuses CSE's selection (steps 1-3, which do not depend on K).

    >>> out = apply_attack("cse:50", texts, answers, standard=own)  # doctest: +SKIP
    """
    name, value = parse_attack(spec)
    x = np.asarray(embeddings, dtype=np.float64)
    rng = np.random.default_rng(seed)
    if name == "none":
        return AttackResult(x.copy(), "key", {})
    if name == "cse":
        if standard is None:
            raise ValueError("CSE needs the attacker's standard-model embeddings")
        purified, info = cse(x, standard, k=int(value), seed=seed, suspicious=suspicious)
        return AttackResult(purified, "key", info)
    if name == "dropout":
        return AttackResult(dropout(x, value, rng), "key", {"rate": value})
    if name == "quant4":
        return AttackResult(quantize(x, bits=int(value or 4)), "key", {"bits": int(value or 4)})
    if name == "permutation":
        return AttackResult(permute(x, rng), "query", {})
    neighbours = int(value if value is not None else 10)
    out, zeroed = saa(x, neighbours=neighbours)
    return AttackResult(out, "key", {"neighbours": neighbours, "zeroed_fraction": zeroed})


# ---------------------------------------------------------------------- simple attacks
def dropout(x: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Inverted dropout on every coordinate of the training targets, one fixed mask.

    >>> dropout(np.ones((1, 4)), 0.5, np.random.default_rng(0)).tolist()
    [[2.0, 0.0, 0.0, 2.0]]
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    keep = rng.random(x.shape) >= rate
    return np.where(keep, x / (1.0 - rate), 0.0)


def quantize(x: np.ndarray, bits: int = 4) -> np.ndarray:
    """Symmetric per-row quantisation to ``bits`` bits (absmax scale), de-quantised.

    >>> quantize(np.array([[0.7, -0.1, 0.05]]), bits=4).round(3).tolist()
    [[0.7, -0.1, 0.1]]
    """
    levels = 2 ** (bits - 1) - 1  # 7 for 4 bits: values -7..7 (and -8 unused)
    scale = np.abs(x).max(axis=1, keepdims=True) / levels
    scale = np.where(scale == 0, 1.0, scale)
    return np.clip(np.rint(x / scale), -levels - 1, levels) * scale


def permute(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One fixed permutation of the dimensions, applied to every row."""
    return x[:, rng.permutation(x.shape[1])]


def saa(
    x: np.ndarray, *, neighbours: int = 10, tolerance: float = 1e-4, spike_ratio: float = 5.0
) -> tuple[np.ndarray, float]:
    """Statistical analysis attack (paper appendix, Alg. "SAA"), vectorised over dimensions.

    Per dimension: bin the values with step ``tolerance``; the most populated
    bin is always zeroed; when it is a spike (``spike_ratio`` times the mean
    count of the 2*50 bins around it), its ``neighbours`` bins on each side are
    zeroed too. Rows are then renormalised. Returns ``(attacked, fraction of
    values zeroed)``.
    """
    _n, d = x.shape
    bins = np.floor(x / tolerance).astype(np.int64)
    low = bins.min(axis=0)
    width = int((bins.max(axis=0) - low).max()) + 1
    flat = (bins - low) + np.arange(d) * width
    counts = np.bincount(flat.ravel(), minlength=d * width).reshape(d, width)
    mode = counts.argmax(axis=1)
    peak = counts[np.arange(d), mode]
    window = 50
    padded = np.pad(counts, ((0, 0), (window, window)))
    cumulative = np.concatenate([np.zeros((d, 1)), np.cumsum(padded, axis=1)], axis=1)
    rows = np.arange(d)
    around = (cumulative[rows, mode + 2 * window + 1] - cumulative[rows, mode] - peak) / (
        2 * window
    )
    spiked = peak >= spike_ratio * np.maximum(around, 1.0 / window)
    half = np.where(spiked, neighbours, 0)
    lower = (mode - half + low) * tolerance
    upper = (mode + half + 1 + low) * tolerance
    hit = (x >= lower[None, :]) & (x < upper[None, :])
    out = np.where(hit, 0.0, x)
    return unit_rows(out), float(hit.mean())


# ---------------------------------------------------------------------- CSE
def scaled_k(k: int, dim: int, paper_dim: int = PAPER_DIM) -> int:
    """K as used at dimension ``dim``: unchanged below ``dim``, else scaled by dim/paper_dim.

    >>> scaled_k(50, 384), scaled_k(1000, 384)
    (50, 250)
    """
    if k < 1:
        raise ValueError(f"CSE needs K >= 1, got {k}")
    if k < dim:
        return k
    return max(1, min(dim - 1, math.floor(k * dim / paper_dim)))


def _cluster_pairs(
    members: np.ndarray, n_pairs: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """All pairs i < j of ``members`` (n_pairs None) or ``n_pairs`` uniform random ones."""
    m = members.size
    if n_pairs is None:
        i, j = np.triu_indices(m, k=1)
    else:
        i = rng.integers(0, m, size=n_pairs)
        j = rng.integers(0, m - 1, size=n_pairs)
        j = j + (j >= i)  # uniform over j != i
        i, j = np.minimum(i, j), np.maximum(i, j)
    return members[i], members[j]


def _pair_cosines(unit: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    out = np.empty(left.size)
    step = 1 << 18
    for s in range(0, left.size, step):  # chunks: bounded memory on 100k texts
        out[s : s + step] = np.einsum(
            "ij,ij->i", unit[left[s : s + step]], unit[right[s : s + step]]
        )
    return out


def _cluster_pair_cosines(
    victim: np.ndarray,
    standard: np.ndarray,
    labels: np.ndarray,
    n_clusters: int,
    *,
    max_pairs: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """Pairs inside each cluster and their cosines under both models (sampled past max_pairs)."""
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(labels == c) for c in range(n_clusters)]
    totals = np.array([g.size * (g.size - 1) // 2 for g in groups], dtype=np.float64)
    sampled = bool(totals.sum() > max_pairs)
    victim_unit, standard_unit = unit_rows(victim), unit_rows(standard)
    lefts, rights, victim_sims, standard_sims = [], [], [], []
    for group, total in zip(groups, totals, strict=False):
        if total == 0:
            continue
        if sampled:
            count = max(1, round(max_pairs * total / totals.sum()))
            left, right = _cluster_pairs(group, count, rng)
            victim_sims.append(_pair_cosines(victim_unit, left, right))
            standard_sims.append(_pair_cosines(standard_unit, left, right))
        else:  # every pair: one Gram matrix per cluster (BLAS), upper triangle
            upper = np.triu_indices(group.size, k=1)
            left, right = group[upper[0]], group[upper[1]]
            for unit, sims in ((victim_unit, victim_sims), (standard_unit, standard_sims)):
                block = unit[group]
                sims.append((block @ block.T)[upper])
        lefts.append(left)
        rights.append(right)
    return (
        np.concatenate(lefts),
        np.concatenate(rights),
        np.concatenate(victim_sims),
        np.concatenate(standard_sims),
        sampled,
    )


def cse_suspicious(
    victim: np.ndarray,
    standard: np.ndarray,
    *,
    n_clusters: int = 20,
    keep_rate: float = 0.025,
    max_pairs: int = 5_000_000,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, Any]]:
    """CSE steps 1-3: indices of the suspicious embeddings.

    Pairs inside each k-means cluster are scored by
    percentile_rank(victim cos) - percentile_rank(standard cos); the top
    ``keep_rate * N`` pairs are kept. When the clusters hold more than
    ``max_pairs`` pairs in all, each cluster gets a uniform sample in
    proportion to its pair count (same number of kept pairs).
    """
    from scipy.stats import rankdata

    require("sklearn", "lab", "the clustered pair sampling")
    from sklearn.cluster import KMeans

    n = victim.shape[0]
    if standard.shape[0] != n:
        raise ValueError(f"standard embeddings have {standard.shape[0]} rows, expected {n}")
    n_clusters = max(1, min(n_clusters, n // 2))
    labels = KMeans(n_clusters=n_clusters, n_init=3, random_state=seed).fit_predict(victim)
    left, right, victim_sim, standard_sim, sampled = _cluster_pair_cosines(
        victim, standard, labels, n_clusters, max_pairs=max_pairs, seed=seed
    )
    diff = rankdata(victim_sim) / left.size - rankdata(standard_sim) / left.size
    n_keep = min(left.size, max(1, math.ceil(keep_rate * n)))
    top = np.argpartition(-diff, n_keep - 1)[:n_keep]
    suspicious = np.unique(np.concatenate([left[top], right[top]]))
    info = {
        "n_clusters": n_clusters,
        "n_pairs": int(left.size),
        "pairs_sampled": bool(sampled),
        "n_kept_pairs": int(n_keep),
        "n_suspicious": int(suspicious.size),
    }
    return suspicious, info


def eliminate(x: np.ndarray, components: np.ndarray) -> np.ndarray:
    """CSE step 5: remove each component in turn, renormalising after each.

    The components are orthonormal (right singular vectors), so removing them
    one by one with a renormalisation after each equals removing their span at
    once and renormalising once; this does the latter, in one matrix product.
    """
    projected = x - (x @ components.T) @ components
    return unit_rows(projected)


def cse(
    x: np.ndarray,
    standard: np.ndarray,
    *,
    k: int,
    n_clusters: int = 20,
    keep_rate: float = 0.025,
    max_pairs: int = 5_000_000,
    seed: int = 0,
    suspicious: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The whole CSE attack: returns ``(purified embeddings, info)``.

    Pass ``suspicious`` (from :func:`cse_suspicious` on the same ``x``) to run
    several K without repeating the selection.

    >>> purified, info = cse(answers, own_model_embeddings, k=50)  # doctest: +SKIP
    """
    x = np.asarray(x, dtype=np.float64)
    info: dict[str, Any] = {}
    if suspicious is None:
        suspicious, info = cse_suspicious(
            x,
            np.asarray(standard, dtype=np.float64),
            n_clusters=n_clusters,
            keep_rate=keep_rate,
            max_pairs=max_pairs,
            seed=seed,
        )
    info["n_suspicious"] = int(suspicious.size)
    k_used = min(scaled_k(k, x.shape[1]), suspicious.size)
    # Uncentred truncated SVD of the suspicious embeddings: top-K right singular vectors.
    _, _, vt = np.linalg.svd(x[suspicious], full_matrices=False)
    info.update(k=int(k), k_used=int(k_used))
    return eliminate(x, vt[:k_used]), info
