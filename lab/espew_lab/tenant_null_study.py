"""Null studies for `trace()`: how often is an innocent account named?

Each trial draws a fresh ring (new master secret, new shared salt, so new
shared and tenant layers, derived by the functions
:class:`espew_integrations.core.keys.keyring.KeyRing` uses) over a synthetic band,
draws per-word scores for a suspect, and runs the real statistic
:func:`espew_integrations.core.audit.tenant_layers.tenant_p_values` on them.
Synthetic scores are enough: under the null the test only needs the scores to be
independent of the draws, which they are by construction, and the rank test is
distribution-free. The raw and reference scores are correlated, as a faithful
copy's are, and a directed score (:mod:`espew_integrations.core.audit.directed`)
correlated with the raw one is passed too, so all three parts of the combined
statistic are exercised, with the factor 3 the key's stored probe embeddings bring.

Two kinds of suspect:

* ``innocent``: copied nobody. Every named account is a false accusation.
* ``copy_of_one``: trained on account 0's answers (its layer and the shared
  layer shifted up); every *other* named account is a false accusation. This
  is the case where chance overlap between layers could mislead, and what the
  second-round removal in
  :func:`espew_integrations.core.audit.tenant_layers.tenant_p_values` is for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from espew_integrations.core.audit.tenant_layers import tenant_p_values
from espew_integrations.core.keys.layers import draw_layer_indices, tenant_salt, universe

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
    levels = tuple(sorted(levels, reverse=True))
    for trial in range(n_trials):
        rng = np.random.default_rng([seed, trial])
        layers, n_universe = _fresh_layers(rng, band, ids, n_shared, n_tenant)
        reference = rng.normal(size=n_universe)
        raw = 0.6 * reference + 0.8 * rng.normal(size=reference.size)
        directed = 0.3 * raw + rng.normal(size=reference.size)
        if suspect == "copy_of_one":
            raw[layers[0]] += shift
            directed[layers[0]] += shift
        p = tenant_p_values(raw, reference, layers, level=levels[0], directed=directed)
        for level in levels:
            if level != levels[0] and (p < levels[0]).any():
                # someone was named at the larger level: the second round differs here
                p = tenant_p_values(raw, reference, layers, level=level, directed=directed)
            hit = p < level
            innocent = hit[1:] if suspect == "copy_of_one" else hit
            false[level] += int(innocent.any())
            named[level] += int(suspect == "copy_of_one" and hit[0])
    return TenantNullStudy(suspect, n_trials, n_tenants, false, named)


def _fresh_layers(
    rng: np.random.Generator, band: list[str], ids: list[str], n_shared: int, n_tenant: int
) -> tuple[np.ndarray, int]:
    """A fresh ring's tenant layers: new shared salt, new master, the ring's own derivation.

    The same functions :class:`espew_integrations.core.keys.keyring.KeyRing` calls
    (:func:`espew_integrations.core.keys.layers.universe`,
    :func:`espew_integrations.core.keys.layers.tenant_salt`,
    :func:`espew_integrations.core.keys.layers.draw_layer_indices`), without
    building a full key per trial.
    """
    words = universe(rng.bytes(32), band, n_shared)
    master = rng.bytes(32)
    salts = [tenant_salt(master, tenant) for tenant in ids]
    return draw_layer_indices(salts, len(words), n_tenant), len(words)
