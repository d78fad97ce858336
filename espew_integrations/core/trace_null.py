"""Null studies for :func:`.trace.trace`: how often is an innocent account named?

Each trial builds a fresh ring (new master secret, new shared salt, so new
shared and tenant layers, derived by the real :class:`.keyring.KeyRing`) over
a synthetic band, draws per-word scores for a suspect, and runs the real
statistic :func:`.trace.tenant_p_values` on them. Synthetic scores are enough:
under the null the test only needs the scores to be independent of the draws,
which they are by construction, and the rank test is distribution-free. The
raw and reference scores are correlated, as a faithful copy's are, so both
halves of the combined statistic are exercised.

Two kinds of suspect:

* ``innocent``: copied nobody. Every named account is a false accusation.
* ``copy_of_one``: trained on account 0's answers (its layer and the shared
  layer shifted up); every *other* named account is a false accusation. This
  is the case where chance overlap between layers could mislead, and what the
  second-round removal in :func:`.trace.tenant_p_values` is for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .key import WatermarkKey
from .keyring import KeyRing
from .trace import tenant_p_values

__all__ = ["TenantNullStudy", "tenant_null_study"]


@dataclasses.dataclass(frozen=True)
class TenantNullStudy:
    """Counts over the trials of :func:`tenant_null_study`.

    ``false_accusations[level]`` counts trials in which at least one innocent
    account was named at that level (the family-wise error); ``guilty_named``
    counts trials in which account 0 was named (``copy_of_one`` only).
    """

    suspect: str
    n_trials: int
    n_tenants: int
    false_accusations: dict[float, int]
    guilty_named: dict[float, int]

    def rate(self, level: float) -> float:
        """Observed family-wise false-accusation rate at ``level``."""
        return self.false_accusations[level] / self.n_trials


def tenant_null_study(
    n_trials: int,
    *,
    suspect: str = "innocent",
    n_tenants: int = 200,
    n_band: int = 200,
    n_shared: int = 20,
    n_tenant: int = 20,
    levels: tuple[float, ...] = (1e-3, 1e-6),
    shift: float = 3.0,
    seed: int = 0,
) -> TenantNullStudy:
    """Run ``n_trials`` trials with fresh rings; see the module docstring.

    >>> study = tenant_null_study(20, n_tenants=50)
    >>> study.false_accusations[1e-3]
    0
    """
    if suspect not in ("innocent", "copy_of_one"):
        raise ValueError(f"suspect must be 'innocent' or 'copy_of_one', got {suspect!r}")
    band = [f"word{i:05d}" for i in range(n_band)]
    ids = [f"acct-{i:05d}" for i in range(n_tenants)]
    false = dict.fromkeys(levels, 0)
    named = dict.fromkeys(levels, 0)
    for trial in range(n_trials):
        rng = np.random.default_rng([seed, trial])
        ring = _fresh_ring(rng, band, n_shared, n_tenant)
        layers = ring.layer_indices(ids)
        reference = rng.normal(size=len(ring.universe))
        raw = 0.6 * reference + 0.8 * rng.normal(size=reference.size)
        if suspect == "copy_of_one":
            raw[layers[0]] += shift
        for level in levels:
            p = tenant_p_values(raw, reference, layers, level=level)
            hit = p < level
            innocent = hit[1:] if suspect == "copy_of_one" else hit
            false[level] += int(innocent.any())
            named[level] += int(suspect == "copy_of_one" and hit[0])
    return TenantNullStudy(suspect, n_trials, n_tenants, false, named)


def _fresh_ring(rng: np.random.Generator, band: list[str], n_shared: int, n_tenant: int):
    from .draw import draw_triggers

    salt = rng.bytes(32)
    target = rng.normal(size=8)
    key = WatermarkKey(
        triggers=draw_triggers(salt, band, n_shared),
        target=target / np.linalg.norm(target),
        target_text="null study",
        band=band,
        salt=salt,
        alpha=0.25,
        created="2026-01-01T00:00:00+00:00",
    )
    return KeyRing(master=rng.bytes(32), shared_key=key, n_tenant_triggers=n_tenant)
