"""The reach benchmark's null study of a field key: fresh salts against fixed innocents.

For each fresh salt (a new field: its Gaussian matrix and its drawn units) every
innocent's answers to an audit are scored as ``verify`` scores a field key, and the
drawn units ranked by the exact rank test (times the audit's round, as ``verify``
multiplies a round-k audit's p by k). The scoring is algebra on ``verify``'s own steps,
so that 10^4 keys take minutes on 2 cores instead of hours:

- a unit's score is linear in its projection column (``field_scores`` centres the
  suspect's leans and multiplies them into the column), so ``field_scores`` over the
  whitened clean rows gives each innocent one d-vector ``b`` up front, and a salt's
  raw scores are ``b @ G`` for its Gaussian matrix ``G``;
- ``verify`` scales each column to unit standard deviation over the audit rows; that
  deviation is ``sqrt(g_j' S g_j)`` for ``S`` the whitened rows' covariance.

The first ``check`` salts are also scored by ``bench_field_null.study`` (the plain
per-key pipeline), and :func:`own_salt_check` runs the key's own salt against
``verify()`` itself; both differences are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from espew_integrations import verify
from espew_integrations.core.audit.directed import mark_directions
from espew_integrations.core.ground.draw import draw_triggers
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.field import (
    drawn_mask,
    field_scores,
    keyed_gaussian,
    unit_names,
    whitened_rows,
)
from espew_integrations.core.stats.ranktest import rank_sum_p_value, rank_sum_tails

LEVELS = (1e-2, 1e-3, 1e-6)


@dataclass(frozen=True)
class ScoredAudit:
    """One audit's fixed part: each innocent's ``b`` vector and the whitened covariance."""

    name: str
    texts: int
    rounds: int
    innocents: tuple[str, ...]
    b: np.ndarray  # (innocents, d)
    covariance: np.ndarray  # (d, d), ddof 0 as numpy's std


def scored_audit(name: str, key, audited, answers: dict[str, np.ndarray]) -> ScoredAudit:
    """``audited``'s audit (the key or a re-audit of it) with ``answers`` to its texts."""
    rows = np.asarray(audited.probe_embeddings, dtype=np.float64)
    clean = unit_rows(rows)
    whitened = whitened_rows(clean, key.design.field.mu)
    directions = mark_directions(rows, key)
    centred = whitened - whitened.mean(axis=0)
    return ScoredAudit(
        name,
        len(rows),
        audited.audit_round,
        tuple(answers),
        np.stack([field_scores(a, directions, clean, whitened) for a in answers.values()]),
        centred.T @ centred / len(centred),
    )


def salt_p_values(audit: ScoredAudit, gaussian: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """Each innocent's p-value under the field of ``gaussian`` with ``drawn`` units."""
    return batch_p_values(audit, gaussian, [drawn])[0]


def batch_p_values(audit: ScoredAudit, gaussians: np.ndarray, drawn: list[np.ndarray]):
    """``salt_p_values`` for ``len(drawn)`` salts whose matrices stand side by side in
    ``gaussians`` (d x salts*units): one matrix product per audit for the whole batch."""
    deviation = np.sqrt(np.einsum("ij,ij->j", gaussians, audit.covariance @ gaussians))
    scores = ((audit.b @ gaussians) / deviation).reshape(len(audit.b), len(drawn), -1)
    masks = np.stack(drawn)  # (salts, units)
    ordered = np.sort(scores, axis=-1)
    untied = (np.diff(ordered, axis=-1) > 0).all(axis=-1)  # (innocents, salts)
    ranks = np.argsort(np.argsort(scores, axis=-1), axis=-1) + 1
    doubled = 2 * (ranks * masks[None]).sum(axis=-1)  # the drawn units' doubled rank sums
    tails = rank_sum_tails(scores.shape[-1], int(masks[0].sum()))
    p = tails[np.minimum(doubled, tails.size - 1)]
    p[doubled >= tails.size] = 0.0
    for j, i in zip(*np.nonzero(~untied), strict=True):  # ties: the exact tied count
        p[j, i] = rank_sum_p_value(scores[j, i], masks[i])
    return np.minimum(1.0, audit.rounds * p).T


def null_p_values(
    key, audits: list[ScoredAudit], n_keys: int, seed: int, *, workers: int = 1, batch: int = 32
) -> list[np.ndarray]:
    """Per audit, an (n_keys, innocents) array of p-values over fresh salts drawn by ``seed``
    (the same stream as ``bench_field_null.study``'s), in ``workers`` processes of one BLAS
    thread each (on a shared machine more threads per process only wait for each other)."""
    rng = np.random.default_rng(seed)
    salts = [rng.bytes(32) for _ in range(n_keys)]
    field = key.design.field
    job = (key.dim, field.units, len(key.triggers), audits)
    chunks = [salts[i : i + batch] for i in range(0, n_keys, batch)]
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            parts = list(pool.map(_chunk_p_values, [job] * len(chunks), chunks))
    else:
        parts = [_chunk_p_values(job, chunk) for chunk in chunks]
    return [np.concatenate([part[i] for part in parts]) for i in range(len(audits))]


def _chunk_p_values(job: tuple, chunk: list[bytes]) -> list[np.ndarray]:
    """One batch of salts: each audit's (salts, innocents) p-values."""
    from threadpoolctl import threadpool_limits

    dim, n_units, n_drawn, audits = job
    units = unit_names(n_units)
    with threadpool_limits(1):
        gaussians = np.hstack([keyed_gaussian(s, dim, n_units) for s in chunk])
        drawn = [drawn_mask(n_units, draw_triggers(s, units, n_drawn)) for s in chunk]
        return [batch_p_values(audit, gaussians, drawn) for audit in audits]


def plain_check(key, audited, answers: dict, rounds: int, fast: np.ndarray, seed: int) -> float:
    """The largest |log10| gap between :func:`null_p_values` and ``bench_field_null.study``
    over the first ``len(fast)`` salts."""
    from bench_field_null import study

    rows = np.asarray(audited.probe_embeddings, dtype=np.float64)
    plain = study(key, rows, answers, len(fast), seed)
    slow = np.stack([np.minimum(1.0, rounds * plain[n]) for n in answers], axis=1)
    return float(np.max(np.abs(np.log10(slow) - np.log10(fast))))


def own_salt_check(key, audited, answers: dict, innocents: dict, seed: int) -> dict:
    """The key's own salt through :func:`salt_p_values` against ``verify()`` itself."""
    audit = scored_audit("own", key, audited, answers)
    gaussian = key.design.field.gaussian(key.salt)
    fast = salt_p_values(audit, gaussian, drawn_mask(key.design.field.units, key.triggers))
    out = {}
    for name, p in zip(answers, fast, strict=True):
        out[name] = {
            "fast": float(p),
            "verify": verify(innocents[name], audited, seed=seed).p_value,
        }
    return out


def counts(p: np.ndarray) -> dict:
    """How many p-values fall at or below each level, and the smallest."""
    return {
        "at_or_below": {f"{a:g}": int((p <= a).sum()) for a in LEVELS},
        "smallest_p": float(p.min()),
    }
