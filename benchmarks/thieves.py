"""The benchmarks' thief: what it steals with, what it is judged on, what it stole.

A real thief trains on its own traffic, and the key's audit is a sample of the
provider's corpus. A thief whose stealing texts include the audit's texts has
memorised the answers to the very questions the audit asks, which no thief in the
field has. So every benchmark thief draws its stealing texts with
:func:`thief_for`:

- ``disjoint`` (the default): ``N_STEAL`` corpus texts and ``N_HELD_OUT``
  held-out ones, none of them an audit text of the key (its ``probe_texts`` and
  ``cover_texts``);
- ``tweets``: the cross-domain thief, whose customers send health tweets
  (``offline.corpora.health_tweets``), never a review;
- ``overlap``: the split the benchmarks used before, every corpus text but 500
  held-out ones (about 96% of the audit's texts inside the training set); kept
  only to reproduce the earlier figures.

:func:`stolen_value` says what a copy took: its top-10 neighbour overlap with the
clean service on the held-out texts, less that of the thief's own base model
(paraphrase-MiniLM-L3). A copy at or below zero learned nothing the thief did not
already own, so its acquittal is no escape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from espew_integrations import WatermarkKey
from espew_integrations.core.ground.rows import unit_rows

N_STEAL = 10_000
N_HELD_OUT = 500
SPLITS = ("disjoint", "tweets", "overlap")


@dataclass(frozen=True)
class Thief:
    """A thief's stealing and held-out texts, with the clean service's and its own
    model's answers to them.

    ``rows`` and ``held_rows`` index the keygen corpus (None for a thief from
    another domain).
    """

    split: str
    steal: list[str]
    held: list[str]
    clean_steal: np.ndarray
    clean_held: np.ndarray
    own_steal: np.ndarray | None = None
    own_held: np.ndarray | None = None
    rows: np.ndarray | None = None
    held_rows: np.ndarray | None = None

    def audit_overlap(self, key: WatermarkKey) -> float:
        """The share of the key's audit texts inside this thief's stealing texts."""
        audit = [*key.probe_texts, *key.cover_texts]
        steal = set(self.steal)
        return float(np.mean([t in steal for t in audit])) if audit else 0.0


def audit_texts(key: WatermarkKey) -> set[str]:
    """Every text the key's audit sends."""
    return set(key.probe_texts) | set(key.cover_texts)


def disjoint_rows(
    seed: int,
    texts: Sequence[str],
    key: WatermarkKey,
    *,
    n_steal: int = N_STEAL,
    n_held: int = N_HELD_OUT,
) -> tuple[np.ndarray, np.ndarray]:
    """Stealing and held-out rows of ``texts`` (seeded), neither holding an audit text."""
    audit = audit_texts(key)
    order = np.random.default_rng(seed + 100).permutation(len(texts))
    pool = [int(i) for i in order if texts[i] not in audit]
    if len(pool) < n_steal + n_held:
        raise SystemExit(
            f"only {len(pool)} corpus texts lie outside the {len(audit)}-text audit; "
            f"the thief needs {n_steal + n_held}"
        )
    return np.asarray(pool[:n_steal]), np.asarray(pool[n_steal : n_steal + n_held])


def overlap_rows(seed: int, n_texts: int) -> tuple[np.ndarray, np.ndarray]:
    """The earlier split: every row but 500 held-out ones, by seed (audit texts included)."""
    order = np.random.default_rng(seed).permutation(n_texts)
    return np.sort(order[:-N_HELD_OUT]), np.sort(order[-N_HELD_OUT:])


def thief_for(
    seed: int,
    texts: Sequence[str],
    key: WatermarkKey,
    victim,
    standard=None,
    *,
    split: str = "disjoint",
    n_steal: int = N_STEAL,
) -> Thief:
    """The thief of ``seed`` for ``key`` under ``split`` (see the module docstring).

    ``victim`` and ``standard`` are ``bench_faithful_copy.Lookup`` models (their
    ``matrix`` holds the corpus's answers); without ``standard`` the thief's own
    features are left out.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "tweets":
        return _tweet_thief(seed, victim, standard, n_steal=n_steal)
    if split == "disjoint":
        steal, held = disjoint_rows(seed, texts, key, n_steal=n_steal)
    else:
        steal, held = overlap_rows(seed, len(texts))
    own = None if standard is None else standard.matrix.astype(np.float64)
    return Thief(
        split=split,
        steal=[texts[i] for i in steal],
        held=[texts[i] for i in held],
        clean_steal=victim.matrix[steal].astype(np.float64),
        clean_held=victim.matrix[held].astype(np.float64),
        own_steal=None if own is None else own[steal],
        own_held=None if own is None else own[held],
        rows=steal,
        held_rows=held,
    )


def _tweet_thief(seed: int, victim, standard, *, n_steal: int) -> Thief:
    from espew_integrations.offline.corpora import health_tweets
    from espew_lab.cache import cached_embed

    tweets = list(dict.fromkeys(health_tweets().texts))
    # One draw for every key (the embedding cache is keyed by the text list, so the
    # tweets are embedded once); ``seed`` only seeds the copies.
    order = np.random.default_rng(100).permutation(len(tweets))
    chosen = [tweets[i] for i in order[: n_steal + N_HELD_OUT]]
    clean = cached_embed(victim.model, chosen, model_name=victim.model.name).astype(np.float64)
    own = None
    if standard is not None:
        own = cached_embed(standard.model, chosen, model_name=standard.model.name)
        own = own.astype(np.float64)
    return Thief(
        split="tweets",
        steal=chosen[:n_steal],
        held=chosen[n_steal:],
        clean_steal=clean[:n_steal],
        clean_held=clean[n_steal:],
        own_steal=None if own is None else own[:n_steal],
        own_held=None if own is None else own[n_steal:],
    )


def top_k_overlap(reference: np.ndarray, other: np.ndarray, *, k: int = 10) -> float:
    """Mean share of each row's ``k`` nearest rows under ``reference`` that ``other`` also
    puts among its ``k`` nearest (every row a query, itself excluded)."""
    a, b = unit_rows(np.asarray(reference, float)), unit_rows(np.asarray(other, float))
    k = min(k, len(a) - 1)

    def top(matrix: np.ndarray) -> np.ndarray:
        sims = matrix @ matrix.T
        np.fill_diagonal(sims, -np.inf)
        return np.argpartition(-sims, k - 1, axis=1)[:, :k]

    ta, tb = top(a), top(b)
    hits = (ta[:, :, None] == tb[:, None, :]).any(axis=2).sum(axis=1)
    return float(hits.mean() / k)


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).mean())


def stolen_value(copy: Callable[[list[str]], np.ndarray], thief: Thief) -> dict:
    """What ``copy`` took from the service, judged on the thief's held-out texts.

    ``top10``: its top-10 neighbour overlap with the clean service; ``base``: that of
    the thief's own model; ``stolen``: the difference; ``fidelity``: mean cosine to
    the clean service (only for copies in the service's coordinates).
    """
    out = np.asarray(copy(thief.held), dtype=np.float64)
    top10 = top_k_overlap(thief.clean_held, out)
    base = top_k_overlap(thief.clean_held, thief.own_held) if thief.own_held is not None else 0
    row = {"top10": top10, "base": base, "stolen": top10 - base}
    if out.shape[1] == thief.clean_held.shape[1]:
        row["fidelity"] = mean_cosine(out, thief.clean_held)
    return row
