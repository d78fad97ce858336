"""Judging candidate target texts without a stealer (step 2 of :mod:`.tune`).

The quality figures are measured on the rows a key marks (:class:`MarkedRows`)
with the core's own watermark and cosine, so a tuned cosine is what the service
will cost. Part of :mod:`.tune`; its names are imported from here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from espew_integrations.core.ground.defaults import DEFAULT_TWIN_LEVEL
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.keys.key import WatermarkKey
from espew_integrations.core.keys.key_quality import fit_strength
from espew_integrations.core.keys.keygen import twin_p_value
from espew_integrations.core.mark.inject import watermark
from espew_integrations.core.mark.probes import reference_cosines, row_cosines
from espew_integrations.core.verify import verify_callable

__all__ = [
    "Embedder",
    "MarkedRows",
    "fingerprint",
    "judge_targets",
    "key_for_target",
    "strength_for_budget",
]

Embedder = Callable[[list[str]], np.ndarray]


def fingerprint(text: str) -> str:
    """Short non-reversible id of a candidate target text (safe to print)."""
    return hashlib.sha256(b"espew-target\x00" + text.encode()).hexdigest()[:8]


@dataclasses.dataclass(frozen=True)
class MarkedRows:
    """The corpus texts a key's triggers mark, with their clean embeddings.

    Every quality figure of the tuner is measured on these rows with the
    core's own :func:`~espew_integrations.watermark` and
    :func:`~espew_integrations.core.mark.probes.row_cosines`, so a tuned cosine is
    exactly what the service will cost.
    """

    texts: list[str]
    clean: np.ndarray

    def watermarked(self, key: WatermarkKey) -> np.ndarray:
        return watermark(self.texts, self.clean, key)

    def mean_cosine(self, key: WatermarkKey) -> float:
        """Mean cos(clean, watermarked) over the rows: the quality budget's measure."""
        return float(np.mean(row_cosines(self.clean, self.watermarked(key))))


def strength_for_budget(marked: MarkedRows, key: WatermarkKey, min_cos: float) -> float:
    """The largest strength whose mean cos(clean, watermarked) on marked rows is >= min_cos.

    The core's one bisection (:func:`~espew_integrations.core.keys.key_quality.fit_strength`),
    measured on this corpus's marked rows; 1.0 if the paper's full write fits.
    """
    return fit_strength(lambda s: marked.mean_cosine(key.replace(strength=s)), min_cos)


def key_for_target(base: WatermarkKey, text: str, clean_model: Embedder) -> WatermarkKey:
    """``base`` with ``text``'s clean embedding as the target, and its audit references.

    The stored probes do not depend on the target, but their reference
    cosines (the clean model's cosine to the target) do: they are recomputed
    so the default audit keeps its reference-adjusted score.
    """
    vector = np.asarray(clean_model([text]), dtype=np.float64)[0]
    target = vector / np.linalg.norm(vector)
    changes: dict[str, Any] = {"target": target, "target_text": text}
    if base.probe_texts:
        changes["probe_reference"] = reference_cosines(clean_model, base.probe_texts, target)
        changes["word_reference"] = reference_cosines(clean_model, list(base.band), target)
    return base.replace(**changes)


def judge_targets(
    keys: Sequence[WatermarkKey],
    *,
    victim: Embedder,
    marked: MarkedRows,
    alphas: Sequence[float],
    min_cos: float,
    seed: int = 0,
    clean_copy: Embedder | None = None,
) -> list[dict[str, Any]]:
    """Judge candidate targets (one key each) without a watermarked stealer (step 2 above).

    ``victim`` is the provider's clean model. ``clean_copy``, a copy trained
    on clean answers, measures how well a stolen copy reproduces each target
    text: verification after a permutation (``target_mode="query"``) compares with
    the copy's own embedding of the target text, so a target the copy cannot
    reproduce (an out-of-domain sentence) loses that verdict. Returns one dict
    per candidate, best first.
    """
    fidelity: list[float | None] = [None] * len(keys)
    if clean_copy is not None and keys:
        reproduced = clean_copy([k.target_text for k in keys])
        targets = np.stack([k.target for k in keys])
        fidelity = [round(float(f), 3) for f in row_cosines(reproduced, targets)]
    judged = []
    for index, key in enumerate(keys):
        judgement = _judge_target(key, victim=victim, marked=marked, alphas=alphas, seed=seed)
        judged.append(
            {
                "index": index,
                "fingerprint": fingerprint(key.target_text),
                **judgement,
                **_budget_summary(judgement["per_alpha"], min_cos),
                "copy_fidelity": fidelity[index],
            }
        )
    return sorted(judged, key=_usability, reverse=True)


def _judge_target(
    key: WatermarkKey, *, victim: Embedder, marked: MarkedRows, alphas: Sequence[float], seed: int
) -> dict[str, Any]:
    """Twin p-value, score spread and, per alpha, the distortion and detectability proxy.

    The twin p-value is keygen's innocent-twin check
    (:func:`espew_integrations.core.keys.keygen.twin_p_value`: the clean model's raw
    scores on the sentence and the word probes), so a target below keygen's twin
    level is one ``WatermarkKey.generate`` would refuse.
    """
    # The clean model itself on the key's audit, raw scores: what an innocent twin shows.
    twin = verify_callable(victim, key, seed=seed, level=0.5, statistic="raw")
    scores = np.array(twin.trigger_scores + twin.benign_scores)
    spread = float(scores.std()) if scores.size > 1 else math.nan
    per_alpha = []
    for alpha in sorted(alphas):
        moved = marked.watermarked(key.replace(alpha=float(alpha)))
        cos = float(np.mean(row_cosines(marked.clean, moved)))
        pull = float(np.mean((unit_rows(moved) - unit_rows(marked.clean)) @ key.target))
        proxy = pull / spread if spread > 0 else math.nan
        per_alpha.append({"alpha": float(alpha), "cos_marked": cos, "proxy": proxy})
    twin_p = twin_p_value(key) if key.probe_texts else float(twin.p_value)
    return {"twin_p_value": twin_p, "score_spread": spread, "per_alpha": per_alpha}


def _budget_summary(per_alpha: list[dict[str, float]], min_cos: float) -> dict[str, Any]:
    """The largest alpha within the budget, and detectability per unit of distortion."""
    feasible = [a for a in per_alpha if a["cos_marked"] >= min_cos]
    best = max(feasible, key=lambda a: a["alpha"]) if feasible else None
    # Detectability bought per unit of distortion, averaged over the alphas that
    # distort at all: judges a target independently of where the budget falls.
    ratios = [
        a["proxy"] / (1.0 - a["cos_marked"])
        for a in per_alpha
        if 1.0 - a["cos_marked"] > 1e-5 and math.isfinite(a["proxy"])
    ]
    return {
        "max_alpha_in_budget": best["alpha"] if best else None,
        "cos_at_max_alpha": round(best["cos_marked"], 5) if best else None,
        "proxy_at_max_alpha": round(best["proxy"], 3) if best else None,
        "proxy_per_distortion": round(float(np.mean(ratios)), 2) if ratios else None,
    }


def _usability(candidate: dict[str, Any]) -> tuple[bool, float]:
    """Rank key: a target the clean model already links to the triggers is unusable."""
    usable = (
        candidate["twin_p_value"] >= DEFAULT_TWIN_LEVEL
        and candidate["proxy_per_distortion"] is not None
    )
    return (usable, candidate["proxy_per_distortion"] or -math.inf)
